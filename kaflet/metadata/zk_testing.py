"""Start and stop a real, throw-away ZooKeeper server (for tests and local clusters).

Uses Debian's ``zookeeper`` package (jars in /usr/share/java) or any ZooKeeper install pointed at
by ``$ZOOKEEPER_CLASSPATH`` (a Java classpath) or ``$ZOOKEEPER_HOME`` (its lib/ directory is
used). The server listens on 127.0.0.1 on a free port, keeps its data in its own temporary
directory and is stopped by PID::

    with ZooKeeperServer() as zk:
        tree = await ZooKeeperTree.connect(zk.connect_string + "/my-chroot")

:func:`zookeeper_unavailable_reason` says what is missing (no Java, no jars).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO

__all__ = ["ZooKeeperServer", "find_zookeeper_classpath", "free_port", "zookeeper_unavailable_reason"]

_DEBIAN_JARS = (
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "slf4j-nop.jar",
    "netty-handler.jar",
    "netty-common.jar",
    "netty-buffer.jar",
    "netty-transport.jar",
    "netty-codec.jar",
    "netty-resolver.jar",
    "netty-transport-native-epoll.jar",
    "netty-transport-native-unix-common.jar",
    "metrics-core.jar",
    "commons-cli.jar",
    "commons-io.jar",
    "snappy-java.jar",
)


def find_zookeeper_classpath() -> str | None:
    """A Java classpath that runs a ZooKeeper server, or None if none is installed."""
    env = os.environ.get("ZOOKEEPER_CLASSPATH")
    if env:
        return env
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(glob.glob(os.path.join(home, "lib", "*.jar")) + glob.glob(os.path.join(home, "*.jar")))
        if jars:
            return os.pathsep.join(jars)
    java_dir = Path("/usr/share/java")
    if (java_dir / "zookeeper.jar").exists():
        return os.pathsep.join(str(java_dir / j) for j in _DEBIAN_JARS if (java_dir / j).exists())
    return None


def zookeeper_unavailable_reason() -> str | None:
    """None if a server can be started here, else a message saying what is missing."""
    if shutil.which("java") is None:
        return "java is not installed (needed to run a real ZooKeeper server)"
    if find_zookeeper_classpath() is None:
        return (
            "no ZooKeeper server jars found (install Debian's 'zookeeper' package, "
            "or set ZOOKEEPER_HOME or ZOOKEEPER_CLASSPATH)"
        )
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ZooKeeperServer:
    """One standalone ZooKeeper server process with a private data directory."""

    def __init__(self, port: int | None = None, tick_time_ms: int = 500, data_dir: str | None = None) -> None:
        self.port = port or free_port()
        self.tick_time_ms = tick_time_ms
        self._own_dir = data_dir is None
        self.base_dir = Path(data_dir or tempfile.mkdtemp(prefix="kaflet-zk-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def connect_string(self) -> str:
        """``127.0.0.1:<port>`` (append ``/chroot`` to isolate users of one server)."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self.proc.pid if self.proc else None

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        """Start the server and wait until it answers ``ruok``."""
        reason = zookeeper_unavailable_reason()
        if reason:
            raise RuntimeError(reason)
        data = self.base_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.base_dir / "zoo.cfg"
        # Short ticks keep session-expiry tests quick (min session timeout = 2 ticks).
        cfg.write_text(
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={data}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            "maxClientCnxns=0\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr\n"
            "maxSessionTimeout=60000\n"
        )
        cmd = [
            "java",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # start fast: this is a test server
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            find_zookeeper_classpath() or "",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(cfg),
        ]
        self._log = open(self.base_dir / "zookeeper.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = (self.base_dir / "zookeeper.log").read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}:\n{log}")
            if self.four_letter("ruok") == "imok":
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not start on port {self.port} within {timeout}s")

    def four_letter(self, cmd: str) -> str | None:
        """Send a four-letter command (ruok, srvr, stat, mntr); None if the server is not reachable."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(cmd.encode("ascii"))
                chunks = []
                while True:
                    b = s.recv(4096)
                    if not b:
                        break
                    chunks.append(b)
                return b"".join(chunks).decode("utf-8", "replace")
        except OSError:
            return None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL) by its PID and remove its temp dir."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout)
            except ProcessLookupError:
                pass
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the server (data kept) to test clients against a crashed ZooKeeper."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def __enter__(self) -> ZooKeeperServer:
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
