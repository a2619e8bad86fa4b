"""The Prometheus endpoint scraped over HTTP after real clients (confluent-kafka) produced and
consumed: Kafka's BrokerTopicMetrics per topic and for all topics, RequestMetrics, the log
gauges; and kafkaexmetrics' per-(appId, topic) series for the topics a (scripted) management
service lists at report/jmx/topics, and none for the topics it does not list."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from kaflet.embedded_broker import embedded_broker
from kaflet.server.broker import Broker, BrokerStartError
from tests.support.management_service import JMX_TOPICS, scripted_management_service
from tests.support.metrics import Samples, scrape
from tests.support.quotas import alter
from tests.support.topics import create_topic

SYNC_MS = 300
JAAS = ('com.didichuxing.datachannel.kafka.security.sasl.plain.PlainLoginModule required '
        'username="admin" password="admin-secret";')

def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def log_bytes(samples: Samples, topic: str) -> float:
    """The topic's log size on disk, all partitions (what was appended: nothing else writes it)."""
    return sum(v for (name, labels), v in samples.items()
               if name == "kafka_log_log_size" and ("topic", topic) in labels)


def wait_for(check: Callable[[], Any], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.1)


def gateway_config(tmp_path: Any, url: str, jaas: str, **extra: str) -> dict[str, str]:
    """A broker with a SASL_PLAINTEXT listener, the gateway on ``url`` and kafkaexmetrics."""
    return {"log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
            "gateway.url": url, "gateway.sync.interval.ms": str(SYNC_MS), "metrics.listener": "http://127.0.0.1:0",
            "kafkaexmetrics.enable": "true", **extra}


def sasl_client(broker: Broker, user: str, password: str) -> dict[str, Any]:
    """Client settings to log in to the broker's SASL_PLAINTEXT listener."""
    sasl = next(a for a in broker.advertised if a.listener == "SASL_PLAINTEXT")
    return {"bootstrap.servers": f"{sasl.host}:{sasl.port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password}


def produce(config: dict[str, Any], topic: str, count: int, partitions: int, size: int = 100) -> None:
    producer = Producer({**config, "linger.ms": 0, "message.timeout.ms": 10000})
    errors: list[Any] = []
    for i in range(count):
        producer.produce(topic, b"v" * size, partition=i % partitions,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(15) == 0
    assert not errors, errors


def consume(config: dict[str, Any], topic: str, count: int) -> int:
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got += 1
    consumer.close()
    return got


def test_broker_topic_and_request_metrics_match_what_clients_sent(tmp_path: Any) -> None:
    with embedded_broker({"log.dirs": str(tmp_path / "data"), "metrics.listener": "http://127.0.0.1:0"}) as (b, _):
        one, two = f"m1-{uuid.uuid4().hex[:6]}", f"m2-{uuid.uuid4().hex[:6]}"
        create_topic(b.bootstrap, one, partitions=2)
        create_topic(b.bootstrap, two)
        client = {"bootstrap.servers": b.bootstrap}
        produce(client, one, 20, 2)
        produce(client, two, 7, 1, size=300)
        assert consume(client, one, 20) == 20
        s = scrape(b)
        print(f"\n{one}: bytes in {value(s, 'kafka_server_brokertopicmetrics_bytesin_total', topic=one)}, "
              f"out {value(s, 'kafka_server_brokertopicmetrics_bytesout_total', topic=one)}")

    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=one) == 20
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=two) == 7
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total") == 27  # all topics
    for topic in (one, two):
        appended = log_bytes(s, topic)
        assert appended > 0
        assert value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == appended
    assert value(s, "kafka_server_brokertopicmetrics_bytesin_total") == log_bytes(s, one) + log_bytes(s, two)
    # The consumer read topic one once, from the start; topic two was never read.
    assert value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic=one) == log_bytes(s, one)
    assert value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic=two) == 0
    # One Produce partition per message (linger.ms=0, acknowledged one at a time or batched).
    produce_partitions = value(s, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic=one)
    assert 2 <= produce_partitions <= 20
    assert value(s, "kafka_server_brokertopicmetrics_failedproducerequests_total") == 0
    assert value(s, "kafka_server_brokertopicmetrics_totalfetchrequests_total", topic=one) >= 2
    requests = sum(v for (name, labels), v in s.items()
                   if name == "kafka_network_requestmetrics_requests_total" and ("request", "Produce") in labels)
    assert requests >= 1
    assert value(s, "kafka_network_requestmetrics_totaltimems_count", request="Produce") == requests
    assert value(s, "kafka_network_requestmetrics_totaltimems_bucket", request="Produce", le="+Inf") == requests
    assert value(s, "kafka_network_requestmetrics_totaltimems_count", request="FetchConsumer") >= 1
    assert value(s, "kafka_server_replicamanager_partitioncount") >= 3
    assert value(s, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(s, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(s, "kafka_log_log_logendoffset", topic=two, partition="0") == 7
    assert value(s, "kafka_coordinator_group_groupmetadatamanager_numgroups") >= 1
    # The process's own series (collected on a thread at a scrape): its log segments are open.
    assert value(s, "process_open_fds") >= 6 and value(s, "process_max_fds") > 0


def test_without_metrics_listener_nothing_is_counted(tmp_path: Any) -> None:
    with embedded_broker({"log.dirs": str(tmp_path / "data")}) as (b, _):
        assert b.metrics is None and b.metrics_exporter is None and not b.track_traffic


@pytest.mark.parametrize("listener", ["127.0.0.1:9404", "https://127.0.0.1:9404", "http://127.0.0.1"])
def test_a_malformed_metrics_listener_stops_the_start_with_a_sentence(tmp_path: Any, listener: str) -> None:
    with pytest.raises(BrokerStartError, match="metrics.listener .* must be http://host:port"), \
            embedded_broker({"log.dirs": str(tmp_path / "data"), "metrics.listener": listener}):
        pass


def test_per_application_metrics_for_the_topics_the_service_lists(tmp_path: Any) -> None:
    with scripted_management_service() as svc:
        svc.add_user("app_a", "pw-a", timestamp=1000)
        svc.add_acl("*", "app_a", 3, timestamp=1000)
        svc.jmx_topics = "listed,other"
        config = gateway_config(tmp_path, svc.url, JAAS, **{
            "authorizer.class.name": "com.didichuxing.datachannel.kafka.security.authorizer.DidiAuthorizer",
            "cluster.id": "0", "gateway.default.users": "admin:admin-secret:true"})
        with embedded_broker(config) as (b, _):
            app = sasl_client(b, "0.app_a", "pw-a")
            admin = {**app, "sasl.username": "admin", "sasl.password": "admin-secret"}
            create_topic(b.bootstrap, "listed", partitions=2)
            create_topic(b.bootstrap, "unlisted")
            wait_for(lambda: b.metrics is not None and b.metrics.app_topics is not None
                     and b.metrics.app_topics.topics == {"listed", "other"})
            produce(app, "listed", 12, 2)
            produce(app, "unlisted", 5, 1)
            produce(admin, "listed", 3, 1)
            assert consume(app, "listed", 15) == 15
            s = scrape(b)

            # The service lists "unlisted" too: its series start with the next traffic.
            svc.jmx_topics = "listed,unlisted"
            wait_for(lambda: b.metrics.app_topics.topics == {"listed", "unlisted"})  # type: ignore[union-attr]
            produce(app, "unlisted", 4, 1)
            after = scrape(b)
            asked = svc.recorded(JMX_TOPICS)

    assert asked and all(r.query.get("clusterId") == "0" for r in asked)
    app_in = value(s, "kafka_server_appidtopicmetrics_bytesin_total", appid="app_a", topic="listed")
    admin_in = value(s, "kafka_server_appidtopicmetrics_bytesin_total", appid="admin", topic="listed")
    print(f"\nlisted: app_a {app_in} B in, admin {admin_in} B in, log {log_bytes(s, 'listed')} B")
    assert value(s, "kafka_server_appidtopicmetrics_messagesin_total", appid="app_a", topic="listed") == 12
    assert value(s, "kafka_server_appidtopicmetrics_messagesin_total", appid="admin", topic="listed") == 3
    # The two applications' bytes add up to what the topic's log holds.
    assert app_in + admin_in == log_bytes(s, "listed") == \
        value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic="listed")
    # app_a read the whole topic once.
    assert value(s, "kafka_server_appidtopicmetrics_bytesout_total", appid="app_a", topic="listed") == \
        log_bytes(s, "listed")
    assert value(s, "kafka_server_appidtopicmetrics_totalproducerequests_total", appid="app_a", topic="listed") >= 1
    assert value(s, "kafka_server_appidtopicmetrics_totalfetchrequests_total", appid="app_a", topic="listed") >= 1
    assert value(s, "kafka_server_topicrequestmetrics_totaltimems_count", request="Produce", topic="listed") >= 2
    assert value(s, "kafka_server_topicrequestmetrics_throttletimems_sum", request="Produce", topic="listed") == 0
    # Nothing per application for a topic the service does not list; the broker-wide ones count it.
    assert not [k for k in s if ("topic", "unlisted") in k[1] and k[0].startswith("kafka_server_appidtopic")]
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic="unlisted") == 5
    assert value(after, "kafka_server_appidtopicmetrics_messagesin_total", appid="app_a", topic="unlisted") == 4


def test_throttle_time_and_rejected_bytes_per_application(tmp_path: Any) -> None:
    """A /config/clients/<appId>.<topic> quota throttles the application: its throttle time shows
    per (appId, topic) and per topic; a batch over the topic's max.message.bytes counts as rejected."""
    users = {"app_quota": "pw-quota"}
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            'password="admin-secret" user_admin="admin-secret" '
            + " ".join(f'user_{u}="{p}"' for u, p in users.items()) + ";")
    with scripted_management_service() as svc:
        topic, small = f"q-{uuid.uuid4().hex[:6]}", f"s-{uuid.uuid4().hex[:6]}"
        svc.jmx_topics = f"{topic},{small}"
        config = gateway_config(tmp_path, svc.url, jaas, **{
            "cluster.id": "7", "max.throttle.time.ms": "1000", "quota.window.num": "3",
            "quota.window.size.seconds": "1"})
        with embedded_broker(config) as (b, _):
            app = sasl_client(b, "app_quota", "pw-quota")
            create_topic(b.bootstrap, topic)
            create_topic(b.bootstrap, small, config={"max.message.bytes": "2000"})
            wait_for(lambda: b.metrics is not None and b.metrics.app_topics is not None
                     and b.metrics.app_topics.topics == {topic, small})
            assert alter(b.bootstrap, [("client-id", f"app_quota.{topic}")],
                         {"producer_byte_rate": 200_000.0}).error_code == 0
            produce(app, topic, 100, 1, size=10_000)  # 1 MB at 200 KB/s: throttled

            producer = Producer({**app, "linger.ms": 0, "message.timeout.ms": 5000, "retries": 0,
                                 "message.max.bytes": 100_000})
            errors: list[Any] = []
            producer.produce(small, b"x" * 5000, on_delivery=lambda err, _m: errors.append(err))
            producer.flush(10)
            s = scrape(b)

    throttled = value(s, "kafka_server_appidtopicmetrics_throttletimems_total", appid="app_quota", topic=topic)
    per_topic = value(s, "kafka_server_topicrequestmetrics_throttletimems_sum", request="Produce", topic=topic)
    print(f"\napp_quota on {topic}: {throttled:.0f} ms of throttle handed out for 1 MB at 200 KB/s")
    assert throttled > 0 and per_topic == throttled
    requests = value(s, "kafka_server_appidtopicmetrics_totalproducerequests_total", appid="app_quota", topic=topic)
    assert throttled <= requests * 1000  # max.throttle.time.ms bounds each
    assert value(s, "kafka_server_appidtopicmetrics_messagesin_total", appid="app_quota", topic=topic) == 100
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert value(s, "kafka_server_brokertopicmetrics_bytesrejected_total", topic=small) > 5000
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=small) == 0
    assert value(s, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic=small) == 1
    assert value(s, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=small) == 0


def test_a_failing_service_leaves_the_topic_list_as_it_was(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "kaflet.metrics")
    with scripted_management_service() as svc:
        svc.jmx_topics = "listed"
        config = {"log.dirs": str(tmp_path / "data"), "gateway.url": svc.url, "cluster.id": "0",
                  "gateway.sync.interval.ms": str(SYNC_MS), "metrics.listener": "http://127.0.0.1:0",
                  "kafkaexmetrics.enable": "true"}
        with embedded_broker(config) as (b, _):
            apps = b.metrics.app_topics if b.metrics is not None else None
            assert apps is not None
            wait_for(lambda: apps.topics == {"listed"})
            for mode in ("not-json", "code", "http-500"):
                svc.set_mode(mode)
                asked = len(svc.recorded(JMX_TOPICS))
                wait_for(lambda: len(svc.recorded(JMX_TOPICS)) >= asked + 2)  # noqa: B023 (waited for here)
                assert apps.topics == {"listed"}
            svc.down()
            time.sleep(3 * SYNC_MS / 1000)
            assert apps.topics == {"listed"}
            svc.up()
            svc.set_mode("ok")
            svc.jmx_topics = "listed,more"
            wait_for(lambda: apps.topics == {"listed", "more"})
    warnings = [r.getMessage() for r in caplog.records if "topic list not refreshed" in r.getMessage()]
    assert warnings and all("\n" not in w for w in warnings)
    assert any("topic list refreshed again" in r.getMessage() for r in caplog.records)
