"""The gateway's quotas per application and topic against a real broker process.

The management service sets them as Kafka client-id quotas named ``<appId>.<topic>`` (the node
/config/clients/<appId>.<topic> and a /config/changes notification, which AlterClientQuotas
writes the same way). With gateway.url set, the broker limits that application's bytes on that
topic, whatever client id it uses; other topics and other applications are not limited.
confluent-kafka clients log in over SASL/PLAIN as the applications.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer

from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.gateway_apps import OVERRIDES, app_producer, sasl
from tests.support.quotas import MB, alter
from tests.support.topics import create_topic


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("gateway-quotas") / "data", OVERRIDES) as b:
        yield b


def test_producer_quota_per_app_and_topic(broker: BrokerProcess) -> None:
    limited, other = f"gq-{uuid.uuid4().hex[:6]}", f"gq-other-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, limited, partitions=2)
    create_topic(broker.bootstrap, other, partitions=2)
    assert alter(broker.bootstrap, [("client-id", f"app_quota.{limited}")],
                 {"producer_byte_rate": float(MB)}).error_code == 0
    slow = app_producer(broker, "app_quota", limited, client_id="any-client-id")
    same_app_other_topic = app_producer(broker, "app_quota", other)
    other_app_same_topic = app_producer(broker, "app_free", limited)
    try:
        rates: dict[str, float] = {}
        slow.run(3)  # a new client may send what the windows allow at once: not measured
        t = threading.Thread(target=lambda: rates.__setitem__("slow", slow.run(14)))
        t.start()
        time.sleep(4)
        beside_topic = same_app_other_topic.run(3)
        beside_app = other_app_same_topic.run(3)
        t.join()
        print(f"\napp_quota on {limited}: {rates['slow']:.3f} MB/s under a 1 MB/s quota, "
              f"{len(slow.throttles)} throttle events (max {max(slow.throttles, default=0)} ms); "
              f"same app other topic {beside_topic:.1f} MB/s, other app same topic {beside_app:.1f} MB/s")
        assert 0.5 <= rates["slow"] <= 1.2  # never over the quota; a slow machine may stay under it
        assert slow.throttles and 0 < max(slow.throttles) <= 2000  # max.throttle.time.ms
        assert not [x for x in same_app_other_topic.throttles if x > 0]
        assert not [x for x in other_app_same_topic.throttles if x > 0]
        assert beside_topic > 1.5 and beside_app > 1.5

        # Removed at run time: the application is free again.
        assert alter(broker.bootstrap, [("client-id", f"app_quota.{limited}")],
                     {"producer_byte_rate": None}).error_code == 0
        time.sleep(2.5)  # the last mute runs out
        before = len(slow.throttles)
        assert slow.run(2) > 1.5
        assert not [x for x in slow.throttles[before:] if x > 0]
    finally:
        for p in (slow, same_app_other_topic, other_app_same_topic):
            p.close()


def test_consumer_quota_per_app_and_topic(broker: BrokerProcess) -> None:
    topic = f"gq-c-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic)
    filler = app_producer(broker, "app_free", topic)
    while filler.delivered < 40 * MB:
        filler.run(1)
    filler.close()
    quota, seconds = 2 * MB, 8.0
    assert alter(broker.bootstrap, [("client-id", f"app_quota.{topic}")],
                 {"consumer_byte_rate": float(quota)}).error_code == 0

    def consume(app: str, throttles: list[float]) -> int:
        consumer = Consumer({**sasl(broker, app), "group.id": f"g-{uuid.uuid4().hex[:6]}",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
        consumer.subscribe([topic])
        got, t0 = 0, None
        try:
            while t0 is None or time.monotonic() - t0 < seconds:
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    t0 = t0 or time.monotonic()
                    got += len(msg.value())
        finally:
            consumer.close()
        return got

    limited_throttles: list[float] = []
    free_throttles: list[float] = []
    got = consume("app_quota", limited_throttles)
    free = consume("app_free", free_throttles)
    print(f"\napp_quota read {got / seconds / MB:.2f} MB/s under a 2 MB/s quota ({len(limited_throttles)} "
          f"throttle events); app_free read {free / seconds / MB:.2f} MB/s of the same topic")
    assert limited_throttles and not [x for x in free_throttles if x > 0]
    # A new client may use what the windows allow (2 x the quota) at once, then the quota.
    assert quota * seconds * 0.5 <= got <= quota * (seconds + 2) * 1.2 + 2 * MB
    assert free > got
