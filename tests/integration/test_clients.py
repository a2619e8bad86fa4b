"""Unmodified Kafka clients against a real kaflet broker process.

Each client library creates a topic, produces 10,000 keyed messages with each compression
codec (idempotence on where the client supports it) and reads them back exactly, in order per
partition.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

N = 10_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3



def _messages(tag: str) -> list[tuple[bytes, bytes]]:
    return [(f"k{i % 37}".encode(), f"{tag}-{i}".encode()) for i in range(N)]


def _check(consumed: dict[int, list[tuple[bytes, bytes, int]]], produced: list[tuple[bytes, bytes]]) -> None:
    """Every message exactly once; offsets gap-free per partition; per-key order preserved."""
    flat = [(k, v) for part in consumed.values() for k, v, _ in part]
    assert len(flat) == len(produced), f"consumed {len(flat)} of {len(produced)}"
    assert sorted(flat) == sorted(produced)
    by_key: dict[bytes, list[bytes]] = defaultdict(list)
    for part in consumed.values():
        offsets = [o for _, _, o in part]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), "offset gap or duplicate"
        for k, v, _ in part:
            by_key[k].append(v)
    want: dict[bytes, list[bytes]] = defaultdict(list)
    for k, v in produced:
        want[k].append(v)
    assert by_key == want, "per-key order differs"


def _create(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic]
    fut.result(timeout=30)


def _consume_confluent(bootstrap: str, topic: str, partitions: int, expect: int) -> dict[int, list[tuple[bytes, bytes, int]]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "enable.partition.eof": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[tuple[bytes, bytes, int]]] = defaultdict(list)
    got = 0
    import time

    deadline = time.monotonic() + 60
    while got < expect and time.monotonic() < deadline:
        for m in c.consume(1000, timeout=1.0):
            if m.error():
                raise KafkaException(m.error())
            out[m.partition()].append((m.key(), m.value(), m.offset()))
            got += 1
    c.close()
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_roundtrip(kaflet_broker, codec):
    bootstrap = kaflet_broker.bootstrap
    topic = f"ck-{codec}-{uuid.uuid4().hex[:6]}"
    _create(bootstrap, topic)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": codec,
                  "linger.ms": 5})
    msgs = _messages(codec)
    errors = []
    for k, v in msgs:
        p.produce(topic, key=k, value=v, on_delivery=lambda err, _m: err and errors.append(err))
        p.poll(0)
    assert p.flush(60) == 0
    assert not errors
    _check(_consume_confluent(bootstrap, topic, PARTITIONS, N), msgs)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_roundtrip(kaflet_broker, codec):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic

    bootstrap = kaflet_broker.bootstrap
    topic = f"kp-{codec}-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([KNewTopic(topic, PARTITIONS, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                             compression_type=None if codec == "none" else codec, linger_ms=5)
    msgs = _messages(codec)
    futures = [producer.send(topic, key=k, value=v) for k, v in msgs]
    producer.flush(60)
    for f in futures:
        f.get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([KTP(topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    out: dict[int, list[tuple[bytes, bytes, int]]] = defaultdict(list)
    for got, m in enumerate(consumer, start=1):
        out[m.partition].append((m.key, m.value, m.offset))
        if got == N:
            break
    consumer.close()
    _check(out, msgs)


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_roundtrip(kaflet_broker, codec):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP

    bootstrap = kaflet_broker.bootstrap
    topic = f"ak-{codec}-{uuid.uuid4().hex[:6]}"
    _create(bootstrap, topic)
    msgs = _messages(codec)

    async def run() -> dict[int, list[tuple[bytes, bytes, int]]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                    compression_type=None if codec == "none" else codec, linger_ms=5)
        await producer.start()
        try:
            futs = [await producer.send(topic, key=k, value=v) for k, v in msgs]
            await asyncio.gather(*futs)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        out: dict[int, list[tuple[bytes, bytes, int]]] = defaultdict(list)
        try:
            consumer.assign([ATP(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            got = 0
            while got < N:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                for tp, records in batch.items():
                    for m in records:
                        out[tp.partition].append((m.key, m.value, m.offset))
                        got += 1
        finally:
            await consumer.stop()
        return out

    _check(asyncio.run(run()), msgs)


@pytest.fixture(scope="session")
def kcat() -> str:
    """The kcat binary (Debian's package, which CI installs): its absence fails the tests."""
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("kcat is not installed (apt-get install kcat)")
    return path


def test_kcat_lists_topics(kaflet_broker, kcat):
    topic = f"kcat-{uuid.uuid4().hex[:6]}"
    _create(kaflet_broker.bootstrap, topic, partitions=4)
    out = subprocess.run([kcat, "-b", kaflet_broker.bootstrap, "-L"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert f'topic "{topic}" with 4 partitions' in out.stdout
    assert "1 brokers:" in out.stdout


def test_kcat_produce_consume(kaflet_broker, kcat):
    topic = f"kcatpc-{uuid.uuid4().hex[:6]}"
    _create(kaflet_broker.bootstrap, topic, partitions=1)
    lines = "".join(f"key{i}:value{i}\n" for i in range(100))
    prod = subprocess.run([kcat, "-b", kaflet_broker.bootstrap, "-P", "-t", topic, "-K:"], input=lines,
                          capture_output=True, text=True, timeout=30)
    assert prod.returncode == 0, prod.stderr
    cons = subprocess.run([kcat, "-b", kaflet_broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e",
                           "-f", "%k=%s\n"], capture_output=True, text=True, timeout=30)
    assert cons.returncode == 0, cons.stderr
    assert cons.stdout.splitlines() == [f"key{i}=value{i}" for i in range(100)]
