"""A kaflet broker as a child process (`kaflet broker`), for `kaflet dev-cluster` and the tests.

The broker binds port 0 unless told otherwise and the harness reads the ports back from its
start-up log line, so parallel runs never race for ports. Every process is stopped or killed by
its PID.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

_LISTENING = re.compile(r"listening on (.*?), data in")
_ENDPOINT = re.compile(r"([A-Za-z0-9_]+)://(\[[0-9a-fA-F:]+\]|[^,:\s]*):(\d+)")


class BrokerProcess:
    """Start, stop (SIGTERM), kill (SIGKILL) and restart one broker process.

    ``log_path`` defaults to ``<data_dir>-broker.log`` beside the data directory; with
    ``own_session`` the broker gets its own session, so a Ctrl-C at the terminal reaches only
    the parent, which then stops the brokers in order. ``host`` is where the broker listens
    (127.0.0.1 unless its listeners say otherwise); ``command_prefix`` runs it under another
    command (``ip netns exec <ns>``, which execs: the PID stays the broker's) and
    ``socket_factory`` opens the readiness connection to a broker the parent cannot reach directly;
    ``python`` is the interpreter that runs ``kaflet.cli`` (another environment's kaflet);
    ``preexec_fn`` runs in the child before it execs (e.g. ``resource.setrlimit``).
    """

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None, *,
                 log_path: Path | None = None, own_session: bool = False, host: str = "127.0.0.1",
                 command_prefix: Sequence[str] = (),
                 socket_factory: Callable[[str, int, float], socket.socket] | None = None,
                 python: str = sys.executable, preexec_fn: Callable[[], None] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.preexec_fn = preexec_fn
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.overrides = dict(overrides or {})
        self.own_session = own_session
        self.host = host
        self.command_prefix = list(command_prefix)
        self.python = python
        self._connect = socket_factory or (lambda h, p, t: socket.create_connection((h, p), timeout=t))
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        #: Bound port of every listener, by listener name (from the start-up log line).
        self.ports: dict[str, int] = {}
        self.log_path = Path(log_path) if log_path is not None else \
            self.data_dir.parent / f"{self.data_dir.name}-broker.log"
        self._log_offset = 0

    @property
    def bootstrap(self) -> str:
        assert self.port is not None, "broker not started"
        return f"{self.host}:{self.port}"

    def bootstrap_for(self, listener: str) -> str:
        """host:port of one of the broker's listeners, by name."""
        return f"{self.host}:{self.ports[listener.upper()]}"

    @property
    def pid(self) -> int | None:
        """The process id while the broker runs."""
        return self.proc.pid if self.alive and self.proc is not None else None

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        """Launch the broker and wait until it listens (see :meth:`wait_started`)."""
        self.launch()
        return self.wait_started(timeout)

    def launch(self) -> BrokerProcess:
        """Start the process without waiting for it to listen."""
        port = self.port or 0  # a restart keeps its port so clients can reconnect
        overrides = dict(self.overrides)
        listeners = overrides.pop("listeners", None)
        if listeners is None:
            listeners = f"PLAINTEXT://{self.host}:{port}"
        elif self.ports:
            # The caller's own listeners: a restart keeps each listener's port.
            listeners = _ENDPOINT.sub(lambda m: f"{m.group(1)}://{m.group(2)}:{self.ports.get(m.group(1).upper(), m.group(3))}",
                                      listeners)
        args = [*self.command_prefix, self.python, "-m", "kaflet.cli", "broker",
                "--override", f"listeners={listeners}",
                "--override", f"log.dirs={self.data_dir}"]
        for k, v in overrides.items():
            args += ["--override", f"{k}={v}"]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=self.own_session, preexec_fn=self.preexec_fn)
        return self

    def wait_started(self, timeout: float = 30.0) -> BrokerProcess:
        """Wait for the "listening on" line and an accepting port.

        A broker that exits first raises RuntimeError with its output; one that does not listen
        in time is killed and raises TimeoutError.
        """
        assert self.proc is not None, "broker not launched"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.new_log()}")
            m = _LISTENING.search(self.new_log())
            if m:
                self.ports = {name.upper(): int(p) for name, _host, p in _ENDPOINT.findall(m.group(1))}
                # `port`/`bootstrap` name the PLAINTEXT listener, or the first one when there is none.
                self.port = self.ports.get("PLAINTEXT", next(iter(self.ports.values())))
                self._wait_port(deadline)
                return self
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"broker did not start within {timeout}s:\n{self.new_log()}")

    def _wait_port(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                with self._connect(self.host, self.port or 0, 1.0):
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError("broker port never accepted connections")

    def new_log(self) -> str:
        """The broker's output since its last start."""
        if not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(self._log_offset)
            return f.read().decode(errors="replace")

    def log_tail(self, lines: int = 20) -> list[str]:
        """The last lines the broker wrote since its last start."""
        return self.new_log().splitlines()[-lines:]

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the clean shutdown path (SIGKILL, then re-raise, if it hangs)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL: the crash path."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def restart(self, hard: bool = False) -> BrokerProcess:
        if hard:
            self.kill()
        else:
            self.stop()
        return self.start()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def stop_brokers(brokers: list[BrokerProcess], timeout: float = 30.0) -> list[BrokerProcess]:
    """SIGTERM every running broker at once, wait up to ``timeout`` for all, then SIGKILL the
    ones still running. Returns the brokers that had to be killed."""
    running = [(b, b.proc) for b in brokers if b.proc is not None and b.proc.poll() is None]
    for _b, proc in running:
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    killed = []
    for b, proc in running:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            b.kill()
            killed.append(b)
    return killed
