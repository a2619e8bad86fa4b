"""The management service in tests: in-process (FastAPI's TestClient) for API tests, or as a
real `kaflet manager` process on a free port for the end-to-end tests, plus logged-in sessions
for its JSON API and console forms."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from kaflet.manager.config import ManagerConfig, load_config
from kaflet.manager.db import Database, migrate
from kaflet.manager.services import ensure_initial_admin
from kaflet.manager.web import create_app
from tests.support.processes import stop_child

GATEWAY_TOKEN = "test-gateway-token-0123456789"
#: The Logi-Kafka cluster id of the brokers the end-to-end tests run.
CLUSTER_ID = 7
SYNC_MS = 300
_JAAS = ('com.didichuxing.datachannel.kafka.security.sasl.plain.PlainLoginModule required '
         'username="admin" password="admin-secret";')
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
_LISTENING = re.compile(r"listening on (http://\S+) ")
_ADMIN = re.compile(r"user 'admin', password '([^']+)'")


def write_config(path: Path, data_dir: Path, database_url: str | None = None,
                 allowed_addresses: tuple[str, ...] = ("127.0.0.1/32",), **extra: Any) -> Path:
    """A manager.toml with a gateway token, the allowed networks, and the given top-level keys."""
    lines = [f'data_dir = "{data_dir}"']
    if database_url:
        lines.append(f'database_url = "{database_url}"')
    lines += [f"{k} = {v!r}".replace("'", '"') if isinstance(v, str) else f"{k} = {str(v).lower()}"
              for k, v in extra.items()]
    lines += ["[gateway]", f'token = "{GATEWAY_TOKEN}"', f"allowed_addresses = {json.dumps(list(allowed_addresses))}"]
    path.write_text("\n".join(lines) + "\n")
    return path


class Session:
    """A logged-in user of the JSON API and the console over any httpx client."""

    def __init__(self, client: httpx.Client, username: str, password: str) -> None:
        self.client = client
        self.username = username
        r = client.post("/api/v1/login", json={"username": username, "password": password})
        assert r.status_code == 200, r.text
        self.csrf: str = r.json()["csrf_token"]

    def api(self, method: str, path: str, body: Any = None) -> httpx.Response:
        headers = {"X-CSRF-Token": self.csrf}
        return self.client.request(method, "/api/v1" + path, json=body, headers=headers)

    def form(self, path: str, data: dict[str, Any]) -> httpx.Response:
        """POST a console form with the session's CSRF token."""
        return self.client.post(path, data={**data, "csrf_token": self.csrf}, follow_redirects=False)


def gateway_call(client: httpx.Client, method: str, path: str, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {GATEWAY_TOKEN}", **kwargs.pop("headers", {})}
    return client.request(method, "/gateway/api/v1" + path, headers=headers, **kwargs)


def csrf_of(page: str) -> str:
    m = _CSRF.search(page)
    assert m, "no CSRF token on the page"
    return m.group(1)


@contextmanager
def manager_client(tmp_path: Path, database_url: str | None = None,
                   **extra: Any) -> Iterator[tuple[TestClient, str, ManagerConfig]]:
    """(client, admin password, config) of an in-process service on a migrated database."""
    config = load_config(write_config(tmp_path / "manager.toml", tmp_path / "data", database_url, **extra))
    db = Database(config.database_url)
    migrate(db.engine)
    with db.session() as s:
        password = ensure_initial_admin(s)
    assert password is not None
    try:
        with TestClient(create_app(config, db), base_url="http://127.0.0.1") as client:
            yield client, password, config
    finally:
        db.dispose()


class ManagerProcess:
    """`kaflet manager` as a child process on a free port; stopped (then killed) by PID."""

    def __init__(self, workdir: Path, database_url: str | None = None,
                 allowed_addresses: tuple[str, ...] = ("127.0.0.1/32",), port: int = 0, **extra: Any) -> None:
        """``port``: 0 for a free one; a fixed one lets a stopped manager come back at the same URL."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = port
        self.config_path = write_config(workdir / "manager.toml", workdir / "data", database_url, allowed_addresses,
                                        **extra)
        self.log_path = workdir / "manager.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.admin_password: str | None = None
        self._log_start = 0

    def start(self, timeout: float = 60.0) -> ManagerProcess:
        return self.launch().wait_ready(timeout)

    def launch(self) -> ManagerProcess:
        """Start the process without waiting for it (several may then start together)."""
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child writes it; closed below
        self._log_start = log.tell()  # a restart appends: only its own lines say it is ready
        self.proc = subprocess.Popen([sys.executable, "-m", "kaflet.cli", "manager", "--config", str(self.config_path),
                                      "--port", str(self.port)],
                                     stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
        log.close()
        return self

    def wait_ready(self, timeout: float = 60.0) -> ManagerProcess:
        """Wait until it serves; RuntimeError (with its log) when it exits or takes too long."""
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_start)
                text = f.read().decode(errors="replace")
            m = _LISTENING.search(text)
            if m and "Application startup complete" in text:
                self.url = m.group(1)
                admin = _ADMIN.search(text)
                self.admin_password = admin.group(1) if admin else None  # printed at the first start only
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"kaflet manager exited: {text[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"kaflet manager did not start: {self.log_path.read_text()[-2000:]}")

    @property
    def gateway_url(self) -> str:
        """The brokers' gateway.url, the token as the HTTP Basic password."""
        return self.url.replace("http://", f"http://gateway:{GATEWAY_TOKEN}@") + "/gateway"

    def stop(self) -> None:
        if self.proc is not None:
            stop_child(self.proc)


@contextmanager
def running_manager(workdir: Path, database_url: str | None = None,
                    allowed_addresses: tuple[str, ...] = ("127.0.0.1/32",), **extra: Any) -> Iterator[ManagerProcess]:
    """A started `kaflet manager` (``extra``: more top-level settings of its manager.toml)."""
    manager = ManagerProcess(workdir, database_url, allowed_addresses, **extra).start()
    try:
        yield manager
    finally:
        manager.stop()


def gateway_broker_overrides(gateway_url: str) -> dict[str, str]:
    """A broker with the gateway on, pulling from ``gateway_url``: a PLAINTEXT listener for
    administration, SASL_PLAINTEXT (PLAIN) for the applications, fast syncs and reports, and
    1 s quota windows so a quota shows within seconds."""
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": _JAAS,
        "authorizer.class.name": "com.didichuxing.datachannel.kafka.security.authorizer.DidiAuthorizer",
        "gateway.url": gateway_url,
        "cluster.id": str(CLUSTER_ID),
        "gateway.sync.interval.ms": str(SYNC_MS),
        "gateway.default.users": "admin:admin-secret:true",
        "session.report.ms": "1000",
        "max.throttle.time.ms": "2000",
        "quota.window.num": "3",
        "quota.window.size.seconds": "1",
    }


def app_client_config(bootstrap: str, app: str, password: str) -> dict[str, Any]:
    """confluent-kafka settings to log in as the application."""
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": f"{CLUSTER_ID}.{app}", "sasl.password": password}


def produce_once(bootstrap: str, app: str, password: str, topic: str) -> Any:
    """The error of one produce as the application (None: acknowledged)."""
    from confluent_kafka import KafkaError, Producer

    producer = Producer({**app_client_config(bootstrap, app, password), "message.timeout.ms": 5000, "retries": 0})
    errors: list[Any] = []
    producer.produce(topic, b"v", partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    return errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT)


def refused(err: Any) -> bool:
    """Whether a produce failed for want of the topic permission."""
    from confluent_kafka import KafkaError

    return err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def wait_for(check: Any, timeout: float = 30.0) -> float:
    """Seconds until ``check()`` is true; AssertionError after ``timeout``."""
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout:
            raise AssertionError("condition not met in time")
        time.sleep(0.2)
    return time.monotonic() - began
