"""High watermarks go to Kafka's replication-offset-checkpoint at SIGTERM and every
replica.high.watermark.checkpoint.interval.ms, and a restarted broker starts from them."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from kaflet.log.checkpoints import REPLICATION_OFFSET_CHECKPOINT, read_offset_checkpoint
from tests.support.topics import create_topic

COUNTS = {0: 7, 1: 0, 2: 12}


def _produce(bootstrap: str, topic: str) -> None:
    create_topic(bootstrap, topic, len(COUNTS))
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for part, n in COUNTS.items():
        for i in range(n):
            p.produce(topic, value=b"v%d" % i, partition=part)
    assert p.flush(30) == 0


def _checkpoint(data_dir: Path, topic: str) -> dict[int, int]:
    hws = read_offset_checkpoint(str(data_dir / REPLICATION_OFFSET_CHECKPOINT))
    return {p: hw for (t, p), hw in hws.items() if t == topic}


def _watermarks_and_records(bootstrap: str, topic: str) -> tuple[dict[int, int], int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        highs = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in COUNTS}
        c.assign([TopicPartition(topic, p, 0) for p in COUNTS])
        got = 0
        deadline = time.monotonic() + 30
        while got < sum(COUNTS.values()) and time.monotonic() < deadline:
            for m in c.consume(100, timeout=0.5):
                assert m.error() is None, m.error()
                got += 1
        return highs, got
    finally:
        c.close()


def test_sigterm_writes_the_high_watermarks_and_restart_starts_from_them(fresh_broker) -> None:
    fresh_broker.start()
    _produce(fresh_broker.bootstrap, "hw-clean")
    fresh_broker.stop()
    assert _checkpoint(fresh_broker.data_dir, "hw-clean") == COUNTS
    fresh_broker.start()
    assert _watermarks_and_records(fresh_broker.bootstrap, "hw-clean") == (COUNTS, sum(COUNTS.values()))
    fresh_broker.stop()
    assert _checkpoint(fresh_broker.data_dir, "hw-clean") == COUNTS


def test_periodic_checkpoint_survives_sigkill(fresh_broker) -> None:
    fresh_broker.overrides["replica.high.watermark.checkpoint.interval.ms"] = "100"
    fresh_broker.start()
    _produce(fresh_broker.bootstrap, "hw-crash")
    deadline = time.monotonic() + 20
    while _checkpoint(fresh_broker.data_dir, "hw-crash") != COUNTS and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _checkpoint(fresh_broker.data_dir, "hw-crash") == COUNTS
    fresh_broker.kill()
    assert _checkpoint(fresh_broker.data_dir, "hw-crash") == COUNTS
    fresh_broker.start()
    assert _watermarks_and_records(fresh_broker.bootstrap, "hw-crash") == (COUNTS, sum(COUNTS.values()))
