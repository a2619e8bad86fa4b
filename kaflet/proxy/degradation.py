"""The manager's degradation settings, enforced on the gateway's own client connections.

- ``appId-rate`` and ``ip-rate``: requests per second an application (the appId of its login)
  and a client address may send the gateway; ``sp-limit`` sets other rates for named appIds or
  addresses. Over a rate, a client is throttled the Kafka way: the answer carries the time in
  ``throttle_time_ms`` (when its version has the field) and the gateway reads nothing more from
  that connection for that long. It is never disconnected for it. A rate is a token bucket, as
  Kafka's controller-mutation quota (KIP-599) measures, holding ``degradation.burst.ms`` worth
  of requests: an idle client may send that many at once, and past them each request waits its
  share of a second. Kafka's sampled rates (the byte quotas') would let a new client send
  ``quota.window.num - 1`` windows' worth at once and then, as each burst's window expires,
  another burst: over 20 s a client would see bursts and one request a second in between.
- ``max-request-num``: the requests the gateway handles at once, over all connections (Kafka's
  queued.max.requests): past it, connections wait before their next request is read.

The settings come from the latest pull (`DiscoveryState`) at each request, so a change applies
at the next sync.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from kaflet.proxy.discovery import DiscoveryState

#: Rates of clients idle this long are forgotten.
IDLE_MS = 3_600_000


class RequestBucket:
    """Requests a client may still send at once: refilled at its rate up to ``burst_ms`` worth;
    a request taken from an empty bucket is owed, and the debt is the throttle time."""

    __slots__ = ("tokens", "last_ms")

    def __init__(self, now_ms: float) -> None:
        self.tokens: float | None = None  # full, whatever the rate, until the first request
        self.last_ms = now_ms

    def take(self, rate: int, burst_ms: int, now_ms: float) -> int:
        """Take one request at ``rate`` per second; the ms until the bucket is out of debt."""
        capacity = max(rate * burst_ms / 1000.0, 1.0)
        if self.tokens is None:
            tokens = capacity
        else:
            # The rate may have changed since the last request (a new pull): refill at the new one.
            tokens = min(capacity, self.tokens + (now_ms - self.last_ms) * rate / 1000.0)
        tokens -= 1.0
        self.tokens, self.last_ms = tokens, now_ms
        return 0 if tokens >= 0 else math.ceil(-tokens * 1000.0 / rate)


class Degradation:
    """Request rates per application and per client address, and the bound on requests at once."""

    def __init__(self, state: Callable[[], DiscoveryState], *, burst_ms: int, max_throttle_ms: int) -> None:
        self._state = state
        self.burst_ms = burst_ms
        self.max_throttle_ms = max_throttle_ms
        self._rates: dict[str, RequestBucket] = {}
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
        if limit <= 0:
            return self.max_throttle_ms
        bucket = self._rates.get(key)
        if bucket is None:
            bucket = self._rates[key] = RequestBucket(now)
        return bucket.take(limit, self.burst_ms, now)

    def _prune(self, now: float) -> None:
        self._last_prune = now
        for key in [k for k, r in self._rates.items() if now - r.last_ms > IDLE_MS]:
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
