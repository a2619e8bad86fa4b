"""Per-record produce errors (KIP-467) as real clients see them.

When a batch is refused for some of its records, the broker checks every record and names each
offending one (record_errors, Produce v8+), so a client fails exactly those records: librdkafka
reports INVALID_RECORD for them and _INVALID_DIFFERENT_RECORD for their batch mates (when more
than one record is named; with one it reports the partition error for the whole batch);
kafka-python raises the broker's message for each named record.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.support.broker_process import BrokerProcess
from tests.support.topics import create_topic


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _consume(bootstrap: str, topic: str, partition: int, want: int) -> list[tuple[int, bytes | None, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "rec-err", "enable.auto.commit": False})
    got: list[tuple[int, bytes | None, bytes]] = []
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + 15
        while len(got) < want and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append((m.offset(), m.key(), m.value()))
        return got
    finally:
        c.close()


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_confluent_kafka_fails_exactly_the_keyless_records(kaflet_broker: BrokerProcess, codec: str) -> None:
    bootstrap = kaflet_broker.bootstrap
    topic = _topic("cmp")
    create_topic(bootstrap, topic, 2, {"cleanup.policy": "compact"})
    # One request: partition 0's batch has two records without a key, partition 1's has none.
    # A long linger keeps each partition's five records in one batch even on a loaded machine.
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2000, "compression.type": codec})
    results: dict[bytes, int | None] = {}

    def on_delivery(err: KafkaError | None, msg) -> None:  # type: ignore[no-untyped-def]
        results[msg.value()] = err.code() if err else None

    keys = [b"a", None, b"b", None, b"c"]
    for i, k in enumerate(keys):
        p.produce(topic, key=k, value=b"p0-%d" % i, partition=0, on_delivery=on_delivery)
        p.produce(topic, key=b"k%d" % i, value=b"p1-%d" % i, partition=1, on_delivery=on_delivery)
    assert p.flush(15) == 0
    assert {v: e for v, e in results.items() if v.startswith(b"p0")} == {
        b"p0-0": KafkaError._INVALID_DIFFERENT_RECORD, b"p0-1": KafkaError.INVALID_RECORD,
        b"p0-2": KafkaError._INVALID_DIFFERENT_RECORD, b"p0-3": KafkaError.INVALID_RECORD,
        b"p0-4": KafkaError._INVALID_DIFFERENT_RECORD,
    }
    assert {v: e for v, e in results.items() if v.startswith(b"p1")} == {b"p1-%d" % i: None for i in range(5)}
    # The keyed records go through when sent again on their own; nothing of the refused batch
    # was written.
    results.clear()
    for i, k in enumerate(keys):
        if k is not None:
            p.produce(topic, key=k, value=b"p0-%d" % i, partition=0, on_delivery=on_delivery)
    assert p.flush(15) == 0 and set(results.values()) == {None}
    assert _consume(bootstrap, topic, 0, 3) == [(0, b"a", b"p0-0"), (1, b"b", b"p0-2"), (2, b"c", b"p0-4")]
    assert [v for _, _, v in _consume(bootstrap, topic, 1, 5)] == [b"p1-%d" % i for i in range(5)]


def test_kafka_python_gets_the_broker_message_of_each_record(kaflet_broker: BrokerProcess) -> None:
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError, InvalidTimestampError
    from kafka.errors import KafkaError as KPError

    bootstrap = kaflet_broker.bootstrap
    topic = _topic("cmp-kp")
    create_topic(bootstrap, topic, 1, {"cleanup.policy": "compact", "message.timestamp.difference.max.ms": "3600000"})
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=200, retries=0)
    try:
        now = int(time.time() * 1000)
        # One batch: record 1 has no key, record 2 a timestamp two hours old: the partition
        # error is INVALID_TIMESTAMP (Kafka's choice when any timestamp is wrong).
        futures = [producer.send(topic, key=b"a", value=b"0", partition=0),
                   producer.send(topic, key=None, value=b"1", partition=0),
                   producer.send(topic, key=b"c", value=b"2", partition=0, timestamp_ms=now - 7_200_000),
                   producer.send(topic, key=b"d", value=b"3", partition=0)]
        producer.flush(15)
        errors = []
        for f in futures:
            with pytest.raises(KPError) as ei:
                f.get(timeout=15)
            errors.append(ei.value)
        assert [type(e) for e in errors] == [KPError, InvalidRecordError, InvalidRecordError, KPError]
        assert "part of a batch which had one more more invalid records" in str(errors[0])
        assert f"Compacted topic cannot accept message without key in topic partition {topic}-0" in str(errors[1])
        assert f"Timestamp {now - 7_200_000} of message with offset 2 is out of range" in str(errors[2])
        # A single bad record: kafka-python raises the partition's error type for it.
        bad = producer.send(topic, key=b"x", value=b"late", partition=0, timestamp_ms=now - 7_200_000)
        good = producer.send(topic, key=b"y", value=b"mate", partition=0)
        producer.flush(15)
        with pytest.raises(InvalidTimestampError):
            bad.get(timeout=15)
        with pytest.raises(KPError, match="one more more invalid records"):
            good.get(timeout=15)
        ok = producer.send(topic, key=b"z", value=b"fine", partition=0)
        assert ok.get(timeout=15).offset == 0
    finally:
        producer.close()


def test_timestamp_before_and_after_max_ms_with_kafka_python(kaflet_broker: BrokerProcess) -> None:
    """KIP-937: an hour-old record passes a topic that allows a day behind, a record an hour
    ahead fails one that allows a minute ahead."""
    from kafka import KafkaProducer
    from kafka.errors import InvalidTimestampError

    bootstrap = kaflet_broker.bootstrap
    topic = _topic("ts-ba")
    create_topic(bootstrap, topic, 1, {"message.timestamp.before.max.ms": "86400000",
                                       "message.timestamp.after.max.ms": "60000"})
    producer = KafkaProducer(bootstrap_servers=bootstrap, retries=0)
    try:
        now = int(time.time() * 1000)
        assert producer.send(topic, value=b"old", partition=0, timestamp_ms=now - 3_600_000).get(timeout=15).offset == 0
        with pytest.raises(InvalidTimestampError):
            producer.send(topic, value=b"future", partition=0, timestamp_ms=now + 3_600_000).get(timeout=15)
        with pytest.raises(InvalidTimestampError):
            producer.send(topic, value=b"ancient", partition=0, timestamp_ms=now - 2 * 86_400_000).get(timeout=15)
    finally:
        producer.close()
