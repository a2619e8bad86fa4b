"""ApiVersions (key 18): the APIs and versions this broker implements."""

from __future__ import annotations

import functools

from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.api_versions import (
    ApiVersionsResponse,
    decode_api_versions_request,
    encode_api_versions_response,
)
from kaflet.protocol.errors import ErrorCode
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.API_VERSIONS
MIN_VERSION = 0
MAX_VERSION = 3


@functools.cache
def _ranges() -> tuple[tuple[int, int, int], ...]:
    # The handlers and their versions are fixed once imported.
    from kaflet.server.handlers import supported_versions

    return tuple(supported_versions())


def unsupported_version_response() -> bytes:
    """The v0 answer to a version we do not know, listing what we do support (KIP-511)."""
    return encode_api_versions_response(ErrorCode.UNSUPPORTED_VERSION, _ranges(), 0, 0)


async def handle(ctx: RequestContext, body: memoryview) -> ApiVersionsResponse:
    try:
        ctx.conn.client_software = decode_api_versions_request(body, ctx.version)
    except (ValueError, UnicodeDecodeError):
        # Kafka answers an unparsable ApiVersions with INVALID_REQUEST rather than closing.
        return ApiVersionsResponse(ErrorCode.INVALID_REQUEST, _ranges(), ctx.version)
    return ApiVersionsResponse(ErrorCode.NONE, _ranges(), ctx.version)
