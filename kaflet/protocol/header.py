"""Request and response headers (request header v1/v2, response header v0/v1)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kaflet.protocol.api_keys import ApiKey, is_flexible
from kaflet.protocol.primitives import Reader

_HEADER_FIXED = struct.Struct(">hhi")
_I32 = struct.Struct(">i")


@dataclass(slots=True)
class RequestHeader:
    """The parsed request header; `body_offset` is where the request body starts in the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    flexible: bool
    body_offset: int


def peek_header(frame: memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from a frame, without parsing the rest."""
    return _HEADER_FIXED.unpack_from(frame, 0)


def parse_request_header(frame: memoryview) -> RequestHeader:
    """Parse the request header; raises DecodeError on a malformed one."""
    r = Reader(frame)
    api_key = r.int16()
    api_version = r.int16()
    correlation_id = r.int32()
    client_id = r.nullable_string()  # stays a non-compact string even in header v2
    flexible = is_flexible(api_key, api_version)
    if flexible:
        r.skip_tagged_fields()
    return RequestHeader(api_key, api_version, correlation_id, client_id, flexible, r.pos)


def response_header(correlation_id: int, api_key: int, flexible: bool) -> bytes:
    """Response header bytes; ApiVersions always answers with header v0 so old clients can parse it."""
    if flexible and api_key != ApiKey.API_VERSIONS:
        return _I32.pack(correlation_id) + b"\x00"
    return _I32.pack(correlation_id)


_REQUEST_FIXED = struct.Struct(">hhih")


def encode_request_header(api_key: int, api_version: int, correlation_id: int, client_id: bytes) -> bytes:
    """Request header v1, or v2 (an empty tagged-field section) for flexible versions."""
    head = _REQUEST_FIXED.pack(api_key, api_version, correlation_id, len(client_id)) + client_id
    return head + b"\x00" if is_flexible(api_key, api_version) else head


def parse_response_header(frame: memoryview, api_key: int, api_version: int) -> tuple[int, int]:
    """(correlation_id, body offset) of a response frame; raises DecodeError.

    Response header v1 (flexible versions, except ApiVersions') carries tagged fields, skipped here.
    """
    r = Reader(frame)
    correlation_id = r.int32()
    if api_key != ApiKey.API_VERSIONS and is_flexible(api_key, api_version):
        r.skip_tagged_fields()
    return correlation_id, r.pos
