"""Fetch response encoding as a list of chunks: header bytes interleaved with file regions.

The record data of each partition is whatever the log returned (file regions that the network
layer sends with sendfile, or bytes); only the framing around it is built here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Protocol

from kaflet.protocol.primitives import Writer, uvarint_bytes

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
    return sum(len(r) if isinstance(r, bytes | bytearray | memoryview) else r.size for r in records)


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
