"""How long the manager's cluster views take to get their data on a large cluster.

Starts a ZooKeeper and --brokers kaflet brokers (3; 1: a lone broker without ZooKeeper) on a
temporary directory (or uses --bootstrap), creates --topics topics
of --partitions partitions (1,000 x 10 by default), writes --records records to each topic and
commits offsets for --groups consumer groups, then times, --repeat times each:

* the live queries of kaflet.manager.clusters (what a page would cost if it asked the cluster on
  every view): Metadata of all topics, the broker overview, the topic records, the high
  watermarks of every partition, the group list, one group's lag, one topic's configs;
* one background sampling round (kaflet.manager.sampling.ClusterObserver.sample);
* the data of each page when it reads the latest snapshot instead: the topic list (every topic
  with partitions, replication factor, under-replicated count, size and message rate), the broker
  list, a topic's detail (partitions, rate chart as SVG over a full ring of 360 samples, its
  configs, live connections out of --connections report rows), a group's lag (live: one group is
  a few small requests).

* the console's HTTP pages, as a browser gets them from a `kaflet manager` process over real
  HTTP on 127.0.0.1 once its own observer has sampled the cluster: the cluster page (every
  broker, the first 100 topics and groups), its last page of topics, the page filtered by one
  topic's name, a topic's page and a group's page.

Prints a table of the median and the slowest run per view, in milliseconds. See
benchmarks/README.md ("Manager views") and docs/manager.md.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kaflet.cli.broker_process import BrokerProcess, stop_brokers
from kaflet.manager.charts import line_chart
from kaflet.manager.clusters import ClusterAccess, ClusterClient
from kaflet.manager.sampling import ClusterObserver, MessageRates
from kaflet.manager.topic_connections import ConnectionRow, connections_by_topic, now_ms
from kaflet.metadata.zk_testing import ZooKeeperServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.manager import ManagerProcess, Session  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", help="use this running cluster instead of starting one")
    ap.add_argument("--zookeeper", help="with --bootstrap: the cluster's zookeeper.connect")
    ap.add_argument("--brokers", type=int, default=3,
                    help="brokers to start (each keeps 3 files open per partition it holds: a lone broker "
                         "needs a file limit above 30,000 for 10,000 partitions)")
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--records", type=int, default=10, help="records written to each topic")
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--connections", type=int, default=10000, help="stored session-report rows")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--sample-interval", type=float, default=30.0,
                    help="the manager process's cluster_sample_interval_s for the HTTP page timings")
    return ap.parse_args(argv)


def fill(bootstrap: str, args: argparse.Namespace) -> list[str]:
    # Creating thousands of partitions takes the broker a while: wait for it rather than fail.
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 300000})
    names = [f"view-{i:05d}" for i in range(args.topics)]
    existing = set(admin.list_topics(timeout=60).topics)
    todo = [n for n in names if n not in existing]
    started = time.monotonic()
    for i in range(0, len(todo), 25):
        t0 = time.monotonic()
        batch = [NewTopic(n, args.partitions, 1) for n in todo[i:i + 25]]
        for fut in admin.create_topics(batch, request_timeout=290).values():
            fut.result(330)
        print(f"  topics {i + len(batch)}/{len(todo)}: batch {time.monotonic() - t0:.1f} s", file=sys.stderr)
    print(f"created {len(todo)} topics x {args.partitions} partitions in {time.monotonic() - started:.1f} s",
          file=sys.stderr)
    if todo and args.records:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1000000})
        for n in todo:
            for r in range(args.records):
                producer.produce(n, value=b"x" * 100, partition=r % args.partitions)
            producer.poll(0)
        if producer.flush(120):
            raise RuntimeError("records not delivered")
    for g in range(args.groups):
        topic = names[g % len(names)]
        request = [ConsumerGroupTopicPartitions(f"view-group-{g}", [TopicPartition(topic, p, 0)
                                                                    for p in range(args.partitions)])]
        admin.alter_consumer_group_offsets(request, request_timeout=30)[f"view-group-{g}"].result(60)
    return names


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t0) * 1000)
    return statistics.median(runs), max(runs)


def http_pages(workdir: Path, bootstrap: str, zk_connect: str | None, topic: str, group: str, topics: int,
               args: argparse.Namespace) -> None:
    """Time the console's cluster pages from a `kaflet manager` process over real HTTP."""
    manager = ManagerProcess(workdir / "manager", cluster_sample_interval_s=args.sample_interval).start()
    try:
        with httpx.Client(base_url=manager.url, timeout=120) as http:
            assert manager.admin_password
            admin = Session(http, "admin", manager.admin_password)
            r = admin.form("/clusters", {"name": "bench", "cluster_id": "1", "bootstrap_servers": bootstrap,
                                         "zookeeper_connect": zk_connect or ""})
            assert r.status_code == 303, r.text[:500]
            began = time.monotonic()
            while not re.search(rf"\b{topics} topics,", http.get("/clusters/1").text):
                if time.monotonic() - began > 600:
                    raise RuntimeError("the manager's observer did not sample the cluster in 10 minutes")
                time.sleep(1)
            print(f"\nthe manager's first sampling round was done after {time.monotonic() - began:.1f} s",
                  file=sys.stderr)
            last = max(1, -(-topics // 100))
            pages = [("/clusters/1", "HTTP: cluster page (brokers, first 100 topics and groups of all)"),
                     (f"/clusters/1?page={last}", f"HTTP: cluster page ?page={last} (the last page of topics)"),
                     (f"/clusters/1?q={topic}", f"HTTP: cluster page filtered to ?q={topic}"),
                     (f"/clusters/1/topics/{topic}", "HTTP: topic page (partitions, live configs, rate chart)"),
                     (f"/clusters/1/groups/{group}", "HTTP: group page (live: members, lag per partition)")]
            for path, label in pages:
                sizes: list[int] = []

                def get(path: str = path, sizes: list[int] = sizes) -> None:
                    r = http.get(path)
                    assert r.status_code == 200, r.text[:300]
                    sizes.append(len(r.content))

                med, worst = timed(get, args.repeat)
                print(f"| {label}, {sizes[-1] / 1024:.0f} KiB | {med:.1f} | {worst:.1f} |", flush=True)
    finally:
        manager.stop()


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM takes Ctrl-C's path, so the processes started here are stopped by PID.
    signal.signal(signal.SIGTERM, _interrupt)
    workdir = Path(tempfile.mkdtemp(prefix="kaflet-manager-bench-"))
    brokers: list[BrokerProcess] = []
    zookeeper: ZooKeeperServer | None = None
    zk_connect = args.zookeeper
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            if args.brokers > 1:
                zookeeper = ZooKeeperServer(data_dir=workdir / "zookeeper").start()
                zk_connect = zookeeper.connect_string + "/kaflet"
            for i in range(1, args.brokers + 1):
                config = {"num.partitions": "1"}
                if zk_connect:
                    config.update({"broker.id": str(i), "zookeeper.connect": zk_connect})
                brokers.append(BrokerProcess(workdir / f"broker-{i}", config))
            for b in brokers:
                b.launch()
            for b in brokers:
                b.wait_started(60)
            bootstrap = ",".join(b.bootstrap for b in brokers)
        names = fill(bootstrap, args)
        client = ClusterClient(ClusterAccess(bootstrap, zookeeper_connect=zk_connect, request_timeout_s=60))
        observer = ClusterObserver(client, interval_s=30)
        observer.sample()
        snap = observer.snapshot()
        assert snap is not None
        on_disk = snap.broker_sizes()
        sizes = f"{sum(on_disk.values()):,} bytes on disk" if on_disk is not None else snap.sizes_unavailable
        print(f"cluster: {len(snap.topics)} topics, {snap.partition_count} partitions, "
              f"{len(snap.groups)} groups; sizes: {sizes}", file=sys.stderr)
        topic, group = names[0], "view-group-0"
        md = client.metadata()
        keys = [(t.name, p.partition) for t in client.topics(md) for p in t.partitions]

        # A full ring (360 samples: 3 hours at 30 s) of the rate chart's data.
        rates = MessageRates(360)
        start = time.time() - 360 * 30
        for i in range(360):
            rates.record(start + 30 * i, {(topic, 0): i * 1000 + (i * 7919) % 500})
        rows = [ConnectionRow(f"app_{i % 300}", 1, names[i % len(names)], "produce" if i % 2 else "fetch",
                              f"10.1.{i // 250}.{i % 250}", "2.8", now_ms() - (i % 1800) * 1000)
                for i in range(args.connections)]

        topic_rows = [r for r in rows if r.topic_name == topic]

        def topic_list_page() -> list[tuple[Any, ...]]:
            s = observer.snapshot()
            assert s is not None
            return [(t.name, t.partition_count, t.replication_factor, t.under_replicated, t.size_bytes,
                     observer.rates.latest(t.name)) for t in sorted(s.topics.values(), key=lambda t: t.name)]

        def group_list_page() -> list[tuple[Any, ...]]:
            s = observer.snapshot()
            assert s is not None
            return [(g.group_id, g.state, s.group_lag(g.group_id)) for g in s.groups]

        def broker_page() -> list[tuple[Any, ...]]:
            s = observer.snapshot()
            assert s is not None
            load = s.broker_load()
            return [(b.id, b.host, b.rack, b.controller, b.up, load[b.id]) for b in s.overview.brokers]

        def topic_page() -> str:
            s = observer.snapshot()
            assert s is not None
            t = s.topics[topic]
            parts = [(p.partition, p.leader, p.replicas, p.isr, p.under_replicated) for p in t.partitions]
            configs = client.topic_configs(topic)
            # The service's database hands over only this topic's rows (WHERE topic = ...).
            conns = connections_by_topic(topic_rows, now_ms()).get(topic, [])
            groups = s.groups_of_topic(topic)
            return line_chart({topic: rates.series(topic)}, title=topic, unit="msg/s") + str(parts) \
                + str(configs) + str(conns) + str(groups)

        views: list[tuple[str, Callable[[], Any]]] = [
            ("live: Metadata of all topics", client.metadata),
            ("live: broker overview (Metadata + DescribeCluster)", client.overview),
            ("live: topic records from Metadata", lambda: client.topics(client.metadata())),
            (f"live: high watermarks of {len(keys)} partitions (ListOffsets)", lambda: client.end_offsets(keys)),
            ("live: consumer group list", client.groups),
            ("live: one group's lag (10 partitions)", lambda: client.group(group)),
            (f"live: committed offsets of all {len(snap.groups)} groups",
             lambda: client.committed_offsets(g.group_id for g in snap.groups)),
            ("live: one topic's configs", lambda: client.topic_configs(topic)),
            ("live: one topic (DescribeTopics)", lambda: client.topic(topic)),
            ("background: one sampling round", observer.sample),
            ("page: topic list from the snapshot", topic_list_page),
            ("page: broker list (with replicas and leaders) from the snapshot", broker_page),
            ("page: group list with total lag from the snapshot", group_list_page),
            ("page: topic detail (snapshot, live configs, groups, chart of 360 samples, "
             f"its {len(topic_rows)} connection rows)", topic_page),
            ("chart only: SVG of 360 samples", lambda: line_chart({topic: rates.series(topic)})),
            (f"page: connections of every topic from {args.connections} report rows",
             lambda: connections_by_topic(rows, now_ms())),
        ]
        print(f"\n{args.topics} topics x {args.partitions} partitions on {len(snap.overview.brokers)} brokers, "
              f"{args.groups} groups, "
              f"median and max of {args.repeat} runs\n")
        print("| view | median ms | max ms |")
        print("| --- | ---: | ---: |")
        for label, fn in views:
            med, worst = timed(fn, args.repeat)
            print(f"| {label} | {med:.1f} | {worst:.1f} |", flush=True)
        client.close()
        http_pages(workdir, bootstrap, zk_connect, topic, group, len(snap.topics), args)
    finally:
        try:
            stop_brokers(brokers, timeout=60)
        finally:
            for b in brokers:
                b.kill()
            if zookeeper is not None:
                zookeeper.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
