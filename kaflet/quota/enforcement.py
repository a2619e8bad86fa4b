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

Existing handlers keep encoding ``throttle_time_ms=0``; the field is set afterwards in the
encoded body, at an offset known from the message schema (for the generic codec) or from our
own encoders (Produce, Fetch), so the handlers need no change.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Generator, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.fetch import encode_fetch_response
from kaflet.quota.entity import QuotaType

if TYPE_CHECKING:
    from types import ModuleType

    from kaflet.network.connection import Connection
    from kaflet.protocol.header import RequestHeader
    from kaflet.quota.manager import QuotaManager


class RequestContext(Protocol):
    """What the enforcer reads of a request: the server's RequestContext, structurally (quota/
    sits below server/ and does not import it)."""

    conn: Connection
    header: RequestHeader

_INT32 = struct.Struct(">i")
_FIXED_SIZES = {"int8": 1, "bool": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
                "float64": 8, "uuid": 16}


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


@cache
def generic_throttle_offset(api_key: int, version: int) -> int | None:
    """Where throttle_time_ms sits in a generic-codec response body, or None.

    Found from the message schema: the sum of the fixed-size fields before it. None when the
    version has no such field or a variable-size field comes first (ApiVersions).
    """
    from kaflet.protocol import codec

    try:
        fields = codec.response_class(api_key)._json["fields"]
    except (LookupError, AttributeError, TypeError):
        return None
    offset = 0
    for f in fields:
        if "tag" in f or not _in_versions(f.get("versions", "0+"), version):
            continue
        if f["name"] == "ThrottleTimeMs":
            return offset
        size = _FIXED_SIZES.get(f["type"])
        if size is None:
            return None
        offset += size
    return None


def _in_versions(spec: str, version: int) -> bool:
    if spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    low, _, high = spec.partition("-")
    return int(low) <= version <= int(high or low)


def set_throttle_time(api_key: int, version: int, body: bytes | bytearray, throttle_ms: int) -> bytes | bytearray:
    """The response body with its throttle_time_ms set (unchanged when it has none)."""
    if api_key == ApiKey.PRODUCE:
        # kaflet's encoder ends with throttle_time_ms, then (flexible versions) an empty
        # tagged-field section of one byte.
        offset = len(body) - (5 if version >= 9 else 4)
    else:
        found = generic_throttle_offset(api_key, version)
        if found is None:
            return body
        offset = found
    if offset < 0 or offset + 4 > len(body):
        return body
    out = bytearray(body)
    _INT32.pack_into(out, offset, throttle_ms)
    return out


def _size(chunks: Sequence[Any]) -> int:
    return sum(c.size if hasattr(c, "size") else len(c) for c in chunks)


class QuotaEnforcer:
    """Runs a handler under the broker's QuotaManager (`broker.quota_manager`)."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker

    async def handle(self, ctx: RequestContext, module: ModuleType, body: memoryview, request_size: int) -> Any:
        manager: QuotaManager | None = getattr(self.broker, "quota_manager", None)
        if manager is None or not ctx.conn.authenticated:
            # Before authentication there is no user to charge (SASL handshakes are exempt, as in Kafka).
            return await module.handle(ctx, body)
        timed = _Timed(module.handle(ctx, body)) if manager.active(QuotaType.REQUEST) else None
        result = await (timed if timed is not None else module.handle(ctx, body))
        api_key, version = ctx.header.api_key, ctx.header.api_version
        user, client_id = ctx.conn.principal.name, ctx.header.client_id or ""
        now_ms = time.monotonic() * 1000
        throttle = 0
        if timed is not None:
            throttle = manager.record(QuotaType.REQUEST, user, client_id, timed.busy_s * 100, now_ms)
        if api_key == ApiKey.PRODUCE and manager.active(QuotaType.PRODUCE):
            throttle = max(throttle, manager.record(QuotaType.PRODUCE, user, client_id, request_size, now_ms))
        elif api_key == ApiKey.FETCH and result is not None:
            size = _size(result) if manager.active(QuotaType.FETCH) else 0
            if size:
                throttle = max(throttle, manager.record(QuotaType.FETCH, user, client_id, size, now_ms))
            if throttle > 0:
                # Throttled for either quota: answer without data, and those bytes were not sent.
                if size:
                    manager.unrecord(QuotaType.FETCH, user, client_id, size, now_ms)
                return self._mute(ctx, throttle, encode_fetch_response([], throttle, version, 0, 0))
        if throttle <= 0:
            return result
        if isinstance(result, bytes | bytearray):
            result = set_throttle_time(api_key, version, result, throttle)
        return self._mute(ctx, throttle, result)

    @staticmethod
    def _mute(ctx: RequestContext, throttle_ms: int, result: Any) -> Any:
        conn = ctx.conn
        conn.throttled_until = max(conn.throttled_until, time.monotonic() + throttle_ms / 1000)
        return result

