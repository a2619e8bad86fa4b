"""The broker as an operator sees it: start-up line, bad configs, clean shutdown, topics'
life cycle on disk, idle connections, request size limits, the embedded broker."""

from __future__ import annotations

import asyncio
import struct
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

import kaflet
from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def test_start_line_and_clean_shutdown_marker(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        log = broker.new_log()
        assert f"listening on PLAINTEXT://127.0.0.1:{broker.port}" in log
        assert f"data in {tmp_path / 'data'}" in log
        assert broker.stop() == 0
        assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()
        assert (tmp_path / "data" / "meta.properties").read_text().count("cluster.id=") == 1
        broker.start()  # the marker is consumed at start-up
        assert not (tmp_path / "data" / ".kafka_cleanshutdown").exists()
    finally:
        broker.kill()


def test_sigterm_keeps_every_acknowledged_record_and_the_next_start_reads_them(tmp_path):
    """The process ends with os._exit once stopped: what it acknowledged is on disk, marked clean."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(broker.bootstrap, "kept", partitions=3)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
        acked: list[bytes] = []
        for i in range(300):
            producer.produce("kept", value=b"v%d" % i, partition=i % 3,
                             on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None)
        producer.flush(30)
        assert len(acked) == 300
        assert broker.stop() == 0
        assert "stopped cleanly in " in broker.new_log()
        assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()
        broker.start()
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "kept",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition("kept", p, 0) for p in range(3)])
            seen: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(seen) < 300 and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    seen.append(msg.value())
        finally:
            consumer.close()
        assert sorted(seen) == sorted(acked)
    finally:
        broker.kill()


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("num.partitions=zero", "num.partitions"),
        ("listeners=PLAINTEXT//nohost", "listener"),
        ("log.message.timestamp.type=Sometimes", "log.message.timestamp.type"),
        ("nonsense", "key=value"),
    ],
)
def test_bad_config_is_one_line_error(tmp_path, override, fragment):
    proc = subprocess.run(
        [sys.executable, "-m", "kaflet.cli", "broker", "--override", f"log.dirs={tmp_path}", "--override", override],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and fragment in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_port_in_use_is_one_line_error(tmp_path, kaflet_broker):
    proc = subprocess.run(
        [sys.executable, "-m", "kaflet.cli", "broker", "--override", f"log.dirs={tmp_path}",
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{kaflet_broker.port}"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "cannot listen" in proc.stderr


def test_unknown_server_properties_keys_are_reported(tmp_path):
    broker = BrokerProcess(tmp_path / "data", {"some.unknown.key": "1", "num.network.threads": "3"}).start()
    try:
        log = broker.new_log()
        assert "The configuration 'some.unknown.key' was supplied but isn't a known config." in log
        assert "config num.network.threads is a Kafka broker config that kaflet does not act on: kaflet serves " \
               "the network from one event loop" in log
    finally:
        broker.kill()


def _topic_id_on_disk(partition_dir, timeout: float = 10.0) -> str:
    """The topic id in partition.metadata, which is written just after the log is created
    (off the event loop, as Kafka 3.x flushes it from its scheduler)."""
    path = partition_dir / "partition.metadata"
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return path.read_text().split("topic_id: ")[1]


def test_delete_removes_data_and_recreate_gets_new_id(kaflet_broker):
    bootstrap = kaflet_broker.bootstrap
    name = f"del-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, name, 2)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(100):
        p.produce(name, f"v{i}".encode())
    assert p.flush(30) == 0
    data_dir = kaflet_broker.data_dir
    assert (data_dir / f"{name}-0").is_dir()
    first_id = _topic_id_on_disk(data_dir / f"{name}-0")
    admin = _admin(bootstrap)
    admin.delete_topics([name])[name].result(30)
    assert not (data_dir / f"{name}-0").exists()
    create_topic(bootstrap, name, 1)
    second_id = _topic_id_on_disk(data_dir / f"{name}-0")
    assert second_id != first_id
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "x", "enable.partition.eof": True})
    c.assign([TopicPartition(name, 0, 0)])
    m = c.poll(10)
    assert m is not None and m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF
    c.close()


def test_topic_admin_errors(kaflet_broker):
    admin = _admin(kaflet_broker.bootstrap)
    name = f"adm-{uuid.uuid4().hex[:6]}"
    bad_rf = admin.create_topics([NewTopic(name, 1, replication_factor=3)])[name]
    with pytest.raises(Exception) as exc:
        bad_rf.result(30)
    assert exc.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
    bad_name = admin.create_topics([NewTopic("bad name!", 1, 1)])["bad name!"]
    with pytest.raises(Exception) as exc:
        bad_name.result(30)
    assert exc.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    bad_cfg = admin.create_topics([NewTopic(name, 1, 1, config={"segment.bytes": "1"})])[name]
    with pytest.raises(Exception) as exc:
        bad_cfg.result(30)
    assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG and "segment.bytes" in exc.value.args[0].str()
    dry = admin.create_topics([NewTopic(name, 3, 1)], validate_only=True)[name]
    dry.result(30)
    assert name not in admin.list_topics(timeout=10).topics
    create_topic(kaflet_broker.bootstrap, name, 2)
    grow = admin.create_partitions([NewPartitions(name, 5)])[name]
    grow.result(30)
    assert len(admin.list_topics(name, timeout=10).topics[name].partitions) == 5
    collide = name.replace("-", "_") if "-" in name else name
    assert collide  # names differing only in '.'/'_' collide in Kafka; '-' does not
    dotted = f"col.{name}"
    create_topic(kaflet_broker.bootstrap, dotted, 1)
    clash = admin.create_topics([NewTopic(f"col_{name}", 1, 1)])[f"col_{name}"]
    with pytest.raises(Exception) as exc:
        clash.result(30)
    assert exc.value.args[0].code() == KafkaError.TOPIC_EXCEPTION


def test_auto_create_on_produce(kaflet_broker):
    name = f"auto-{uuid.uuid4().hex[:6]}"
    p = Producer({"bootstrap.servers": kaflet_broker.bootstrap})
    p.produce(name, b"hello")
    assert p.flush(30) == 0
    assert name in _admin(kaflet_broker.bootstrap).list_topics(timeout=10).topics


def test_auto_create_disabled(tmp_path):
    broker = BrokerProcess(tmp_path / "data", {"auto.create.topics.enable": "false"}).start()
    try:
        p = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 3000})
        errors = []
        p.produce("nope", b"x", on_delivery=lambda err, _m: errors.append(err))
        p.flush(10)
        assert errors and errors[0] is not None
        assert "nope" not in _admin(broker.bootstrap).list_topics(timeout=10).topics
    finally:
        broker.kill()


def test_idle_connections_are_closed(tmp_path):
    broker = BrokerProcess(tmp_path / "data", {"connections.max.idle.ms": "500"}).start()
    try:
        c = RawClient(broker.bootstrap)
        start = time.monotonic()
        assert c.is_closed_by_peer(timeout=10)
        # Not before the idle time; the upper bound (10x it) only tells "closed by the reaper"
        # from "closed by something else much later".
        assert 0.4 < time.monotonic() - start < 5
        c.close()
    finally:
        broker.kill()


def test_socket_request_max_bytes(tmp_path):
    broker = BrokerProcess(tmp_path / "data", {"socket.request.max.bytes": "1000"}).start()
    try:
        c = RawClient(broker.bootstrap)
        c.send_raw(struct.pack(">i", 1001) + b"\x00" * 8)
        assert c.is_closed_by_peer()
        c.close()
        small = RawClient(broker.bootstrap)  # a request under the limit is served
        from kaflet.protocol import codec

        resp = small.request(18, 0, codec.request_class(18)())
        assert resp.error_code == 0
        small.close()
    finally:
        broker.kill()


def test_pipelined_requests_answer_in_order(kaflet_broker):
    from kaflet.protocol import codec

    c = RawClient(kaflet_broker.bootstrap)
    frames = b"".join(c.frame(18, v % 4, b"" if v % 4 < 3 else b"\x02t\x021\x00") for v in range(40))
    c.send_raw(frames)
    ids = [struct.unpack(">i", c.read_frame()[:4])[0] for _ in range(40)]
    assert ids == list(range(1, 41))
    assert codec  # the frames above are ApiVersions v0-v3 bodies
    c.close()


def test_embedded_sync():
    with kaflet.embedded({"num.partitions": "3"}) as bootstrap:
        p = Producer({"bootstrap.servers": bootstrap})
        p.produce("emb", b"v")
        assert p.flush(30) == 0
        md = _admin(bootstrap).list_topics("emb", timeout=10)
        assert len(md.topics["emb"].partitions) == 3


def test_embedded_async():
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> list[bytes]:
        async with kaflet.embedded_async() as bootstrap:
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
            await producer.start()
            await producer.send_and_wait("aemb", b"one")
            await producer.stop()
            consumer = AIOKafkaConsumer("aemb", bootstrap_servers=bootstrap, auto_offset_reset="earliest")
            from aiokafka import TopicPartition as ATP

            await consumer.start()
            try:
                consumer.unsubscribe()
                consumer.assign([ATP("aemb", 0)])
                await consumer.seek_to_beginning()
                msg = await asyncio.wait_for(consumer.getone(), 30)
                return [msg.value]
            finally:
                await consumer.stop()

    assert asyncio.run(run()) == [b"one"]
