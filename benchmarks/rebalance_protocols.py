"""A 4th member joins a stable 3-member group: how long until the group is stable again, with
KIP-848's consumer protocol vs the classic protocol (eager range and cooperative-sticky), in the
same run against the same broker.

Starts a kaflet broker (or uses --bootstrap) with group.initial.rebalance.delay.ms=0, creates a
12-partition topic per round, starts 3 confluent-kafka consumers of one group and waits until
they hold 4 partitions each, then starts a 4th and times until the 4 hold 3 each, as their
assign/revoke callbacks say. --rounds rounds (3) per protocol, interleaved; prints each time and
the median. --heartbeat-ms sets both the broker's group.consumer.heartbeat.interval.ms and the
classic clients' heartbeat.interval.ms (default: Kafka's defaults, 5000 and 3000).

It also counts what the group consumes: each topic is filled first with --records 100-byte
records, more than the group can read in a round, and each member processes at most
--rate-per-member records/s (as an application whose work bounds it), so the group's rate is
3 x that while stable. Printed: records/s over the 3 s before the 4th member starts
(steady) and from its start until the group is stable again (during), their ratio, and the
longest time in the latter in which the group consumed nothing. See
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
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from bench import create_topic, started_broker
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

PARTITIONS = 12
#: Seconds of the stable 3-member group's consumption taken as its steady rate.
STEADY_S = 3.0


class Member(threading.Thread):
    """A consumer polling in a thread; its partitions as its callbacks leave them."""

    def __init__(self, conf: dict[str, object], topic: str, incremental: bool, rate: float) -> None:
        super().__init__(daemon=True)
        self.conf, self.topic, self.incremental, self.rate = conf, topic, incremental, rate
        self.owned: set[int] = set()
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        #: (time, records) of each non-empty consume() call.
        self.consumed: list[tuple[float, int]] = []

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
        budget_at = time.monotonic()  # when the records consumed so far have been "processed"
        while not self.stop_flag.is_set():
            got = [m for m in c.consume(100, 0.05) if m.error() is None]
            if got:
                now = time.monotonic()
                self.consumed.append((now, len(got)))
                budget_at = max(budget_at, now) + len(got) / self.rate
                time.sleep(max(0.0, budget_at - time.monotonic()))
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


def _fill(bootstrap: str, topic: str, records: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
                  "queue.buffering.max.messages": 1_000_000})
    value = b"r" * 100
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(120):
        raise RuntimeError("could not fill the topic")


def _rate(members: list[Member], start: float, end: float) -> float:
    count = sum(n for m in members for t, n in list(m.consumed) if start <= t < end)
    return count / (end - start)


def _longest_pause(members: list[Member], start: float, end: float) -> float:
    """The longest time in [start, end) in which no member consumed a record."""
    times = sorted([start, end, *(t for m in members for t, _ in list(m.consumed) if start <= t < end)])
    return max(b - a for a, b in pairwise(times))


@dataclass
class Round:
    seconds: float
    steady: float
    during: float
    pause: float


def one_round(bootstrap: str, admin: AdminClient, protocol: str, heartbeat_ms: int | None,
              records: int, rate: float) -> Round:
    topic = create_topic(admin, PARTITIONS)
    _fill(bootstrap, topic, records)
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "group.id": f"rb-{uuid.uuid4().hex[:8]}",
                               "auto.offset.reset": "earliest"}
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf["partition.assignment.strategy"] = "range" if protocol == "classic-eager" else "cooperative-sticky"
        if heartbeat_ms:
            conf["heartbeat.interval.ms"] = heartbeat_ms
    incremental = protocol != "classic-eager"
    members = [Member(conf, topic, incremental, rate) for _ in range(3)]
    try:
        for m in members:
            m.start()
        _wait(lambda: _balanced(members), 120)
        time.sleep(STEADY_S + 1)  # settled: no heartbeat or rebalance in flight from the joins
        start = time.monotonic()
        members.append(Member(conf, topic, incremental, rate))
        members[-1].start()
        _wait(lambda: _balanced(members), 120)
        end = time.monotonic()
        if not members[0].consumed or members[0].consumed[-1][0] < end - 1:
            print(f"  ({protocol}: the backlog ran out; raise --records)", file=sys.stderr)
        return Round(end - start, _rate(members, start - STEADY_S, start), _rate(members, start, end),
                     _longest_pause(members, start, end))
    finally:
        for m in members:
            m.stop_flag.set()
        for m in members:
            m.join(30)


def measure(bootstrap: str, rounds: int, heartbeat_ms: int | None, records: int, rate: float) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    protocols = ("consumer", "classic-eager", "classic-cooperative-sticky")
    results: dict[str, list[Round]] = {p: [] for p in protocols}
    for _ in range(rounds):
        for protocol in protocols:
            results[protocol].append(one_round(bootstrap, admin, protocol, heartbeat_ms, records, rate))
    for protocol in protocols:
        rs = results[protocol]
        shown = " ".join(f"{r.seconds:.2f}" for r in rs)
        steady = statistics.median(r.steady for r in rs)
        during = statistics.median(r.during for r in rs)
        print(f"{protocol:28} median {statistics.median(r.seconds for r in rs):6.2f} s   (rounds: {shown})   "
              f"records/s steady {steady:,.0f}, during {during:,.0f} ({during / steady:.2f}x; rounds: "
              + " ".join(f"{r.during / r.steady:.2f}" for r in rs) + "), longest pause "
              + " ".join(f"{r.pause * 1000:.0f}" for r in rs) + " ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="an already running broker (default: start kaflet)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--heartbeat-ms", type=int, help="heartbeat interval of both protocols")
    parser.add_argument("--records", type=int, default=300_000, help="records in each round's topic")
    parser.add_argument("--rate-per-member", type=float, default=5_000.0,
                        help="records a member processes per second at most")
    args = parser.parse_args()
    if args.bootstrap:
        measure(args.bootstrap, args.rounds, args.heartbeat_ms, args.records, args.rate_per_member)
        return 0
    overrides = {"group.initial.rebalance.delay.ms": "0"}
    if args.heartbeat_ms:
        overrides |= {"group.consumer.heartbeat.interval.ms": str(args.heartbeat_ms),
                      "group.consumer.min.heartbeat.interval.ms": str(min(args.heartbeat_ms, 5000))}
    with tempfile.TemporaryDirectory() as tmp, started_broker("kaflet", Path(tmp), overrides) as broker:
        measure(broker.bootstrap, args.rounds, args.heartbeat_ms, args.records, args.rate_per_member)
    return 0


if __name__ == "__main__":
    sys.exit(main())
