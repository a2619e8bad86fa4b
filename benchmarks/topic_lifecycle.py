"""How long creating, deleting and shutting down with a many-partition topic takes, and how
long the broker's event loop stalls meanwhile.

The broker runs in this process, on this script's event loop, so a probe coroutine on the same
loop sees every stall: it sleeps 10 ms again and again and records how late it wakes. A
confluent-kafka producer in a thread sends one record every 20 ms to a one-partition topic and
records each delivery's latency (what a client of the broker notices). Phases:

* create: CreateTopics of a ``--partitions`` topic (answered once every partition has a leader);
* delete: DeleteTopics of it (answered once the replicas are gone);
* shutdown: the topic is created again, then the broker stops cleanly;
* start-up: a new broker on the same directory starts (clean shutdown: no recovery).

    .venv/bin/python benchmarks/topic_lifecycle.py [--partitions 1000] [--data-dir DIR] [--repeat N]

The data directory defaults to a fresh one under the system temp dir; put it on the disk you
want to measure (fsync on tmpfs costs nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kaflet.server.broker import Broker
from kaflet.server.config import BrokerConfig

PROBE_S = 0.010
PRODUCE_EVERY_S = 0.020


@dataclass
class Phase:
    """One measured phase: its duration and the stalls seen meanwhile."""

    name: str
    seconds: float = 0.0
    loop_lateness_ms: list[float] = field(default_factory=list)
    produce_latency_ms: list[float] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        def pct(xs: list[float], q: float) -> float:
            return round(sorted(xs)[min(len(xs) - 1, int(q * len(xs)))], 1) if xs else float("nan")

        return {"phase": self.name, "seconds": round(self.seconds, 2),
                "loop_max_ms": round(max(self.loop_lateness_ms, default=float("nan")), 1),
                "loop_p99_ms": pct(self.loop_lateness_ms, 0.99),
                "produce_max_ms": round(max(self.produce_latency_ms, default=float("nan")), 1),
                "produce_p99_ms": pct(self.produce_latency_ms, 0.99),
                "produced": len(self.produce_latency_ms)}


class Probes:
    """The loop probe (a coroutine) and the produce probe (a thread), feeding the current phase."""

    def __init__(self) -> None:
        self.phase: Phase | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None

    async def _loop_probe(self) -> None:
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(PROBE_S)
            late = (time.perf_counter() - t0 - PROBE_S) * 1000
            if self.phase is not None:
                self.phase.loop_lateness_ms.append(late)

    def _produce(self, bootstrap: str, topic: str) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1, "log_level": 0})

        def delivered(err: Any, msg: Any) -> None:
            if err is None and self.phase is not None:
                self.phase.produce_latency_ms.append(msg.latency() * 1000)

        while not self._stop.is_set():
            producer.produce(topic, b"probe", on_delivery=delivered)
            producer.poll(PRODUCE_EVERY_S)
        producer.flush(10)

    def start(self, bootstrap: str | None, topic: str) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop_probe())
        if bootstrap is not None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._produce, args=(bootstrap, topic), daemon=True)
            self._thread.start()

    def stop_producer(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None

    async def close(self) -> None:
        self.stop_producer()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @contextlib.asynccontextmanager
    async def measure(self, phase: Phase) -> AsyncIterator[None]:
        await asyncio.sleep(0.2)  # let the probes settle
        self.phase = phase
        t0 = time.perf_counter()
        try:
            yield
        finally:
            phase.seconds = time.perf_counter() - t0
            self.phase = None


def _broker(data_dir: str) -> Broker:
    return Broker(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": data_dir}))


async def _admin(fn: Callable[[], Any]) -> None:
    futures = await asyncio.to_thread(fn)
    for f in futures.values():
        await asyncio.to_thread(f.result, 300)


async def one_run(partitions: int, data_dir: str) -> list[Phase]:
    probes = Probes()
    phases: list[Phase] = []
    broker = _broker(data_dir)
    await broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        await _admin(lambda: admin.create_topics([NewTopic("probe", 1, 1)]))
        probes.start(broker.bootstrap, "probe")
        topic = "wide"

        async def create(name: str = topic) -> None:
            await _admin(lambda: admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=300))

        async def delete() -> None:
            await _admin(lambda: admin.delete_topics([topic], operation_timeout=300))

        for name, action in (("create", create), ("delete", delete)):
            phase = Phase(name)
            async with probes.measure(phase):
                await action()
            phases.append(phase)
        await create(topic + "-again")  # the controller may still be removing the first one's znodes
        probes.stop_producer()  # the producer would only retry against a stopping broker
        phase = Phase("shutdown")
        async with probes.measure(phase):
            await broker.stop()
        phases.append(phase)
    finally:
        await broker.stop()
    broker = _broker(data_dir)
    phase = Phase("start-up")
    async with probes.measure(phase):
        await broker.start()
    phases.append(phase)
    await broker.stop()
    await probes.close()
    return phases


async def main_async(args: argparse.Namespace) -> None:
    runs: list[list[Phase]] = []
    for _ in range(args.repeat):
        data_dir = tempfile.mkdtemp(prefix="kaflet-lifecycle-", dir=args.data_dir)
        try:
            runs.append(await one_run(args.partitions, data_dir))
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)
    rows: list[dict[str, Any]] = []
    for i in range(len(runs[0])):
        # The run with the median duration of this phase.
        by_time = sorted((run[i] for run in runs), key=lambda p: p.seconds)
        row = by_time[len(by_time) // 2].row()
        if len(runs) > 1:
            row["seconds_range"] = [round(by_time[0].seconds, 2), round(by_time[-1].seconds, 2)]
            row["loop_max_ms_median"] = round(statistics.median(max(p.loop_lateness_ms, default=0) for p in by_time), 1)
        rows.append(row)
    print(f"{args.partitions} partitions, {args.repeat} run(s)")
    cols = ["phase", "seconds", "loop_max_ms", "loop_p99_ms", "produce_max_ms", "produce_p99_ms", "produced"]
    print("  ".join(f"{c:>14}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]!s:>14}" for c in cols))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--data-dir", default=None, help="parent of the broker's data directory")
    ap.add_argument("--json", default=None, help="write the rows to this file")
    ap.add_argument("--log-level", default="WARNING")
    args = ap.parse_args()
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
