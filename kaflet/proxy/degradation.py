"""The manager's degradation settings, enforced on the gateway's own client connections.

- ``appId-rate`` and ``ip-rate``: requests per second an application (the appId of its login)
  and a client address may send the gateway; ``sp-limit`` sets other rates for named appIds or
  addresses. Over a rate, a client is throttled the Kafka way: the answer carries the time in
  ``throttle_time_ms`` (when its version has the field) and the gateway reads nothing more from
  that connection for that long. It is never disconnected for it. Rates are Kafka's sampled
  rates (``quota.window.num`` windows of ``quota.window.size.seconds``), so a new client may
  send about one window's worth at once.
- ``max-request-num``: the requests the gateway handles at once, over all connections (Kafka's
  queued.max.requests): past it, connections wait before their next request is read.

The settings come from the latest pull (`DiscoveryState`) at each request, so a change applies
at the next sync.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from kaflet.proxy.discovery import DiscoveryState
from kaflet.quota.rate import WindowedRate, throttle_time_ms

#: Rates of clients idle this long are forgotten.
IDLE_MS = 3_600_000


class Degradation:
    """Request rates per application and per client address, and the bound on requests at once."""

    def __init__(self, state: Callable[[], DiscoveryState], *, samples: int, window_ms: int,
                 max_throttle_ms: int) -> None:
        self._state = state
        self.samples = samples
        self.window_ms = window_ms
        self.max_throttle_ms = max_throttle_ms
        self._rates: dict[str, WindowedRate] = {}
        self._handling = 0
        #: Requests waiting for a place, in arrival order.
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._last_prune = time.monotonic() * 1000

    def throttle_ms(self, app: str | None, address: str) -> int:
        """Record one request of ``app`` (None before login) from ``address``; how long to throttle."""
        state = self._state()
        now = time.monotonic() * 1000
        if now - self._last_prune > IDLE_MS / 10:
            self._prune(now)
        worst = 0
        if app is not None:
            worst = self._record(f"app:{app}", state.sp_limits.get(app, state.app_rate), now)
        worst = max(worst, self._record(f"ip:{address}", state.sp_limits.get(address, state.ip_rate), now))
        return min(worst, self.max_throttle_ms)

    def _record(self, key: str, limit: int | None, now: float) -> int:
        if limit is None:
            return 0
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = WindowedRate(self.samples, self.window_ms, now)
        rate.record(1, now)
        return throttle_time_ms(rate, float(limit), now) if limit > 0 else self.max_throttle_ms

    def _prune(self, now: float) -> None:
        self._last_prune = now
        for key in [k for k, r in self._rates.items() if now - r.last_record_ms > IDLE_MS]:
            del self._rates[key]

    def try_enter(self) -> bool:
        """Take one of the ``max-request-num`` places for a request if one is free and nobody
        waits (no await: the path of every request while the gateway is within its bound)."""
        bound = self._state().max_request_num
        if self._waiters or (bound is not None and self._handling >= max(bound, 1)):
            return False
        self._handling += 1
        return True

    async def enter(self) -> None:
        """Wait for a place (first come, first served), then take it."""
        loop = asyncio.get_running_loop()
        while True:
            bound = self._state().max_request_num
            if bound is None or self._handling < max(bound, 1):
                self._handling += 1
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.done() and not waiter.cancelled():
                    self._wake_next()  # woken and cancelled at once: the place goes to the next
                raise

    def leave(self) -> None:
        """Give the place back; the longest waiting request takes it."""
        self._handling -= 1
        self._wake_next()

    def _wake_next(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one of the ``max-request-num`` places while a request is handled."""
        if not self.try_enter():
            await self.enter()
        try:
            yield
        finally:
            self.leave()
