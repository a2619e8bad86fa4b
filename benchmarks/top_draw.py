"""How long `kaflet top --once` takes to draw a 3-broker cluster with many partitions.

Starts ZooKeeper and three kaflet brokers (tests/support/cluster.py, stopped by PID at the end),
creates --topics topics (10) of --partitions partitions in all (1,000, replication factor 3),
--groups consumer groups (20) with committed offsets on every partition of one topic, then runs
`kaflet top --once` --rounds times (5). Each run samples the cluster twice, --interval apart
(0.1 s); the figure printed is the wall time of the whole command minus that sleep, i.e. start-up
plus two samples plus the drawing. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kaflet.cli.common import Admin  # noqa: E402
from kaflet.cli.top import render  # noqa: E402
from kaflet.cli.top_sample import collect, view  # noqa: E402
from tests.support.cluster import Cluster  # noqa: E402


def populate(bootstrap: str, topics: int, partitions: int, groups: int) -> list[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    per_topic = partitions // topics
    names = [f"top-{i}-{uuid.uuid4().hex[:4]}" for i in range(topics)]
    futures = admin.create_topics([NewTopic(n, num_partitions=per_topic, replication_factor=3) for n in names],
                                  request_timeout=120)
    for f in futures.values():
        f.result(timeout=180)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for name in names:
        for p in range(per_topic):
            producer.produce(name, b"x" * 100, partition=p)
    assert producer.flush(120) == 0
    for g in range(groups):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-group-{g}", "enable.auto.commit": False})
        try:
            c.commit(offsets=[TopicPartition(names[g % topics], p, 0) for p in range(per_topic)], asynchronous=False)
        finally:
            c.close()
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--interval", type=float, default=0.1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Cluster(Path(tmp), 3) as cluster:
        cluster.wait_for_registered([1, 2, 3], timeout=60)
        populate(cluster.bootstrap, args.topics, args.partitions, args.groups)
        command = [sys.executable, "-m", "kaflet.cli", "top", "--bootstrap-server", cluster.bootstrap, "--once",
                   "--interval", str(args.interval), "--timeout", "30"]
        times = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
            times.append(time.perf_counter() - start - args.interval)
            if proc.returncode != 0 or "3 brokers" not in proc.stdout.splitlines()[0]:
                print(proc.stdout[:500], proc.stderr, file=sys.stderr)
                return 1
        # The parts in-process: one sample of the cluster, and turning two samples into a frame.
        admin = Admin(cluster.bootstrap, None, 30)
        prev = collect(admin)
        samples, draws = [], []
        for _ in range(args.rounds):
            start = time.perf_counter()
            cur = collect(admin)
            samples.append(time.perf_counter() - start)
            start = time.perf_counter()
            Console(file=io.StringIO(), width=80).print(render(view(prev, cur), cluster.bootstrap))
            draws.append(time.perf_counter() - start)
        print(f"one sample (DescribeCluster, Metadata, ListOffsets, groups' offsets): median "
              f"{statistics.median(samples) * 1000:.0f} ms; view + render: median {statistics.median(draws) * 1000:.1f} ms")
        print(f"kaflet top --once, 3 brokers, {args.partitions} partitions (+ __consumer_offsets), "
              f"{args.groups} groups: median {statistics.median(times):.2f} s, min {min(times):.2f} s, "
              f"max {max(times):.2f} s over {args.rounds} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
