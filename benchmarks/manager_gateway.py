"""How long the management service takes to answer the brokers' pulls and to render the
console's application pages, with many applications and permissions.

Fills a fresh SQLite (or --database-url) database through the service layer (N applications,
each granted produce+consume on T topics of one cluster), starts `kaflet manager` as a process
on a free port and times, over real HTTP: a full /security/users pull (start=0), a full
/security/acls pull, an incremental acls pull of the last second, the applications list page
and one application's page. Prints the median and the worst of --repeat runs.

    python benchmarks/manager_gateway.py --apps 1000 --topics 10
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kaflet.manager.config import load_config  # noqa: E402
from kaflet.manager.db import Database, migrate  # noqa: E402
from kaflet.manager.models import Account  # noqa: E402
from kaflet.manager.security import SecretBox  # noqa: E402
from kaflet.manager.services import (  # noqa: E402
    approve_request,
    create_app,
    ensure_initial_admin,
    register_cluster,
    request_permission,
)
from tests.support.manager import GATEWAY_TOKEN, ManagerProcess, Session  # noqa: E402


def fill(workdir: Path, apps: int, topics: int, database_url: str | None = None) -> str:
    """Populate the database the manager process will use; the admin password."""
    proc = ManagerProcess(workdir, database_url)  # writes manager.toml (data dir, database, gateway token)
    config = load_config(proc.config_path)
    db = Database(config.database_url)
    migrate(db.engine)
    box = SecretBox(config.encryption_key)
    with db.session() as s:
        password = ensure_initial_admin(s)
        assert password is not None
        admin = s.query(Account).one()
        register_cluster(s, admin, box, name="bench", bootstrap_servers="127.0.0.1:9092", cluster_id=1)
        for a in range(apps):
            app_id = f"app_{a:05d}"
            create_app(s, admin, box, app_id, "benchmark application")
            for t in range(topics):
                req = request_permission(s, admin, app_id, 1, f"topic-{t:04d}", 3)
                approve_request(s, admin, req.id)
    db.dispose()
    return password


def timed(call, repeat: int) -> tuple[float, float, int]:  # type: ignore[no-untyped-def]
    times, size = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = call()
        times.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200, r.text[:200]
        size = len(r.content)
    return statistics.median(times), max(times), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--apps", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=10, help="permissions per application")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--database-url", help="an empty database (default: SQLite in a temp dir)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="kaflet-manager-bench-"))
    t0 = time.perf_counter()
    admin_password = fill(workdir, args.apps, args.topics, args.database_url)
    print(f"filled {args.apps} applications x {args.topics} permissions in {time.perf_counter() - t0:.1f} s")
    manager = ManagerProcess(workdir, args.database_url).start()
    try:
        auth = {"Authorization": f"Bearer {GATEWAY_TOKEN}"}
        with httpx.Client(base_url=manager.url, timeout=120) as client:
            session = Session(client, "admin", admin_password)
            cases = {
                "POST security/users (all)": lambda: client.post("/gateway/api/v1/security/users",
                                                                 json={"start": 0, "end": 0}, headers=auth),
                "POST security/acls (all)": lambda: client.post("/gateway/api/v1/security/acls",
                                                                json={"clusterId": 1, "start": 0, "end": 0},
                                                                headers=auth),
                # As a broker's sync asks: the window up to its own clock's now.
                "POST security/acls (last 1 s)": lambda: client.post(
                    "/gateway/api/v1/security/acls",
                    json={"clusterId": 1, "start": int(time.time() * 1000) - 1000, "end": int(time.time() * 1000)},
                    headers=auth),
                "GET /apps (console)": lambda: session.client.get("/apps"),
                "GET /apps/<id> (console)": lambda: session.client.get("/apps/app_00000"),
            }
            for name, call in cases.items():
                median, worst, size = timed(call, args.repeat)
                print(f"{name:32s} median {median:8.1f} ms  worst {worst:8.1f} ms  {size / 1024:9.1f} KiB")
    finally:
        manager.stop()


if __name__ == "__main__":
    main()
