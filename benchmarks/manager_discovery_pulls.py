"""What recording the gateways' pulls costs the manager: ``discovery/update`` pulls per second a
`kaflet manager` process answers over real HTTP (one client, sequential), when one gateway pulls
(its row written at most every 2 s) and when every pull comes from a new instance id (a write
each time, the worst case), on SQLite by default.

    python benchmarks/manager_discovery_pulls.py --pulls 2000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.manager import GATEWAY_TOKEN, ManagerProcess  # noqa: E402


def rate(client: httpx.Client, pulls: int, instance: str, distinct: bool) -> float:
    began = time.perf_counter()
    for n in range(pulls):
        headers = {"Authorization": f"Bearer {GATEWAY_TOKEN}", "X-Kaflet-Gateway-Sync-Interval-Ms": "1000",
                   "X-Kaflet-Gateway-Instance": f"{instance}-{n}" if distinct else instance}
        r = client.get("/gateway/api/v1/discovery/update", params={"versionNumber": "0"}, headers=headers)
        assert r.status_code == 200 and r.json()["code"] == 0, r.text[:200]
    return pulls / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pulls", type=int, default=2000)
    parser.add_argument("--database-url", help="an empty database (default: SQLite in a temp dir)")
    args = parser.parse_args()
    manager = ManagerProcess(Path(tempfile.mkdtemp(prefix="kaflet-pulls-bench-")), args.database_url).start()
    try:
        with httpx.Client(base_url=manager.url, timeout=60) as client:
            rate(client, 200, "warm-up", False)
            for name, distinct in (("one gateway (rate-limited writes)", False),
                                   ("a new gateway every pull (a write each)", True)):
                print(f"{name:42s} {rate(client, args.pulls, name.split()[0], distinct):8.0f} pulls/s")
    finally:
        manager.stop()


if __name__ == "__main__":
    main()
