"""Fetch response encoding as a list of chunks: header bytes interleaved with file regions.

The record data of each partition is whatever the log returned (file regions that the network
layer sends with sendfile, or bytes); only the framing around it is built here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Protocol

from kaflet.protocol.primitives import Writer, uvarint_bytes
from kaflet.protocol.response import OwnEncoding

_PART_HEAD = struct.Struct(">ihqq")


class Region(Protocol):
    """A run of bytes to send: a file region, or anything with a size."""

    size: int


@dataclass(slots=True)
class PartitionFetchData:
    """One partition's part of a fetch response."""

    index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: list[Region | bytes] = field(default_factory=list)
    preferred_read_replica: int = -1


def _records_size(records: list[Region | bytes]) -> int:
    # hasattr, not isinstance(r, bytes | ...): measured 3x faster over a response's chunks.
    return sum(r.size if hasattr(r, "size") else len(r) for r in records)


def encode_fetch_response(
    topics: list[tuple[str, list[PartitionFetchData]]],
    throttle_ms: int,
    version: int,
    error_code: int = 0,
    session_id: int = 0,
) -> list[bytes | Region]:
    """Encode a Fetch response body (v4-v12) as chunks; regions are passed through untouched."""
    flexible = version >= 12
    chunks: list[bytes | Region] = []
    w = Writer()
    w.int32(throttle_ms)
    if version >= 7:
        w.int16(error_code)
        w.int32(session_id)
    w.array_len(len(topics), flexible)
    for name, parts in topics:
        w.string(name, flexible)
        w.array_len(len(parts), flexible)
        for p in parts:
            w.raw(_PART_HEAD.pack(p.index, p.error_code, p.high_watermark, p.last_stable_offset))
            if version >= 5:
                w.int64(p.log_start_offset)
            w.array_len(0, flexible)  # aborted transactions: none without transactions
            if version >= 11:
                w.int32(p.preferred_read_replica)
            size = _records_size(p.records)
            if flexible:
                w.raw(uvarint_bytes(size + 1))
            else:
                w.int32(size)
            if size:
                chunks.append(bytes(w.buf))
                w = Writer()
                chunks.extend(r for r in p.records if (len(r) if isinstance(r, bytes) else r.size))
            w.tagged_fields(flexible)
        w.tagged_fields(flexible)
    w.tagged_fields(flexible)
    chunks.append(bytes(w.buf))
    return chunks


@dataclass(slots=True)
class FetchResponse(OwnEncoding):
    """A Fetch response waiting for its throttle time (see protocol/response.py).

    The fetch quota charges a response its size before the throttle time is known. The size
    does not depend on the throttle time, and a throttled fetch is answered by `without_data()`
    instead, so `size()` encodes the body (with throttle time 0) and keeps it for `encode(0)`:
    the data's framing is still encoded once.
    """

    topics: list[tuple[str, list[PartitionFetchData]]]
    version: int
    error_code: int = 0
    session_id: int = 0
    _unthrottled: list[bytes | Region] | None = field(default=None, init=False, repr=False, compare=False)

    def encode(self, throttle_time_ms: int) -> list[bytes | Region]:
        if throttle_time_ms == 0 and self._unthrottled is not None:
            return self._unthrottled
        return encode_fetch_response(self.topics, throttle_time_ms, self.version, self.error_code, self.session_id)

    def size(self) -> int:
        """The encoded body's size in bytes, record data included (what the fetch quota counts)."""
        if self._unthrottled is None:
            self._unthrottled = self.encode(0)
        return _records_size(self._unthrottled)

    def without_data(self) -> FetchResponse:
        """The answer to a throttled fetch: no partitions, so none of its data is sent."""
        return FetchResponse([], self.version)
