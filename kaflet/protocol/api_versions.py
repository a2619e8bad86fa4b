"""ApiVersions response, hand-written so its exact bytes are under our control.

librdkafka 2.0 cannot parse a v3 response that carries top-level tagged fields, so none are
written (there are no features to report).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from kaflet.protocol.primitives import Reader, Writer
from kaflet.protocol.response import OwnEncoding


def decode_api_versions_request(body: memoryview, version: int) -> tuple[str, str]:
    """(client_software_name, client_software_version); empty strings before v3."""
    if version < 3:
        return "", ""
    r = Reader(body)
    name = r.compact_string()
    ver = r.compact_string()
    r.skip_tagged_fields()
    return name, ver


def encode_api_versions_response(
    error_code: int, ranges: Sequence[tuple[int, int, int]], throttle_ms: int, version: int
) -> bytes:
    """Encode ApiVersionsResponse; `ranges` are (api_key, min_version, max_version)."""
    flexible = version >= 3
    w = Writer()
    w.int16(error_code)
    w.array_len(len(ranges), flexible)
    for key, lo, hi in ranges:
        w.int16(key)
        w.int16(lo)
        w.int16(hi)
        w.tagged_fields(flexible)
    if version >= 1:
        w.int32(throttle_ms)
    w.tagged_fields(flexible)
    return bytes(w.buf)


#: Every client asks on every connection and the answer is the same bytes each time (~60 API
#: ranges), so it is encoded once per error, throttle time and version; the bound covers the
#: throttle times of clients over a request quota.
_encoded = functools.lru_cache(maxsize=256)(encode_api_versions_response)


@dataclass(slots=True)
class ApiVersionsResponse(OwnEncoding):
    """An ApiVersions response waiting for its throttle time (v1 and later carry one)."""

    error_code: int
    ranges: tuple[tuple[int, int, int], ...]
    version: int

    def encode(self, throttle_time_ms: int) -> bytes:
        return _encoded(self.error_code, self.ranges, throttle_time_ms, self.version)
