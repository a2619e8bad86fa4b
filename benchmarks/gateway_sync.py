"""How fast a change in the management service reaches every broker, and what a failing service
does to a running cluster: ZooKeeper, three kaflet brokers and a scripted management service
(tests/support/management_service.py) on this machine, all stopped at the end.

  apply   time from an ACL row (grant or revoke) written in the service to every broker having
          applied it (the "committed" line in each broker's log that passes the row), over
          --changes rows, with gateway.sync.interval.ms = --sync-ms.
  faults  for each failure mode (down, slow, not-json, code, no-rows, wrong-types, http-500):
          --fault-s seconds of it, then: whether every broker still runs, the warning lines each
          logged, whether a row written during the fault was applied by anyone (it must not be),
          and the time from the service's recovery to every broker applying that row.

    python benchmarks/gateway_sync.py [--only apply|faults] [--sync-ms 2000] [--changes 6]
        [--fault-s 60] [--modes down,slow,...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.cluster import Cluster  # noqa: E402
from tests.support.management_service import MODES, scripted_management_service  # noqa: E402

BROKERS = (1, 2, 3)


def _commits(cluster: Cluster, bid: int) -> list[int]:
    text = cluster.broker(bid).log_path.read_text(errors="replace")
    return [int(x) for x in re.findall(rf"DataCache kafka_authorizer node {bid} committed \d+ rows at (\d+)", text)]


def _all_applied(cluster: Cluster, timestamp: int, brokers: tuple[int, ...] = BROKERS) -> bool:
    return all(any(c > timestamp for c in _commits(cluster, b)) for b in brokers)


def _wait_applied(cluster: Cluster, timestamp: int, timeout: float) -> float:
    began = time.monotonic()
    while not _all_applied(cluster, timestamp):
        if time.monotonic() - began > timeout:
            raise SystemExit(f"row at {timestamp} not applied by every broker within {timeout:.0f} s")
        time.sleep(0.01)
    return time.monotonic() - began


def _warnings(cluster: Cluster, bid: int) -> int:
    text = cluster.broker(bid).log_path.read_text(errors="replace")
    return len(re.findall(r"DataCache \w+ node \d+: pull failed", text))


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"sync_ms": args.sync_ms}
    with scripted_management_service() as service, tempfile.TemporaryDirectory() as tmp:
        service.slow_s = 3 * args.timeout_ms / 1000
        overrides = {"gateway.url": service.url, "cluster.id": "1", "gateway.sync.interval.ms": str(args.sync_ms),
                     "gateway.request.timeout.ms": str(args.timeout_ms)}
        with Cluster(Path(tmp), 3, overrides=overrides) as cluster:
            if args.only in (None, "apply"):
                seconds = []
                for i in range(args.changes):
                    row = service.add_acl("bench", "app", 1, operation=2 if i % 2 else 0)
                    seconds.append(_wait_applied(cluster, row["timestamp"], 20 * args.sync_ms / 1000))
                    print(f"change {i + 1}: every broker applied it after {seconds[-1]:.2f} s", flush=True)
                out["apply_s"] = {"min": min(seconds), "median": statistics.median(seconds), "max": max(seconds),
                                  "all": seconds}
            if args.only in (None, "faults"):
                out["faults"] = {}
                for mode in args.modes:
                    before = {b: _warnings(cluster, b) for b in BROKERS}
                    if mode == "down":
                        service.down()
                    else:
                        service.set_mode(mode)
                    row = service.add_acl("bench-fault", "app", 3)
                    time.sleep(args.fault_s)
                    alive = all(cluster.broker(b).proc is not None and cluster.broker(b).proc.poll() is None
                                for b in BROKERS)
                    applied_during = any(any(c > row["timestamp"] for c in _commits(cluster, b)) for b in BROKERS)
                    warnings = {b: _warnings(cluster, b) - before[b] for b in BROKERS}
                    if mode == "down":
                        service.up()
                    service.set_mode("ok")
                    recovery = _wait_applied(cluster, row["timestamp"], 10 * args.sync_ms / 1000 + 30)
                    out["faults"][mode] = {"alive": alive, "applied_during_fault": applied_during,
                                           "warning_lines": warnings, "recovery_s": recovery}
                    print(f"{mode}: {args.fault_s} s, brokers alive {alive}, applied during the fault "
                          f"{applied_during}, warning lines {warnings}, all applied {recovery:.2f} s after "
                          "recovery", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("apply", "faults"))
    parser.add_argument("--sync-ms", type=int, default=2000)
    parser.add_argument("--timeout-ms", type=int, default=2000, help="gateway.request.timeout.ms")
    parser.add_argument("--changes", type=int, default=6)
    parser.add_argument("--fault-s", type=float, default=60)
    parser.add_argument("--modes", type=lambda v: v.split(","), default=["down", *[m for m in MODES if m != "ok"]])
    parser.add_argument("--json")
    args = parser.parse_args()
    result = run(args)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
