"""A throwaway PostgreSQL server for tests: Debian's postgresql binaries, run as the `postgres`
system user (PostgreSQL refuses root) in a temp dir on a free port, stopped by PID.

Skips (with the reason) when the binaries or the user are missing; CI installs `postgresql`.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

BIN = Path(os.environ.get("KAFLET_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unavailable_reason() -> str | None:
    """Why no server can be started here, or None."""
    if not (BIN / "postgres").exists() or not (BIN / "initdb").exists():
        return f"PostgreSQL binaries not found in {BIN} (apt-get install postgresql)"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no 'postgres' system user (installed with the postgresql package)"
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != "postgres":
        return "starting PostgreSQL as the postgres user needs root (or running as postgres)"
    return None


class PostgresServer:
    """One running server; :meth:`new_database` gives each test an empty database."""

    def __init__(self, root: Path, port: int, proc: subprocess.Popen[bytes]) -> None:
        self.root, self.port, self.proc = root, port, proc

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def new_database(self) -> str:
        """The URL of a fresh, empty database."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"


def _as_postgres(args: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return args
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", *args]


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """Start a server (failing the test, saying why, when impossible) and stop it by PID afterwards."""
    reason = unavailable_reason()
    if reason:
        pytest.fail(f"the PostgreSQL tests need a server: {reason}")
    root = Path(tempfile.mkdtemp(prefix="kaflet-pg-"))
    user = pwd.getpwnam("postgres")
    os.chown(root, user.pw_uid, user.pw_gid)
    data = root / "data"
    subprocess.run(_as_postgres([str(BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                                 "--no-sync", "-E", "UTF8"]), check=True, capture_output=True, cwd=root)
    port = _free_port()
    log = open(root / "server.log", "wb")  # noqa: SIM115 - closed after the server stops
    proc = subprocess.Popen(_as_postgres([str(BIN / "postgres"), "-D", str(data), "-p", str(port), "-k", str(root),
                                          "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]),
                            stdout=log, stderr=subprocess.STDOUT, cwd=root)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"postgres exited: {(root / 'server.log').read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                import psycopg
                psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres").close()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield PostgresServer(root, port, proc)
    finally:
        proc.send_signal(signal.SIGINT)  # "fast" shutdown
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
        shutil.rmtree(root, ignore_errors=True)
