"""Two real `kaflet manager` processes on one database (a real PostgreSQL the tests start, and
one SQLite file): started together they migrate and create the admin once; a session made on one
works on the other; permission changes hammered through both while a poller pulls the gateway
contract incrementally, as a broker's DataCache does, lose no row and reorder none.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from kaflet.manager.config import load_config
from kaflet.manager.db import Database, migrate, now_ms
from kaflet.manager.models import Account
from kaflet.manager.services import ensure_initial_admin
from kaflet.manager.web import create_app
from tests.support.manager import ManagerProcess, Session, gateway_call, wait_for, write_config
from tests.support.postgres import PostgresServer, postgres_server

CLUSTER = 7
#: Both processes are configured with the same keys, as a platform team deploys them.
KEYS = {"secret_key": "multi-process-test-secret-key-0123456789",
        "encryption_key": Fernet.generate_key().decode()}
#: How long the writers hammer the two processes at least, and the changes they must make at
#: least (on a slow or busy machine they go on until they have, for at most HAMMER_MAX_S).
HAMMER_S = 8.0
HAMMER_CHANGES = 60
HAMMER_MAX_S = 120.0


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


class Pair:
    """Two manager processes on one database, and the admin's password (printed by one)."""

    def __init__(self, a: ManagerProcess, b: ManagerProcess, database_url: str) -> None:
        self.a, self.b, self.database_url = a, b, database_url
        passwords = [p.admin_password for p in (a, b) if p.admin_password]
        assert len(passwords) == 1, "exactly one of the processes starting together creates the admin"
        self.admin_password = passwords[0]

    def session(self, manager: ManagerProcess) -> Session:
        return Session(httpx.Client(base_url=manager.url, timeout=30), "admin", self.admin_password)


@pytest.fixture(params=["postgresql", "sqlite"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    if request.param == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgres")
        url = server.new_database()
    else:
        url = f"sqlite:///{tmp_path / 'shared.db'}"
    # Separate data dirs, as on two hosts: only the configured keys are shared.
    a = ManagerProcess(tmp_path / "a", url, cluster_sample_interval_s=3600, **KEYS)
    b = ManagerProcess(tmp_path / "b", url, cluster_sample_interval_s=3600, **KEYS)
    try:
        a.launch()
        b.launch()  # at the same time: both migrate the empty database and look for an admin
        a.wait_ready()
        b.wait_ready()
        yield Pair(a, b, url)
    finally:
        a.stop()
        b.stop()


def test_started_together_they_migrate_and_create_one_admin(pair: Pair) -> None:
    db = Database(pair.database_url)
    try:
        with db.session() as s:
            assert s.scalar(select(func.count()).select_from(Account)) == 1
    finally:
        db.dispose()
    for manager in (pair.a, pair.b):
        assert "Traceback" not in manager.log_path.read_text()


def test_a_session_made_on_one_process_works_on_the_other(pair: Pair) -> None:
    on_a = pair.session(pair.a)
    on_b = httpx.Client(base_url=pair.b.url, timeout=30)
    on_b.cookies.set("kaflet_manager", on_a.client.cookies["kaflet_manager"])
    # Read, and change with the CSRF token the login on A gave (JSON API and console form).
    assert on_b.get("/api/v1/apps").status_code == 200
    r = on_b.post("/api/v1/apps", json={"app_id": "from_b", "description": "x"}, headers={"X-CSRF-Token": on_a.csrf})
    assert r.status_code == 201, r.text
    r = on_b.post("/clusters", data={"name": "main", "cluster_id": str(CLUSTER), "bootstrap_servers": "127.0.0.1:1",
                                     "csrf_token": on_a.csrf}, follow_redirects=False)
    assert r.status_code == 303, r.text
    # A's answer shows what B did; a wrong token is still refused on B.
    assert [a["app_id"] for a in on_a.api("GET", "/apps").json()] == ["from_b"]
    r = on_b.post("/api/v1/apps", json={"app_id": "nope"}, headers={"X-CSRF-Token": "wrong"})
    assert r.status_code == 403
    # A password change on A ends the session on B too.
    r = on_a.form("/account/password", {"current_password": pair.admin_password,
                                        "new_password": "a-new-password-123"})
    assert r.status_code in (200, 303), r.text
    assert on_b.get("/api/v1/apps").status_code == 401


def test_a_process_with_another_encryption_key_is_refused_another_secret_key_warned(pair: Pair,
                                                                                     tmp_path: Path) -> None:
    other = ManagerProcess(tmp_path / "c", pair.database_url, secret_key=KEYS["secret_key"],
                           encryption_key=Fernet.generate_key().decode())
    with pytest.raises(RuntimeError, match="served with another encryption_key"):
        other.start()
    other.stop()
    # A new secret_key is how all sessions are ended: it starts, says so, and refuses A's sessions.
    rotated = ManagerProcess(tmp_path / "d", pair.database_url, secret_key="another-secret-key-0123456789-abcdef",
                             encryption_key=KEYS["encryption_key"])
    rotated.start()
    try:
        assert "secret_key differs from the one this database was served with" in rotated.log_path.read_text()
        on_rotated = httpx.Client(base_url=rotated.url, timeout=30)
        on_rotated.cookies.set("kaflet_manager", pair.session(pair.a).client.cookies["kaflet_manager"])
        assert on_rotated.get("/api/v1/apps").status_code == 401
    finally:
        rotated.stop()


def test_processes_sharing_a_data_dir_generate_one_set_of_keys(tmp_path: Path) -> None:
    """No keys configured, one data dir (its SQLite database and secrets.toml) for both: the
    process that loses the race to create secrets.toml uses the winner's keys."""
    a, b = ManagerProcess(tmp_path / "a"), ManagerProcess(tmp_path / "b")
    write_config(b.config_path, tmp_path / "a" / "data")
    try:
        a.launch()
        b.launch()
        a.wait_ready()
        b.wait_ready()
        password = a.admin_password or b.admin_password
        assert password and not (a.admin_password and b.admin_password)
        on_a = Session(httpx.Client(base_url=a.url, timeout=30), "admin", password)
        on_b = httpx.Client(base_url=b.url, timeout=30)
        on_b.cookies.set("kaflet_manager", on_a.client.cookies["kaflet_manager"])
        assert on_b.get("/api/v1/apps").status_code == 200
        assert not list((tmp_path / "a" / "data").glob(".secrets.toml.*")), "no temporary file left behind"
    finally:
        a.stop()
        b.stop()


def test_the_process_losing_the_race_for_secrets_toml_uses_the_winners_keys(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process writes secrets.toml between this one's look and its own link into place."""
    winner = load_config(None, data_dir=tmp_path / "winner")
    real_link = os.link

    def link_after_the_winner(src: Any, dst: Any) -> None:
        shutil.copy(tmp_path / "winner" / "secrets.toml", dst)
        real_link(src, dst)

    monkeypatch.setattr(os, "link", link_after_the_winner)
    loser = load_config(None, data_dir=tmp_path / "loser")
    assert (loser.secret_key, loser.encryption_key) == (winner.secret_key, winner.encryption_key)
    assert [p.name for p in (tmp_path / "loser").iterdir()] == ["secrets.toml"]


def test_each_process_follows_the_clusters_registered_and_forgotten_through_the_other(tmp_path: Path) -> None:
    """Two services on one database (in this process, to look at their observers): a cluster
    registered or forgotten through one is observed or dropped by the other within a sample
    interval, without anyone opening its pages there."""
    config = load_config(write_config(tmp_path / "manager.toml", tmp_path / "data", cluster_sample_interval_s=0.2))
    db = Database(config.database_url)
    migrate(db.engine)
    with db.session() as s:
        password = ensure_initial_admin(s) or ""
    try:
        with TestClient(create_app(config), base_url="http://127.0.0.1") as on_a, \
                TestClient(create_app(config), base_url="http://127.0.0.1") as on_b:
            b_observers = on_b.app.state.manager.observers  # type: ignore[attr-defined]
            admin = Session(on_a, "admin", password)
            assert admin.form("/clusters", {"name": "far", "cluster_id": "9",
                                            "bootstrap_servers": "127.0.0.1:2"}).status_code == 303
            wait_for(lambda: b_observers.keys() == {9}, 10)
            assert admin.form("/clusters/9/delete", {}).status_code == 303
            wait_for(lambda: b_observers.keys() == set(), 10)
    finally:
        db.dispose()


def test_discovery_settings_changed_through_both_processes_get_distinct_versions(pair: Pair) -> None:
    """Brokers ask for settings of a type above the version they have: two changes committed under
    one version (each process reading the same highest one) would hide one of them."""
    answers: list[int] = []

    def work(manager: ManagerProcess, worker: int) -> None:
        me = pair.session(manager)
        for n in range(10):
            r = me.form("/gateway-configs", {"type": "SD_SP_RATE", "name": f"w{worker}-{n}", "value": "100"})
            answers.append(r.status_code)

    workers = [threading.Thread(target=work, args=(m, i)) for i, m in enumerate((pair.a, pair.b, pair.a, pair.b))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert answers == [303] * 40
    audit = pair.session(pair.a).api("GET", "/audit?limit=1000").json()
    versions = sorted(json.loads(r["detail"])["version"] for r in audit if r["action"] == "gateway-config.set")
    assert versions == list(range(1, 41))


def _pull(client: httpx.Client, path: str, start: int, end: int) -> list[dict[str, Any]]:
    body = {"clusterId": CLUSTER, "start": start, "end": end}
    r = gateway_call(client, "POST", path, json=body)
    assert r.status_code == 200 and r.json()["code"] == 0, r.text
    return list(json.loads(r.json()["data"])["rows"])


class Poller(threading.Thread):
    """Pulls one change log as kaflet's DataCache does: [previous end, now), alternating
    processes, keeping the rows before ``end`` (the next pull starts there). ``ahead_ms``: a
    broker whose clock is that far ahead, taking the contract's window [start, end] at its word
    (every row up to ``end``; the next pull starts after it)."""

    def __init__(self, clients: list[httpx.Client], path: str, ahead_ms: int = 0) -> None:
        super().__init__(daemon=True)
        self.clients, self.path, self.ahead_ms = clients, path, ahead_ms
        self.rows: list[dict[str, Any]] = []
        self.start_at = 0
        self.pulls = self.non_empty = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def pull_once(self) -> None:
        start, end = self.start_at, now_ms() + self.ahead_ms
        if end <= start:
            return
        got = _pull(self.clients[self.pulls % 2], self.path, start, end)
        if self.ahead_ms:
            self.start_at = end + 1
        else:
            got = [r for r in got if r["timestamp"] < end]
            self.start_at = end
        self.rows.extend(got)
        self.pulls += 1
        self.non_empty += bool(got)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.pull_once()
        except BaseException as exc:  # reported by the test
            self.error = exc


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted(row.items()))


def test_concurrent_changes_on_both_processes_reach_incremental_pulls_complete_and_in_order(pair: Pair) -> None:
    admin_a = pair.session(pair.a)
    assert admin_a.form("/clusters", {"name": "main", "cluster_id": str(CLUSTER),
                                      "bootstrap_servers": "127.0.0.1:1"}).status_code == 303
    apps = ["app0", "app1", "app2"]
    pollers = [Poller([httpx.Client(base_url=m.url, timeout=30) for m in (pair.a, pair.b)], path, ahead)
               for path, ahead in (("/security/acls", 0), ("/security/users", 0), ("/security/acls", 50))]
    for poller in pollers:
        poller.start()
    for i, app in enumerate(apps):  # user rows while the pollers pull
        r = pair.session((pair.a, pair.b)[i % 2]).api("POST", "/apps", {"app_id": app})
        assert r.status_code == 201, r.text

    statuses: list[int] = []
    unexpected: list[str] = []
    started = time.monotonic()

    def hammering() -> bool:
        elapsed = time.monotonic() - started
        made = statuses.count(200) + statuses.count(201)
        return elapsed < HAMMER_S or (made < HAMMER_CHANGES and elapsed < HAMMER_MAX_S)

    def work(manager: ManagerProcess, seed: int) -> None:
        rnd = random.Random(seed)
        me = pair.session(manager)
        while hammering():
            # Few apps and topics: the two processes often change the same permission at once.
            app, topic = rnd.choice(apps), f"t{rnd.randrange(2)}"
            if rnd.random() < 0.1:
                calls = [me.api("POST", f"/apps/{app}/reset-password")]
            elif rnd.random() < 0.6:
                r = me.api("POST", f"/apps/{app}/requests", {"cluster_id": CLUSTER, "topic": topic,
                                                            "access": rnd.randrange(1, 4)})
                calls = [r]
                if r.status_code == 201:
                    calls.append(me.api("POST", f"/requests/{r.json()['id']}/approve", {}))
            else:
                calls = [me.api("POST", f"/apps/{app}/revoke", {"cluster_id": CLUSTER, "topic": topic,
                                                               "access": rnd.randrange(1, 4)})]
            for r in calls:
                statuses.append(r.status_code)
                # 400: revoking what is not held; 409: a request or permission changed at once.
                if r.status_code not in (200, 201, 400, 409):
                    unexpected.append(f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text}")

    workers = [threading.Thread(target=work, args=(m, i)) for i, m in enumerate((pair.a, pair.b, pair.a, pair.b))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for poller in pollers:
        poller.stop.set()
        poller.join(30)
        assert poller.error is None, poller.error
    assert not unexpected, unexpected[:5]
    assert statuses.count(200) + statuses.count(201) >= HAMMER_CHANGES, "the hammer made too few changes to mean anything"

    time.sleep(0.01)
    for poller in pollers:
        poller.pull_once()  # everything is committed now: the last window reaches past every row
        # A full pull from either process is exactly the union of the incremental pulls.
        for client in poller.clients:
            full = _pull(client, poller.path, 0, 0)
            assert [_key(r) for r in poller.rows] == [_key(r) for r in full], poller.path
        stamps = [r["timestamp"] for r in poller.rows]
        assert stamps == sorted(set(stamps)), "timestamps strictly increase, none pulled twice"
        assert poller.non_empty >= 5, "the pulls interleaved with the writes"

    # Folding the pulled log gives the permissions both processes show (grant rows carry the
    # merged access, revoke rows the bits removed).
    folded: dict[tuple[str, str], int] = {}
    for row in pollers[0].rows:
        key = (row["username"], row["topicName"])
        folded[key] = row["access"] if row["operation"] == 0 else folded.get(key, 0) & ~row["access"]
    for manager in (pair.a, pair.b):
        me = pair.session(manager)
        held = {(app, p["topic"]): p["access"] for app in apps for p in me.api("GET", f"/apps/{app}").json()["permissions"]}
        assert held == {k: v for k, v in folded.items() if v}
