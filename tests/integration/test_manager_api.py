"""The management service's console, JSON API and gateway contract over HTTP (FastAPI's
TestClient), on SQLite and on a real PostgreSQL server (started by the tests; they fail, saying
what to install, when its binaries are missing).

Bad input of every kind gets a clear 4xx and leaves every table as it was.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from kaflet.manager.config import ConfigError, load_config
from kaflet.manager.db import Database, head_revision, now_ms
from kaflet.manager.gateway_instances import Pull, upsert
from kaflet.manager.models import (
    App,
    AuditRecord,
    Authority,
    Base,
    GatewayConfig,
    GatewayInstance,
    KafkaUser,
    PermissionRequest,
    Quota,
    TopicConnection,
    TopicReport,
)
from kaflet.manager.security import SecretBox
from tests.support.manager import GATEWAY_TOKEN, Session, csrf_of, gateway_call, manager_client
from tests.support.postgres import PostgresServer, postgres_server

CLUSTER = 7


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "sqlite":
        return None
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.new_database()


class Service:
    """An in-process service with its admin session and direct database access for checks."""

    def __init__(self, client: TestClient, admin_password: str, config: Any) -> None:
        self.client = client
        self.config = config
        self.admin = Session(client, "admin", admin_password)
        self.db = Database(config.database_url)
        self.box = SecretBox(config.encryption_key)

    def new_client(self) -> TestClient:
        return TestClient(self.client.app, base_url="http://127.0.0.1")

    def account(self, name: str, role: str) -> Session:
        r = self.admin.form("/accounts", {"username": name, "password": f"{name}-password", "role": role})
        assert r.status_code == 303, r.text
        return Session(self.new_client(), name, f"{name}-password")

    def counts(self) -> dict[str, int]:
        """Rows of every table: what 'changes nothing' is checked against."""
        with self.db.session() as s:
            return {t.name: s.scalar(select(func.count()).select_from(t)) or 0 for t in Base.metadata.sorted_tables}

    def gateway(self, path: str, body: Any = None, method: str = "POST", **kw: Any) -> Any:
        r = gateway_call(self.client, method, path, **({"json": body} if body is not None else {}), **kw)
        assert r.status_code == 200, r.text
        return r.json()


@pytest.fixture
def service(tmp_path: Path, database_url: str | None) -> Iterator[Service]:
    with manager_client(tmp_path, database_url, login_max_failures=3) as (client, password, config):
        svc = Service(client, password, config)
        assert svc.admin.form("/clusters", {"name": "main", "cluster_id": str(CLUSTER),
                                            "bootstrap_servers": "127.0.0.1:1"}).status_code == 303
        try:
            yield svc
        finally:
            svc.db.dispose()


def rows(envelope: dict[str, Any]) -> list[dict[str, Any]]:
    assert envelope["code"] == 0 and envelope["message"] == "success" and "tips" in envelope
    assert isinstance(envelope["data"], str)  # a JSON string, as the published manager sends it
    return list(json.loads(envelope["data"])["rows"])


def new_app(session: Session, app_id: str = "app1") -> str:
    r = session.api("POST", "/apps", {"app_id": app_id, "description": "test"})
    assert r.status_code == 201, r.text
    return str(r.json()["password"])


# -- schema and settings ----------------------------------------------------------------------------


def test_migrations_create_exactly_the_models(service: Service) -> None:
    with service.db.engine.connect() as conn:
        ctx = MigrationContext.configure(conn)
        assert ctx.get_current_revision() == head_revision()
        assert compare_metadata(ctx, Base.metadata) == []


def test_config_generates_secrets_once_and_rejects_bad_settings(tmp_path: Path) -> None:
    first = load_config(None, data_dir=tmp_path / "d")
    secrets_file = tmp_path / "d" / "secrets.toml"
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    again = load_config(None, data_dir=tmp_path / "d")
    assert (again.secret_key, again.encryption_key) == (first.secret_key, first.encryption_key)
    assert first.database_url.startswith("sqlite:///") and (first.host, first.port) == ("127.0.0.1", 8080)
    for text, problem in (("colour = 1\n", "unknown key"), ("port = 'x'\n", "port must be an integer"),
                          ("[gateway]\ntoken = 'short'\n", "at least 16"),
                          ("[gateway]\nallowed_addresses = ['nonsense']\n", "allowed_addresses"),
                          ("encryption_key = 'abc'\n", "Fernet"), ("port = \n", "not valid TOML"),
                          ("database_url = 'mysql://u@db/kaflet'\n", "SQLite or PostgreSQL, not mysql"),
                          ("database_url = 'no url'\n", "not a database URL")):
        path = tmp_path / "bad.toml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=problem):
            load_config(path, data_dir=tmp_path / "d")


# -- login, sessions, CSRF ----------------------------------------------------------------------------


def test_pages_and_api_need_a_login(service: Service) -> None:
    anonymous = service.new_client()
    r = anonymous.get("/apps", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login"
    assert anonymous.get("/api/v1/apps").status_code == 401
    assert anonymous.get("/audit", follow_redirects=False).status_code == 303


def test_login_cookie_is_protected_and_wrong_passwords_fail(service: Service) -> None:
    client = service.new_client()
    token = csrf_of(client.get("/login").text)
    r = client.post("/login", data={"username": "admin", "password": "nope-nope", "csrf_token": token})
    assert r.status_code == 401 and "Wrong user name or password" in r.text
    r = client.post("/login", data={"username": "ghost", "password": "nope-nope", "csrf_token": token})
    assert r.status_code == 401
    cookie = service.new_client().get("/login").headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert client.get("/login").headers["x-frame-options"] == "DENY"


def test_login_is_rate_limited_per_user(service: Service) -> None:
    client = service.new_client()
    token = csrf_of(client.get("/login").text)
    for _ in range(3):  # login_max_failures = 3
        assert client.post("/login", data={"username": "admin", "password": "wrong-wrong",
                                           "csrf_token": token}).status_code == 401
    r = client.post("/login", data={"username": "admin", "password": "wrong-wrong", "csrf_token": token})
    assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
    assert client.post("/api/v1/login", json={"username": "admin", "password": "x"}).status_code == 429


def test_unsafe_requests_without_the_csrf_token_change_nothing(service: Service) -> None:
    before = service.counts()
    c = service.admin.client
    assert c.post("/apps", data={"app_id": "sneaky"}).status_code == 403
    assert c.post("/apps", data={"app_id": "sneaky", "csrf_token": "forged"}).status_code == 403
    assert c.post("/api/v1/apps", json={"app_id": "sneaky"}).status_code == 403
    assert c.post("/api/v1/apps", json={"app_id": "sneaky"}, headers={"X-CSRF-Token": "forged"}).status_code == 403
    # JSON API calls must be JSON (so a cross-site form cannot even log in).
    assert c.post("/api/v1/apps", content=b'{"app_id": "sneaky"}', headers={
        "X-CSRF-Token": service.admin.csrf, "Content-Type": "text/plain"}).status_code == 415
    assert c.post("/api/v1/login", content=b'{"username": "admin", "password": "x"}',
                  headers={"Content-Type": "text/plain"}).status_code == 415
    assert c.post("/logout", follow_redirects=False).status_code == 403
    assert service.counts() == before


def test_a_password_change_ends_other_sessions(service: Service) -> None:
    user = service.account("carol", "user")
    assert user.client.get("/api/v1/apps").status_code == 200
    r = service.admin.form("/accounts/carol", {"password": "a-new-password-1"})
    assert r.status_code == 303
    assert user.client.get("/api/v1/apps").status_code == 401


def test_users_change_their_own_password_given_the_current_one(service: Service) -> None:
    user = service.account("dave", "user")
    assert user.form("/accounts/dave", {"role": "admin"}).status_code == 403
    r = user.form("/account/password", {"current_password": "wrong", "new_password": "dave-new-password"})
    assert r.status_code == 403
    r = user.form("/account/password", {"current_password": "dave-password", "new_password": "short"})
    assert r.status_code == 400
    r = user.form("/account/password", {"current_password": "dave-password", "new_password": "dave-new-password"})
    assert r.status_code == 303 and r.headers["location"] == "/login"
    assert user.client.post("/api/v1/login", json={"username": "dave", "password": "dave-password"}).status_code == 401
    Session(service.new_client(), "dave", "dave-new-password")


# -- applications ---------------------------------------------------------------------------------


def test_app_password_is_shown_once_and_encrypted_at_rest(service: Service) -> None:
    page = service.admin.form("/apps", {"app_id": "shop", "description": "the shop"})
    assert page.status_code == 201 and page.headers["cache-control"] == "no-store"
    password = page.text.split('<code id="app-password">')[1].split("</code>")[0]
    assert len(password) == 24
    with service.db.session() as s:
        app = s.scalar(select(App).where(App.app_id == "shop"))
        assert app is not None and password not in app.password_enc
        assert service.box.decrypt(app.password_enc) == password
        assert all(password not in (r.detail + r.target) for r in s.scalars(select(AuditRecord)))
    assert password not in service.admin.client.get("/apps/shop").text
    assert "password" not in service.admin.api("GET", "/apps/shop").json()
    users = rows(service.gateway("/security/users", {"start": 0, "end": 0}))
    assert [(u["username"], u["password"], u["operation"], u["userType"]) for u in users] == [("shop", password, 0, 0)]

    again = service.admin.api("POST", "/apps/shop/reset-password")
    new = again.json()["password"]
    assert new != password
    users = rows(service.gateway("/security/users", {"start": users[0]["timestamp"] + 1, "end": 0}))
    assert [(u["username"], u["password"], u["operation"]) for u in users] == [("shop", new, 1)]


def test_owners_and_roles(service: Service) -> None:
    alice, bob = service.account("alice", "user"), service.account("bob", "user")
    new_app(alice, "alices")
    assert bob.api("GET", "/apps/alices").status_code == 403
    assert bob.client.get("/apps/alices").status_code == 403
    assert bob.api("POST", "/apps/alices/reset-password").status_code == 403
    assert [a["app_id"] for a in bob.api("GET", "/apps").json()] == []
    r = alice.api("POST", "/apps/alices/requests", {"cluster_id": CLUSTER, "topic": "t", "access": 2})
    assert r.status_code == 201
    assert alice.api("POST", f"/requests/{r.json()['id']}/approve", {}).status_code == 403
    assert alice.api("GET", "/audit").status_code == 403
    assert alice.form("/clusters", {"name": "x", "bootstrap_servers": "h:1"}).status_code == 403
    assert alice.form("/accounts", {"username": "eve", "password": "eve-password", "role": "admin"}).status_code == 403
    oscar = service.account("oscar", "operator")
    assert oscar.form("/accounts", {"username": "eve", "password": "eve-password", "role": "admin"}).status_code == 403
    assert oscar.api("POST", f"/requests/{r.json()['id']}/approve", {}).status_code == 200
    # An owner added by name shares the application.
    assert alice.form("/apps/alices/edit", {"description": "shared", "owners": "bob"}).status_code == 303
    assert bob.api("GET", "/apps/alices").json()["owners"] == ["alice", "bob"]


# -- permissions ------------------------------------------------------------------------------------


def test_grants_merge_and_revokes_carry_only_the_removed_bits(service: Service) -> None:
    new_app(service.admin)
    ids = [service.admin.api("POST", "/apps/app1/requests", {"cluster_id": CLUSTER, "topic": "orders",
                                                             "access": a}).json()["id"] for a in (2, 1)]
    assert service.admin.api("POST", f"/requests/{ids[0]}/approve", {}).json()["access"] == 2
    assert service.admin.api("POST", f"/requests/{ids[1]}/approve", {}).json()["access"] == 3
    assert service.admin.api("POST", f"/requests/{ids[1]}/approve", {}).status_code == 409
    acls = rows(service.gateway("/security/acls", {"clusterId": CLUSTER, "start": 0, "end": 0}))
    assert [(a["topicName"], a["username"], a["access"], a["operation"]) for a in acls] == [
        ("orders", "app1", 2, 0), ("orders", "app1", 3, 0)]
    assert rows(service.gateway("/security/acls", {"clusterId": CLUSTER + 1, "start": 0, "end": 0})) == []

    assert service.admin.api("POST", "/apps/app1/revoke", {"cluster_id": CLUSTER, "topic": "orders",
                                                           "access": 2}).json() == {"access": 1}
    before = service.counts()
    r = service.admin.api("POST", "/apps/app1/revoke", {"cluster_id": CLUSTER, "topic": "orders", "access": 3})
    assert r.status_code == 400 and "cannot revoke" in r.json()["error"]
    assert service.counts() == before
    last = rows(service.gateway("/security/acls", {"clusterId": CLUSTER, "start": acls[-1]["timestamp"] + 1,
                                                   "end": 0}))
    assert [(a["access"], a["operation"]) for a in last] == [(2, 2)]
    with service.db.session() as s:
        assert [a.access for a in s.scalars(select(Authority))] == [1]


def test_rejection_needs_a_reason_and_is_recorded(service: Service) -> None:
    new_app(service.admin)
    rid = service.admin.api("POST", "/apps/app1/requests", {"cluster_id": CLUSTER, "topic": "t", "access": 1,
                                                            "reason": "reports"}).json()["id"]
    assert service.admin.api("POST", "/apps/app1/requests",
                             {"cluster_id": CLUSTER, "topic": "t", "access": 1}).status_code == 409
    assert service.admin.api("POST", f"/requests/{rid}/reject", {"reason": " "}).status_code == 400
    r = service.admin.api("POST", f"/requests/{rid}/reject", {"reason": "use the reports topic"})
    assert r.json()["status"] == "rejected" and r.json()["decision_reason"] == "use the reports topic"
    actions = [a["action"] for a in service.admin.api("GET", "/audit").json()]
    assert actions[:2] == ["permission.reject", "permission.request"]
    assert "use the reports topic" in service.admin.client.get("/audit").text
    assert rows(service.gateway("/security/acls", {"clusterId": CLUSTER, "start": 0, "end": 0})) == []


def test_deleting_an_app_is_refused_while_it_has_live_connections(service: Service) -> None:
    new_app(service.admin)
    rid = service.admin.api("POST", "/apps/app1/requests", {"cluster_id": CLUSTER, "topic": "t",
                                                            "access": 3}).json()["id"]
    service.admin.api("POST", f"/requests/{rid}/approve", {})
    report = {"produce": {"t": ["app1#10.0.0.5#2.8#my-client"]}}
    assert service.gateway(f"/heartbeat/survive-user?clusterId={CLUSTER}&brokerId=1", report)["code"] == 0
    before = service.counts()
    r = service.admin.api("DELETE", "/apps/app1")
    assert r.status_code == 409 and "connection" in r.json()["error"]
    assert service.counts() == before
    with service.db.session() as s:  # the connection was last seen 21 minutes ago
        for c in s.scalars(select(TopicConnection)):
            c.create_time = now_ms() - 21 * 60 * 1000
    start = now_ms()
    assert service.admin.api("DELETE", "/apps/app1").status_code == 204
    assert [(u["username"], u["operation"]) for u in rows(service.gateway("/security/users", {
        "start": start, "end": 0}))] == [("app1", 2)]
    assert [(a["access"], a["operation"]) for a in rows(service.gateway("/security/acls", {
        "clusterId": CLUSTER, "start": start, "end": 0}))] == [(3, 2)]
    with service.db.session() as s:
        assert s.scalar(select(func.count()).select_from(Authority)) == 0
        assert s.scalar(select(func.count()).select_from(PermissionRequest)) == 0


def test_a_quota_the_cluster_does_not_take_is_not_recorded(service: Service) -> None:
    new_app(service.admin)
    before = service.counts()
    r = service.admin.api("PUT", "/apps/app1/quotas", {"cluster_id": CLUSTER, "topic": "t",
                                                       "producer_byte_rate": 1000.0})
    assert r.status_code == 502 and "did not take the quota" in r.json()["error"]
    assert service.counts() == before
    for bad in (-5.0, 0.0):
        r = service.admin.api("PUT", "/apps/app1/quotas", {"cluster_id": CLUSTER, "topic": "t",
                                                           "producer_byte_rate": bad})
        assert r.status_code == 400
    with service.db.session() as s:
        assert s.scalar(select(func.count()).select_from(Quota)) == 0


# -- bad input ----------------------------------------------------------------------------------------


def test_bad_input_gets_a_clear_4xx_and_changes_nothing(service: Service) -> None:
    new_app(service.admin)
    before = service.counts()
    a, c = service.admin, service.admin.client
    csrf = {"X-CSRF-Token": a.csrf, "Content-Type": "application/json"}
    cases = [
        (c.post("/api/v1/apps", content=b'{"app_id": ', headers=csrf), 422),
        (c.post("/api/v1/apps", content=b"[1, 2]", headers=csrf), 422),
        (c.post("/api/v1/apps", content=b"\xff\xfe", headers=csrf), 422),
        (c.post("/api/v1/apps", content=b"[" * 100_000, headers=csrf), 400),  # deeper than the parser goes
        (a.api("POST", "/apps", {"app_id": "ok", "role": "admin"}), 422),  # unknown field
        (a.api("POST", "/apps", {"app_id": 5}), 422),
        (a.api("POST", "/apps", {"app_id": "has.dot"}), 400),
        (a.api("POST", "/apps", {"app_id": "x" * 65}), 422),
        (a.api("POST", "/apps", {"app_id": "app1"}), 409),
        (a.api("POST", "/apps", {"app_id": "ok", "owners": ["nobody"]}), 400),
        (a.api("POST", "/apps/app1/requests", {"cluster_id": CLUSTER, "topic": "bad topic!", "access": 2}), 400),
        (a.api("POST", "/apps/app1/requests", {"cluster_id": CLUSTER, "topic": "t", "access": 4}), 400),
        (a.api("POST", "/apps/app1/requests", {"cluster_id": 99, "topic": "t", "access": 2}), 404),
        (a.api("POST", "/apps/nope/requests", {"cluster_id": CLUSTER, "topic": "t", "access": 2}), 404),
        (a.api("POST", "/requests/12345/approve", {}), 404),
        (a.form("/apps", {"app_id": ""}), 422),
        (a.form("/apps", {"app_id": "  "}), 400),
        (a.form("/apps/app1/requests", {"cluster_id": "seven", "topic": "t", "access": "2"}), 422),
        (a.form("/apps/app1/quota", {"cluster_id": str(CLUSTER), "topic": "t", "producer_byte_rate": "fast"}), 400),
        (a.form("/clusters", {"name": "c2", "bootstrap_servers": "no-port"}), 400),
        (a.form("/clusters", {"name": "c2", "bootstrap_servers": "h:1", "cluster_id": "-3"}), 400),
        (a.form("/clusters", {"name": "main", "bootstrap_servers": "h:1"}), 409),
        (a.form("/accounts", {"username": "short", "password": "2short", "role": "user"}), 400),
        (a.form("/accounts", {"username": "x y", "password": "long-enough-1", "role": "user"}), 400),
        (a.form("/accounts", {"username": "root", "password": "long-enough-1", "role": "god"}), 400),
        (a.form("/accounts/admin", {"role": "user"}), 400),
        (a.form("/gateway-configs", {"type": "SD_CLUSTER_ID", "name": "abc", "value": "h:1"}), 400),
        (c.get("/no/such/page"), 404),
        (c.put("/apps", data={"csrf_token": a.csrf}), 405),
        (c.post("/apps", content=b"a" * (2 * 1024 * 1024),
                headers={"Content-Type": "application/x-www-form-urlencoded"}), 413),
    ]
    for i, (response, status) in enumerate(cases):
        assert response.status_code == status, (i, response.status_code, response.text[:300])
        if response.headers.get("content-type", "").startswith("application/json"):
            assert response.json()["error"]
        elif status != 413:
            assert 'role="alert"' in response.text and "Traceback" not in response.text
    assert service.counts() == before


# -- the gateway contract -----------------------------------------------------------------------------


def test_gateway_callers_need_the_token_or_an_allowed_address(service: Service) -> None:
    body = {"clusterId": CLUSTER, "start": 0, "end": 0}
    # The test client's address ("testclient") is in no allowed network.
    r = service.client.post("/gateway/api/v1/security/users", json=body)
    assert r.status_code == 403 and r.json()["code"] == -1
    r = service.client.post("/gateway/api/v1/security/users", json=body, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 403
    import base64
    basic = base64.b64encode(f"gateway:{GATEWAY_TOKEN}".encode()).decode()
    for headers in ({"Authorization": f"Bearer {GATEWAY_TOKEN}"}, {"Authorization": f"Basic {basic}"},
                    {"X-Gateway-Token": GATEWAY_TOKEN}):
        r = service.client.post("/gateway/api/v1/security/users", json=body, headers=headers)
        assert r.status_code == 200 and r.json()["code"] == 0


def test_gateway_pulls_validate_their_window(service: Service) -> None:
    new_app(service.admin)
    for body in (None, {"start": 0}, {"start": -1, "end": 0}, {"start": "x", "end": 0}, {"start": True, "end": 0}):
        envelope = service.gateway("/security/users", body) if body is not None else \
            gateway_call(service.client, "POST", "/security/users", content=b"{nope").json()
        assert (envelope["code"], envelope["message"], envelope["data"]) == (-1, "invalid request", None)
    assert service.gateway("/security/acls", {"start": 0, "end": 0})["code"] == -1  # acls need clusterId
    stamp = rows(service.gateway("/security/users", {"start": 0, "end": 0}))[0]["timestamp"]
    # Both ends are inclusive; decimal strings are numbers too (Jackson reads them).
    assert len(rows(service.gateway("/security/users", {"start": stamp, "end": stamp}))) == 1
    assert len(rows(service.gateway("/security/users", {"start": str(stamp + 1), "end": 0}))) == 0
    assert len(rows(service.gateway("/security/users", {"start": 0, "end": stamp - 1}))) == 0


def test_users_pull_fails_whole_when_a_password_cannot_be_decrypted(service: Service) -> None:
    new_app(service.admin)
    with service.db.session() as s:  # as if encryption_key had been replaced
        for u in s.scalars(select(KafkaUser)):
            u.password_enc = SecretBox(Fernet.generate_key().decode()).encrypt("x")
    envelope = service.gateway("/security/users", {"start": 0, "end": 0})
    assert envelope["code"] == -1 and "cannot be decrypted" in envelope["message"] and envelope["data"] is None


def test_heartbeat_reports_are_stored_by_their_key(service: Service) -> None:
    path = f"/heartbeat/survive-user?clusterId={CLUSTER}&brokerId=3"
    report = {"produce": {"t1": ["app1#10.0.0.1#2.8#c1", "app1#10.0.0.2#2.8"]},
              "fetch": {"t1": ["app2#10.0.0.3#3.5#c3"], "t2": ["broken"]}}
    assert service.gateway(path, report) == {"code": 0, "message": "success", "data": None, "tips": None}
    with service.db.session() as s:
        first = {(c.app_id, c.topic_name, c.type, c.ip): c.create_time for c in s.scalars(select(TopicConnection))}
    # "broken" names no connection (fewer than three parts) and is left out.
    assert set(first) == {("app1", "t1", "produce", "10.0.0.1"), ("app1", "t1", "produce", "10.0.0.2"),
                          ("app2", "t1", "fetch", "10.0.0.3")}
    assert service.gateway(path, {"produce": {"t1": ["app1#10.0.0.1#2.8#c1"]}})["code"] == 0
    with service.db.session() as s:
        again = {(c.app_id, c.topic_name, c.type, c.ip): c.create_time for c in s.scalars(select(TopicConnection))}
    assert set(again) == set(first)  # replaced, not added
    assert again[("app1", "t1", "produce", "10.0.0.1")] >= first[("app1", "t1", "produce", "10.0.0.1")]
    before = service.counts()
    assert service.gateway(path, {"produce": ["not", "a", "map"]})["message"] == "fail"
    assert service.gateway(path, {"produce": {"t": [1, 2]}})["code"] == -1
    assert gateway_call(service.client, "POST", path, content=b"{{").json()["code"] == -1
    assert service.gateway("/heartbeat/survive-user?clusterId=x&brokerId=1", {})["code"] == -1
    assert gateway_call(service.client, "POST", path).json()["code"] == 0  # an empty body is fine
    long = {"produce": {"t": ["a" * 100 + "#" + "9" * 100 + "#" + "v" * 100 + "#" + "c" * 300]}}
    assert service.gateway(path, long)["code"] == 0  # cut to the columns, not refused by the database
    before["topic_connections"] += 1
    assert service.counts() == before


def test_jmx_topics_lists_the_topics_reported_now(service: Service) -> None:
    for topic in ("b", "a"):
        r = service.admin.form("/topic-reports", {"cluster_id": str(CLUSTER), "topic": topic, "hours": "1"})
        assert r.status_code == 303
    assert service.admin.form("/topic-reports", {"cluster_id": str(CLUSTER), "topic": "c", "hours": "-1"}).status_code == 422
    with service.db.session() as s:  # a window that is over
        s.add(TopicReport(cluster_id=CLUSTER, topic_name="old", start_time=0, end_time=now_ms() - 1))
    r = service.gateway(f"/report/jmx/topics?clusterId={CLUSTER}", method="GET")
    assert (r["code"], r["data"]) == (0, "a,b")
    assert service.gateway("/report/jmx/topics?clusterId=8", method="GET")["data"] == ""
    assert service.gateway("/report/jmx/topics", method="GET")["code"] == -1
    assert "(over)" in service.admin.client.get("/clusters").text


def test_forgetting_a_cluster_revokes_its_permissions_on_the_brokers(service: Service) -> None:
    new_app(service.admin)
    rid = service.admin.api("POST", "/apps/app1/requests", {"cluster_id": CLUSTER, "topic": "t",
                                                            "access": 1}).json()["id"]
    service.admin.api("POST", f"/requests/{rid}/approve", {})
    start = now_ms()
    assert service.admin.form(f"/clusters/{CLUSTER}/delete", {}).status_code == 303
    acls = rows(service.gateway("/security/acls", {"clusterId": CLUSTER, "start": start, "end": 0}))
    assert [(a["topicName"], a["username"], a["access"], a["operation"]) for a in acls] == [("t", "app1", 1, 2)]
    with service.db.session() as s:
        assert s.scalar(select(func.count()).select_from(Authority)) == 0


def test_discovery_answers_only_newer_versions(service: Service) -> None:
    get = lambda path: service.gateway(path, method="GET")  # noqa: E731
    assert get("/discovery/init")["data"] is None
    assert gateway_call(service.client, "GET", f"/discovery/address?clusterId={CLUSTER}").text == ""
    assert json.loads(get("/discovery/max-request-num?versionNumber=0")["data"]) == {"version": "1",
                                                                                  "data": "100000000"}
    assert get("/discovery/max-request-num?versionNumber=1")["data"] is None
    assert get("/discovery/appId-rate?versionNumber=0")["code"] == 0
    assert get("/discovery/ip-rate?versionNumber=x")["code"] == -1
    for name, value in (("7", "h1:9093,h2:9093"), ("8", "h3:9093")):
        assert service.admin.form("/gateway-configs", {"type": "SD_CLUSTER_ID", "name": name,
                                                       "value": value}).status_code == 303
    assert json.loads(get("/discovery/init")["data"]) == {"7": ["h1:9093", "h2:9093"], "8": ["h3:9093"]}
    update = json.loads(get("/discovery/update?versionNumber=1")["data"])
    assert update["version"] == "2" and json.loads(update["data"])["8"] == ["h3:9093"]
    assert get("/discovery/update?versionNumber=2")["data"] is None
    r = gateway_call(service.client, "GET", f"/discovery/address?clusterId={CLUSTER}")
    assert r.text == "h1:9093,h2:9093"
    for name, value in (("app_1", "50"), ("10.0.0.1", "20")):
        service.admin.form("/gateway-configs", {"type": "SD_SP_RATE", "name": name, "value": value})
    sp = json.loads(get("/discovery/sp-limit?versionNumber=0")["data"])
    assert sp == {"version": "2", "data": "10.0.0.1#20,app_1#50"}
    actions = [a["action"] for a in service.admin.api("GET", "/audit").json()]
    assert actions.count("gateway-config.set") == 4


def test_deleting_a_discovery_setting_raises_its_version(service: Service) -> None:
    get = lambda path: service.gateway(path, method="GET")  # noqa: E731

    def setting_id(kind: str, name: str) -> int:
        with service.db.session() as s:
            found = s.scalar(select(GatewayConfig.id).where(GatewayConfig.type == kind, GatewayConfig.name == name))
        assert found is not None
        return found

    for kind, name, value in (("SD_CLUSTER_ID", "7", "h1:9093"), ("SD_CLUSTER_ID", "8", "h2:9093"),
                              ("SD_SP_RATE", "app_1", "50")):
        assert service.admin.form("/gateway-configs", {"type": kind, "name": name, "value": value}).status_code == 303
    assert json.loads(get("/discovery/update?versionNumber=-1")["data"])["version"] == "2"
    # Deleting the newest row: the type's version still goes up, and the pull has the rest.
    assert service.admin.form(f"/gateway-configs/{setting_id('SD_CLUSTER_ID', '8')}/delete", {}).status_code == 303
    update = json.loads(get("/discovery/update?versionNumber=2")["data"])
    assert update["version"] == "3" and json.loads(update["data"]) == {"7": ["h1:9093"]}
    assert service.admin.form(f"/gateway-configs/{setting_id('SD_CLUSTER_ID', '7')}/delete", {}).status_code == 303
    assert json.loads(get("/discovery/update?versionNumber=3")["data"]) == {"version": "4", "data": "{}"}
    assert get("/discovery/update?versionNumber=4")["data"] is None
    # A single setting deleted is a newer version without a value; a set after it goes higher still.
    assert service.admin.form(f"/gateway-configs/{setting_id('SD_IP_RATE', 'SD_IP_RATE')}/delete",
                              {}).status_code == 303
    assert json.loads(get("/discovery/ip-rate?versionNumber=1")["data"]) == {"version": "2", "data": None}
    assert service.admin.form("/gateway-configs", {"type": "SD_IP_RATE", "value": "9"}).status_code == 303
    assert json.loads(get("/discovery/ip-rate?versionNumber=2")["data"]) == {"version": "3", "data": "9"}
    assert service.admin.form(f"/gateway-configs/{setting_id('SD_SP_RATE', 'app_1')}/delete", {}).status_code == 303
    assert json.loads(get("/discovery/sp-limit?versionNumber=1")["data"]) == {"version": "2", "data": ""}
    deletions = [a for a in service.admin.api("GET", "/audit").json() if a["action"] == "gateway-config.delete"]
    assert len(deletions) == 4 and all('"version"' in a["detail"] for a in deletions)


def test_gateway_pulls_are_listed_with_their_version(service: Service) -> None:
    assert service.admin.form("/gateway-configs", {"type": "SD_CLUSTER_ID", "name": "7",
                                                   "value": "h1:9093"}).status_code == 303
    headers = {"X-Kaflet-Gateway-Instance": "gw-a:9092", "X-Kaflet-Gateway-Sync-Interval-Ms": "1000"}
    service.gateway("/discovery/update?versionNumber=-1", method="GET", headers=headers)
    service.gateway("/discovery/update?versionNumber=1", method="GET", headers=headers)
    service.gateway("/discovery/update?versionNumber=-1", method="GET")  # another caller, no identity
    service.gateway("/discovery/update?versionNumber=x", method="GET")  # invalid: not recorded
    listed = service.admin.api("GET", "/gateway-instances").json()
    assert {(g["instance_id"], g["version"], g["sync_interval_ms"], g["stale"]) for g in listed} == {
        ("gw-a:9092", 1, 1000, False), ("", 1, None, False)}
    assert all(g["address"] and g["first_pull_ms"] <= g["last_pull_ms"] <= now_ms() for g in listed)
    page = service.admin.client.get("/gateway-instances").text
    assert "gw-a:9092" in page and "1000 ms" in page and "(none sent)" in page and "stale</span>" not in page
    # An application owner sees neither the page nor the list.
    user = service.account("user1", "user")
    assert user.api("GET", "/gateway-instances").status_code == 403
    # Another process's row for the same gateway is moved forward, never back.
    with service.db.session() as s:
        row = s.scalars(select(GatewayInstance).where(GatewayInstance.instance_id == "gw-a:9092")).one()
        upsert(s, Pull(row.address, row.instance_id, 1000, 0, row.last_pull_ms - 10_000))
    with service.db.session() as s:
        again = s.scalars(select(GatewayInstance).where(GatewayInstance.instance_id == "gw-a:9092")).one()
        assert (again.version, again.last_pull_ms) == (1, row.last_pull_ms)
        upsert(s, Pull(row.address, row.instance_id, 1000, 5, row.last_pull_ms + 1000))
    listed = service.admin.api("GET", "/gateway-instances").json()
    assert listed[0]["instance_id"] == "gw-a:9092" and listed[0]["version"] == 5
    # Forgetting one takes it off the list (operators only), audited.
    anonymous = next(g["id"] for g in listed if g["instance_id"] == "")
    assert user.form(f"/gateway-instances/{anonymous}/forget", {}).status_code == 403
    assert service.admin.form(f"/gateway-instances/{anonymous}/forget", {}).status_code == 303
    assert service.admin.form(f"/gateway-instances/{anonymous}/forget", {}).status_code == 404
    assert [g["instance_id"] for g in service.admin.api("GET", "/gateway-instances").json()] == ["gw-a:9092"]
    assert "gateway-instance.forget" in [a["action"] for a in service.admin.api("GET", "/audit").json()]
