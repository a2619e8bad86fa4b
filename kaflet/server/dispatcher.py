"""The request pipeline: frame -> header -> authentication gate -> quotas + handler -> response header + body.

Kafka closes the connection when it cannot parse a request or does not support its API version
(ApiVersions excepted: that one answers with UNSUPPORTED_VERSION so the client can pick another
version). kaflet does the same, and says why in one log line.

On a SASL listener the gate lets only ApiVersions and SaslHandshake (then SaslAuthenticate)
through until the connection is authenticated; any other request closes it, as Kafka's
SaslServerAuthenticator does. After SaslHandshake v0 the client sends raw tokens without Kafka
headers (the legacy exchange), which the gate hands straight to the SASL session.

While the gateway hides disabled partitions (RunState.partition_router), the handlers of APIs
that carry partition numbers run behind its renumbering step (server/renumbering.py), except
the cluster's own requests (`from_the_cluster`); without it the handler is called as it is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Sequence
from typing import Any, cast

from kaflet.metrics.stats import BrokerMetrics
from kaflet.network.connection import Chunk, Connection, DeferredResponse, FrameError, HandlerResult
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.header import RequestHeader, parse_request_header, response_header
from kaflet.protocol.primitives import DecodeError
from kaflet.protocol.response import encode_body
from kaflet.quota.enforcement import QuotaEnforcer
from kaflet.security.sasl import SaslAuthenticationError
from kaflet.security.session import SaslSession, SaslState
from kaflet.server import traffic
from kaflet.server.handlers import HANDLERS, api_versions
from kaflet.server.renumbering import from_the_cluster, renumbered
from kaflet.server.request_context import RequestContext
from kaflet.server.services import Services

log = logging.getLogger("kaflet.requests")
auth_log = logging.getLogger("kaflet.security")

_HANDSHAKE_APIS = (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE)


class Dispatcher:
    """Routes each request frame to its API's handler."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.accounting = services.accounting
        self.state = services.state
        self.quotas = QuotaEnforcer(services.accounting.quotas)

    async def __call__(self, conn: Connection, frame: memoryview) -> HandlerResult:
        started = time.monotonic()
        sasl = conn.sasl
        if sasl is not None and sasl.state is SaslState.AUTHENTICATE_RAW:
            return await self._raw_token(conn, sasl, frame)
        try:
            header = parse_request_header(frame)
        except (DecodeError, UnicodeDecodeError) as exc:
            raise FrameError(f"malformed request header: {exc}") from None
        # KIP-368: a SaslHandshake may start a re-authentication; any other request on a
        # connection whose session has expired closes it, as Kafka's SocketServer does.
        if sasl is not None and sasl.expires_at is not None and sasl.complete and not (
                header.api_key == ApiKey.SASL_HANDSHAKE and sasl.begin_reauthentication()) and sasl.expired():
            raise FrameError(f"the SASL session of {conn.principal} expired without re-authentication "
                             f"(connections.max.reauth.ms)")
        if sasl is not None and not sasl.complete:
            allowed = _HANDSHAKE_APIS if sasl.in_handshake else (ApiKey.SASL_AUTHENTICATE,)
            if header.api_key not in allowed:
                name = ApiKey(header.api_key).name if header.api_key in ApiKey._value2member_map_ else header.api_key
                raise FrameError(f"unexpected {name} request during SASL authentication on listener {conn.listener}")
            if header.api_key == ApiKey.API_VERSIONS:
                sasl.on_api_versions()
        module = HANDLERS.get(header.api_key)
        if module is None:
            raise FrameError(f"unsupported API key {header.api_key}")
        if not module.MIN_VERSION <= header.api_version <= module.MAX_VERSION:
            if header.api_key == ApiKey.API_VERSIONS:
                body = api_versions.unsupported_version_response()
                return [response_header(header.correlation_id, header.api_key, False), body]
            raise FrameError(
                f"unsupported version {header.api_version} of {ApiKey(header.api_key).name} "
                f"(supported: {module.MIN_VERSION}-{module.MAX_VERSION})"
            )
        ctx = RequestContext(self.services, conn, header)
        accounting = self.accounting
        ctx.traffic = traffic.start(accounting, header.api_key)
        body_view = frame[header.body_offset :]
        handler = module.handle
        router = self.state.partition_router
        if router is not None and not from_the_cluster(ctx):
            handler = renumbered(router, header.api_key) or handler
        try:
            # Quotas: record what the request used, get the throttle time, mute if over quota.
            response, throttle_ms = await self.quotas.handle(ctx, handler, body_view, len(frame))
        except Exception as exc:
            raise _frame_error(exc, header, conn) from None
        traffic.report(accounting, ctx.traffic, header, conn)
        if isinstance(response, DeferredResponse):
            # Only handed out with no quota in force (RequestContext.may_defer): throttle 0.
            return DeferredResponse(self._complete(ctx, response.completion, started))
        metrics = accounting.metrics
        if metrics is not None:
            _record(metrics, ctx, throttle_ms, started)
        return self._encode(header, conn, response, throttle_ms)

    async def _complete(self, ctx: RequestContext, completion: Coroutine[Any, Any, Any],
                        started: float) -> Sequence[Chunk] | None:
        header, conn = ctx.header, ctx.conn
        try:
            response = await completion
        except Exception as exc:
            raise _frame_error(exc, header, conn) from None
        metrics = self.accounting.metrics
        if metrics is not None:
            _record(metrics, ctx, 0, started)
        return self._encode(header, conn, response, 0)

    @staticmethod
    def _encode(header: RequestHeader, conn: Connection, response: Any, throttle_ms: int) -> Sequence[Chunk] | None:
        if response is None:
            return None
        try:
            # Encoded once, now that the throttle time is known.
            result = encode_body(header.api_key, header.api_version, response, throttle_ms)
        except Exception as exc:
            raise _frame_error(exc, header, conn) from None
        head = response_header(header.correlation_id, header.api_key, header.flexible)
        if isinstance(result, bytes | bytearray):
            return [head, result]
        # Fetch's regions are the log's file regions, which the connection sends with sendfile.
        return [head, *cast("list[Chunk]", result)]

    async def _raw_token(self, conn: Connection, sasl: SaslSession, frame: memoryview) -> Sequence[Chunk] | None:
        """One token of the legacy exchange (after SaslHandshake v0): no headers, size-prefixed answers."""
        try:
            answer = await sasl.authenticate(bytes(frame))
        except SaslAuthenticationError as exc:
            auth_log.info("failed authentication of %s from %s (mechanism %s): %s",
                          conn.conn_id, conn.peer[0], sasl.mechanism, exc)
            # Kafka delays the close of a failed authentication to slow down password guessing;
            # the legacy exchange has no error response, so the client just sees the close.
            await asyncio.sleep(sasl.failed_delay_s)
            conn.close_after_response = True
            return None
        if sasl.complete:
            auth_log.debug("connection %s from %s authenticated as %s (%s)", conn.conn_id, conn.peer[0],
                          sasl.principal, sasl.mechanism)
        return [answer]


def _record(metrics: BrokerMetrics, ctx: RequestContext, throttle_ms: int, started: float) -> None:
    """A request's RequestMetrics, and its bytes per topic once the throttle is known."""
    header = ctx.header
    metrics.on_request(header.api_key, header.api_version, ctx.quota_exempt, ctx.conn.principal.name,
                       ctx.traffic, throttle_ms, (time.monotonic() - started) * 1000)


def _frame_error(exc: Exception, header: RequestHeader, conn: Connection) -> FrameError:
    """The FrameError that closes the connection after a handler failed (logged when unexpected)."""
    if isinstance(exc, FrameError):
        return exc
    if isinstance(exc, DecodeError | UnicodeDecodeError):
        return FrameError(f"malformed {ApiKey(header.api_key).name} v{header.api_version} request: {exc}")
    log.error("unexpected error handling %s v%d from %s; closing the connection", ApiKey(header.api_key).name,
              header.api_version, conn.conn_id, exc_info=exc)
    return FrameError(f"internal error ({ErrorCode.UNKNOWN_SERVER_ERROR.name})")
