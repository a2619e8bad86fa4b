"""Restarting the broker (SIGTERM and SIGKILL) in the middle of a produce stream loses nothing
that was acknowledged, and offsets continue without gaps or duplicates."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.topics import create_topic

TOPIC = "restart-stream"
PARTITIONS = 2


def _produce_across_restart(broker, hard: bool) -> tuple[list[bytes], int]:
    create_topic(broker.bootstrap, TOPIC, PARTITIONS)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 2, "message.timeout.ms": 60000, "reconnect.backoff.max.ms": 200})
    acked: list[bytes] = []
    lock = threading.Lock()

    def cb(err, msg):
        if err is None:
            with lock:
                acked.append(msg.value())

    sent = 0
    restarted = False
    start = time.monotonic()
    while sent < 20000:
        p.produce(TOPIC, key=str(sent % 11).encode(), value=f"m{sent}".encode(), on_delivery=cb)
        sent += 1
        p.poll(0)
        if sent % 500 == 0:
            time.sleep(0.01)
        if not restarted and sent == 8000:
            p.flush(30)
            broker.restart(hard=hard)
            restarted = True
    assert p.flush(90) == 0
    assert time.monotonic() - start < 180
    return acked, sent


def _read_all(bootstrap: str) -> dict[int, list[tuple[int, bytes]]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    out: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 3:
        msgs = c.consume(1000, timeout=0.5)
        if msgs:
            idle_since = time.monotonic()
        for m in msgs:
            assert m.error() is None, m.error()
            out[m.partition()].append((m.offset(), m.value()))
    c.close()
    return out


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
def test_acknowledged_messages_survive_restart(fresh_broker, hard):
    fresh_broker.start()
    acked, sent = _produce_across_restart(fresh_broker, hard)
    assert len(acked) == sent  # idempotent producer retried everything through the restart
    stored = _read_all(fresh_broker.bootstrap)
    values = [v for part in stored.values() for _, v in part]
    assert len(values) == len(set(values)), "duplicates after restart"
    assert set(acked) <= set(values), "an acknowledged message was lost"
    for part in stored.values():
        offsets = [o for o, _ in part]
        assert offsets == list(range(len(offsets))), "offset gap"
