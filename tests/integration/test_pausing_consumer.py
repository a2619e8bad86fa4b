"""Consumers that stop fetching some partitions and later resume, over real sockets.

librdkafka leaves a partition out of its fetches while its consumer queue holds more than
queued.min.messages records, for fetch.queue.backoff.ms, then names it again at the next offset
(sessionless full fetches whose partition set changes); every record must still arrive exactly
once, in offset order. (A session's forgotten and re-added partitions, kafka-python's pause()
and resume(), are checked with raw requests in test_fetch_sessions.py: kafka-python 3.0.12 itself
stops fetching a partition paused while part of a fetched batch waits in its buffer.)
A partition whose first batch is larger than its share of a fetch is answered without records
(KIP-74), which kafka-python needs to make progress.
See benchmarks/README.md, "Small records and a pausing consumer", for what this costs.
"""

from __future__ import annotations

import logging
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.broker_process import BrokerProcess
from tests.support.topics import create_topic

PARTITIONS = 6
PER_PARTITION = 5_000


def _produce_small_records(bootstrap: str, topic: str) -> None:
    """PER_PARTITION records of 100 B into each partition; value = partition and sequence."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16_384})
    for seq in range(PER_PARTITION):
        for p in range(PARTITIONS):
            producer.produce(topic, b"%d:%d:" % (p, seq) + b"x" * 90, partition=p)
        if seq % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def _check_in_order(seen: dict[int, list[tuple[int, bytes]]]) -> None:
    for p in range(PARTITIONS):
        offsets = [o for o, _ in seen[p]]
        assert offsets == list(range(PER_PARTITION)), f"partition {p}: offsets not 0..{PER_PARTITION - 1} once each"
        assert [v.split(b":")[1] for _, v in seen[p]] == [b"%d" % i for i in range(PER_PARTITION)]


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_librdkafka_consumer_that_pauses_on_a_full_queue_gets_every_record(kaflet_broker: BrokerProcess) -> None:
    topic = f"pausing-{uuid.uuid4().hex[:8]}"
    create_topic(kaflet_broker.bootstrap, topic, PARTITIONS)
    _produce_small_records(kaflet_broker.bootstrap, topic)
    lines = _Lines()
    log = logging.getLogger(f"rdkafka-{topic}")
    log.addHandler(lines)
    log.setLevel(logging.DEBUG)
    consumer = Consumer({
        "bootstrap.servers": kaflet_broker.bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False,
        # A queue this small fills after the first responses, so partitions leave and rejoin
        # the fetches many times; a short backoff keeps the test quick.
        "queued.min.messages": 1_000, "fetch.queue.backoff.ms": 20, "max.partition.fetch.bytes": 65_536,
        "debug": "fetch", "logger": log,
    })
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        seen: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        got, deadline = 0, time.monotonic() + 90
        while got < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                assert msg.error() is None, msg.error()
                seen[msg.partition()].append((msg.offset(), msg.value()))
                got += 1
            # Slower than the broker serves, so the queue stays full and fetching pauses.
            time.sleep(0.002)
        _check_in_order(seen)
    finally:
        consumer.close()
        log.removeHandler(lines)
    assert any("queued.min.messages exceeded" in line for line in lines.lines), "the consumer never paused"


def test_kafka_python_reads_batches_larger_than_its_partition_limit(kaflet_broker: BrokerProcess) -> None:
    """Only the first partition with data may exceed max.partition.fetch.bytes; the others must be
    answered without records, not with a piece of a batch (kafka-python stops with "Failed to make
    progress" on such a piece)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    topic = f"large-batches-{uuid.uuid4().hex[:8]}"
    partitions, batches, per_batch = 3, 4, 40
    create_topic(kaflet_broker.bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": kaflet_broker.bootstrap, "linger.ms": 50, "batch.size": 1_000_000})
    for b in range(batches):
        for p in range(partitions):
            for i in range(per_batch):
                producer.produce(topic, b"%d:%d:" % (p, b * per_batch + i) + b"z" * 1000, partition=p)
        assert producer.flush(30) == 0  # one batch of about 40 KB per partition and round
    consumer = KafkaConsumer(bootstrap_servers=kaflet_broker.bootstrap, enable_auto_commit=False,
                             max_partition_fetch_bytes=16_384)
    try:
        consumer.assign([KTP(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        seen: dict[int, list[int]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + 60
        while sum(map(len, seen.values())) < partitions * batches * per_batch and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500).items():
                seen[tp.partition].extend(m.offset for m in msgs)
        assert seen == {p: list(range(batches * per_batch)) for p in range(partitions)}
    finally:
        consumer.close()
