"""What the broker's metrics cost: the request path's counter updates (per call, best of
several runs, so a busy shared machine disturbs them little) and one scrape of a broker with
many partitions (values read on the event loop, text written on a thread).

    PYTHONPATH=. python benchmarks/metrics_overhead.py [--partitions 1000]

The end-to-end comparison (throughput, latency and broker CPU with metrics on and off, taking
turns) is ``bench.py --target kaflet --metrics-compare``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import timeit

from prometheus_client import generate_latest

from kaflet.embedded_broker import embedded_broker
from kaflet.metrics.stats import AppTopicStats, BrokerMetrics
from kaflet.protocol.api_keys import ApiKey
from tests.support.topics import create_topic


def _costs(m: BrokerMetrics, number: int, repeat: int) -> list[float]:
    """µs per call of each hook, the best of ``repeat`` runs of ``number`` calls."""
    calls = (
        lambda: m.produced("t", 16384, 100, "0.app"),
        lambda: m.fetched("t", 0),
        lambda: m.on_request(ApiKey.PRODUCE, 9, False, "0.app", {"t": 16384}, 0, 1.3),
        lambda: m.on_request(ApiKey.METADATA, 12, False, "0.app", None, 0, 0.4),
    )
    return [min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6 for fn in calls]


def hook_costs(number: int = 200_000, repeat: int = 5) -> None:
    print(f"{'counters':<24} {'produced':>10} {'fetched':>10} {'Produce req':>12} {'Metadata req':>13}  (us per call)")
    for name, m in (("BrokerTopicMetrics", BrokerMetrics()),
                    ("+ kafkaexmetrics", BrokerMetrics(AppTopicStats(0, 10_000, topics=["t"])))):
        produced, fetched, produce_req, metadata_req = _costs(m, number, repeat)
        print(f"{name:<24} {produced:>10.2f} {fetched:>10.2f} {produce_req:>12.2f} {metadata_req:>13.2f}")


def scrape_cost(partitions: int, topics: int = 4, rounds: int = 5) -> None:
    with embedded_broker({"metrics.listener": "http://127.0.0.1:0", "kafkaexmetrics.enable": "true"}) as (b, loop):
        for i in range(topics):
            create_topic(b.bootstrap, f"scrape-{i}", partitions=max(1, partitions // topics))
        exporter = b.metrics_exporter
        assert exporter is not None

        async def once() -> tuple[float, float, int]:
            began = time.perf_counter()
            families = list(exporter.registry.collect())
            read = time.perf_counter()

            class Snapshot:
                def collect(self) -> list[object]:
                    return families  # type: ignore[return-value]

            text = await asyncio.to_thread(generate_latest, Snapshot())  # type: ignore[arg-type]
            return (read - began) * 1000, (time.perf_counter() - read) * 1000, len(text)

        results = [asyncio.run_coroutine_threadsafe(once(), loop).result(60) for _ in range(rounds)]
        hosted = len(b.replica_manager.partitions)
    on_loop = sorted(r[0] for r in results)[rounds // 2]
    writing = sorted(r[1] for r in results)[rounds // 2]
    print(f"scrape of {hosted} partitions: {on_loop:.1f} ms on the loop (reading values), "
          f"{writing:.1f} ms on a thread (writing {results[-1][2] / 1000:.0f} kB of text); median of {rounds}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--partitions", type=int, default=1000, help="partitions of the broker scraped")
    args = p.parse_args()
    hook_costs()
    scrape_cost(args.partitions)


if __name__ == "__main__":
    main()
