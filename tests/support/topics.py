"""Topic set-up for tests, through the confluent-kafka admin client, and a check that a partition is served."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    """Create a topic and wait for the broker to confirm it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                            config=config or {})])
    futures[name].result(30)  # `admin` must stay alive until the future resolves


def round_trip(bootstrap: str, topic: str, partition: int) -> None:
    """Produce one record to ``topic``/``partition`` (acks=all) and read it back with a consumer
    assigned there (no offset commits): the partition is served."""
    value = uuid.uuid4().bytes
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(topic, value, partition=partition)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                assert msg.value() == value
                return
        raise AssertionError(f"nothing consumed from {topic}-{partition}")
    finally:
        consumer.close()


def poll_values(consumer: Consumer, topic: str, count: int, timeout: float = 30) -> list[bytes]:
    """Subscribe ``consumer`` to ``topic`` and poll until ``count`` values are in (or ``timeout``
    s have passed); the consumer stays open for the caller."""
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    return got


def kafka_python_values(topic: str, **config: Any) -> list[bytes]:
    """Every value of ``topic`` read from the start by a new kafka-python consumer group
    (``config``: its settings), until 8 s pass without a record."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, group_id=f"kg-{uuid.uuid4()}", auto_offset_reset="earliest",
                             consumer_timeout_ms=8000, **config)
    try:
        return [m.value for m in consumer]
    finally:
        consumer.close()
