"""What kafka_exporter's series cost a broker with many partitions and groups.

One broker (a process of its own, with metrics.listener) gets ``--partitions`` partitions
(10,000 by default) in ``--topics`` topics (1,000) and ``--groups`` groups (1,000), each of which
committed offsets on every partition of one topic (10,000 committed offsets by default). Then:

1. scrapes: ``--scrapes`` GETs of /metrics, each after the cache expired (1.2 s apart): wall
   time (median and slowest) and the body's size, kafka_exporter's share of it apart;
2. produce latency: a producer paced at ``--rate`` msg/s (acks=1, linger.ms=0; to a topic with
   one partition led by each broker) for
   ``--seconds`` without scraping, then as long again with a scraper (a process of its own)
   getting /metrics every second; p50, p99 and the slowest delivery of each phase.

    PYTHONPATH=benchmarks:. python benchmarks/cluster_series.py [--partitions 10000 --groups 1000]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench import (
    _QUIET,
    BrokerProcess,
    ClusterProcesses,
    Deliveries,
    _raise_interrupt,
    free_port,
    percentile,
    scraping,
)
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kaflet.network.raw_connection import RawConnection, connect
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode

_CLUSTER_PREFIXES = (b"kafka_brokers", b"kafka_broker_info", b"kafka_topic_", b"kafka_consumergroup_")


def make_topics(bootstrap: str, topics: int, partitions: int) -> list[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap, **_QUIET})
    names = [f"series-{i}" for i in range(topics)]
    each = partitions // topics
    for first in range(0, topics, 100):
        for future in admin.create_topics([NewTopic(n, each, 1) for n in names[first:first + 100]],
                                          request_timeout=300).values():
            future.result(300)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=30).topics
        if all(n in meta and len(meta[n].partitions) == each and
               all(p.leader >= 0 for p in meta[n].partitions.values()) for n in names):
            return names
        time.sleep(1)
    raise RuntimeError("the topics have no leaders after 300 s")


def commit_groups(bootstrap: str, topics: list[str], each: int, groups: int) -> None:
    """Groups that committed offsets without members (OffsetCommit v2, generation -1), as admin
    tools and kafka-consumer-groups --reset-offsets leave them, each at its coordinator."""
    R = codec.request_class(ApiKey.OFFSET_COMMIT)
    T = R.OffsetCommitRequestTopic
    F = codec.request_class(ApiKey.FIND_COORDINATOR)
    host, port = bootstrap.rsplit(":", 1)
    conns: dict[tuple[str, int], RawConnection] = {}
    try:
        first = connect(host, int(port), {}, 30)
        conns[(host, int(port))] = first
        for g in range(groups):
            request = R(group_id=f"group-{g}", generation_id_or_member_epoch=-1, member_id="", retention_time_ms=-1,
                        topics=[T(name=topics[g % len(topics)], partitions=[
                            T.OffsetCommitRequestPartition(partition_index=i, committed_offset=0, committed_metadata="")
                            for i in range(each)])])
            deadline = time.monotonic() + 60
            while True:
                # The first FindCoordinator creates __consumer_offsets; its leaders load it.
                found = first.request(ApiKey.FIND_COORDINATOR, 1, F(key=f"group-{g}", key_type=0))
                codes: set[int] = {found.error_code}
                if found.error_code == ErrorCode.NONE:
                    address = (found.host, found.port)
                    if address not in conns:
                        conns[address] = connect(found.host, found.port, {}, 30)
                    response = conns[address].request(ApiKey.OFFSET_COMMIT, 2, request)
                    codes = {p.error_code for t in response.topics for p in t.partitions}
                    if codes == {ErrorCode.NONE}:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"OffsetCommit of group-{g} answered {codes}")
                time.sleep(0.2)
    finally:
        for conn in conns.values():
            conn.close()


def scrape(url: str) -> tuple[float, int, int]:
    """(seconds, body bytes, bytes of kafka_exporter's series) of one GET."""
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as resp:
        body = resp.read()
    took = time.perf_counter() - began
    cluster = sum(len(line) + 1 for line in body.split(b"\n") if line.startswith(_CLUSTER_PREFIXES))
    return took, len(body), cluster


class _ByPartition(Deliveries):
    """Deliveries that also keeps each partition's latencies (partition p is led by broker p + 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_partition: dict[int, list[float]] = {}

    def __call__(self, err: Any, msg: Any) -> None:
        super().__call__(err, msg)
        latency = msg.latency() if err is None else None
        if latency is not None:
            self.by_partition.setdefault(msg.partition(), []).append(latency)


def paced_produce(bootstrap: str, topic: str, rate: int, seconds: float
                  ) -> tuple[float, float, float, int, dict[int, float]]:
    """(p50, p99, max) delivery latency in ms, the records delivered and each partition's p99."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0, **_QUIET})
    producer.list_topics(topic, timeout=10)
    dr = _ByPartition()
    start = time.perf_counter()
    n = int(rate * seconds)
    for i in range(n):
        due = start + i / rate
        while (delay := due - time.perf_counter()) > 0:
            producer.poll(max(delay, 0.001))
        producer.produce(topic, b"x" * 100, on_delivery=dr)
        producer.poll(0)
    producer.flush(30)
    lat = sorted(dr.latencies)
    p50, p99 = percentile(lat, 50), percentile(lat, 99)
    each = {p: (percentile(sorted(values), 99) or 0) * 1000 for p, values in sorted(dr.by_partition.items())}
    return (p50 or 0) * 1000, (p99 or 0) * 1000, (lat[-1] if lat else 0) * 1000, dr.ok, each


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--brokers", type=int, default=1,
                   help="brokers (a ZooKeeper cluster when more than 1; a broker alone keeps ~3 files open per "
                        "partition, so 10,000 need an open-files limit above 30,000)")
    p.add_argument("--partitions", type=int, default=10_000)
    p.add_argument("--topics", type=int, default=1_000)
    p.add_argument("--groups", type=int, default=1_000)
    p.add_argument("--scrapes", type=int, default=10)
    p.add_argument("--rate", type=int, default=500)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--keep-logs", metavar="DIR", help="copy the brokers' logs here at the end")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, _raise_interrupt)
    with tempfile.TemporaryDirectory(prefix="kaflet-series-") as tmp:
        urls = [f"http://127.0.0.1:{free_port()}/metrics" for _ in range(args.brokers)]
        overrides = {"offsets.topic.num.partitions": "10", "offsets.topic.replication.factor": "1"}
        broker: BrokerProcess | ClusterProcesses
        if args.brokers == 1:
            broker = BrokerProcess("kaflet", Path(tmp), {**overrides, "metrics.listener": urls[0].removesuffix("/metrics")})
        else:
            broker = ClusterProcesses(Path(tmp), args.brokers, overrides)
            for b, u in zip(broker.brokers, urls, strict=True):
                b.overrides["metrics.listener"] = u.removesuffix("/metrics")
        try:
            if isinstance(broker, BrokerProcess):
                broker.wait_ready(60)
            else:
                broker.start(120)
            began = time.monotonic()
            topics = make_topics(broker.bootstrap, args.topics, args.partitions)
            print(f"{args.partitions} partitions in {len(topics)} topics made in {time.monotonic() - began:.0f} s",
                  file=sys.stderr)
            each = args.partitions // args.topics
            commit_groups(broker.bootstrap.split(",")[0], topics, each, args.groups)
            # The controller's endpoint is the one with kafka_exporter's series.
            url = next(u for u in urls if scrape(u)[2] > 0)
            scrape(url)  # the first one warms the connections and imports
            runs = []
            for _ in range(args.scrapes):
                time.sleep(1.2)
                runs.append(scrape(url))
            times = [r[0] * 1000 for r in runs]
            print(f"scrape of {args.partitions} partitions and {args.groups} groups "
                  f"({args.groups * each} committed offsets) on {args.brokers} broker(s): median {statistics.median(times):.0f} ms, "
                  f"slowest {max(times):.0f} ms; body {runs[-1][1] / 1e6:.1f} MB, of which kafka_exporter's series "
                  f"{runs[-1][2] / 1e6:.1f} MB ({args.scrapes} scrapes)")
            lat_topic = "series-latency"
            admin = AdminClient({"bootstrap.servers": broker.bootstrap, **_QUIET})
            # One partition led by each broker: the controller gathering and the others answering it.
            spread = NewTopic(lat_topic, args.brokers, replica_assignment=[[b] for b in range(1, args.brokers + 1)])
            admin.create_topics([spread])[lat_topic].result(60)
            time.sleep(2)
            quiet = paced_produce(broker.bootstrap, lat_topic, args.rate, args.seconds)
            with scraping(url, 1.0):
                busy = paced_produce(broker.bootstrap, lat_topic, args.rate, args.seconds)
            controller = urls.index(url) + 1
            for name, (p50, p99, slowest, n, each) in (("no scraping", quiet), ("scrape every 1 s", busy)):
                leaders = ", ".join(f"{'controller' if p + 1 == controller else f'broker {p + 1}'} {v:.2f} ms"
                                    for p, v in each.items())
                print(f"produce at {args.rate} msg/s, {name:<17}: p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
                      f"slowest {slowest:.1f} ms ({n} records); p99 by leader: {leaders}")
        finally:
            broker.stop()
            if args.keep_logs:
                for log in Path(tmp).glob("*.log"):
                    shutil.copy(log, Path(args.keep_logs) / log.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
