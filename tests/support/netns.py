"""Network partitions between real processes, with Linux network namespaces.

A :class:`Network` is a private 10.200.0.0/24 that exists only inside namespaces it creates:
one bridge namespace and one namespace per host (host ``i`` is 10.200.0.i on its ``eth0``,
whose veth peer ``p<i>`` sits on the bridge). Processes run inside a host with
``ip netns exec`` (which execs, so the PID is the program's own). Partitions:

* :meth:`Network.cut` / :meth:`Network.restore`: host ``i`` is cut from everyone (its bridge
  port goes down; the host itself sees nothing, as when a cable is pulled further away).
* :meth:`Network.cut_pair` / :meth:`Network.restore_pair`: only ``i``<->``j`` is cut
  (iptables DROP inside host ``i``, both directions); the others still reach both.

Dropped packets are silent: new connects time out and open connections stall, then resume by
TCP retransmission after a restore.

Safety (the root namespace has a default route, so traffic to 10.200.0.x from there would leave
the machine): before any namespace exists, ``ip route add unreachable 10.200.0.0/24`` is put in
the root namespace, and it is removed at teardown once no namespace is left on the machine.
Clients run inside a host namespace: a process via :meth:`Network.popen`, or a socket or client of this
process via :meth:`Network.connect` / :meth:`Network.call_in` (created by a thread that entered
the namespace).

:meth:`Network.close` kills every process in the namespaces (SIGTERM, then SIGKILL) and deletes
them, whatever state a failing test left. :func:`netns_unavailable_reason` says why a machine
cannot do this (not root, no ``ip``), for a skip with that reason.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

SUBNET = "10.200.0"
GUARD = f"{SUBNET}.0/24"
_CLONE_NEWNET = 0x40000000
_names = itertools.count(1)
T = TypeVar("T")


def _ip(*args: str, check: bool = True, timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip() or proc.returncode}")
    return proc


def netns_unavailable_reason() -> str | None:
    """None if this machine can create network namespaces here, else why not."""
    if os.geteuid() != 0:
        return f"network namespaces need root (running as uid {os.geteuid()})"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"kflprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=10)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=10)
    return None


def namespaces() -> list[str]:
    """Names of the network namespaces on the machine."""
    out = _ip("netns", "list").stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def guard_in_place() -> bool:
    """True when the root namespace's route for 10.200.0.0/24 is the unreachable guard."""
    out = _ip("route", "show", GUARD).stdout
    return any(line.split()[:2] == ["unreachable", GUARD] for line in out.splitlines())


def call_in_namespace(ns: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` on a short-lived thread that entered namespace ``ns``; return its result.

    The namespace is a per-thread attribute: sockets ``fn`` creates belong to ``ns`` for life,
    and so do threads it starts (a client library's I/O threads), whichever thread uses them later.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    box: dict[str, Any] = {}

    def enter_and_call() -> None:
        try:
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into {ns}: {os.strerror(err)}")
            finally:
                os.close(fd)
            box["result"] = fn(*args, **kwargs)
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=enter_and_call, name=f"netns-{ns}")
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return cast(T, box["result"])


class Host:
    """One host of a :class:`Network`: its namespace, address and bridge port."""

    def __init__(self, network: Network, index: int) -> None:
        self.index = index
        self.ns = f"{network.name}-n{index}"
        self.ip = f"{SUBNET}.{index}"
        self.bridge_port = f"p{index}"

    @property
    def exec_prefix(self) -> list[str]:
        """The command prefix that runs a program inside this host."""
        return ["ip", "netns", "exec", self.ns]


class Network:
    """``hosts`` namespaces on one bridge, with 10.200.0.1..N; see the module docstring."""

    def __init__(self, hosts: int = 3, name: str | None = None) -> None:
        if not 1 <= hosts <= 200:
            raise ValueError("a network has 1 to 200 hosts")
        self.name = name or f"kfl{os.getpid()}x{next(_names)}"
        self.bridge_ns = f"{self.name}-br"
        self.hosts = [Host(self, i) for i in range(1, hosts + 1)]
        self._procs: list[subprocess.Popen[Any]] = []
        self._created: list[str] = []
        self._pair_rules: set[tuple[int, int]] = set()
        self.guard_added = False

    def host(self, index: int) -> Host:
        return self.hosts[index - 1]

    # -- set-up and teardown ------------------------------------------------------------------

    def start(self) -> Network:
        """Add the root-namespace guard, then the bridge and host namespaces."""
        try:
            self._add_guard()
            self._add_ns(self.bridge_ns)
            _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
            for h in self.hosts:
                self._add_ns(h.ns)
                _ip("-n", h.ns, "link", "set", "lo", "up")
                # Both ends are made inside namespaces: nothing appears in the root namespace.
                _ip("-n", self.bridge_ns, "link", "add", h.bridge_port, "type", "veth",
                    "peer", "name", "eth0", "netns", h.ns)
                _ip("-n", self.bridge_ns, "link", "set", h.bridge_port, "master", "br0")
                _ip("-n", self.bridge_ns, "link", "set", h.bridge_port, "up")
                _ip("-n", h.ns, "addr", "add", f"{h.ip}/24", "dev", "eth0")
                _ip("-n", h.ns, "link", "set", "eth0", "up")
        except BaseException:
            self.close()
            raise
        return self

    def _add_guard(self) -> None:
        added = _ip("route", "add", "unreachable", GUARD, check=False)
        if added.returncode == 0:
            self.guard_added = True
        elif not guard_in_place():
            # Something else routes 10.200.0.0/24 here: do not run traffic into it.
            raise RuntimeError(f"cannot add the unreachable guard route for {GUARD}: {added.stderr.strip()}")

    def _add_ns(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._created.append(ns)

    def close(self, grace: float = 5.0) -> None:
        """Kill every process in the namespaces, delete them, then drop the guard if no
        namespace is left on the machine. Safe to call twice or after a failed start."""
        mine = [ns for ns in self._created if ns in set(namespaces())]
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            pids = self._pids(mine)
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while pids and time.monotonic() < deadline:
                for proc in self._procs:
                    proc.poll()  # reap our own children so they leave the namespace
                pids = [pid for pid in pids if process_running(pid)]
                if pids:
                    time.sleep(0.05)
        for proc in self._procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        errors = []
        for ns in reversed(mine):
            res = _ip("netns", "del", ns, check=False)
            if res.returncode != 0:
                errors.append(f"{ns}: {res.stderr.strip()}")
        self._created = []
        if not namespaces() and guard_in_place():
            _ip("route", "del", "unreachable", GUARD, check=False)
        if errors:
            raise RuntimeError("could not delete namespaces: " + "; ".join(errors))

    @staticmethod
    def _pids(nss: Sequence[str]) -> list[int]:
        pids: list[int] = []
        for ns in nss:
            res = _ip("netns", "pids", ns, check=False)
            pids += [int(p) for p in res.stdout.split() if p.isdigit()]
        return pids

    def pids(self) -> list[int]:
        """Every process now running in one of this network's namespaces."""
        return self._pids(self._created)

    def __enter__(self) -> Network:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- processes and sockets inside -----------------------------------------------------------

    def popen(self, index: int, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside host ``index``; it is killed by :meth:`close` at the latest."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        proc: subprocess.Popen[Any] = subprocess.Popen([*self.host(index).exec_prefix, *argv], **kwargs)
        self._procs.append(proc)
        return proc

    def run(self, index: int, argv: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside host ``index`` to completion (text output captured)."""
        return subprocess.run([*self.host(index).exec_prefix, *argv], capture_output=True, text=True,
                              timeout=timeout)

    def socket(self, index: int, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
        """A socket of this process that lives in host ``index``'s namespace."""
        return call_in_namespace(self.host(index).ns, socket.socket, family, kind)

    def call_in(self, index: int, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` inside host ``index`` (see :func:`call_in_namespace`): e.g. create a client
        there, ``net.call_in(4, AdminClient, conf)``, whose I/O threads then stay in that host."""
        return call_in_namespace(self.host(index).ns, fn, *args, **kwargs)

    def socket_factory(self, index: int) -> Callable[[str, int, float], socket.socket]:
        """``(address, port, timeout) -> connected socket`` from host ``index`` (for the harnesses'
        readiness checks of servers inside the network)."""
        return lambda address, port, timeout: self.connect(index, address, port, timeout)

    def connect(self, index: int, address: str, port: int, timeout: float) -> socket.socket:
        """A TCP connection from host ``index`` to ``address:port`` (inside the network)."""
        if not address.startswith(SUBNET + ".") and not address.startswith("127."):
            raise ValueError(f"{address} is outside the test network")
        sock = self.socket(index)
        try:
            sock.settimeout(timeout)
            sock.connect((address, port))
        except BaseException:
            sock.close()
            raise
        return sock

    # -- partitions -------------------------------------------------------------------------------

    def cut(self, index: int) -> None:
        """Cut host ``index`` from every other host (its bridge port goes down)."""
        _ip("-n", self.bridge_ns, "link", "set", self.host(index).bridge_port, "down")

    def restore(self, index: int) -> None:
        """Undo :meth:`cut`."""
        _ip("-n", self.bridge_ns, "link", "set", self.host(index).bridge_port, "up")

    def cut_pair(self, a: int, b: int) -> None:
        """Drop every packet between hosts ``a`` and ``b`` (both directions); others unaffected."""
        if (a, b) in self._pair_rules:
            return
        self._iptables(a, "-I", b)
        self._pair_rules.add((a, b))

    def restore_pair(self, a: int, b: int) -> None:
        """Undo :meth:`cut_pair` (given in either order)."""
        for x, y in ((a, b), (b, a)):
            if (x, y) in self._pair_rules:
                self._iptables(x, "-D", y)
                self._pair_rules.discard((x, y))

    def _iptables(self, index: int, op: str, peer: int) -> None:
        if shutil.which("iptables") is None:
            raise RuntimeError("iptables is not installed (Debian package 'iptables'): pair cuts need it")
        other = self.host(peer).ip
        for chain, flag in (("INPUT", "-s"), ("OUTPUT", "-d")):
            res = self.run(index, ["iptables", op, chain, flag, other, "-j", "DROP"], timeout=10)
            if res.returncode != 0:
                raise RuntimeError(f"iptables {op} {chain} in {self.host(index).ns} failed: {res.stderr.strip()}")


def process_running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (killed but not yet reaped by its parent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class LineReader:
    """A process's stdout, line by line, with timeouts (a thread drains the pipe)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None, "start the process with stdout=PIPE, text=True"
        self.proc = proc
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def expect(self, pattern: str, timeout: float) -> re.Match[str]:
        """Wait for the next line matching ``pattern`` (earlier lines are kept in ``lines``)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no line matching {pattern!r} within {timeout:g}s; output: {self.lines}")
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"process exited ({self.proc.poll()}) before a line matching {pattern!r}; "
                                     f"output: {self.lines}")
            self.lines.append(line)
            m = rx.search(line)
            if m:
                return m

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
