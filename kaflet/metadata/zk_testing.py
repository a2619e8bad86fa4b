"""Start and stop real, throw-away ZooKeeper servers (for tests and local clusters).

Uses Debian's ``zookeeper`` package (jars in /usr/share/java) or any ZooKeeper install pointed at
by ``$ZOOKEEPER_CLASSPATH`` (a Java classpath) or ``$ZOOKEEPER_HOME`` (its lib/ directory is
used). A server listens on 127.0.0.1 on a free port, keeps its data in its own directory and is
stopped by PID::

    with ZooKeeperServer() as zk:                       # one standalone server
        tree = await ZooKeeperTree.connect(zk.connect_string + "/my-chroot")

    with ZooKeeperEnsemble(3) as ensemble:              # a 3-node quorum on loopback
        old = ensemble.leader_id()
        ensemble.kill(old)
        new = ensemble.wait_for_leader(exclude=(old,))

Readiness is ZooKeeper's ``srvr`` four-letter word answering ``Mode: standalone|leader|follower``;
``ruok`` is never trusted because it answers ``imok`` on a node that has lost its quorum.

:func:`zookeeper_unavailable_reason` says what is missing (no Java, no jars).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

__all__ = [
    "QuorumPeer",
    "ZooKeeperEnsemble",
    "ZooKeeperServer",
    "find_zookeeper_classpath",
    "free_port",
    "free_ports",
    "zookeeper_unavailable_reason",
]

_DEBIAN_JARS = (
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
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
# Debian's zookeeper.jar names no SLF4J binding: with log4j's the server writes a readable log
# (elections, sessions), without it slf4j-nop keeps it quiet rather than printing a warning.
_LOG4J_BINDING = ("slf4j-log4j12.jar", "log4j-1.2.jar")
_NOP_BINDING = ("slf4j-nop.jar",)

_MODE = re.compile(r"^Mode: (\w+)", re.MULTILINE)
SERVING_MODES = ("standalone", "leader", "follower", "observer")

SocketFactory = Callable[[str, int, float], socket.socket]


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
        binding = _LOG4J_BINDING if all((java_dir / j).exists() for j in _LOG4J_BINDING) else _NOP_BINDING
        return os.pathsep.join(str(java_dir / j) for j in (*_DEBIAN_JARS, *binding) if (java_dir / j).exists())
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
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports on 127.0.0.1 that were free a moment ago.

    All are held open until every one is chosen, so the kernel cannot hand out one twice.
    """
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _loopback_socket(host: str, port: int, timeout: float) -> socket.socket:
    return socket.create_connection((host, port), timeout=timeout)


@dataclass(frozen=True, slots=True)
class QuorumPeer:
    """One ``server.<myid>=<host>:<quorum_port>:<election_port>`` line of an ensemble."""

    myid: int
    host: str
    quorum_port: int
    election_port: int

    def config_line(self) -> str:
        return f"server.{self.myid}={self.host}:{self.quorum_port}:{self.election_port}"


class ZooKeeperServer:
    """One ZooKeeper server process: standalone, or one node of an ensemble (``peers``).

    The process can be killed, stopped and started again on the same data and ports;
    :meth:`stop` ends it for good (and removes the directory when it made a temporary one).
    ``command_prefix`` runs java under another command (``ip netns exec <ns>``: that execs, so the
    PID is still java's) and ``socket_factory`` opens the four-letter-word connections (to reach
    a server inside a network namespace).
    """

    def __init__(
        self,
        port: int | None = None,
        tick_time_ms: int = 500,
        data_dir: str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        myid: int | None = None,
        peers: Sequence[QuorumPeer] = (),
        init_limit: int = 10,
        sync_limit: int = 5,
        command_prefix: Sequence[str] = (),
        socket_factory: SocketFactory | None = None,
    ) -> None:
        if peers and myid not in {p.myid for p in peers}:
            raise ValueError(f"myid {myid} is not one of the ensemble's peers")
        self.port = port or free_port()
        self.host = host
        self.tick_time_ms = tick_time_ms
        self.myid = myid
        self.peers = list(peers)
        self.init_limit = init_limit
        self.sync_limit = sync_limit
        self.command_prefix = list(command_prefix)
        self._socket_factory = socket_factory or _loopback_socket
        self._own_dir = data_dir is None
        self.base_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="kaflet-zk-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def connect_string(self) -> str:
        """``host:port`` (append ``/chroot`` to isolate users of one server)."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "zookeeper.log"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    @property
    def alive(self) -> bool:
        return self.pid is not None

    def _write_config(self) -> Path:
        data = self.base_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        lines = [
            # Short ticks keep session-expiry tests quick (min session timeout = 2 ticks).
            f"tickTime={self.tick_time_ms}",
            f"dataDir={data}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            "admin.enableServer=false",
            "maxClientCnxns=0",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,conf",
            "maxSessionTimeout=60000",
        ]
        if self.peers:
            (data / "myid").write_text(f"{self.myid}\n")
            lines += [f"initLimit={self.init_limit}", f"syncLimit={self.sync_limit}"]
            lines += [p.config_line() for p in sorted(self.peers, key=lambda p: p.myid)]
        cfg = self.base_dir / "zoo.cfg"
        cfg.write_text("\n".join(lines) + "\n")
        (self.base_dir / "log4j.properties").write_text(
            "log4j.rootLogger=INFO, CONSOLE\n"
            "log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1} - %m%n\n"
        )
        return cfg

    def launch(self) -> ZooKeeperServer:
        """Start the process (data and ports kept from an earlier run) without waiting."""
        reason = zookeeper_unavailable_reason()
        if reason:
            raise RuntimeError(reason)
        if self.alive:
            raise RuntimeError(f"ZooKeeper {self.connect_string} is already running (pid {self.pid})")
        cfg = self._write_config()
        cmd = [
            *self.command_prefix,
            "java",
            "-Xms16m",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # start fast: this is a test server
            "-Dzookeeper.jmx.log4j.disable=true",
            f"-Dlog4j.configuration=file:{self.base_dir / 'log4j.properties'}",
            "-cp",
            find_zookeeper_classpath() or "",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(cfg),
        ]
        if self._log is None:
            self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop)
        # Its own session: a Ctrl-C meant for the parent must not reach it before the brokers stop.
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        """Start the server and wait until it serves (for an ensemble node: until it has a quorum)."""
        self.launch()
        try:
            self.wait_serving(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_serving(self, timeout: float = 30.0) -> str:
        """Wait until ``srvr`` reports a serving mode; returns it (leader, follower, standalone)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is None or self.proc.poll() is not None:
                code = self.proc.returncode if self.proc is not None else None
                raise RuntimeError(f"ZooKeeper {self.connect_string} exited with {code}:\n{self.log_tail()}")
            mode = self.mode()
            if mode in SERVING_MODES:
                return mode
            if time.monotonic() >= deadline:
                raise RuntimeError(f"ZooKeeper {self.connect_string} did not serve within {timeout}s "
                                   f"(srvr: {mode or 'no answer'}):\n{self.log_tail()}")
            time.sleep(0.05)

    def mode(self) -> str | None:
        """leader, follower, standalone or observer from ``srvr``; None when not serving or unreachable."""
        answer = self.four_letter("srvr")
        if not answer:
            return None
        m = _MODE.search(answer)
        return m.group(1) if m else None

    def four_letter(self, cmd: str, timeout: float = 0.5) -> str | None:
        """Send a four-letter command (srvr, stat, mntr, conf); None if the server is not reachable."""
        try:
            with self._socket_factory(self.host, self.port, timeout) as s:
                s.settimeout(timeout)
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

    def log_tail(self, chars: int = 2000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - chars))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def terminate(self, timeout: float = 10.0) -> int | None:
        """SIGTERM by PID (SIGKILL if it lingers); data and ports are kept for a restart."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout)
            except ProcessLookupError:
                pass
        return proc.wait()

    def kill(self) -> None:
        """SIGKILL by PID (data kept) to test clients against a crashed ZooKeeper."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def restart(self, hard: bool = False, timeout: float = 30.0) -> str:
        """Kill (hard) or stop the process, start it on the same data; returns its serving mode."""
        if hard:
            self.kill()
        else:
            self.terminate()
        self.launch()
        return self.wait_serving(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server for good (SIGTERM, then SIGKILL) and remove its temporary directory."""
        try:
            self.terminate(timeout)
        finally:
            self.proc = None
            if self._log is not None:
                self._log.close()
                self._log = None
            if self._own_dir:
                shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> ZooKeeperServer:
        if not self.alive:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ZooKeeperEnsemble:
    """A ZooKeeper quorum of ``size`` servers on loopback (myid 1..size), each with its own
    dataDir, ``myid`` file and free client, quorum and election ports."""

    def __init__(self, size: int = 3, tick_time_ms: int = 500, base_dir: str | Path | None = None,
                 *, init_limit: int = 10, sync_limit: int = 5) -> None:
        if size < 1:
            raise ValueError("an ensemble needs at least one server")
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir) if base_dir is not None else Path(tempfile.mkdtemp(prefix="kaflet-zkq-"))
        ports = free_ports(3 * size)
        peers = [QuorumPeer(i, "127.0.0.1", ports[3 * (i - 1) + 1], ports[3 * (i - 1) + 2])
                 for i in range(1, size + 1)]
        self.servers: dict[int, ZooKeeperServer] = {
            p.myid: ZooKeeperServer(ports[3 * (p.myid - 1)], tick_time_ms, self.base_dir / f"zk-{p.myid}",
                                    myid=p.myid, peers=peers, init_limit=init_limit, sync_limit=sync_limit)
            for p in peers
        }

    @property
    def connect_string(self) -> str:
        """``127.0.0.1:p1,127.0.0.1:p2,...`` (append ``/chroot`` as for one server)."""
        return ",".join(s.connect_string for s in self.servers.values())

    def server(self, myid: int) -> ZooKeeperServer:
        return self.servers[myid]

    def start(self, timeout: float = 60.0) -> ZooKeeperEnsemble:
        """Launch every server; wait until all serve and one of them leads."""
        try:
            for s in self.servers.values():
                s.launch()
            deadline = time.monotonic() + timeout
            for s in self.servers.values():
                s.wait_serving(max(0.1, deadline - time.monotonic()))
            self.wait_for_leader(max(0.1, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def modes(self) -> dict[int, str | None]:
        """Each server's ``srvr`` mode (None: down or not serving, e.g. without a quorum)."""
        return {myid: s.mode() for myid, s in self.servers.items()}

    def leader_id(self) -> int | None:
        """The myid of the server whose ``srvr`` says ``Mode: leader``, if any."""
        leaders = [myid for myid, mode in self.modes().items() if mode == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    def wait_for_leader(self, timeout: float = 30.0, exclude: Iterable[int] = ()) -> int:
        """Wait until exactly one server leads (and it is not in ``exclude``); returns its myid."""
        excluded = set(exclude)
        deadline = time.monotonic() + timeout
        modes: dict[int, str | None] = {}
        while time.monotonic() < deadline:
            modes = self.modes()
            leaders = [myid for myid, mode in modes.items() if mode == "leader"]
            if len(leaders) == 1 and leaders[0] not in excluded:
                return leaders[0]
            time.sleep(0.05)
        raise RuntimeError(f"no ZooKeeper leader (other than {sorted(excluded)}) within {timeout}s; modes: {modes}")

    def kill(self, myid: int) -> None:
        """SIGKILL one server by PID (its data is kept)."""
        self.servers[myid].kill()

    def stop_server(self, myid: int) -> None:
        """SIGTERM one server by PID (its data is kept)."""
        self.servers[myid].terminate()

    def restart(self, myid: int, timeout: float = 30.0) -> str:
        """Start a stopped or killed server again on its data; returns its mode once it serves."""
        s = self.servers[myid]
        if not s.alive:
            s.launch()
            return s.wait_serving(timeout)
        return s.restart(timeout=timeout)

    def pids(self) -> dict[int, int]:
        """PIDs of the servers that are running."""
        return {myid: s.pid for myid, s in self.servers.items() if s.pid is not None}

    def stop(self) -> None:
        """Stop every server by PID and remove the directory when it is a temporary one."""
        errors: list[BaseException] = []
        for s in self.servers.values():
            try:
                s.stop()
            except BaseException as exc:  # stop the others before reporting
                errors.append(exc)
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)
        if errors:
            raise errors[0]

    def __enter__(self) -> ZooKeeperEnsemble:
        if not self.pids():
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
