"""Client quotas against a real broker process: AlterClientQuotas / DescribeClientQuotas, byte-rate
throttling of confluent-kafka producers and consumers (throttle_time_ms and a muted connection),
request_percentage, changes without a restart, and `kaflet configs` for users and clients."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer

from kaflet.protocol import codec
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.quotas import MeasuredProducer, alter, as_dict, describe
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic

MB = 1024 * 1024
METADATA = 3


# Kafka's defaults are 11 windows of 1 s. Kafka's rate assumes at least windows-1 of them have
# passed, so a new or bursting client may send (windows-1) seconds of quota at once, and a greedy
# client's 20-second averages swing with the windows (0.6-1.3 x the quota with 11 windows, in
# tests/unit/test_quota.py's model); 3 windows keep them within a few percent.
QUOTA_WINDOWS = {"quota.window.num": "3", "quota.window.size.seconds": "1"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("quotas") / "data", QUOTA_WINDOWS) as b:
        yield b


# -- the ClientQuotas APIs ------------------------------------------------------------------------

def test_alter_and_describe_client_quotas(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    assert alter(b, [("user", "alice"), ("client-id", "app")], {"producer_byte_rate": 1000.0}).error_code == 0
    assert alter(b, [("user", "alice")], {"consumer_byte_rate": 2000.0, "request_percentage": 25.5},
                 version=0).error_code == 0
    assert alter(b, [("user", None)], {"producer_byte_rate": 3000.0}).error_code == 0
    assert alter(b, [("client-id", "app")], {"producer_byte_rate": 4000.0}).error_code == 0
    assert alter(b, [("ip", "10.0.0.1")], {"connection_creation_rate": 5.0}).error_code == 0
    # validate_only writes nothing
    assert alter(b, [("client-id", "ghost")], {"producer_byte_rate": 1.0}, validate_only=True).error_code == 0

    everything = as_dict(describe(b, []))
    assert everything[(("user", "alice"), ("client-id", "app"))] == {"producer_byte_rate": 1000.0}
    assert everything[(("user", "alice"),)] == {"consumer_byte_rate": 2000.0, "request_percentage": 25.5}
    assert everything[(("user", None),)] == {"producer_byte_rate": 3000.0}
    assert everything[(("ip", "10.0.0.1"),)] == {"connection_creation_rate": 5.0}
    assert (("client-id", "ghost"),) not in everything

    exact_user = as_dict(describe(b, [("user", 0, "alice")], version=0))
    assert set(exact_user) == {(("user", "alice"), ("client-id", "app")), (("user", "alice"),)}
    assert set(as_dict(describe(b, [("user", 0, "alice")], strict=True))) == {(("user", "alice"),)}
    assert set(as_dict(describe(b, [("user", 1, None)], strict=True))) == {(("user", None),)}
    specified = as_dict(describe(b, [("user", 2, None)], strict=True))
    assert set(specified) == {(("user", "alice"),), (("user", None),)}
    assert set(as_dict(describe(b, [("client-id", 0, "app")], strict=True))) == {(("client-id", "app"),)}
    assert set(as_dict(describe(b, [("ip", 2, None)]))) == {(("ip", "10.0.0.1"),)}

    # removing the last key removes the entity from the answers
    assert alter(b, [("client-id", "app")], {"producer_byte_rate": None}).error_code == 0
    assert (("client-id", "app"),) not in as_dict(describe(b, []))
    # (the default user quota would outrank the client-id quotas of the tests below)
    assert alter(b, [("user", None)], {"producer_byte_rate": None}).error_code == 0


def test_client_quota_errors(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    assert alter(b, [("client-id", "x")], {"no_such_quota": 1.0}).error_code == 42  # INVALID_REQUEST
    assert alter(b, [("client-id", "x")], {"producer_byte_rate": 1.5}).error_code == 42  # must be a Long
    assert alter(b, [("client-id", "x")], {"producer_byte_rate": -1.0}).error_code == 42
    assert alter(b, [("group", "x")], {"producer_byte_rate": 1.0}).error_code == 35  # UNSUPPORTED_VERSION
    assert alter(b, [("user", "a"), ("user", "b")], {"producer_byte_rate": 1.0}).error_code == 42
    assert alter(b, [("user", "a"), ("ip", "1.2.3.4")], {"producer_byte_rate": 1.0}).error_code == 42
    assert alter(b, [("ip", "not-an-ip")], {"connection_creation_rate": 1.0}).error_code == 42
    assert alter(b, [], {"producer_byte_rate": 1.0}).error_code == 42
    assert describe(b, [("user", 0, "a"), ("user", 1, None)]).error_code == 42
    assert describe(b, [("user", 0, "a"), ("ip", 2, None)]).error_code == 42
    assert describe(b, [("nope", 2, None)]).error_code == 35
    assert describe(b, [("user", 9, None)]).error_code == 42


# -- byte-rate quotas ----------------------------------------------------------------------------

def test_producer_byte_rate(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    topic = f"quota-{uuid.uuid4().hex[:6]}"
    create_topic(b, topic)
    fast = MeasuredProducer(b, "unthrottled", topic)
    slow = MeasuredProducer(b, "throttled", topic)
    try:
        fast.run(1)  # connect and warm up
        baseline = fast.run(3)
        # Set at run time, no restart: AlterClientQuotas for the throttled producer's client id.
        assert alter(b, [("client-id", "throttled")], {"producer_byte_rate": float(MB)}).error_code == 0
        rates: dict[str, float] = {}
        t = threading.Thread(target=lambda: rates.__setitem__("slow", slow.run(20)))
        t.start()
        time.sleep(8)
        alongside = fast.run(3)
        t.join()
        slow_rate = rates["slow"]
        print(f"\nthrottled producer {slow_rate:.3f} MB/s (quota 1 MB/s), {len(slow.throttles)} throttle events; "
              f"unthrottled {alongside:.1f} MB/s alongside vs {baseline:.1f} MB/s baseline")
        # Throttling follows the bytes (Kafka's quotas mute after a window is over its rate), so
        # the mean runs a little over: 1.13x here when idle (before and after the seams step),
        # 1.23x once on a loaded CI machine.
        assert 0.8 <= slow_rate <= 1.35
        assert slow.throttles and max(slow.throttles) > 0
        assert not fast.throttles
        # The throttled client's mute must not hold anyone else up. Two cores serve both
        # producers, the broker and the throttled client's retries, so the bound is a tenth of
        # the baseline (measured 1.09x when idle); a mute that blocked the broker would leave
        # the other producer near the throttled one's 1 MB/s.
        assert alongside >= 0.1 * baseline

        # Removing the quota applies at once, too.
        assert alter(b, [("client-id", "throttled")], {"producer_byte_rate": None}).error_code == 0
        time.sleep(max(slow.throttles) / 1000 + 0.5)  # the last mute runs out
        before = len(slow.throttles)
        assert slow.run(2) > 3
        assert not [t for t in slow.throttles[before:] if t > 0]  # (librdkafka reports the end as 0)
    finally:
        fast.close()
        slow.close()


def test_consumer_byte_rate(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    topic = f"quota-c-{uuid.uuid4().hex[:6]}"
    create_topic(b, topic)
    filler = MeasuredProducer(b, "filler", topic)
    while filler.delivered < 40 * MB:
        filler.run(1)
    filler.close()
    quota, seconds = 2 * MB, 10.0
    assert alter(b, [("client-id", None)], {"consumer_byte_rate": float(quota)}).error_code == 0
    try:
        throttles: list[float] = []
        consumer = Consumer({"bootstrap.servers": b, "group.id": f"g-{uuid.uuid4().hex[:6]}", "client.id": "reader",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
        consumer.subscribe([topic])
        got, t0 = 0, None
        while t0 is None or time.monotonic() - t0 < seconds:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                if t0 is None:
                    t0 = time.monotonic()
                got += len(msg.value())
        consumer.close()
        rate = got / seconds / MB
        print(f"\nconsumer under a {quota / MB:.0f} MB/s default client-id quota: {rate:.2f} MB/s over {seconds:.0f} s "
              f"({len(throttles)} throttle events)")
        assert throttles
        # A new client may use what the windows allow (2 x the quota) at once, then the quota.
        assert got <= quota * (seconds + 2) * 1.2 + 2 * MB
        assert got >= quota * seconds * 0.8
        assert got < 40 * MB  # it would have read everything without the quota
    finally:
        assert alter(b, [("client-id", None)], {"consumer_byte_rate": None}).error_code == 0


def test_request_percentage(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    assert alter(b, [("client-id", "greedy")], {"request_percentage": 0.01}).error_code == 0
    rc = RawClient(b)
    M = codec.request_class(METADATA)
    body = bytes(M(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False).encode(version=9))
    try:
        throttled = 0
        t0 = time.monotonic()
        for _ in range(30):
            rc.send_raw(rc.frame(METADATA, 9, body, client_id="greedy"))
            resp = rc.read_response(METADATA, 9)
            throttled = max(throttled, resp.throttle_time_ms)
            if throttled:
                break
        assert 0 < throttled <= 1000  # bounded by one quota window
        # The connection is muted for that long: the next request waits.
        start = time.monotonic()
        rc.send_raw(rc.frame(METADATA, 9, body, client_id="greedy"))
        rc.read_response(METADATA, 9)
        assert time.monotonic() - start >= throttled / 1000 * 0.8
        assert time.monotonic() - t0 < 30
    finally:
        rc.close()
        alter(b, [("client-id", "greedy")], {"request_percentage": None})


# -- kaflet configs ---------------------------------------------------------------------------------

def kaflet_configs(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kaflet.cli", "configs", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def test_configs_cli_for_users_and_clients(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    out = kaflet_configs(b, "--entity-type", "clients", "--entity-name", "cli-app", "--alter",
                         "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    assert out.returncode == 0, out.stderr
    out = kaflet_configs(b, "--entity-type", "clients", "--entity-name", "cli-app", "--describe")
    assert "Quota configs for client-id 'cli-app' are consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0" in out.stdout
    # Quota and SCRAM keys in one --add-config, each to its own API.
    out = kaflet_configs(b, "--entity-type", "users", "--entity-name", "carol", "--alter",
                         "--add-config", "request_percentage=50,SCRAM-SHA-256=[iterations=4096,password=pw]")
    assert out.returncode == 0, out.stderr
    out = kaflet_configs(b, "--entity-type", "users", "--entity-name", "carol", "--describe")
    assert "Quota configs for user-principal 'carol' are request_percentage=50.0" in out.stdout
    assert "SCRAM-SHA-256=iterations=4096" in out.stdout
    out = kaflet_configs(b, "--entity-type", "users", "--entity-default", "--alter", "--add-config",
                         "consumer_byte_rate=1000000000")
    assert out.returncode == 0, out.stderr
    out = kaflet_configs(b, "--entity-type", "users", "--entity-default", "--describe")
    assert "Quota configs for the default user-principal are consumer_byte_rate=1000000000.0" in out.stdout
    out = kaflet_configs(b, "--entity-type", "clients", "--entity-name", "cli-app", "--alter",
                         "--delete-config", "consumer_byte_rate")
    assert out.returncode == 0, out.stderr
    assert as_dict(describe(b, [("client-id", 0, "cli-app")], strict=True)) == {
        (("client-id", "cli-app"),): {"producer_byte_rate": 1048576.0}}
    out = kaflet_configs(b, "--entity-type", "users", "--entity-name", "carol", "--alter", "--delete-config",
                         "request_percentage,SCRAM-SHA-256")
    assert out.returncode == 0, out.stderr
    assert (("user", "carol"),) not in as_dict(describe(b, []))
    out = kaflet_configs(b, "--entity-type", "clients", "--entity-name", "x", "--alter", "--add-config", "bogus=1")
    assert out.returncode != 0 and "bogus" in out.stderr
    kaflet_configs(b, "--entity-type", "users", "--entity-default", "--alter", "--delete-config", "consumer_byte_rate")


def test_quotas_survive_a_restart(tmp_path: Any) -> None:
    with running_broker(tmp_path / "data") as b:
        assert alter(b.bootstrap, [("user", None), ("client-id", "k")], {"producer_byte_rate": 777.0}).error_code == 0
        b.restart()
        assert as_dict(describe(b.bootstrap, [])) == {(("user", None), ("client-id", "k")): {"producer_byte_rate": 777.0}}
        assert "loaded quotas of 1 entities" in b.new_log()

