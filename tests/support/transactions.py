"""Reading a topic back the way transactional tests check it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

from confluent_kafka import Consumer, TopicPartition


def consume_all(bootstrap: str, topic: str, isolation: str, expected: int, partitions: Iterable[int] = (0,),
                settle_s: float = 1.5, timeout_s: float = 30) -> list[bytes]:
    """Every value a confluent-kafka consumer with ``isolation.level=isolation`` reads from the
    start of ``partitions`` (in arrival order): it waits for ``expected`` values, then
    ``settle_s`` longer so that a record that should not be there has time to show up."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}", "isolation.level": isolation,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in partitions])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        settle: float | None = None
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m.value())
            if len(out) >= expected:
                settle = settle or time.monotonic() + settle_s
                if time.monotonic() > settle:
                    break
        return out
    finally:
        c.close()
