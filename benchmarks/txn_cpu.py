"""The broker's CPU per transaction, by part, measured in its own thread (``time.thread_time``).

Runs a broker in this process (``kaflet.embedded_broker``, its event loop in a thread), then:

1. ``--transactions`` transactions of ``--records`` records of ``--record-bytes`` bytes over two
   partitions from a confluent-kafka transactional producer (linger.ms 5; begin, produce,
   commit), and the same records from an idempotent producer (flush after each ``--records``):
   the broker thread's CPU per transaction and, per API, what its requests cost from the
   header's parse to the unencoded response (``Dispatcher.__call__``, its awaits included, so
   EndTxn holds its marker round); the rest is reading, framing, sending and the event loop.
   Then a transaction's timeline: from the commit_transaction() call, when the broker took up
   and answered each of its requests and when the call returned (medians; client and broker
   share one clock here), which splits the wall time into the broker's part and the client's.
2. The same number of transactions driven on the transaction coordinator directly (no
   requests): AddPartitionsToTxn and EndTxn with its markers and completion, the three
   ``__transaction_state`` writes and the marker round timed on their own.

CPU time of one thread is what the broker spent whatever else the machine runs, unlike wall
time; a busy machine still slows it through caches and frequency, so compare trees taking
turns (``PYTHONPATH`` picks the tree). See benchmarks/README.md, "Transactions".
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import collections
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import kaflet
from kaflet.embedded_broker import embedded_broker
from kaflet.protocol.api_keys import ApiKey
from kaflet.server import dispatcher
from kaflet.server.broker import Broker

TOPIC = "txn-cpu"
WARMUP = 100


def _per_api(cpu: collections.Counter[int], count: collections.Counter[int],
             handled: list[tuple[int, float, float]]) -> None:
    """Charge each request's thread CPU, its awaits included, to its API key, and note when
    each was taken up and handed back (``time.monotonic``, the client's clock too: one process)."""
    original = dispatcher.Dispatcher.__call__

    async def timed(self: dispatcher.Dispatcher, conn: Any, frame: memoryview) -> Any:
        start, began = time.thread_time(), time.monotonic()
        try:
            return await original(self, conn, frame)
        finally:
            key = int.from_bytes(frame[0:2], "big")
            cpu[key] += time.thread_time() - start
            count[key] += 1
            handled.append((key, began, time.monotonic()))

    dispatcher.Dispatcher.__call__ = timed  # type: ignore[method-assign]


def over_the_wire(broker: Broker, loop: asyncio.AbstractEventLoop, transactional: bool, n: int, records: int,
                  record_bytes: int, cpu: collections.Counter[int], count: collections.Counter[int],
                  handled: list[tuple[int, float, float]], marks: list[tuple[float, float, float]],
                  pause_s: float = 0.0) -> dict[str, float]:
    conf: dict[str, Any] = {"bootstrap.servers": broker.bootstrap, "linger.ms": 5}
    conf.update({"transactional.id": f"txn-cpu-{time.monotonic_ns()}"} if transactional
                else {"enable.idempotence": True})
    p = Producer(conf)
    if transactional:
        p.init_transactions(30)
    value = b"x" * record_bytes

    def one() -> None:
        began = time.monotonic()
        if transactional:
            p.begin_transaction()
        for i in range(records):
            p.produce(TOPIC, value, partition=i % 2)
        if pause_s:
            time.sleep(pause_s)
        produced = time.monotonic()
        if transactional:
            p.commit_transaction(30)
        elif p.flush(30):
            raise RuntimeError("the idempotent producer did not deliver every record")
        marks.append((began, produced, time.monotonic()))

    for _ in range(WARMUP):
        one()

    async def thread_cpu() -> float:
        return time.thread_time()

    cpu.clear()
    count.clear()
    marks.clear()
    handled.clear()
    c0, t0 = asyncio.run_coroutine_threadsafe(thread_cpu(), loop).result(), time.perf_counter()
    for _ in range(n):
        one()
    c1, t1 = asyncio.run_coroutine_threadsafe(thread_cpu(), loop).result(), time.perf_counter()
    out = {"wall_ms": (t1 - t0) / n * 1000, "broker_thread_us": (c1 - c0) / n * 1e6}
    for key, spent in cpu.most_common():
        if count[key] >= n // 2:  # not the odd FindCoordinator or Metadata
            out[f"{ApiKey(key).name} us ({count[key] / n:.0f}/txn)"] = spent / n * 1e6
    return out


def timeline(handled: list[tuple[int, float, float]], marks: list[tuple[float, float, float]]
             ) -> list[tuple[str, float]]:
    """Per transaction, from the moment commit_transaction() is called: when the broker took up
    each of the transaction's requests and handed its answer back, and when commit returned;
    the median of each over the transactions, in the order they happen."""
    handled = sorted(handled, key=lambda h: h[1])
    starts = [h[1] for h in handled]
    steps: dict[str, list[float]] = collections.defaultdict(list)
    for began, produced, done in marks:
        steps["begin_transaction()"].append((began - produced) * 1000)
        seen: collections.Counter[str] = collections.Counter()
        for key, start, end in handled[bisect.bisect_left(starts, began):bisect.bisect_right(starts, done)]:
            name = ApiKey(key).name
            seen[name] += 1
            label = name if seen[name] == 1 else f"{name} #{seen[name]}"
            steps[f"{label} taken up"].append((start - produced) * 1000)
            steps[f"{label} answered"].append((end - produced) * 1000)
        steps["commit_transaction() returned"].append((done - produced) * 1000)
    # Steps seen in most transactions only: not the odd Metadata refresh.
    common = {k: v for k, v in steps.items() if len(v) >= len(marks) // 2}
    return sorted(((k, statistics.median(v)) for k, v in common.items()), key=lambda kv: kv[1])


async def coordinator_parts(broker: Broker, n: int) -> dict[str, float]:
    c = broker.txn_coordinator
    txn_id = f"txn-cpu-direct-{time.monotonic_ns()}"
    code, pid, epoch = await c.init_producer_id(txn_id, 60_000)
    if code:
        raise RuntimeError(f"InitProducerId: {code.name}")
    spent: collections.Counter[str] = collections.Counter()

    def timed(name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return await fn(*args, **kwargs)
            finally:
                spent[name] += time.thread_time() - start
        return wrapper

    store_append, send_markers = c.store.append, c.send_markers
    c.store.append = timed("__transaction_state writes (3)", store_append)  # type: ignore[method-assign]
    c.send_markers = timed("marker round (2 partitions)", send_markers)
    partitions = {(TOPIC, 0), (TOPIC, 1)}
    try:
        for i in range(n + WARMUP):
            if i == WARMUP:
                spent.clear()
                total = time.thread_time()
            start = time.thread_time()
            if code := await c.add_partitions(txn_id, pid, epoch, partitions):
                raise RuntimeError(f"AddPartitionsToTxn: {code.name}")
            mid = time.thread_time()
            if code := await c.end_txn(txn_id, pid, epoch, True):
                raise RuntimeError(f"EndTxn: {code.name}")
            spent["AddPartitionsToTxn"] += mid - start
            spent["EndTxn (markers and completion included)"] += time.thread_time() - mid
        total = time.thread_time() - total
    finally:
        c.store.append, c.send_markers = store_append, send_markers  # type: ignore[method-assign]
    return {"coordinator_us": total / n * 1e6, **{f"{k} us": v / n * 1e6 for k, v in spent.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=1000)
    ap.add_argument("--records", type=int, default=100, help="records per transaction")
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--pause-ms", type=float, default=0.0,
                    help="sleep this long between the last produce() and commit_transaction() (or flush): "
                         "shows which requests the client sends on its own clock rather than on the commit")
    args = ap.parse_args()
    cpu: collections.Counter[int] = collections.Counter()
    count: collections.Counter[int] = collections.Counter()
    handled: list[tuple[int, float, float]] = []
    marks: list[tuple[float, float, float]] = []
    _per_api(cpu, count, handled)
    print(f"kaflet from {kaflet.__file__}")
    with embedded_broker() as (broker, loop):
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
            f.result()
        for name, transactional in (("transactional", True), ("idempotent", False)):
            row = over_the_wire(broker, loop, transactional, args.transactions, args.records, args.record_bytes,
                                cpu, count, handled, marks, args.pause_ms / 1000)
            print(f"{name}: " + ", ".join(f"{k} {v:.3f}" if k == "wall_ms" else f"{k} {v:.0f}" for k, v in row.items()))
            if transactional:
                print("  a transaction, ms from the commit_transaction() call (median):")
                for step, at in timeline(handled, marks):
                    print(f"    {at:+7.3f}  {step}")
        row = asyncio.run_coroutine_threadsafe(coordinator_parts(broker, args.transactions), loop).result()
        print("coordinator alone: " + ", ".join(f"{k} {v:.0f}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
