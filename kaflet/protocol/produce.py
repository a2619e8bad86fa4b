"""Produce request decoding and response encoding, hand-written for the hot path.

The record sets stay memoryviews into the request frame: nothing is copied until the log
assigns offsets.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kaflet.protocol.primitives import Reader, Writer
from kaflet.protocol.response import OwnEncoding

_PARTITION_RESULT = struct.Struct(">ihqq")
_PARTITION_RESULT_V0 = struct.Struct(">ihq")  # v0-1: no log append time


@dataclass(slots=True)
class ProducePartition:
    """One partition's record set of a produce request."""

    index: int
    records: memoryview | None


@dataclass(slots=True)
class ProduceTopic:
    name: str
    partitions: list[ProducePartition]


@dataclass(slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[ProduceTopic]


def decode_produce_request(body: memoryview, version: int) -> ProduceRequest:
    """Decode a Produce request body (v0 and later; v0-2 have no transactional id)."""
    r = Reader(body)
    flexible = version >= 9
    if flexible:
        txn = r.compact_nullable_string()
        acks = r.int16()
        timeout = r.int32()
        topics = []
        for _ in range(r.compact_array_len(2)):
            name = r.compact_string()
            parts = []
            for _ in range(r.compact_array_len(6)):
                idx = r.int32()
                records = r.compact_nullable_bytes()
                r.skip_tagged_fields()
                parts.append(ProducePartition(idx, records))
            r.skip_tagged_fields()
            topics.append(ProduceTopic(name, parts))
        r.skip_tagged_fields()
    else:
        txn = r.nullable_string() if version >= 3 else None
        acks = r.int16()
        timeout = r.int32()
        topics = []
        for _ in range(r.array_len(6)):
            name = r.string()
            parts = []
            for _ in range(r.array_len(8)):
                idx = r.int32()
                parts.append(ProducePartition(idx, r.nullable_bytes()))
            topics.append(ProduceTopic(name, parts))
    return ProduceRequest(txn, acks, timeout, topics)


@dataclass(slots=True)
class PartitionProduceResult:
    """What the broker answers for one partition."""

    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)


def encode_produce_response(
    results: list[tuple[str, list[PartitionProduceResult]]], throttle_ms: int, version: int
) -> bytes:
    """Encode a Produce response body (v1 adds the throttle time, v2 the log append time)."""
    flexible = version >= 9
    w = Writer()
    w.array_len(len(results), flexible)
    for name, parts in results:
        w.string(name, flexible)
        w.array_len(len(parts), flexible)
        for p in parts:
            if version >= 2:
                w.raw(_PARTITION_RESULT.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms))
            else:
                w.raw(_PARTITION_RESULT_V0.pack(p.index, p.error_code, p.base_offset))
            if version >= 5:
                w.int64(p.log_start_offset)
            if version >= 8:
                w.array_len(len(p.record_errors), flexible)
                for batch_index, msg in p.record_errors:
                    w.int32(batch_index)
                    w.nullable_string(msg, flexible)
                    w.tagged_fields(flexible)
                w.nullable_string(p.error_message, flexible)
            w.tagged_fields(flexible)
        w.tagged_fields(flexible)
    if version >= 1:
        w.int32(throttle_ms)
    w.tagged_fields(flexible)
    return bytes(w.buf)


@dataclass(slots=True)
class ProduceResponse(OwnEncoding):
    """A Produce response waiting for its throttle time (see protocol/response.py)."""

    results: list[tuple[str, list[PartitionProduceResult]]]
    version: int

    def encode(self, throttle_time_ms: int) -> bytes:
        return encode_produce_response(self.results, throttle_time_ms, self.version)
