"""`kaflet gateway` as a child process on a free port, stopped (then killed) by its PID."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.manager import ManagerProcess, Session, running_manager
from tests.support.processes import stop_child
from tests.support.topics import create_topic

_LISTENING = re.compile(r"listening on [^:\s]+:(\d+);")


class GatewayProcess:
    """One gateway process; ``args`` are the command's options, ``props`` its --config file."""

    def __init__(self, workdir: Path, args: list[str], props: dict[str, str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        """``env``: added to the environment (PYTHONPATH=another checkout runs its kaflet)."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, **(env or {})}
        self.log_path = workdir / "gateway.log"
        self.args = list(args)
        if props:
            config = workdir / "gateway.properties"
            config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            self.args += ["--config", str(config)]
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def launch(self) -> GatewayProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "kaflet.cli", "gateway", *self.args],
                                         stdout=log, stderr=subprocess.STDOUT, env=self.env)
        return self

    def wait_ready(self, timeout: float = 30.0) -> GatewayProcess:
        """Wait until it listens; RuntimeError with its log when it exits first."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = _LISTENING.search(self.log())
            if m:
                self.port = int(m.group(1))
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"kaflet gateway exited: {self.log()[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"kaflet gateway did not start: {self.log()[-2000:]}")

    def wait_exit(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None:
            stop_child(self.proc)


@contextmanager
def running_gateway(workdir: Path, args: list[str], props: dict[str, str] | None = None) -> Iterator[GatewayProcess]:
    """A started gateway, stopped on exit."""
    gateway = GatewayProcess(workdir, args, props)
    try:
        yield gateway.launch().wait_ready()
    finally:
        gateway.stop()


def gateway_broker(cluster_id: int, gateway_url: str, jaas: str) -> dict[str, str]:
    """The settings of a broker whose applications log in over SASL/PLAIN (``jaas``) and which
    takes its users from the manager at ``gateway_url`` as cluster ``cluster_id``."""
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "gateway.url": gateway_url,
        "cluster.id": str(cluster_id),
        "gateway.sync.interval.ms": "1000",
    }


@contextmanager
def two_clusters(work: Path, overrides: Callable[[int, str], dict[str, str]]
                 ) -> Iterator[tuple[ManagerProcess, Session, BrokerProcess, BrokerProcess]]:
    """A `kaflet manager` and two single-broker clusters registered in it as cluster ids 7 and
    8 (``overrides(cluster id, manager gateway URL)``: each broker's settings), each with a topic
    "orders" of 2 and 3 partitions; stopped on exit."""
    with running_manager(work / "manager") as manager, \
            httpx.Client(base_url=manager.url, timeout=30) as http, \
            running_broker(work / "a", overrides(7, manager.gateway_url)) as a, \
            running_broker(work / "b", overrides(8, manager.gateway_url)) as b:
        assert manager.admin_password
        admin = Session(http, "admin", manager.admin_password)
        for cluster_id, broker in ((7, a), (8, b)):
            r = admin.form("/clusters", {"name": f"c{cluster_id}", "cluster_id": str(cluster_id),
                                         "bootstrap_servers": broker.bootstrap})
            assert r.status_code == 303, r.text
        create_topic(a.bootstrap, "orders", partitions=2)
        create_topic(b.bootstrap, "orders", partitions=3)
        yield manager, admin, a, b
