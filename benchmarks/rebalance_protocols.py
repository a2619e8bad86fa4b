"""A 4th member joins a stable 3-member group: how long until the group is stable again, with
KIP-848's consumer protocol vs the classic protocol (eager range and cooperative-sticky), in the
same run against the same broker.

Starts a kaflet broker (or uses --bootstrap) with group.initial.rebalance.delay.ms=0, creates a
12-partition topic per round, starts 3 confluent-kafka consumers of one group and waits until
they hold 4 partitions each, then starts a 4th and times until the 4 hold 3 each, as their
assign/revoke callbacks say. --rounds rounds (3) per protocol, interleaved; prints each time and
the median. --heartbeat-ms sets both the broker's group.consumer.heartbeat.interval.ms and the
classic clients' heartbeat.interval.ms (default: Kafka's defaults, 5000 and 3000). See
benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bench import create_topic, started_broker
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

PARTITIONS = 12


class Member(threading.Thread):
    """A consumer polling in a thread; its partitions as its callbacks leave them."""

    def __init__(self, conf: dict[str, object], topic: str, incremental: bool) -> None:
        super().__init__(daemon=True)
        self.conf, self.topic, self.incremental = conf, topic, incremental
        self.owned: set[int] = set()
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()

    def _assign(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        with self.lock:
            got = {p.partition for p in parts}
            self.owned = self.owned | got if self.incremental else got

    def _revoke(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        with self.lock:
            self.owned -= {p.partition for p in parts}

    def run(self) -> None:
        c = Consumer(self.conf)
        c.subscribe([self.topic], on_assign=self._assign, on_revoke=self._revoke, on_lost=self._revoke)
        while not self.stop_flag.is_set():
            c.poll(0.05)
        c.close()

    def parts(self) -> set[int]:
        with self.lock:
            return set(self.owned)


def _balanced(members: list[Member]) -> bool:
    held = [m.parts() for m in members]
    want = PARTITIONS // len(members)
    return all(len(h) == want for h in held) and set().union(*held) == set(range(PARTITIONS))


def _wait(pred: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.005)
    raise RuntimeError("the group did not settle")


def one_round(bootstrap: str, admin: AdminClient, protocol: str, heartbeat_ms: int | None) -> float:
    topic = create_topic(admin, PARTITIONS)
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "group.id": f"rb-{uuid.uuid4().hex[:8]}",
                               "auto.offset.reset": "earliest"}
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf["partition.assignment.strategy"] = "range" if protocol == "classic-eager" else "cooperative-sticky"
        if heartbeat_ms:
            conf["heartbeat.interval.ms"] = heartbeat_ms
    incremental = protocol != "classic-eager"
    members = [Member(conf, topic, incremental) for _ in range(3)]
    try:
        for m in members:
            m.start()
        _wait(lambda: _balanced(members), 120)
        time.sleep(1)  # settled: no heartbeat or rebalance in flight from the joins
        start = time.monotonic()
        members.append(Member(conf, topic, incremental))
        members[-1].start()
        _wait(lambda: _balanced(members), 120)
        return time.monotonic() - start
    finally:
        for m in members:
            m.stop_flag.set()
        for m in members:
            m.join(30)


def measure(bootstrap: str, rounds: int, heartbeat_ms: int | None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    protocols = ("consumer", "classic-eager", "classic-cooperative-sticky")
    times: dict[str, list[float]] = {p: [] for p in protocols}
    for _ in range(rounds):
        for protocol in protocols:
            times[protocol].append(one_round(bootstrap, admin, protocol, heartbeat_ms))
    for protocol in protocols:
        shown = " ".join(f"{t:.2f}" for t in times[protocol])
        print(f"{protocol:28} median {statistics.median(times[protocol]):6.2f} s   (rounds: {shown})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="an already running broker (default: start kaflet)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--heartbeat-ms", type=int, help="heartbeat interval of both protocols")
    args = parser.parse_args()
    if args.bootstrap:
        measure(args.bootstrap, args.rounds, args.heartbeat_ms)
        return 0
    overrides = {"group.initial.rebalance.delay.ms": "0"}
    if args.heartbeat_ms:
        overrides |= {"group.consumer.heartbeat.interval.ms": str(args.heartbeat_ms),
                      "group.consumer.min.heartbeat.interval.ms": str(min(args.heartbeat_ms, 5000))}
    with tempfile.TemporaryDirectory() as tmp, started_broker("kaflet", Path(tmp), overrides) as broker:
        measure(broker.bootstrap, args.rounds, args.heartbeat_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
