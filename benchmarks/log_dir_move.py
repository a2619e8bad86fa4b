"""Moving a replica between two log dirs of one kaflet broker: how long it takes, unthrottled and
under replica.alter.log.dirs.io.max.bytes.per.second, and produce latency meanwhile.

Starts `kaflet broker` with two log dirs in a temporary directory, fills a one-partition topic
(in the first dir) with --megabytes of 10 KB records, measures paced acks=all produce latency to
a second topic while nothing moves, then moves the big replica to the second dir with
AlterReplicaLogDirs (no throttle) and back (with --throttle bytes/s), with the paced producer
running throughout. A move's time runs from the request to the DescribeLogDirs answer that shows
the replica in its new dir with no future replica left (polled every 20 ms). Each move starts
--quiet-seconds after the previous copy (12 s: longer than the throttle's 11 x 1 s window), so
the throttled move is measured as on a broker that has moved nothing for a while; sooner, the
bytes of the window's quiet seconds would be allowed at once (Kafka's SimpleRate does the same).
See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import _QUIET, Deliveries, create_topic, in_temporary_workdir, percentile, started_broker
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from kaflet.network.raw_connection import RawConnection, connect
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey

THROTTLE_CONFIG = "replica.alter.log.dirs.io.max.bytes.per.second"


@dataclass
class Phase:
    """One measured phase: the move (if any) and the paced producer's latencies meanwhile."""

    name: str
    seconds: float
    moved_bytes: int = 0
    produced: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None

    @property
    def mb_per_s(self) -> float | None:
        return self.moved_bytes / self.seconds / 1e6 if self.moved_bytes else None


class PacedProducer(threading.Thread):
    """acks=all, one 100 B record every 1/rate s, each sent at once (linger.ms=0)."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, **_QUIET})
        self.producer.list_topics(topic, timeout=10)
        self.topic, self.rate = topic, rate
        self.deliveries = Deliveries()
        self.stop_event = threading.Event()

    def run(self) -> None:
        value, interval = b"p" * 100, 1.0 / self.rate
        start = time.perf_counter()
        i = 0
        while not self.stop_event.is_set():
            due = start + i * interval
            while (delay := due - time.perf_counter()) > 0:
                self.producer.poll(max(delay, 0.001))
            self.producer.produce(self.topic, value, on_delivery=self.deliveries)
            self.producer.poll(0)
            i += 1
        self.producer.flush(30)

    def finish(self, phase: Phase) -> Phase:
        self.stop_event.set()
        self.join(60)
        lat = sorted(self.deliveries.latencies)
        phase.produced = self.deliveries.ok
        for attr, pct in (("p50_ms", 50), ("p99_ms", 99), ("max_ms", 100)):
            v = percentile(lat, pct)
            setattr(phase, attr, None if v is None else v * 1000)
        return phase


def where(conn: RawConnection, topic: str) -> tuple[str | None, str | None, int]:
    """(current dir, future dir, current size) of the topic's partition 0, from DescribeLogDirs."""
    D = codec.request_class(ApiKey.DESCRIBE_LOG_DIRS)
    resp = conn.request(ApiKey.DESCRIBE_LOG_DIRS, 1, D(topics=[D.DescribableLogDirTopic(topic=topic, partitions=[0])]))
    current = future = None
    size = 0
    for r in resp.results:
        for t in r.topics:
            for p in t.partitions:
                if p.is_future_key:
                    future = r.log_dir
                else:
                    current, size = r.log_dir, p.partition_size
    return current, future, size


def move(conn: RawConnection, topic: str, target: str, timeout_s: float = 600) -> float:
    """AlterReplicaLogDirs to ``target``; seconds until the move is over."""
    A = codec.request_class(ApiKey.ALTER_REPLICA_LOG_DIRS)
    start = time.monotonic()
    resp = conn.request(ApiKey.ALTER_REPLICA_LOG_DIRS, 1, A(dirs=[A.AlterReplicaLogDir(path=target, topics=[
        A.AlterReplicaLogDir.AlterReplicaLogDirTopic(name=topic, partitions=[0])])]))
    [code] = [p.error_code for r in resp.results for p in r.partitions]
    if code:
        raise RuntimeError(f"AlterReplicaLogDirs to {target} answered error {code}")
    while True:
        current, future, _ = where(conn, topic)
        if current == target and future is None:
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise RuntimeError(f"the move to {target} did not end within {timeout_s:g} s")
        time.sleep(0.02)


def fill(bootstrap: str, topic: str, megabytes: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "1",
                         "queue.buffering.max.kbytes": 512 * 1024, **_QUIET})
    value = b"v" * 10_000
    for _ in range(megabytes * 100):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError("the big topic was not filled: records were not acknowledged")


def set_throttle(admin: AdminClient, broker_id: str, value: int | None) -> None:
    op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
    res = ConfigResource(ConfigResource.Type.BROKER, broker_id, incremental_configs=[
        ConfigEntry(THROTTLE_CONFIG, "" if value is None else str(value), incremental_operation=op)])
    admin.incremental_alter_configs([res])[res].result(10)


def run(args: argparse.Namespace, workdir: Path) -> list[Phase]:
    d1, d2 = workdir / "d1", workdir / "d2"
    overrides = {"log.dirs": f"{d1},{d2}", "log.segment.delete.delay.ms": "1000"}
    phases: list[Phase] = []
    with started_broker("kaflet", workdir, overrides) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **_QUIET})
        broker_id = str(next(iter(admin.list_topics(timeout=10).brokers)))
        big = create_topic(admin, 1)
        paced = create_topic(admin, 1)
        print(f"filling {big} with {args.megabytes} MB ...", file=sys.stderr, flush=True)
        fill(broker.bootstrap, big, args.megabytes)
        host, port = broker.bootstrap.split(":")
        with connect(host, int(port), {}, 30) as conn:
            first, _, size = where(conn, big)
            second = str(d2) if first == str(d1) else str(d1)
            # Idle latency, for comparison.
            producer = PacedProducer(broker.bootstrap, paced, args.rate)
            producer.start()
            time.sleep(args.quiet_seconds)
            phases.append(producer.finish(Phase("idle", args.quiet_seconds)))
            for name, target, throttle in (("unthrottled", second, None), (f"throttle {args.throttle} B/s", first,
                                                                          args.throttle)):
                set_throttle(admin, broker_id, throttle)
                if phases[-1].name != "idle":
                    time.sleep(args.quiet_seconds)
                size = where(conn, big)[2]
                producer = PacedProducer(broker.bootstrap, paced, args.rate)
                producer.start()
                took = move(conn, big, target)
                phases.append(producer.finish(Phase(name, took, size)))
                print(f"{name}: {size / 1e6:.0f} MB in {took:.1f} s", file=sys.stderr, flush=True)
            set_throttle(admin, broker_id, None)
    return phases


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    p.add_argument("--megabytes", type=int, default=200, help="size of the replica to move")
    p.add_argument("--throttle", type=int, default=50_000_000, help="bytes/s of the throttled move")
    p.add_argument("--rate", type=int, default=500, help="paced produce rate during the moves, msgs/s")
    p.add_argument("--quiet-seconds", type=float, default=12.0,
                   help="idle latency measurement, and the pause before each move")
    return p.parse_args(argv)


def report(args: argparse.Namespace, phases: list[Phase]) -> None:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    print(f"\nmoving a {args.megabytes} MB replica between two log dirs; acks=all produce latency of 100 B "
          f"records paced at {args.rate} msg/s meanwhile (librdkafka's Message.latency()):")
    print(f"{'phase':<26}{'seconds':>9}{'MB/s':>8}{'msgs':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for ph in phases:
        rate = "-" if ph.mb_per_s is None else f"{ph.mb_per_s:.1f}"
        print(f"{ph.name:<26}{ph.seconds:>9.1f}{rate:>8}{ph.produced:>8}{ms(ph.p50_ms):>9}{ms(ph.p99_ms):>9}"
              f"{ms(ph.max_ms):>9}")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(p) | {"mb_per_s": p.mb_per_s} for p in phases], indent=2))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    phases = in_temporary_workdir("kaflet-log-dir-move-", lambda workdir: run(args, workdir))
    if phases is not None:
        report(args, phases)
    return 130 if phases is None else 0


if __name__ == "__main__":
    sys.exit(main())
