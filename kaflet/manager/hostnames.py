"""Host names of the client addresses the brokers report (reverse DNS), for the console.

A page never waits for a resolver: :meth:`HostNames.lookup` answers from a cache at once and
queues the addresses it does not know (or knows no longer: answers expire after ``ttl_s``, a
failure after ``failure_ttl_s``) for worker threads of its own. A lookup that takes longer
than ``timeout_s`` is given up as "no answer" (``socket.gethostbyaddr`` cannot be cancelled, so
it finishes on its own daemon thread; at most ``max_in_flight`` of those run at once, so a dead
resolver holds a bounded number of threads). Reports may carry anything, so only text that is
an IP address is looked up.
"""

from __future__ import annotations

import ipaddress
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger("kaflet.manager.hostnames")

Resolver = Callable[[str], tuple[str, list[str], list[str]]]


@dataclass(frozen=True)
class HostName:
    """What is known of one address: ``name`` when it resolved, else ``note`` says why not
    (``resolving``, ``no name``, ``no answer in 2 s``, ``not an IP address``)."""

    ip: str
    name: str | None
    note: str

    @property
    def text(self) -> str:
        """The name, or the note in parentheses."""
        return self.name if self.name is not None else f"({self.note})"


@dataclass
class _Entry:
    answer: HostName
    expires: float


class HostNames:
    """A cache of reverse DNS answers filled by background threads; see the module's docstring."""

    def __init__(self, *, ttl_s: float = 600.0, failure_ttl_s: float = 60.0, timeout_s: float = 2.0,
                 workers: int = 2, max_in_flight: int = 8, max_pending: int = 1024, max_entries: int = 100_000,
                 resolver: Resolver = socket.gethostbyaddr, clock: Callable[[], float] = time.monotonic) -> None:
        if timeout_s <= 0 or ttl_s <= 0 or failure_ttl_s <= 0:
            raise ValueError("timeout_s, ttl_s and failure_ttl_s must be positive")
        self.ttl_s, self.failure_ttl_s, self.timeout_s = ttl_s, failure_ttl_s, timeout_s
        self.workers = max(1, workers)
        self.max_entries = max_entries
        self._resolver = resolver
        self._clock = clock
        self._cache: dict[str, _Entry] = {}
        self._queued: set[str] = set()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._queue: queue.Queue[str | None] = queue.Queue(max_pending)
        self._in_flight = threading.BoundedSemaphore(max(1, max_in_flight))
        self._threads: list[threading.Thread] = []
        self._closed = False

    def lookup(self, ips: Iterable[str]) -> dict[str, HostName]:
        """What is known of each address now; unknown or expired ones are queued for a lookup."""
        now = self._clock()
        out: dict[str, HostName] = {}
        todo: list[str] = []
        with self._lock:
            for ip in dict.fromkeys(ips):
                entry = self._cache.get(ip)
                if entry is not None:
                    out[ip] = entry.answer
                    if entry.expires > now:
                        continue
                elif not _is_ip(ip):
                    out[ip] = HostName(ip, None, "not an IP address")
                    continue
                else:
                    out[ip] = HostName(ip, None, "resolving")
                if ip not in self._queued:
                    todo.append(ip)
            for ip in todo:
                self._enqueue(ip)
        return out

    def prefetch(self, ips: Iterable[str]) -> None:
        """Queue lookups of the addresses not known yet (a report came in: its page may follow)."""
        self.lookup(ips)

    def wait(self, ips: Iterable[str], timeout: float) -> bool:
        """Wait until every address has an answer (resolved or failed); False on timeout."""
        wanted = [ip for ip in ips if _is_ip(ip)]
        with self._changed:
            return self._changed.wait_for(lambda: all(ip in self._cache for ip in wanted), timeout)

    def close(self) -> None:
        """Stop the workers (a lookup under way finishes on its daemon thread)."""
        with self._lock:
            self._closed = True
            threads, self._threads = self._threads, []
        for _ in threads:
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                break  # the workers see _closed when they take their next address

    # -- the workers ------------------------------------------------------------------------------

    def _enqueue(self, ip: str) -> None:
        """Called with the lock held."""
        if self._closed:
            return
        try:
            self._queue.put_nowait(ip)
        except queue.Full:
            return  # asked again on a later view
        self._queued.add(ip)
        if len(self._threads) < self.workers:
            t = threading.Thread(target=self._work, name="kaflet-manager-hostnames", daemon=True)
            self._threads.append(t)
            t.start()

    def _work(self) -> None:
        while True:
            ip = self._queue.get()
            if ip is None or self._closed:
                return
            self._in_flight.acquire()
            done, timed_out = threading.Event(), threading.Event()
            threading.Thread(target=self._resolve, args=(ip, done, timed_out), name="kaflet-manager-hostname",
                             daemon=True).start()
            if not done.wait(self.timeout_s):
                timed_out.set()
                self._store(ip, HostName(ip, None, f"no answer in {self.timeout_s:g} s"), self.failure_ttl_s,
                            late=False)

    def _resolve(self, ip: str, done: threading.Event, timed_out: threading.Event) -> None:
        try:
            try:
                name, _, _ = self._resolver(ip)
            except (OSError, UnicodeError) as exc:
                # herror/gaierror: the address has no PTR record or the resolver failed.
                log.debug("no host name for %s: %s", ip, exc)
                self._store(ip, HostName(ip, None, "no name"), self.failure_ttl_s, late=timed_out.is_set())
            else:
                # A late answer still replaces the timeout: the name is worth showing.
                self._store(ip, HostName(ip, name, ""), self.ttl_s, late=timed_out.is_set())
        finally:
            done.set()
            self._in_flight.release()

    def _store(self, ip: str, answer: HostName, ttl: float, *, late: bool) -> None:
        with self._changed:
            if late and answer.name is None:
                return  # the timeout was stored already; a late failure says nothing new
            if len(self._cache) >= self.max_entries and ip not in self._cache:
                # Bounded memory: the oldest entry (insertion order) makes room.
                del self._cache[next(iter(self._cache))]
            self._cache[ip] = _Entry(answer, self._clock() + ttl)
            self._queued.discard(ip)
            self._changed.notify_all()


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
