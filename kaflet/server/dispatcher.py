"""The request pipeline: frame -> header -> handler -> response header + body.

Kafka closes the connection when it cannot parse a request or does not support its API version
(ApiVersions excepted: that one answers with UNSUPPORTED_VERSION so the client can pick another
version). kaflet does the same, and says why in one log line.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kaflet.network.connection import Chunk, Connection, FrameError
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.header import parse_request_header, response_header
from kaflet.protocol.primitives import DecodeError
from kaflet.server.handlers import HANDLERS, api_versions
from kaflet.server.request_context import RequestContext

if TYPE_CHECKING:
    from kaflet.server.broker import Broker

log = logging.getLogger("kaflet.requests")


class Dispatcher:
    """Routes each request frame to its API's handler."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def __call__(self, conn: Connection, frame: memoryview) -> Sequence[Chunk] | None:
        try:
            header = parse_request_header(frame)
        except (DecodeError, UnicodeDecodeError) as exc:
            raise FrameError(f"malformed request header: {exc}") from None
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
        ctx = RequestContext(self.broker, conn, header)
        body_view = frame[header.body_offset :]
        try:
            result = await module.handle(ctx, body_view)
        except (DecodeError, UnicodeDecodeError) as exc:
            raise FrameError(f"malformed {ApiKey(header.api_key).name} v{header.api_version} request: {exc}") from None
        except FrameError:
            raise
        except Exception:
            log.exception(
                "unexpected error handling %s v%d from %s; closing the connection",
                ApiKey(header.api_key).name, header.api_version, conn.conn_id,
            )
            raise FrameError(f"internal error ({ErrorCode.UNKNOWN_SERVER_ERROR.name})") from None
        if result is None:
            return None
        head = response_header(header.correlation_id, header.api_key, header.flexible)
        if isinstance(result, bytes | bytearray):
            return [head, result]
        return [head, *result]
