"""Readable logs while something outside the process keeps failing.

A management service, a ZooKeeper ensemble or a peer broker that is down is retried every few
seconds for as long as the outage lasts. Logging every attempt buries everything else, so each
retry loop reports its attempts to an `OutageLog`, which writes one WARNING when the target
starts failing, at most one "still failing" WARNING per ``summary_every_s`` while it goes on,
and one INFO line when it answers again; the attempts in between go to DEBUG.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

#: How often a continuing outage is summed up, by default.
SUMMARY_EVERY_S = 60.0


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"


def _attempts(n: int, kind: str = "") -> str:
    return f"{n} {kind}attempt" if n == 1 else f"{n} {kind}attempts"


class OutageLog:
    """The log lines of one target's outages.

    ``what`` names the target the way the caller's own lines did ("session report to the
    management service", "fetcher-0 from broker 2 (host:port)"). ``failed`` counts one failed
    attempt, ``succeeded`` ends an outage (and is free when there is none). Safe to use from
    several threads.
    """

    def __init__(self, logger: logging.Logger, what: str, *, summary_every_s: float = SUMMARY_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.what = what
        self.summary_every_s = summary_every_s
        self.clock = clock
        self._lock = threading.Lock()
        self._attempts = 0  # failed attempts in this outage
        self._began = 0.0
        self._last_line = 0.0  # when the last WARNING of this outage was written
        self._since_line = 0  # failed attempts since then

    @property
    def failing(self) -> bool:
        """An outage is going on: the last attempt failed."""
        return self._attempts > 0

    @property
    def attempts(self) -> int:
        """The failed attempts of the current outage (0 when there is none)."""
        return self._attempts

    def failed(self, error: object, note: str = "") -> None:
        """One failed attempt: ``error`` says why, ``note`` (on the first line only) what happens
        meanwhile ("retrying every 500 ms", "kept for the next one")."""
        with self._lock:
            now = self.clock()
            self._attempts += 1
            self._since_line += 1
            if self._attempts == 1:
                self._began = self._last_line = now
                self._since_line = 0
                self.logger.warning("%s failed: %s%s", self.what, error, f"; {note}" if note else "")
            elif now - self._last_line >= self.summary_every_s:
                self.logger.warning("%s still failing: %s in the last %s (last error: %s)", self.what,
                                    _attempts(self._since_line), _seconds(now - self._last_line), error)
                self._last_line = now
                self._since_line = 0
            else:
                self.logger.debug("%s failed again (attempt %d): %s", self.what, self._attempts, error)

    def succeeded(self) -> None:
        """An attempt worked: ends the outage with one line, if there was one."""
        with self._lock:
            if not self._attempts:
                return
            self.logger.info("%s recovered after %s in %s", self.what, _attempts(self._attempts, "failed "),
                             _seconds(self.clock() - self._began))
            self._attempts = 0
            self._since_line = 0


class OutageLogs:
    """One OutageLog per broker id, made on first use; ``what(broker_id)`` names each target."""

    def __init__(self, logger: logging.Logger, what: Callable[[int], str]) -> None:
        self.logger = logger
        self.what = what
        self._logs: dict[int, OutageLog] = {}

    def __getitem__(self, broker_id: int) -> OutageLog:
        found = self._logs.get(broker_id)
        if found is None:
            found = self._logs[broker_id] = OutageLog(self.logger, self.what(broker_id))
        return found
