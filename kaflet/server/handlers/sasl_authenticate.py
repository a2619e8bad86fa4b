"""SaslAuthenticate (key 36): one SASL token each way, after SaslHandshake v1."""

from __future__ import annotations

import asyncio
import logging

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.sasl import SaslAuthenticationError
from kaflet.security.session import SaslState
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.SASL_AUTHENTICATE
MIN_VERSION = 0
MAX_VERSION = 2

log = logging.getLogger("kaflet.security")


def _response(ctx: RequestContext, code: int, message: str | None, auth_bytes: bytes = b"",
              session_lifetime_ms: int = 0) -> Response:
    R = codec.response_class(API_KEY)
    return R(error_code=code, error_message=message, auth_bytes=auth_bytes, session_lifetime_ms=session_lifetime_ms)


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    conn = ctx.conn
    sasl = conn.sasl
    if sasl is None or sasl.state is not SaslState.AUTHENTICATE:
        what = ("SaslAuthenticate request received after successful authentication"
                if sasl is None or sasl.complete else "SaslAuthenticate request received before SaslHandshake")
        return _response(ctx, ErrorCode.ILLEGAL_SASL_STATE, what)
    try:
        answer = await sasl.authenticate(bytes(req.auth_bytes))
    except SaslAuthenticationError as exc:
        log.info("failed %s of %s from %s (mechanism %s): %s",
                 "re-authentication" if sasl.reauthenticating else "authentication", conn.conn_id, conn.peer[0],
                 sasl.mechanism, exc)
        # connection.failed.authentication.delay.ms: the failure answer (then the close) is held
        # back to slow down password guessing, as Kafka does.
        await asyncio.sleep(sasl.failed_delay_s)
        conn.close_after_response = True
        return _response(ctx, ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc))
    if not sasl.complete:
        return _response(ctx, ErrorCode.NONE, None, answer)
    log.debug("connection %s from %s %s as %s (%s), session lifetime %d ms", conn.conn_id, conn.peer[0],
              "re-authenticated" if sasl.reauthentications else "authenticated", sasl.principal, sasl.mechanism,
              sasl.session_lifetime_ms)
    # v0 has no lifetime field (the codec leaves it out): such clients cannot re-authenticate
    # and are closed at their first request after the session expires, as by Kafka.
    return _response(ctx, ErrorCode.NONE, None, answer, sasl.session_lifetime_ms)
