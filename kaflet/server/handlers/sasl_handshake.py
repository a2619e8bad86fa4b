"""SaslHandshake (key 17): the client picks a SASL mechanism (v0: then raw tokens, v1: SaslAuthenticate)."""

from __future__ import annotations

import logging

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.SASL_HANDSHAKE
MIN_VERSION = 0
MAX_VERSION = 1

log = logging.getLogger("kaflet.security")


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    sasl = ctx.conn.sasl
    if sasl is None or not sasl.in_handshake:
        # Kafka answers a handshake on a non-SASL listener, or after authentication when no
        # re-authentication (KIP-368) may start (no session lifetime, or one started < 1 s ago).
        return R(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    enabled = sasl.enabled_mechanisms()
    if not sasl.handshake(req.mechanism, ctx.version):
        log.info("connection %s from %s asked for SASL mechanism %r, not enabled on listener %s (enabled: %s)",
                 ctx.conn.conn_id, ctx.conn.peer[0], req.mechanism, ctx.listener, ", ".join(enabled))
        # The client learns what is enabled, then the connection is closed (as Kafka does).
        ctx.conn.close_after_response = True
        return R(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
    return R(error_code=ErrorCode.NONE, mechanisms=enabled)
