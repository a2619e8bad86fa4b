"""acks=1 produce latency of a kaflet broker while its log cleaner compacts a large log, and idle.

Starts `kaflet broker` on a temporary directory, fills a topic (cleanup.policy=delete, so nothing
cleans it yet), measures paced produce latency to a second topic, switches the first topic to
cleanup.policy=compact and measures again while the cleaner's pass runs. The broker's
"beginning cleaning" and "cleaned" log lines bracket the pass; the report says how much of the
second measurement the pass covered. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import (
    _QUIET,
    BrokerProcess,
    Result,
    Scenario,
    create_topic,
    in_temporary_workdir,
    produce_phase,
    started_broker,
)
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource


class PassWatch(threading.Thread):
    """Polls the broker's log for one partition's cleaning lines; when each was first seen."""

    def __init__(self, broker: BrokerProcess, partition: str) -> None:
        super().__init__(daemon=True)
        self.path = broker.log_path
        self.began_re = re.compile(rf"beginning cleaning of log {re.escape(partition)} ")
        self.ended_re = re.compile(rf"cleaned {re.escape(partition)} up to offset .*")
        self.began: float | None = None
        self.ended: float | None = None
        self.summary = ""
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.005):
            text = self.path.read_text(errors="replace")
            now = time.monotonic()
            if self.began is None and self.began_re.search(text):
                self.began = now
            m = self.ended_re.search(text)
            if m:
                self.ended, self.summary = now, m.group(0)
                return

    def wait_began(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.began is None and self.is_alive():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cleaner did not start within {timeout_s:g} s")
            time.sleep(0.01)


def fill(bootstrap: str, topic: str, records: int, keys: int, size: int) -> None:
    """`records` keyed records as fast as the client sends them."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 500,
                         "queue.buffering.max.messages": 200_000, **_QUIET})
    value = b"w" * size
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=b"key-%07d" % (i % keys), value=value)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("the big topic was not filled: records were not acknowledged")


@dataclass
class PassFigures:
    """The cleaner's pass as the broker logged it, and its overlap with the busy measurement."""

    summary: str
    measurement_s: float
    overlap_s: float


def run(args: argparse.Namespace, workdir: Path) -> tuple[Result, Result, PassFigures]:
    overrides = {"log.cleaner.backoff.ms": "100"}
    if args.throttle:
        overrides["log.cleaner.io.max.bytes.per.second"] = str(args.throttle)
    client = argparse.Namespace(linger_ms=0, batch_size=1_048_576, compression="none")

    def scenario(name: str) -> Scenario:
        return Scenario(name, 100, 1, "1", int(args.rate * args.seconds), args.seconds + 30, rate=args.rate,
                        duration_s=args.seconds)

    with started_broker("kaflet", workdir, overrides) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **_QUIET})
        big = create_topic(admin, 1, config={"segment.bytes": str(args.segment_bytes),
                                             "min.cleanable.dirty.ratio": "0.01"})
        print(f"filling {big} with {args.records} records over {args.keys} keys ...", file=sys.stderr, flush=True)
        fill(broker.bootstrap, big, args.records, args.keys, args.value_size)
        paced = create_topic(admin, 1)
        produce_phase(broker.bootstrap, paced, scenario("warm-up"), client, Result("kaflet", "warm-up"))
        idle = Result("kaflet", "idle")
        produce_phase(broker.bootstrap, paced, scenario("idle"), client, idle)

        watch = PassWatch(broker, f"{big}-0")
        watch.start()
        res = ConfigResource(ConfigResource.Type.TOPIC, big, incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(10)
        watch.wait_began(60)
        busy = Result("kaflet", "while cleaning")
        start = time.monotonic()
        produce_phase(broker.bootstrap, paced, scenario("while cleaning"), client, busy)
        end = time.monotonic()
        watch.join(300)
        watch.stop.set()
        assert watch.began is not None
        pass_end = watch.ended if watch.ended is not None else time.monotonic()
        overlap = max(0.0, min(end, pass_end) - max(start, watch.began))
        figures = PassFigures(watch.summary or "did not finish within 300 s", end - start, overlap)
    return idle, busy, figures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--records", type=int, default=400_000, help="records in the log to be compacted")
    p.add_argument("--keys", type=int, default=5_000, help="distinct keys among them")
    p.add_argument("--value-size", type=int, default=80, help="bytes per record value")
    p.add_argument("--segment-bytes", type=int, default=4 * 1024 * 1024, help="segment.bytes of that log")
    p.add_argument("--throttle", type=int, default=0, help="log.cleaner.io.max.bytes.per.second (0: none)")
    p.add_argument("--rate", type=int, default=300, help="paced produce rate, msgs/s")
    p.add_argument("--seconds", type=float, default=3.0, help="length of each latency measurement")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = in_temporary_workdir("kaflet-cleaning-bench-", lambda workdir: run(args, workdir))
    if result is None:
        return 130
    idle, busy, figures = result
    print(f"\nacks=1 produce latency, 100 B records paced at {args.rate} msg/s for {args.seconds:g} s "
          f"(librdkafka's Message.latency()):")
    print(f"{'phase':<16}{'msgs':>8}{'p50 ms':>9}{'p99 ms':>9}")
    for r in (idle, busy):
        p50 = "-" if r.p50_ms is None else f"{r.p50_ms:.2f}"
        p99 = "-" if r.p99_ms is None else f"{r.p99_ms:.2f}"
        print(f"{r.scenario:<16}{r.produced:>8}{p50:>9}{p99:>9}")
    print(f"cleaner pass: {figures.summary}")
    early = figures.overlap_s < figures.measurement_s - 0.1
    print(f"the pass ran during {figures.overlap_s:.1f} s of the {figures.measurement_s:.1f} s measurement"
          + (" (it ended early: raise --records or set --throttle for a longer pass)" if early else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({"idle": asdict(idle), "while_cleaning": asdict(busy),
                                               "pass": asdict(figures)}, indent=2))
    return 0 if idle.produced and busy.produced else 1


if __name__ == "__main__":
    sys.exit(main())
