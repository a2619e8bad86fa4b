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
        self._freed = asyncio.Condition()
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

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one of the ``max-request-num`` places while a request is handled."""
        async with self._freed:
            while True:
                bound = self._state().max_request_num
                if bound is None or self._handling < max(bound, 1):
                    break
                await self._freed.wait()
            self._handling += 1
        try:
            yield
        finally:
            async with self._freed:
                self._handling -= 1
                self._freed.notify()
