"""`kaflet manager` as a user starts it: the schema is created by the migrations, the first
admin's password is printed once, a restart keeps everything, and a PostgreSQL URL works.
Bad settings are one clear line, and the service loads no broker internals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.manager import ManagerProcess, Session
from tests.support.postgres import postgres_server


def test_first_start_prints_the_admin_password_once_and_a_restart_keeps_the_data(tmp_path: Path) -> None:
    manager = ManagerProcess(tmp_path / "m").start()
    try:
        password = manager.admin_password
        assert password and "(created)" in manager.log_path.read_text()
        with httpx.Client(base_url=manager.url) as client:
            assert Session(client, "admin", password).api("POST", "/apps", {"app_id": "kept"}).status_code == 201
    finally:
        manager.stop()
    # uvicorn shuts down cleanly, then re-raises SIGTERM so the exit status still says why.
    assert manager.proc is not None and manager.proc.returncode in (0, -15)
    assert "Finished server process" in manager.log_path.read_text()
    manager.log_path.write_text("")
    manager.start()
    try:
        text = manager.log_path.read_text()
        assert manager.admin_password is None and "Initial admin" not in text and "(up to date)" in text
        with httpx.Client(base_url=manager.url) as client:
            assert [a["app_id"] for a in Session(client, "admin", password).api("GET", "/apps").json()] == ["kept"]
    finally:
        manager.stop()
    assert (tmp_path / "m" / "data" / "manager.db").exists()


def test_postgresql_database_url(tmp_path: Path) -> None:
    with postgres_server() as pg:
        manager = ManagerProcess(tmp_path / "m", database_url=pg.new_database()).start()
        try:
            assert manager.admin_password and "postgresql+psycopg://postgres@127.0.0.1" in manager.log_path.read_text()
            with httpx.Client(base_url=manager.url) as client:
                admin = Session(client, "admin", manager.admin_password)
                assert admin.api("POST", "/apps", {"app_id": "on_pg"}).status_code == 201
        finally:
            manager.stop()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kaflet.cli", "manager", *args], capture_output=True, text=True,
                          timeout=60)


def test_bad_settings_are_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("port = 'eighty'\n")
    r = run_cli("--config", str(bad), "--data-dir", str(tmp_path / "d"))
    assert r.returncode != 0 and "port must be an integer" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("--config", str(tmp_path / "missing.toml"))
    assert r.returncode != 0 and "cannot read" in r.stderr
    r = run_cli("--data-dir", str(tmp_path / "d"), "--database-url", "postgresql://nobody@127.0.0.1:1/none")
    assert r.returncode != 0 and "database postgresql+psycopg://nobody@127.0.0.1:1/none" in r.stderr
    assert "Traceback" not in r.stderr


def test_the_service_loads_no_broker_internals() -> None:
    # The one module of network/ the manager may use is the tools' client connection (it talks
    # to brokers over the wire, as the CLI does); nothing of the broker itself.
    code = ("import sys, kaflet.manager.command, kaflet.manager.web, kaflet.manager.api, kaflet.manager.console;"
            "print(sorted(m for m in sys.modules if m.startswith('kaflet.') and m.split('.')[1] in "
            "('server', 'log', 'replication', 'coordinator', 'controller', 'gateway', 'metadata', 'network') "
            "and m not in ('kaflet.network', 'kaflet.network.raw_connection')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
