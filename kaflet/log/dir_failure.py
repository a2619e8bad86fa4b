"""Which I/O errors take a log directory offline, and the channel that reports them (Kafka's
LogDirFailureChannel).

A failed write, read, fsync or file creation in a log directory means the directory can no
longer be trusted: its logs stop serving (every request for them answers KAFKA_STORAGE_ERROR)
and the broker tells the controller, which moves their leadership elsewhere. Running out of a
process-wide resource is not a disk fault: a full descriptor table or memory says nothing about
the directory, so those errors only refuse the work at hand.

Errors are found on the event loop and on executor threads (fsyncs, checkpoint writes, the log
cleaner), so the channel is thread-safe and hands each newly offline directory to its listener
on the event loop.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("kaflet.log")

#: Errors of the process or the machine, not of a directory: EMFILE/ENFILE (descriptors),
#: ENOMEM/ENOBUFS (memory), EAGAIN/EINTR (try again).
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS, errno.EAGAIN, errno.EINTR})


#: At most one warning per log dir in this many seconds while a resource is exhausted.
RESOURCE_WARNING_INTERVAL_S = 10.0


def is_resource_exhaustion(exc: BaseException) -> bool:
    """Whether ``exc`` says the process ran out of something rather than the disk failed."""
    return isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS


class LogDirFailureChannel:
    """The set of offline log directories; ``listener`` hears of each one once, on ``loop``."""

    def __init__(self) -> None:
        self._offline: dict[str, str] = {}
        #: log dir -> (when the last resource warning was logged, failures not logged since)
        self._exhausted: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listener: Callable[[str], None] | None = None

    def set_listener(self, loop: asyncio.AbstractEventLoop, listener: Callable[[str], None]) -> None:
        """Call ``listener(dir)`` on ``loop`` for every directory that goes offline from now on
        (and for those already offline)."""
        with self._lock:
            self._loop, self._listener = loop, listener
            already = list(self._offline)
        for d in already:
            loop.call_soon_threadsafe(listener, d)

    def is_offline(self, log_dir: str) -> bool:
        return log_dir in self._offline

    @property
    def any_offline(self) -> bool:
        return bool(self._offline)

    @property
    def offline_dirs(self) -> dict[str, str]:
        """Offline directory -> why it went offline."""
        with self._lock:
            return dict(self._offline)

    def _warn_exhausted(self, log_dir: str, what: str, exc: BaseException) -> None:
        # Every append fails alike while the resource is short: one line per dir and interval.
        now = time.monotonic()
        with self._lock:
            last, suppressed = self._exhausted.get(log_dir, (-RESOURCE_WARNING_INTERVAL_S, 0))
            if now - last < RESOURCE_WARNING_INTERVAL_S:
                self._exhausted[log_dir] = (last, suppressed + 1)
                return
            self._exhausted[log_dir] = (now, 0)
        more = f" ({suppressed} more such failures since the last warning)" if suppressed else ""
        log.warning("%s failed in %s: %s; the directory stays online (not a disk fault)%s", what, log_dir, exc, more)

    def maybe_add_offline_log_dir(self, log_dir: str, what: str, exc: BaseException) -> bool:
        """Record that ``what`` failed in ``log_dir`` with ``exc``: unless the error is resource
        exhaustion, the directory goes offline (once; True then)."""
        if is_resource_exhaustion(exc):
            self._warn_exhausted(log_dir, what, exc)
            return False
        reason = f"{what} failed: {exc}"
        with self._lock:
            if log_dir in self._offline:
                return False
            self._offline[log_dir] = reason
            loop, listener = self._loop, self._listener
        log.error("log directory %s is offline: %s", log_dir, reason)
        if loop is not None and listener is not None:
            try:
                loop.call_soon_threadsafe(listener, log_dir)
            except RuntimeError:
                pass  # the loop is closed: the broker is gone already
        return True
