"""Disk load protection: producer and tail-consumer latency while a consumer catches up on cold data.

Starts a kaflet broker with `diskloadprotector.enable=false` and one with it on (taking turns,
`--rounds` times, one broker running at a time), each with a topic of `--cold-mb` MB of 1 KiB
records. Each turn drops that topic's segments from the page cache (fsync, then
posix_fadvise(POSIX_FADV_DONTNEED)), then for `--seconds`:

* a producer sends `--rate` records/s of 1 KiB (acks=all) to a second topic, and a tail consumer
  reads them; a record's produce latency is produce() to its delivery report, its end-to-end
  latency produce() to the tail consumer receiving it;
* after `--warmup` seconds a catch-up consumer starts reading the cold topic from offset 0.

Reported per broker: produce p50/p99 and tail end-to-end p50/p99 before the catch-up starts
(baseline) and while it runs, the MB the catch-up consumer read, and the disk's utilisation
(/proc/diskstats of the device holding the data) during the catch-up; then the on/off ratios.
Brokers are stopped by PID. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import _QUIET, create_topic, percentile, started_broker
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kaflet.log.disk_load import (
    DiskLoadProtector,
    DiskLoadSettings,
    DiskSample,
    device_of,
    parse_diskstats,
    sample_between,
)

RECORD = 1024


def fill(bootstrap: str, topic: str, megabytes: int) -> int:
    """Write ``megabytes`` MB of 1 KiB records; returns the record count."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "acks": "1", **_QUIET})
    value = os.urandom(RECORD)
    count = megabytes * 1_000_000 // RECORD
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("the cold topic could not be filled")
    return count


def drop_cache(data_dir: Path, topic: str) -> None:
    for path in glob.glob(str(data_dir / f"{topic}-*" / "*.log")):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class DiskWatch:
    """The utilisation of the device holding ``path`` between ``start`` and ``stop``."""

    def __init__(self, path: Path) -> None:
        with open("/proc/diskstats") as f:
            self.device = device_of(str(path), parse_diskstats(f.read()))
        self._before: tuple[float, object] | None = None
        self.util: float | None = None
        self.read_await_ms: float | None = None

    def _read(self) -> object:
        with open("/proc/diskstats") as f:
            return parse_diskstats(f.read())[self.device]  # type: ignore[index]

    def start(self) -> None:
        if self.device is not None:
            self._before = (time.monotonic(), self._read())

    def stop(self) -> None:
        if self._before is not None:
            then, before = self._before
            sample = sample_between(before, self._read(), (time.monotonic() - then) * 1000)  # type: ignore[arg-type]
            self.util, self.read_await_ms = sample.util, sample.read_await_ms


def turn(bootstrap: str, data_dir: Path, cold_topic: str, cold_count: int, live_topic: str, rate: int,
         seconds: float, warmup: float) -> dict[str, object]:
    drop_cache(data_dir, cold_topic)
    produced: dict[int, float] = {}  # sequence -> produce() time
    produce_lat: list[tuple[float, float]] = []  # (produce() time, latency ms)
    e2e_lat: list[tuple[float, float]] = []
    stop = threading.Event()
    caught = {"bytes": 0, "records": 0, "throttled": 0}
    catchup_start = [0.0]
    catchup_end = [0.0]

    def tail() -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "tail", "enable.auto.commit": False,
                      "fetch.wait.max.ms": 10, **_QUIET})
        c.assign([TopicPartition(live_topic, 0, 0)])
        while not stop.is_set():
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                seq = int(m.key())
                sent = produced.get(seq)
                if sent is not None:
                    e2e_lat.append((sent, (time.monotonic() - sent) * 1000))
        c.close()

    def catch_up() -> None:
        if stop.wait(warmup):
            return
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "catch-up", "enable.auto.commit": False,
                      "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 4 << 20, **_QUIET,
                      # (librdkafka also reports the end of a throttle, as 0)
                      "throttle_cb": lambda ev: caught.__setitem__("throttled", caught["throttled"] + (ev.throttle_time > 0))})
        c.assign([TopicPartition(cold_topic, 0, 0)])
        catchup_start[0] = time.monotonic()
        while not stop.is_set() and caught["records"] < cold_count:
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                caught["records"] += 1
                caught["bytes"] += len(m.value() or b"")
        if caught["records"] >= cold_count:
            catchup_end[0] = time.monotonic()
        c.close()

    threads = [threading.Thread(target=tail), threading.Thread(target=catch_up)]
    for t in threads:
        t.start()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, **_QUIET})
    value = os.urandom(RECORD)
    watch = DiskWatch(data_dir)
    started = time.monotonic()
    interval = 1 / rate
    seq = 0
    watching = False
    while (now := time.monotonic()) < started + seconds:
        if not watching and catchup_start[0]:
            watch.start()
            watching = True
        sent = now

        def done(err: object, _msg: object, sent: float = sent) -> None:
            if err is None:
                produce_lat.append((sent, (time.monotonic() - sent) * 1000))

        produced[seq] = sent
        producer.produce(live_topic, key=str(seq).encode(), value=value, partition=0, on_delivery=done)
        seq += 1
        producer.poll(0)
        next_at = started + seq * interval
        # poll() returns at the first event it serves: wait out the rest of the interval.
        while (delay := next_at - time.monotonic()) > 0:
            producer.poll(delay)
    producer.flush(30)
    if watching:
        watch.stop()
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join()
    split = catchup_start[0] or float("inf")
    until = catchup_end[0] or float("inf")

    def stats(samples: list[tuple[float, float]], during: bool) -> dict[str, float | None]:
        # Baseline: before the catch-up started (the first 0.5 s left out); during: until it
        # had read everything.
        chosen = sorted(lat for at, lat in samples
                        if (split <= at < until if during else started + 0.5 <= at < split))
        return {"n": len(chosen), "p50_ms": percentile(chosen, 50), "p99_ms": percentile(chosen, 99)}

    # Over the time it read: until it had everything, or until the turn ended.
    catchup_s = max(1e-9, (catchup_end[0] or started + seconds) - split) if catchup_start[0] else None
    return {
        "baseline_produce": stats(produce_lat, False), "baseline_e2e": stats(e2e_lat, False),
        "catchup_produce": stats(produce_lat, True), "catchup_e2e": stats(e2e_lat, True),
        "catchup_mb": caught["bytes"] / 1e6, "catchup_s": catchup_s,
        "catchup_throttled_responses": caught["throttled"],
        "catchup_mb_per_s": caught["bytes"] / 1e6 / catchup_s if catchup_s else None,
        "disk": watch.device, "disk_util": watch.util, "disk_read_await_ms": watch.read_await_ms,
    }


def check_cost(reads: list[int], rounds: int = 2000) -> dict[str, float]:
    """µs the protector spends on one consumer read while the disk is overloaded (a hot segment,
    so every read is admitted after the full check), per read size; the device's read-ahead
    window sets how far past the read it looks."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="kaflet-disk-cost-", dir=os.environ.get("BENCH_DIR")) as tmp:
        part = Path(tmp) / "t-0"
        part.mkdir()
        seg = part / "00000000000000000000.log"
        seg.write_bytes(os.urandom(max(reads) + (64 << 20)))
        with open("/proc/diskstats") as f:
            device = device_of(tmp, parse_diskstats(f.read())) or "unknown"
        protector = DiskLoadProtector([tmp], DiskLoadSettings(util_threshold=0.0), devices={tmp: device})
        protector.observe({device: DiskSample(0.5, 0.0)})
        fd = os.open(seg, os.O_RDONLY)
        try:
            for size in reads:
                best = float("inf")
                for _ in range(3):
                    t0 = time.perf_counter()
                    for _ in range(rounds):
                        protector.admit(str(part), fd, 4096, size)
                    best = min(best, (time.perf_counter() - t0) / rounds * 1e6)
                out[f"{size >> 10} KiB read, look-ahead {protector.disks[device].lookahead >> 10} KiB"] = best
        finally:
            os.close(fd)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cold-mb", type=int, default=400, help="size of the cold topic (default 400 MB)")
    ap.add_argument("--rate", type=int, default=500, help="producer records/s (default 500)")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of one turn (default 20)")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds before the catch-up starts (default 5)")
    ap.add_argument("--rounds", type=int, default=2, help="turns per broker, alternating (default 2)")
    ap.add_argument("--threshold", default="0.9", help="diskloadprotector.util.threshold when on")
    ap.add_argument("--cold-fetch-rate", default="10", help="diskloadprotector.cold.fetch.rate when on")
    ap.add_argument("--check-cost", action="store_true",
                    help="only measure the cold-data check per consumer read (µs, best of 3)")
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args()
    if args.check_cost:
        print(json.dumps(check_cost([16 << 10, 256 << 10, 1 << 20, 4 << 20]), indent=2))
        return 0
    modes = {"off": {"diskloadprotector.enable": "false"},
             "on": {"diskloadprotector.enable": "true", "diskloadprotector.util.threshold": args.threshold,
                    "diskloadprotector.cold.fetch.rate": args.cold_fetch_rate}}
    results: dict[str, list[dict[str, object]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="kaflet-disk-bench-", dir=os.environ.get("BENCH_DIR")) as tmp, \
            contextlib.ExitStack() as stack:
        # Both brokers run throughout; the one not taking its turn is idle.
        brokers = {mode: stack.enter_context(started_broker("kaflet", Path(tmp) / mode,
                                                            {"log.segment.bytes": str(64 << 20), **overrides}))
                   for mode, overrides in modes.items()}
        prepared: dict[str, tuple[str, int]] = {}
        for mode, broker in brokers.items():
            cold = create_topic(AdminClient({"bootstrap.servers": broker.bootstrap, **_QUIET}), 1)
            t0 = time.monotonic()
            prepared[mode] = (cold, fill(broker.bootstrap, cold, args.cold_mb))
            print(f"{mode}: filled {args.cold_mb} MB in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        for rnd in range(args.rounds):
            for mode, broker in brokers.items():
                cold, count = prepared[mode]
                live = create_topic(AdminClient({"bootstrap.servers": broker.bootstrap, **_QUIET}), 1)
                r = turn(broker.bootstrap, Path(tmp) / mode / "kaflet-data", cold, count, live, args.rate,
                         args.seconds, args.warmup)
                print(f"{mode} round {rnd + 1}: {json.dumps(r)}", file=sys.stderr)
                results[mode].append(r)

    def med(mode: str, key: str, field: str) -> float | None:
        vals = [r[key][field] for r in results[mode] if r[key][field] is not None]  # type: ignore[index]
        return statistics.median(vals) if vals else None

    summary: dict[str, object] = {"runs": results, "median": {}}
    for mode in modes:
        summary["median"][mode] = {  # type: ignore[index]
            f"{k}_{f}": med(mode, k, f) for k in ("baseline_produce", "catchup_produce", "baseline_e2e", "catchup_e2e")
            for f in ("p50_ms", "p99_ms")}
        summary["median"][mode]["catchup_mb_per_s"] = statistics.median(  # type: ignore[index]
            [r["catchup_mb_per_s"] or 0.0 for r in results[mode]])
        summary["median"][mode]["disk_util"] = statistics.median(  # type: ignore[index]
            [r["disk_util"] if r["disk_util"] is not None else -1.0 for r in results[mode]])
    ratios = {}
    for key in ("catchup_produce_p99_ms", "catchup_e2e_p99_ms", "catchup_mb_per_s"):
        on, off = summary["median"]["on"][key], summary["median"]["off"][key]  # type: ignore[index]
        ratios[f"{key} on/off"] = (on / off) if on is not None and off else None
    summary["ratios"] = ratios
    print(json.dumps({"median": summary["median"], "ratios": ratios}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
