"""Quotas around each request: measure, record, answer with throttle_time_ms, mute the connection.

Kafka's way since KIP-219: a request is handled in full, then what it used is recorded (the
request's size for Produce, the response's size for Fetch, the handler's time for
request_percentage); the response goes out at once carrying ``throttle_time_ms``, and the
broker stops reading the connection for that long. Clients that know KIP-219 also hold back
themselves. A throttled Fetch is answered without data (its bytes are taken back from the
rate), so a consumer over its quota is not sent more while it waits.

Handler time is the time the handler's own code runs on the event loop: the handler coroutine
is stepped through `_Timed`, which adds up its steps and leaves out the awaits in between, so a
long-polling Fetch or a JoinGroup waiting for its group costs only the work it did (Kafka counts
the request threads' time, not the time in purgatory).

Handlers return their responses unencoded and know nothing of quotas: the enforcer gives the
dispatcher the response and its throttle time, and the dispatcher encodes the one with the
other (protocol/response.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kaflet.protocol.api_keys import ApiKey
from kaflet.quota.entity import QuotaType

if TYPE_CHECKING:
    from kaflet.network.connection import Connection
    from kaflet.protocol.header import RequestHeader
    from kaflet.protocol.response import Response
    from kaflet.quota.manager import QuotaManager


class RequestContext(Protocol):
    """What the enforcer reads of a request: the server's RequestContext, structurally (quota/
    sits below server/ and does not import it)."""

    conn: Connection
    header: RequestHeader
    #: Bytes per topic the handler produced or fetched, filled when the broker asks for it.
    traffic: dict[str, int] | None
    #: True for requests Kafka exempts from client quotas (a follower's fetch).
    quota_exempt: bool
    #: A throttle the handler asks for itself (disk load protection refused a cold read).
    throttle_ms: int


Context = TypeVar("Context", bound=RequestContext)
#: A request's handler: the server's handler module's `handle`, or the same behind a step
#: around it (the gateway's renumbering, kaflet/server/renumbering.py).
Handler = Callable[[Context, memoryview], Coroutine[Any, Any, "Response"]]


class _Timed:
    """Awaits a coroutine while adding up the time its steps run (not the time it waits)."""

    __slots__ = ("_coro", "busy_s")

    def __init__(self, coro: Any) -> None:
        self._coro = coro
        self.busy_s = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        clock = time.perf_counter
        to_send: Any = None
        to_throw: BaseException | None = None
        while True:
            start = clock()
            try:
                if to_throw is not None:
                    exc, to_throw = to_throw, None
                    yielded = coro.throw(exc)
                else:
                    yielded = coro.send(to_send)
            except StopIteration as done:
                self.busy_s += clock() - start
                return done.value
            except BaseException:
                self.busy_s += clock() - start
                raise
            self.busy_s += clock() - start
            try:
                to_send = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation and the like go into the handler
                to_throw = exc


class QuotaEnforcer:
    """Runs a handler under the broker's QuotaManager."""

    def __init__(self, manager: QuotaManager) -> None:
        self.manager = manager

    async def handle(self, ctx: Context, handler: Handler[Context], body: memoryview,
                     request_size: int) -> tuple[Response, int]:
        """Run the handler: its response, unencoded, and the throttle time in ms to encode it with."""
        result, throttle = await self._handle(ctx, handler, body, request_size)
        own = ctx.throttle_ms
        if own > throttle:
            # The handler's own throttle mutes the connection like a quota's.
            conn = ctx.conn
            conn.throttled_until = max(conn.throttled_until, time.monotonic() + own / 1000)
            throttle = own
        return result, throttle

    async def _handle(self, ctx: Context, handler: Handler[Context], body: memoryview,
                      request_size: int) -> tuple[Response, int]:
        manager = self.manager
        if not ctx.conn.authenticated:
            # Before authentication there is no user to charge (SASL handshakes are exempt, as in Kafka).
            return await handler(ctx, body), 0
        timed = _Timed(handler(ctx, body)) if manager.active(QuotaType.REQUEST) else None
        result = await (timed if timed is not None else handler(ctx, body))
        if ctx.quota_exempt:
            return result, 0
        api_key = ctx.header.api_key
        user, client_id = ctx.conn.principal.name, ctx.header.client_id or ""
        now_ms = time.monotonic() * 1000
        throttle = 0
        if timed is not None:
            throttle = manager.record(QuotaType.REQUEST, user, client_id, timed.busy_s * 100, now_ms)
        traffic = ctx.traffic
        if api_key == ApiKey.PRODUCE:
            if manager.active(QuotaType.PRODUCE):
                throttle = max(throttle, manager.record(QuotaType.PRODUCE, user, client_id, request_size, now_ms))
            if traffic and manager.active_per_topic(QuotaType.PRODUCE):
                throttle = max(throttle, manager.record_topics(QuotaType.PRODUCE, user, traffic, now_ms))
        elif api_key == ApiKey.FETCH and result is not None:
            size = result.size() if manager.active(QuotaType.FETCH) else 0
            if size:
                throttle = max(throttle, manager.record(QuotaType.FETCH, user, client_id, size, now_ms))
            per_topic = traffic if traffic and manager.active_per_topic(QuotaType.FETCH) else None
            if per_topic:
                throttle = max(throttle, manager.record_topics(QuotaType.FETCH, user, per_topic, now_ms))
            if throttle > 0:
                # Throttled for either quota: answer without data, and those bytes were not sent.
                if size:
                    manager.unrecord(QuotaType.FETCH, user, client_id, size, now_ms)
                if per_topic:
                    manager.unrecord_topics(QuotaType.FETCH, user, per_topic, now_ms)
                result = result.without_data()
        if throttle > 0:
            conn = ctx.conn
            conn.throttled_until = max(conn.throttled_until, time.monotonic() + throttle / 1000)
        return result, throttle
