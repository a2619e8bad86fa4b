"""`kaflet gateway --mode proxy` with real processes: a `kaflet manager`, two single-broker kaflet
clusters (ids 7 and 8, the gateway on, applications logging in over SASL/PLAIN) whose service
addresses are discovery settings in the manager, and one gateway in proxy mode. Clients know only
the gateway's address and log in as ``<clusterId>.<appId>``; every request goes through the
gateway, whose answers name its own ports (one per broker) instead of the brokers'."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from kaflet.protocol.records import iter_batches
from tests.support.broker_process import BrokerProcess
from tests.support.cli import free_port_range
from tests.support.gateway_process import GatewayProcess, gateway_broker, running_gateway, two_clusters
from tests.support.java import JavaPrograms
from tests.support.manager import ManagerProcess, Session, wait_for
from tests.support.topics import create_topic, kafka_python_values, poll_values

SYNC_MS = 300
APP = "app_a"
PASSWORD = "pw-a"
PER_CLUSTER = 10
BROKER_ID = 1
# Both clusters know the application under both cluster ids, so a cluster can take over the
# other's id when the manager moves it (the brokers check the password, not the gateway).
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        f'password="admin-secret" user_admin="admin-secret" user_7.{APP}="{PASSWORD}" user_8.{APP}="{PASSWORD}" '
        f'user_12.{APP}="{PASSWORD}";')


def broker_overrides(cluster_id: int, gateway_url: str) -> dict[str, str]:
    return {
        **gateway_broker(cluster_id, gateway_url, JAAS),
        "broker.id": str(BROKER_ID),
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
    }


def free_port_base() -> int:
    """A base whose broker ports for cluster ids 7 to 12 are free now."""
    while True:
        first = free_port_range(6 * PER_CLUSTER)
        if first > 7 * PER_CLUSTER:
            return first - 7 * PER_CLUSTER


class Setup:
    def __init__(self, manager: ManagerProcess, admin: Session, a: BrokerProcess, b: BrokerProcess,
                 gateway: GatewayProcess, cache: Path, base: int) -> None:
        self.manager, self.admin, self.a, self.b, self.gateway, self.cache = manager, admin, a, b, gateway, cache
        self.base = base

    def set_address(self, cluster_id: int, address: str) -> None:
        r = self.admin.form("/gateway-configs", {"type": "SD_CLUSTER_ID", "name": str(cluster_id), "value": address})
        assert r.status_code == 303, r.text

    def move_back(self) -> None:
        """Cluster 7 at broker A again, once the gateway has it."""
        address = self.a.bootstrap_for("SASL_PLAINTEXT")
        self.set_address(7, address)
        wait_for(lambda: json.loads(self.cache.read_text())["clusters"].get("7") == [address])

    def broker_port(self, cluster_id: int) -> int:
        return self.base + cluster_id * PER_CLUSTER + BROKER_ID


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    work = tmp_path_factory.mktemp("gateway-proxy")
    with two_clusters(work, broker_overrides) as (manager, admin, a, b):
        cache = work / "gateway-cache.json"
        base = free_port_base()
        with running_gateway(work / "gateway", ["--manager-url", manager.gateway_url, "--listen", "127.0.0.1:0",
                                                "--mode", "proxy", "--config-cache", str(cache)],
                             {"gateway.sync.interval.ms": str(SYNC_MS), "proxy.broker.port.base": str(base),
                              "proxy.broker.ports.per.cluster": str(PER_CLUSTER)}) as gateway:
            s = Setup(manager, admin, a, b, gateway, cache, base)
            s.set_address(7, a.bootstrap_for("SASL_PLAINTEXT"))
            s.set_address(8, b.bootstrap_for("SASL_PLAINTEXT"))
            wait_for(lambda: '"8"' in cache.read_text() if cache.exists() else False)
            yield s


def client_config(gateway: GatewayProcess, username: str, password: str = PASSWORD) -> dict[str, Any]:
    return {"bootstrap.servers": gateway.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": username, "sasl.password": password}


def consume(config: dict[str, Any], topic: str, count: int, timeout: float = 30) -> list[bytes]:
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4()}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
                consumer.commit(msg, asynchronous=False)
    finally:
        consumer.close()
    return got


def end_offset(bootstrap: str, topic: str) -> int:
    """The end offset of the topic's partition 0, asked of the broker directly."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def test_metadata_names_only_the_gateway(setup: Setup) -> None:
    md = AdminClient(client_config(setup.gateway, f"7.{APP}")).list_topics(timeout=10)
    assert {(b.host, b.port) for b in md.brokers.values()} == {("127.0.0.1", setup.broker_port(7))}
    assert len(md.topics["orders"].partitions) == 2
    md = AdminClient(client_config(setup.gateway, f"8.{APP}")).list_topics(timeout=10)
    assert {(b.host, b.port) for b in md.brokers.values()} == {("127.0.0.1", setup.broker_port(8))}
    assert len(md.topics["orders"].partitions) == 3


def test_idempotent_producer_and_group_with_committed_offsets(setup: Setup) -> None:
    config = client_config(setup.gateway, f"7.{APP}")
    topic = f"idem-{uuid.uuid4().hex[:8]}"
    values = [f"m{i}".encode() * 100 for i in range(200)]
    producer = Producer({**config, "enable.idempotence": True, "linger.ms": 5})
    errors: list[Any] = []
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(20) == 0
    assert errors == [None] * len(values)
    group = f"g-{uuid.uuid4()}"
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        got = poll_values(consumer, topic, len(values))
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        consumer.close()
    assert got == values  # one partition: in order, each once
    assert committed[0].offset == len(values)
    # The records are on cluster A itself.
    direct = consume({"bootstrap.servers": setup.a.bootstrap}, topic, len(values))
    assert sorted(direct) == sorted(values)


def test_kafka_python_producer_and_consumer_with_acks_0_and_1(setup: Setup) -> None:
    sasl = {"bootstrap_servers": setup.gateway.bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN", "sasl_plain_username": f"8.{APP}", "sasl_plain_password": PASSWORD}
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    create_topic(setup.b.bootstrap, topic, partitions=1)
    for acks in (1, 0):
        producer = KafkaProducer(acks=acks, **sasl)
        try:
            for i in range(5):
                producer.send(topic, f"kp{acks}-{i}".encode()).get(timeout=20)
            producer.flush(10)
        finally:
            producer.close()
    got = kafka_python_values(topic, **sasl)
    assert got == [f"kp{acks}-{i}".encode() for acks in (1, 0) for i in range(5)]


def test_transactions_reach_the_coordinator_through_its_port(setup: Setup) -> None:
    config = client_config(setup.gateway, f"7.{APP}")
    topic = f"tx-{uuid.uuid4().hex[:8]}"
    create_topic(setup.a.bootstrap, topic, partitions=1)
    producer = Producer({**config, "transactional.id": f"tx-{uuid.uuid4()}"})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.abort_transaction(20)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(20)
    got = consume({**config, "isolation.level": "read_committed"}, topic, 1)
    assert got == [b"committed"]


def test_admin_creates_and_deletes_topics(setup: Setup) -> None:
    admin = AdminClient(client_config(setup.gateway, f"8.{APP}"))
    topic = f"adm-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(20)
    assert len(AdminClient({"bootstrap.servers": setup.b.bootstrap}).list_topics(topic, timeout=10)
               .topics[topic].partitions) == 4
    admin.delete_topics([topic])[topic].result(20)
    wait_for(lambda: topic not in AdminClient({"bootstrap.servers": setup.b.bootstrap}).list_topics(timeout=10).topics,
             timeout=15)


def kcat(setup: Setup, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(["kcat", "-b", setup.gateway.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
                           "-X", "sasl.mechanism=PLAIN", "-X", f"sasl.username=7.{APP}",
                           "-X", f"sasl.password={PASSWORD}", *args],
                          input=stdin, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_kcat_lists_produces_and_consumes(setup: Setup) -> None:
    listing = kcat(setup, "-L")
    assert f"broker {BROKER_ID} at 127.0.0.1:{setup.broker_port(7)}" in listing
    assert 'topic "orders" with 2 partitions' in listing
    topic = f"kcat-{uuid.uuid4().hex[:8]}"
    create_topic(setup.a.bootstrap, topic, partitions=1)
    kcat(setup, "-P", "-t", topic, stdin="one\ntwo\nthree\n")
    assert kcat(setup, "-C", "-t", topic, "-e", "-q").split() == ["one", "two", "three"]


def test_a_connected_producer_follows_its_cluster_moved_in_the_manager(setup: Setup) -> None:
    """Cluster 7's address moves to the other broker: a producer that stays connected goes on
    delivering, and its later records land on the new place (a plain producer; idempotent ones
    below)."""
    topic = f"move-{uuid.uuid4().hex[:8]}"
    create_topic(setup.a.bootstrap, topic, partitions=1)
    create_topic(setup.b.bootstrap, topic, partitions=1)
    producer = Producer({**client_config(setup.gateway, f"7.{APP}"), "acks": "all",
                         "topic.metadata.refresh.interval.ms": 1000, "message.timeout.ms": 20000})
    errors: list[Any] = []
    stop = threading.Event()

    def keep_producing() -> None:
        i = 0
        while not stop.is_set():
            producer.produce(topic, f"r{i}".encode(), on_delivery=lambda err, msg: errors.append(err))
            producer.poll(0.02)
            i += 1

    thread = threading.Thread(target=keep_producing)
    thread.start()
    try:
        time.sleep(1.5)
        setup.set_address(7, setup.b.bootstrap_for("SASL_PLAINTEXT"))
        took = wait_for(lambda: end_offset(setup.b.bootstrap, topic) > 0, timeout=20)
        print(f"\nthe connected producer's records reached the moved cluster within {took:.2f} s")
        time.sleep(1)
    finally:
        stop.set()
        thread.join()
        assert producer.flush(30) == 0
        setup.move_back()
    assert errors and all(e is None for e in errors), [e for e in errors if e is not None][:3]
    assert end_offset(setup.a.bootstrap, topic) > 0


def producers_of(broker: BrokerProcess, topic: str) -> list[tuple[int, int]]:
    """(producer id, epoch) of each batch in the topic's partition 0 on the broker, read from its
    segment files (what the gateway's clients cannot see)."""
    found = []
    for segment in sorted(broker.data_dir.rglob(f"{topic}-0/*.log")):
        data = segment.read_bytes()
        found += [(h.producer_id, h.producer_epoch) for _, h in iter_batches(data)]
    return found


def direct_values(bootstrap: str, topic: str) -> list[bytes]:
    """Every value of the topic's partition 0 on one broker, in offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        end = int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
        return poll_values(consumer, topic, end) if end else []
    finally:
        consumer.close()


def check_moved_records(setup: Setup, topic: str, sent: list[bytes], acked: list[bytes]) -> None:
    """What a move may do to an idempotent producer's records, as Kafka's semantics allow it.

    Idempotence holds per producer id within one cluster, and the producer id the client holds
    was given by cluster A, so across the switch the only record Kafka would allow on both sides
    is one whose send got no answer and was retried. The gateway keeps the old connection until
    its answers are in, so there is none: A holds a prefix of what was sent and B the rest, each
    once and in order (one partition). B must not see A's (producer id, epoch) pairs: it has its
    own producers under the same ids."""
    on_a, on_b = direct_values(setup.a.bootstrap, topic), direct_values(setup.b.bootstrap, topic)
    assert on_a and on_b, (len(on_a), len(on_b))
    assert on_a + on_b == sent, "records lost, duplicated or reordered across the move"
    assert sorted(acked) == sorted(sent)
    assert not set(producers_of(setup.a, topic)) & set(producers_of(setup.b, topic))


def test_an_idempotent_producer_follows_its_cluster_moved_in_the_manager(setup: Setup) -> None:
    """librdkafka's idempotent producer (acks=all) writing steadily while cluster 7 moves to the
    other broker: every record is acknowledged, none fails, and none is lost or doubled."""
    topic = f"imove-{uuid.uuid4().hex[:8]}"
    create_topic(setup.a.bootstrap, topic, partitions=1)
    create_topic(setup.b.bootstrap, topic, partitions=1)
    errors: list[Any] = []
    producer = Producer({**client_config(setup.gateway, f"7.{APP}"), "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "topic.metadata.refresh.interval.ms": 1000,
                         "message.timeout.ms": 30000, "error_cb": lambda e: errors.append(e)})
    sent: list[bytes] = []
    acked: list[bytes] = []
    failed: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        (failed if err is not None else acked).append(err if err is not None else msg.value())

    stop = threading.Event()

    def keep_producing() -> None:
        while not stop.is_set():
            value = f"r{len(sent)}".encode()
            producer.produce(topic, value, on_delivery=delivered)
            sent.append(value)
            producer.poll(0.01)

    thread = threading.Thread(target=keep_producing)
    thread.start()
    try:
        wait_for(lambda: end_offset(setup.a.bootstrap, topic) > 0, timeout=20)
        time.sleep(0.5)
        setup.set_address(7, setup.b.bootstrap_for("SASL_PLAINTEXT"))
        wait_for(lambda: end_offset(setup.b.bootstrap, topic) > 0, timeout=20)
        time.sleep(1)
    finally:
        stop.set()
        thread.join()
        remaining = producer.flush(30)
        setup.move_back()
    assert remaining == 0 and not failed, failed[:3]
    assert not [e for e in errors if e.fatal()], errors
    check_moved_records(setup, topic, sent, acked)
    assert "answered UNKNOWN_PRODUCER_ID" in setup.gateway.log()


def test_the_java_idempotent_producer_follows_its_cluster_moved_in_the_manager(setup: Setup,
                                                                               java: JavaPrograms) -> None:
    """The Java client (idempotent by default) writing steadily while cluster 7 moves."""
    topic = f"jmove-{uuid.uuid4().hex[:8]}"
    create_topic(setup.a.bootstrap, topic, partitions=1)
    create_topic(setup.b.bootstrap, topic, partitions=1)
    lines: list[list[str]] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            lines.extend(java.run("ProduceSteadily", setup.gateway.bootstrap, topic, "12", timeout=90,
                                  login=(f"7.{APP}", PASSWORD)))
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_for(lambda: end_offset(setup.a.bootstrap, topic) > 0 or not thread.is_alive(), timeout=30)
        assert not failure, failure
        time.sleep(0.5)
        setup.set_address(7, setup.b.bootstrap_for("SASL_PLAINTEXT"))
        wait_for(lambda: end_offset(setup.b.bootstrap, topic) > 0, timeout=20)
    finally:
        thread.join()
        setup.move_back()
    assert not failure, failure
    [done] = [int(w[1]) for w in lines if w[0] == "done"]
    assert not [w for w in lines if w[0] == "failed"][:3]
    acked = [w[1].encode() for w in lines if w[0] == "acked"]
    check_moved_records(setup, topic, [f"j{i}".encode() for i in range(done)], acked)


def produce_directly(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(30) == 0


def test_a_consumer_in_a_group_follows_its_cluster_moved_in_the_manager(setup: Setup) -> None:
    """A group member that knows only the gateway reads cluster A, then, with no restart, the
    records written to cluster B after the move. Its group and offsets belong to A, so on B it
    joins the group afresh and starts where B has no committed offset (auto.offset.reset)."""
    topic = f"gmove-{uuid.uuid4().hex[:8]}"
    create_topic(setup.a.bootstrap, topic, partitions=1)
    create_topic(setup.b.bootstrap, topic, partitions=1)
    produce_directly(setup.a.bootstrap, topic, [f"a{i}".encode() for i in range(10)])
    consumer = Consumer({**client_config(setup.gateway, f"7.{APP}"), "group.id": f"g-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "topic.metadata.refresh.interval.ms": 1000, "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 500})
    got: list[bytes] = []
    errors: list[str] = []

    def read_until(last: bytes, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while last not in got and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                errors.append(str(msg.error()))
                continue
            got.append(msg.value())
            consumer.commit(msg, asynchronous=False)

    try:
        consumer.subscribe([topic])
        read_until(b"a9", 30)
        assert got == [f"a{i}".encode() for i in range(10)], got
        setup.set_address(7, setup.b.bootstrap_for("SASL_PLAINTEXT"))
        address = setup.b.bootstrap_for("SASL_PLAINTEXT")
        wait_for(lambda: json.loads(setup.cache.read_text())["clusters"].get("7") == [address])
        # More records on B than A held, so the last ones lie past the member's old position too.
        produce_directly(setup.b.bootstrap, topic, [f"b{i}".encode() for i in range(30)])
        read_until(b"b29", 60)
    finally:
        consumer.close()
        setup.move_back()
    after = got[10:]
    assert after and after[-1] == b"b29", (after[-5:], errors[:3])
    # Whatever offset it started from on B, it read B's records from there on, in order, once.
    first = int(after[0][1:])
    assert after == [f"b{i}".encode() for i in range(first, 30)], after



def test_an_unreachable_cluster_gets_retriable_errors_and_recovers(setup: Setup) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens once closed
    topic = f"down-{uuid.uuid4().hex[:8]}"
    create_topic(setup.a.bootstrap, topic, partitions=1)
    setup.set_address(12, setup.a.bootstrap_for("SASL_PLAINTEXT"))
    producer = Producer({**client_config(setup.gateway, f"12.{APP}"), "enable.idempotence": True,
                         "message.timeout.ms": 30000, "topic.metadata.refresh.interval.ms": 1000})
    errors: list[Any] = []
    try:
        producer.produce(topic, b"before", on_delivery=lambda err, msg: errors.append(err))
        assert producer.flush(20) == 0 and errors == [None]
        setup.set_address(12, dead)
        wait_for(lambda: dead in setup.cache.read_text(), 10)
        producer.produce(topic, b"while-down", on_delivery=lambda err, msg: errors.append(err))
        producer.flush(3)
        assert len(errors) == 1  # not delivered, not failed: the client retries
        setup.set_address(12, setup.a.bootstrap_for("SASL_PLAINTEXT"))
        assert producer.flush(25) == 0
        assert errors == [None, None]
    finally:
        setup.set_address(12, dead)
    assert consume({"bootstrap.servers": setup.a.bootstrap}, topic, 2) == [b"before", b"while-down"]
    log = setup.gateway.log()
    assert "cluster 12's brokers failed" in log and "cluster 12's brokers recovered" in log


def test_a_broker_port_refuses_another_clusters_login(setup: Setup) -> None:
    AdminClient(client_config(setup.gateway, f"8.{APP}")).list_topics(timeout=10)  # binds cluster 8's port
    errors: list[Any] = []
    admin = AdminClient({**client_config(setup.gateway, f"7.{APP}"),
                         "bootstrap.servers": f"127.0.0.1:{setup.broker_port(8)}",
                         "error_cb": lambda e: errors.append(e)})
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        admin.poll(0.2)
    assert any("is a broker of cluster 8" in e.str() for e in errors), errors


def test_the_java_client_produces_and_consumes_in_a_group(setup: Setup, java: JavaPrograms) -> None:
    """The reference client, the strictest about rewritten metadata: Admin creates the topics, an
    idempotent producer writes with every codec, a two-member group reads everything once."""
    prefix, count = f"java-{uuid.uuid4().hex[:6]}", 100
    lines = java.run("ProduceConsume", setup.gateway.bootstrap, prefix, "range", str(count), timeout=90,
                     login=(f"8.{APP}", PASSWORD))
    codecs = ("none", "gzip", "snappy", "lz4", "zstd")
    assert {w[1]: int(w[2]) for w in lines if w[0] == "produced"} == {f"{prefix}-{c}": count for c in codecs}
    for c in codecs:
        [consumed] = [w[2:] for w in lines if w[:2] == ["consumed", f"{prefix}-{c}"]]
        assert consumed[:3] == [str(count), "distinct", str(count)]
    # The topics are on cluster 8's broker.
    assert f"{prefix}-none" in AdminClient({"bootstrap.servers": setup.b.bootstrap}).list_topics(timeout=10).topics
