"""Consume the same records again and again from several brokers, taking turns: paired ratios
of consume rates and each broker's CPU per consume, for comparing code versions (and Tansu)
under the same machine load.

Each broker (one kaflet per ``--checkout DIR``, run with DIR first on its PYTHONPATH, and Tansu
with ``--tansu``) gets one 6-partition topic of ``--messages`` records of ``--size`` B, produced
once; then every round consumes the whole topic from each broker in turn with bench.py's
consume phase (confluent-kafka, assign(), from offset 0). See benchmarks/README.md, "Small
records and a pausing consumer".
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--checkout", action="append", metavar="DIR",
                   help="a kaflet source tree to run a broker from (repeatable; default: the installed kaflet)")
    p.add_argument("--tansu", action="store_true", help="also Tansu (memory engine)")
    p.add_argument("--messages", type=int, default=2_000_000)
    p.add_argument("--size", type=int, default=100, help="record value bytes")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--consumer-config", action="append", metavar="KEY=VALUE",
                   help="a librdkafka property for the consumer (repeatable)")
    args = p.parse_args(argv)
    if any("=" not in kv for kv in args.consumer_config or []):
        p.error("--consumer-config takes KEY=VALUE")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    consumer = dict(kv.split("=", 1) for kv in args.consumer_config or [])
    targets: list[tuple[str, str | None]] = [(f"kaflet[{i}]", d) for i, d in enumerate(args.checkout or [None])]
    if args.tansu:
        targets.append(("tansu", None))
    produce_args = bench.parse_args(["--target", "kaflet"])
    with tempfile.TemporaryDirectory(prefix="consume-rounds-") as tmp, contextlib.ExitStack() as stack:
        topics: dict[str, tuple[bench.BrokerProcess, str, int]] = {}
        for name, checkout in targets:
            env_before = os.environ.get("PYTHONPATH")
            if checkout is not None:
                os.environ["PYTHONPATH"] = str(Path(checkout).resolve())
            try:
                broker = stack.enter_context(bench.started_broker("tansu" if name == "tansu" else "kaflet",
                                                                  Path(tmp) / name.strip("[]").replace("[", "-")))
            finally:
                if env_before is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = env_before
            sc = bench.Scenario(name, args.size, args.partitions, "1", args.messages, 120)
            topic = bench.create_topic(AdminClient({"bootstrap.servers": broker.bootstrap, **bench._QUIET}),
                                       args.partitions)
            res = bench.Result(name, "produce", size=args.size)
            bench.produce_phase(broker.bootstrap, topic, sc, produce_args, res)
            print(f"{name} {checkout or ''}: {res.produced:,} records produced", flush=True)
            topics[name] = (broker, topic, res.produced)
        rates: dict[str, list[float]] = {name: [] for name in topics}
        cpus: dict[str, list[float]] = {name: [] for name in topics}
        for r in range(args.rounds):
            for name, (broker, topic, n) in topics.items():
                sc = bench.Scenario(name, args.size, args.partitions, "1", n, 120)
                res = bench.Result(name, "consume", size=args.size)
                before = cpu_seconds(broker.proc.pid)
                bench.consume_phase(broker.bootstrap, topic, sc, n, res, consumer)
                cpus[name].append(cpu_seconds(broker.proc.pid) - before)
                rates[name].append(res.consumed / res.consume_s if res.consume_s else 0.0)
                print(f"round {r} {name}: {rates[name][-1]:,.0f} msg/s, broker CPU {cpus[name][-1]:.2f} s"
                      + "".join(f" ({note})" for note in res.notes), flush=True)
    print()
    for name in rates:
        print(f"{name}: median {bench._median(rates[name]) or 0:,.0f} msg/s, broker CPU per consume median "
              f"{bench._median(cpus[name]) or 0:.2f} s (range {min(cpus[name]):.2f}-{max(cpus[name]):.2f})")
    for a, b in itertools.combinations(rates, 2):
        ratios = sorted(x / y for x, y in zip(rates[a], rates[b], strict=True) if y)
        print(f"{a} / {b}, paired by round: {' '.join(f'{x:.2f}' for x in ratios)}; "
              f"median {bench._median(ratios) or 0:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
