"""confluent-kafka consumers of KIP-848's protocol (``group.protocol=consumer``) in threads, a
producer that keeps producing meanwhile, and a registry that catches a partition owned by two
members at once (from the members' own assign/revoke callbacks)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition


class Ownership:
    """Who holds each partition, as the members' callbacks say; records every double ownership."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner: dict[int, str] = {}
        self.violations: list[str] = []

    def assign(self, member: str, parts: set[int]) -> None:
        with self.lock:
            for p in parts:
                other = self.owner.get(p)
                if other is not None and other != member:
                    self.violations.append(f"partition {p} given to {member} while {other} holds it")
                self.owner[p] = member

    def revoke(self, member: str, parts: set[int]) -> None:
        with self.lock:
            for p in parts:
                if self.owner.get(p) == member:
                    del self.owner[p]


class ProtocolMember(threading.Thread):
    """One member: consumes in batches, commits synchronously after each batch (so a partition's
    next owner starts where this one stopped), and records its assign/revoke callbacks."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, ownership: Ownership,
                 **conf: object) -> None:
        super().__init__(daemon=True, name=name)
        self.conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf}
        self.topic = topic
        self.ownership = ownership
        self.values: list[bytes] = []
        self.events: list[tuple[float, str, set[int]]] = []
        self.owned: set[int] = set()
        self.errors: list[str] = []
        self.stale_commits = 0
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()

    def _on_assign(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        got = {p.partition for p in parts}
        self.ownership.assign(self.name, got)
        with self.lock:
            self.events.append((time.monotonic(), "assign", got))
            self.owned |= got

    def _on_revoke(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        lost = {p.partition for p in parts}
        with self.lock:
            self.events.append((time.monotonic(), "revoke", lost))
            self.owned -= lost
        self.ownership.revoke(self.name, lost)

    def run(self) -> None:
        c = Consumer(self.conf)
        c.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                    on_lost=self._on_revoke)
        try:
            while not self.stop_flag.is_set():
                msgs = c.consume(200, 0.2)
                good = [m for m in msgs if not m.error()]
                self.errors += [str(m.error()) for m in msgs if m.error()]
                if not good:
                    continue
                with self.lock:
                    self.values += [m.value() for m in good]
                self._commit(c)
        finally:
            c.close()

    def _commit(self, c: Consumer) -> None:
        """Commit synchronously. A commit sent just before the member's heartbeat brought it a new
        member epoch is STALE_MEMBER_EPOCH (as from Kafka): the commit is sent again once the
        heartbeat has answered, as the Java client does by itself."""
        for _ in range(50):
            try:
                c.commit(asynchronous=False)
                return
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.STALE_MEMBER_EPOCH:
                    self.errors.append(f"commit: {exc}")
                    return
                self.stale_commits += 1
                time.sleep(0.1)
        self.errors.append("commit: still STALE_MEMBER_EPOCH after 5 s")

    def parts(self) -> set[int]:
        with self.lock:
            return set(self.owned)

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(30)
        assert not self.is_alive(), f"{self.name} did not stop"


class SteadyProducer(threading.Thread):
    """Produces numbered values round-robin over the partitions until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, pause: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
        self.topic, self.partitions, self.pause = topic, partitions, pause
        self.sent: set[bytes] = set()
        self.stop_flag = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop_flag.is_set():
            value = f"v{i}".encode()
            self.producer.produce(self.topic, value, partition=i % self.partitions)
            self.sent.add(value)
            i += 1
            self.producer.poll(0)
            time.sleep(self.pause)
        assert self.producer.flush(30) == 0

    def stop(self) -> set[bytes]:
        self.stop_flag.set()
        self.join(60)
        return self.sent


def wait_for(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
