"""Producing under faults and checking afterwards that no acknowledged record was lost.

The method (the issue's): an idempotent confluent-kafka producer (``enable.idempotence``,
``acks=all``) sends unique, sequential payloads and records every delivery report; after the
faults a fresh consumer reads every partition from its start to its high watermark, and
:func:`check_delivery` says which acknowledged payloads are missing and which payloads appear
more than once (an unacknowledged payload may be there or not; none may appear twice).

:class:`AckedProducer` runs its own thread at a bounded rate and for a bounded count, so a test
that fails halfway still ends; :meth:`AckedProducer.stop` flushes what is in flight (bounded).
:func:`replica_log_bytes` reads what one broker stores for a partition, for tests that check the
replicas are byte-identical once they are all back in the ISR (the old leader truncated its
unreplicated suffix and caught up).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

#: Timeouts small enough for short fault tests (the cluster's overrides).
FAST_FAILOVER = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    # The last broker left of a test's cluster cannot hand its leaderships to anyone; Kafka's
    # 3 x 5 s of retries would only slow every teardown.
    "controlled.shutdown.retry.backoff.ms": "300",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}


def payload(n: int, tag: str = "m") -> bytes:
    """The ``n``-th payload of the producer tagged ``tag``."""
    return b"%s-%08d" % (tag.encode(), n)


def payload_number(value: bytes, tag: str = "m") -> int | None:
    """``n`` of a payload of the producer tagged ``tag``; None for another producer's."""
    prefix = tag.encode() + b"-"
    return int(value[len(prefix):]) if value.startswith(prefix) else None


@dataclass
class DeliveryLog:
    """What the delivery reports said: acknowledged payload number -> (partition, offset; None
    when the client acknowledged it without one), and failed payload number -> error name."""

    acked: dict[int, tuple[int, int | None]] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    sent: int = 0
    #: time.monotonic() of each successful delivery report, by partition, in order.
    ack_times: dict[int, list[float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, n: int, err: KafkaError | None, partition: int, offset: int | None) -> None:
        now = time.monotonic()
        with self.lock:
            if err is None:
                self.acked[n] = (partition, offset)
                self.ack_times.setdefault(partition, []).append(now)
            else:
                self.failed[n] = err.name()

    def first_ack_after(self, partition: int, t: float) -> float | None:
        """When the first delivery report for ``partition`` after ``t`` arrived (monotonic)."""
        with self.lock:
            times = self.ack_times.get(partition, [])
            i = bisect.bisect_right(times, t)
            return times[i] if i < len(times) else None

    def counts(self) -> tuple[int, int]:
        with self.lock:
            return len(self.acked), len(self.failed)


class AckedProducer:
    """An idempotent acks=all producer sending payload 0, 1, 2, ... round-robin over the
    topic's partitions, on a thread, at most ``rate`` per second and ``limit`` in all. Producers
    writing to the same topic need different ``tag``s (their payloads' prefix).

    ``make`` creates the client (e.g. inside a network namespace: ``cluster.in_client_host``).
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int, *, tag: str = "m", rate: float = 300.0,
                 limit: int = 200_000, config: dict[str, Any] | None = None,
                 make: Callable[..., Any] | None = None) -> None:
        conf = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 60_000,
            "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 2000,
            **(config or {}),
        }
        self.topic = topic
        self.tag = tag
        self.idempotent = bool(conf["enable.idempotence"])
        self.partitions = partitions
        self.rate = rate
        self.limit = limit
        self.log = DeliveryLog()
        self.errors: list[str] = []  # client-level errors (error_cb), e.g. a fatal idempotence error
        conf["error_cb"] = lambda err: self.errors.append(f"{err.name()}: {err.str()}")
        self._producer: Any = (make or (lambda f, c: f(c)))(Producer, conf)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"acked-producer-{topic}", daemon=True)

    def start(self) -> AckedProducer:
        self._thread.start()
        return self

    def _run(self) -> None:
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        n = 0
        while not self._stop.is_set() and n < self.limit:
            part = n % self.partitions
            try:
                self._producer.produce(self.topic, payload(n, self.tag), partition=part,
                                       on_delivery=lambda err, msg, n=n, p=part: self.log.record(
                                           n, err, p, msg.offset() if err is None else -1))
            except BufferError:
                self._producer.poll(0.05)
                continue
            n += 1
            self.log.sent = n
            self._producer.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            else:
                next_at = time.monotonic()
        self._producer.poll(0)

    def wait_acked(self, count: int, timeout: float = 60.0) -> int:
        """Wait until at least ``count`` payloads in all are acknowledged; returns how many are."""
        deadline = time.monotonic() + timeout
        while True:
            acked, failed = self.log.counts()
            if acked >= count:
                return acked
            if time.monotonic() > deadline:
                raise AssertionError(f"only {acked} of {count} payloads acknowledged after {timeout:g}s "
                                     f"({failed} failed: {self.failure_summary()}; client errors: {self.errors[-5:]})")
            self._producer.poll(0.05) if not self._thread.is_alive() else time.sleep(0.05)

    def wait_more(self, extra: int, timeout: float = 60.0) -> int:
        """Wait until ``extra`` more payloads than now are acknowledged."""
        return self.wait_acked(self.log.counts()[0] + extra, timeout)

    def stop(self, flush_timeout: float = 70.0) -> DeliveryLog:
        """Stop sending, wait for the delivery reports of everything sent (bounded)."""
        self._stop.set()
        self._thread.join(10)
        try:
            left = self._producer.flush(flush_timeout)
            if left:
                raise AssertionError(f"{left} payloads still in flight after {flush_timeout:g}s")
        finally:
            # The client's callbacks refer back to this object: without this the cycle keeps
            # librdkafka's threads reconnecting to a stopped cluster until a garbage collection.
            self._producer = None
        return self.log

    def close(self) -> None:
        """Stop at once, dropping what is still queued (the teardown of a failed test)."""
        self._stop.set()
        self._thread.join(10)
        if self._producer is not None:
            self._producer.purge()
            self._producer.poll(0)
            self._producer = None

    def failure_summary(self) -> dict[str, int]:
        with self.log.lock:
            return dict(Counter(self.log.failed.values()))


def read_partitions(bootstrap: str, topic: str, partitions: Iterable[int], timeout: float = 60.0,
                    make: Callable[..., Any] | None = None) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of each partition from its start up to its high watermark, as
    (offset, value), read by a fresh consumer without a group."""
    conf = {"bootstrap.servers": bootstrap, "group.id": f"verify-{time.monotonic_ns()}",
            "enable.auto.commit": False, "enable.partition.eof": False, "fetch.wait.max.ms": 100}
    consumer = (make or (lambda f, c: f(c)))(Consumer, conf)
    try:
        parts = list(partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in parts}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in parts}
        position = dict.fromkeys(parts, -1)
        deadline = time.monotonic() + timeout
        while any(position[p] + 1 < ends[p] for p in parts):
            if time.monotonic() > deadline:
                raise AssertionError(f"reading {topic} did not reach the high watermarks {ends} within "
                                     f"{timeout:g}s (at {position})")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise AssertionError(f"consumer error reading {topic}: {msg.error()}")
            p = msg.partition()
            if msg.offset() < ends[p]:
                out[p].append((msg.offset(), msg.value()))
                position[p] = msg.offset()
        return out
    finally:
        consumer.close()


@dataclass
class DeliveryCheck:
    """The verdict: acknowledged payloads missing, payloads stored more than once, and acknowledged
    payloads not found where their delivery report said (partition, offset)."""

    acked: int
    stored: int
    missing: list[int]
    duplicated: dict[int, int]
    misplaced: list[tuple[int, tuple[int, int], tuple[int, int]]]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.duplicated and not self.misplaced

    def __str__(self) -> str:
        return (f"{self.acked} acknowledged, {self.stored} stored; missing {len(self.missing)} "
                f"{self.missing[:20]}; duplicated {len(self.duplicated)} {dict(list(self.duplicated.items())[:20])}; "
                f"misplaced {len(self.misplaced)} {self.misplaced[:10]}")


def check_delivery(log: DeliveryLog, stored: dict[int, list[tuple[int, bytes]]], tag: str = "m") -> DeliveryCheck:
    """Compare the delivery reports of the producer tagged ``tag`` with what the partitions hold."""
    where: dict[int, list[tuple[int, int]]] = {}
    for p, records in stored.items():
        for offset, value in records:
            n = payload_number(value, tag)
            if n is not None:
                where.setdefault(n, []).append((p, offset))
    with log.lock:
        acked = dict(log.acked)
    missing = sorted(n for n in acked if n not in where)
    # An offset of None: librdkafka acknowledged the record implicitly (a later batch of the
    # idempotent producer succeeded after this one's request failed), so no offset was reported.
    misplaced = [(n, acked[n], where[n][0]) for n in sorted(acked)
                 if n in where and acked[n][1] is not None and acked[n] not in where[n]]
    return DeliveryCheck(len(acked), sum(len(w) for w in where.values()), missing,
                         {n: len(w) for n, w in sorted(where.items()) if len(w) > 1}, misplaced)


def replica_log_bytes(data_dir: Path, topic: str, partition: int) -> bytes:
    """The partition's segments on one broker, concatenated in offset order: replicas that agree
    hold the same batches, byte for byte (followers store the leader's batches unchanged)."""
    pdir = Path(data_dir) / f"{topic}-{partition}"
    return b"".join(f.read_bytes() for f in sorted(pdir.glob("*.log")))
