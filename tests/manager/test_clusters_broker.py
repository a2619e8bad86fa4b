"""The cluster library against a real kaflet broker process over real sockets: topics (create,
expand, configs, delete), consumer groups with lag and offset resets (refused while the group
has members), the background sampler's snapshots and message rates, and the live connections
view built from the session reports the broker really POSTs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from kaflet.manager.charts import line_chart
from kaflet.manager.clusters import ClusterAccess, ClusterClient, ClusterError
from kaflet.manager.sampling import ClusterObserver, ObserverPool
from kaflet.manager.topic_connections import connections_by_topic, now_ms, rows_from_heartbeat
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.management_service import HEARTBEAT, scripted_management_service


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(kaflet_broker: BrokerProcess) -> Iterator[ClusterClient]:
    with ClusterClient(ClusterAccess(kaflet_broker.bootstrap, request_timeout_s=10)) as c:
        yield c


def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, count in per_partition.items():
        for i in range(count):
            producer.produce(topic, value=b"v%d" % i, partition=partition)
    assert producer.flush(20) == 0


def consume(consumer: Consumer, count: int, timeout: float = 30.0) -> int:
    got = 0
    deadline = time.monotonic() + timeout
    while got < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got += 1
    return got


def test_single_broker_overview(client: ClusterClient, kaflet_broker: BrokerProcess) -> None:
    ov = client.overview()
    [b] = ov.brokers
    assert b.up and b.controller and ov.controller_id == b.id
    assert f"{b.host}:{b.port}" == kaflet_broker.bootstrap
    assert ov.cluster_id


def test_create_expand_configure_and_delete_a_topic(client: ClusterClient) -> None:
    topic = name("ops")
    client.create_topic(topic, 2, configs={"retention.ms": "3600000", "cleanup.policy": "delete"})
    t = client.topic(topic)
    assert (t.partition_count, t.replication_factor, t.under_replicated, t.internal) == (2, 1, 0, False)
    assert [p.isr for p in t.partitions] == [p.replicas for p in t.partitions]
    assert topic in {x.name for x in client.topics()}

    with pytest.raises(ClusterError) as exists:
        client.create_topic(topic, 1)
    assert exists.value.code == "TOPIC_ALREADY_EXISTS"

    client.expand_topic(topic, 5)
    assert client.topic(topic).partition_count == 5
    with pytest.raises(ClusterError) as shrink:
        client.expand_topic(topic, 3)
    assert shrink.value.code == "INVALID_PARTITIONS"

    client.alter_topic_configs(topic, {"segment.bytes": "1048576"}, delete_configs=["retention.ms"])
    configs = {c.name: c for c in client.topic_configs(topic)}
    assert configs["segment.bytes"].value == "1048576" and not configs["segment.bytes"].default
    assert configs["segment.bytes"].source == "DYNAMIC_TOPIC_CONFIG"
    assert configs["retention.ms"].default and configs["retention.ms"].value == "604800000"
    assert configs["cleanup.policy"].value == "delete"  # untouched by the incremental change
    with pytest.raises(ClusterError) as bad:
        client.alter_topic_configs(topic, {"segment.bytes": "not-a-number"})
    assert bad.value.code == "INVALID_CONFIG"
    assert {c.name: c.value for c in client.topic_configs(topic)}["segment.bytes"] == "1048576"

    client.delete_topic(topic)
    deadline = time.monotonic() + 10
    while topic in {x.name for x in client.topics()} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic not in {x.name for x in client.topics()}
    with pytest.raises(ClusterError) as gone:
        client.topic(topic)
    assert gone.value.code == "UNKNOWN_TOPIC_OR_PART"


def test_sizes_from_describe_log_dirs(client: ClusterClient, kaflet_broker: BrokerProcess) -> None:
    topic = name("size")
    client.create_topic(topic, 2)
    produce(kaflet_broker.bootstrap, topic, {0: 10, 1: 0})
    sizes = client.log_dir_sizes()
    assert sizes is not None and client.sizes_unavailable is None
    on_disk = sum(f.stat().st_size for f in (kaflet_broker.data_dir / f"{topic}-0").glob("*.log"))
    [broker] = [b.id for b in client.overview().brokers]
    # Per partition, the bytes of each broker's replica (one broker here).
    assert on_disk > 0 and sizes[(topic, 0)] == {broker: on_disk} and sizes[(topic, 1)] == {broker: 0}
    [info] = [t for t in client.topics(sizes=sizes) if t.name == topic]
    assert info.size_bytes == on_disk
    assert [(p.size_bytes, p.replica_sizes, p.replica_size(broker)) for p in info.partitions] == \
        [(on_disk, ((broker, on_disk),), on_disk), (0, ((broker, 0),), 0)]


def test_group_lag_and_offset_resets(client: ClusterClient, kaflet_broker: BrokerProcess) -> None:
    topic, group = name("lag"), name("grp")
    client.create_topic(topic, 3)
    produce(kaflet_broker.bootstrap, topic, {0: 10, 1: 20, 2: 30})
    assert [(o.partition, o.start, o.end, o.records) for o in client.topic_offsets(topic)] == \
        [(0, 0, 10, 10), (1, 0, 20, 20), (2, 0, 30, 30)]
    before = int(time.time() * 1000)
    consumer = Consumer({"bootstrap.servers": kaflet_broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        assert consume(consumer, 60) == 60
        consumer.commit(asynchronous=False)
        produce(kaflet_broker.bootstrap, topic, {1: 5})

        assert group in {g.group_id: g.state for g in client.groups() if g.state == "Stable"}
        detail = client.group(group)
        assert detail.state == "Stable" and len(detail.members) == 1
        [member] = detail.members
        assert set(member.assignment) == {(topic, 0), (topic, 1), (topic, 2)}
        lags = {p.partition: (p.committed, p.log_end, p.lag, p.member_id) for p in detail.partitions}
        assert lags == {0: (10, 10, 0, member.member_id), 1: (20, 25, 5, member.member_id),
                        2: (30, 30, 0, member.member_id)}
        assert detail.total_lag == 5
        snap = ClusterObserver(client, interval_s=60).sample()
        assert snap.group_lag(group) == 5 and snap.groups_of_topic(topic) == {group: 5}
        assert snap.groups_of_topic(name("none")) == {} and snap.group_lag(name("none")) is None

        # A group with members would overwrite a reset at its next commit: Kafka refuses, so do we.
        with pytest.raises(ClusterError) as busy:
            client.reset_offsets(group, topic, "earliest")
        assert busy.value.code == "GROUP_NOT_EMPTY"
    finally:
        consumer.close()

    assert client.group(group).state == "Empty"
    changes = client.reset_offsets(group, topic, "earliest", dry_run=True)
    assert [(c.partition, c.before, c.after) for c in changes] == [(0, 10, 0), (1, 20, 0), (2, 30, 0)]
    assert client.group(group).total_lag == 5  # a dry run commits nothing

    client.reset_offsets(group, topic, "earliest", partitions=[1])
    assert {p.partition: p.committed for p in client.group(group).partitions} == {0: 10, 1: 0, 2: 30}
    client.reset_offsets(group, topic, "offset", 7)
    assert {p.partition: p.lag for p in client.group(group).partitions} == {0: 3, 1: 18, 2: 23}
    # Past the end is clamped to the log end offset, as kafka-consumer-groups.sh does.
    client.reset_offsets(group, topic, "offset", 10_000, partitions=[0])
    assert {p.partition: p.committed for p in client.group(group).partitions}[0] == 10
    client.reset_offsets(group, topic, "latest")
    assert client.group(group).total_lag == 0
    # Every record was written after `before`: the timestamp finds the first offsets.
    client.reset_offsets(group, topic, "timestamp", before - 60_000)
    assert {p.partition: p.committed for p in client.group(group).partitions} == {0: 0, 1: 0, 2: 0}
    # A time after the last record: the log end, as Kafka's tool.
    client.reset_offsets(group, topic, "timestamp", now_ms() + 3_600_000)
    assert client.group(group).total_lag == 0

    with pytest.raises(ClusterError) as nopart:
        client.reset_offsets(group, topic, "earliest", partitions=[7])
    assert nopart.value.code == "UNKNOWN_TOPIC_OR_PART"
    with pytest.raises(ValueError):
        client.reset_offsets(group, topic, "offset")

    # The new offsets are where a consumer of the group really starts.
    client.reset_offsets(group, topic, "offset", 8)
    again = Consumer({"bootstrap.servers": kaflet_broker.bootstrap, "group.id": group,
                      "enable.auto.commit": False})
    try:
        again.subscribe([topic])
        assert consume(again, 2 + 17 + 22) == 41
        assert consume(again, 1, timeout=2) == 0
    finally:
        again.close()


def test_observer_samples_in_the_background_and_charts_the_rate(client: ClusterClient,
                                                                 kaflet_broker: BrokerProcess) -> None:
    topic = name("rate")
    client.create_topic(topic, 2)
    observer = ClusterObserver(client, interval_s=0.5).start()
    try:
        assert observer.wait_for_rounds(1, 30), observer.last_error
        snap = observer.snapshot()
        assert snap is not None and topic in snap.topics
        assert snap.partition_count >= 2 and snap.overview.controller_id is not None
        start = observer.rounds
        produce(kaflet_broker.bootstrap, topic, {0: 300, 1: 200})
        assert observer.wait_for_rounds(start + 2, 30), observer.last_error
    finally:
        observer.stop()
    series = observer.rates.series(topic)
    samples = observer.rates.samples(topic)
    assert samples[0][1] == 0 and samples[-1][1] == 500
    # Every message appended shows up once in the rate integrated over time.
    times = [t for t, _ in samples]
    counted = sum(rate * (t1 - t0) for t0, (t1, rate) in zip(times, series, strict=False))
    assert round(counted) == 500
    assert all(rate >= 0 for _, rate in series)
    svg = line_chart({topic: series}, title=topic, unit="msg/s")
    assert svg.count("<polyline") == 1 and topic in svg


def test_connections_view_from_the_reports_a_broker_posts(tmp_path: Path) -> None:
    with scripted_management_service() as service:
        overrides = {"gateway.url": service.url, "cluster.id": "7", "session.report.ms": "300",
                     "gateway.sync.interval.ms": "200"}
        with running_broker(tmp_path / "data", overrides) as broker:
            topic = name("conn")
            with ClusterClient(ClusterAccess(broker.bootstrap)) as c:
                c.create_topic(topic, 1)
            producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "writer-1"})
            producer.produce(topic, b"x")
            assert producer.flush(10) == 0
            consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "reader-1",
                                 "group.id": name("g"), "auto.offset.reset": "earliest"})
            try:
                consumer.subscribe([topic])
                assert consume(consumer, 1) == 1
            finally:
                consumer.close()

            def reported() -> list:  # type: ignore[type-arg]
                rows = []
                for req in service.recorded(HEARTBEAT):
                    assert req.query == {"clusterId": "7", "brokerId": req.query["brokerId"]}
                    rows += rows_from_heartbeat(req.body, int(req.query["clusterId"]), req.at_ms)
                return rows

            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and {r.type for r in reported() if r.topic_name == topic} != \
                    {"produce", "fetch"}:
                time.sleep(0.2)
    view = connections_by_topic(reported(), now_ms())
    conns = {(c.role, c.app_id, c.ip, c.client_id) for c in view[topic]}
    assert conns == {("producer", "ANONYMOUS", "127.0.0.1", "writer-1"),
                     ("consumer", "ANONYMOUS", "127.0.0.1", "reader-1")}
    assert all(c.client_version not in ("", "unknown") for c in view[topic])


JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_ops="ops-secret";')


def test_sasl_plain_credentials_reach_both_admin_clients(tmp_path: Path) -> None:
    overrides = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                 "sasl.enabled.mechanisms": "PLAIN",
                 "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS}
    with running_broker(tmp_path / "data", overrides) as broker:
        sasl = broker.bootstrap_for("SASL_PLAINTEXT")
        access = ClusterAccess(sasl, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                               sasl_username="ops", sasl_password="ops-secret", request_timeout_s=5)
        assert "ops-secret" not in repr(access)
        with ClusterClient(access) as c:
            topic = name("sasl")
            c.create_topic(topic, 2)
            assert c.topic(topic).partition_count == 2
            assert [f"{b.host}:{b.port}" for b in c.overview().brokers] == [sasl]
            # kafka-python's client (DescribeLogDirs) logs in too.
            assert c.log_dir_sizes() is not None and c.sizes_unavailable is None
        wrong = ClusterAccess(sasl, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                              sasl_username="ops", sasl_password="nope", request_timeout_s=3)
        with ClusterClient(wrong) as c, pytest.raises(ClusterError):
            c.overview()


def test_observer_pool_keeps_one_sampler_per_cluster(kaflet_broker: BrokerProcess) -> None:
    pool = ObserverPool(interval_s=0.3)
    try:
        access = ClusterAccess(kaflet_broker.bootstrap)
        first = pool.observe(1, access)
        assert pool.observe(1, ClusterAccess(kaflet_broker.bootstrap)) is first  # same access: same one
        assert first.wait_for_rounds(2, 30), first.last_error
        snap = first.snapshot()
        assert snap is not None and [b.up for b in snap.overview.brokers] == [True]
        # New credentials (or servers): a new observer, the old one stopped.
        second = pool.observe(1, ClusterAccess(kaflet_broker.bootstrap, request_timeout_s=7))
        assert second is not first and pool.get(1) is second
        rounds = first.rounds
        time.sleep(1)
        assert first.rounds == rounds
        pool.forget(1)
        assert pool.get(1) is None
        # A cluster that cannot be reached keeps its last error and no snapshot.
        down = pool.observe(2, ClusterAccess("127.0.0.1:9", request_timeout_s=1))
        deadline = time.monotonic() + 30
        while down.last_error is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert down.last_error and down.snapshot() is None
    finally:
        pool.close()
