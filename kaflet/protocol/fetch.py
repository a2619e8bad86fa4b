"""Fetch response encoding as a list of chunks: header bytes interleaved with file regions, and
its decoding for replica fetchers.

The record data of each partition is whatever the log returned (file regions that the network
layer sends with sendfile, or bytes); only the framing around it is built here. The decoder
leaves each partition's records as a memoryview into the received buffer, so a follower appends
what the leader sent without copying it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from kaflet.protocol.primitives import DecodeError, Reader, Writer, uvarint_bytes
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


# -- decoding (the follower side) ------------------------------------------------------------

#: Versions the decoder reads (those the encoder writes).
DECODE_VERSIONS = range(4, 13)


class AbortedTransaction(NamedTuple):
    producer_id: int
    first_offset: int


class EpochEndOffset(NamedTuple):
    """DivergingEpoch (tag 0 of a v12+ partition)."""

    epoch: int
    end_offset: int


class LeaderIdAndEpoch(NamedTuple):
    """CurrentLeader (tag 1 of a v12+ partition)."""

    leader_id: int
    leader_epoch: int


class SnapshotId(NamedTuple):
    """SnapshotId (tag 2 of a v12+ partition)."""

    end_offset: int
    epoch: int


@dataclass(slots=True)
class FetchedPartition:
    """One partition of a received Fetch response; `records` is a view into the response buffer."""

    index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[AbortedTransaction] | None
    preferred_read_replica: int
    records: memoryview
    diverging_epoch: EpochEndOffset | None = None
    current_leader: LeaderIdAndEpoch | None = None
    snapshot_id: SnapshotId | None = None


@dataclass(slots=True)
class FetchResponseData:
    """A received Fetch response: topics in the order the leader sent them."""

    throttle_time_ms: int
    error_code: int
    session_id: int
    topics: list[tuple[str, list[FetchedPartition]]]


def decode_fetch_response(body: memoryview | bytes | bytearray, version: int) -> FetchResponseData:
    """Decode a Fetch response body (after the response header), v4-v12; raises DecodeError."""
    if version not in DECODE_VERSIONS:
        raise DecodeError(f"Fetch response v{version} is not decoded here (v4-v12 are)")
    flexible = version >= 12
    r = Reader(body)
    throttle = r.int32()
    error_code = session_id = 0
    if version >= 7:
        error_code = r.int16()
        session_id = r.int32()
    topics: list[tuple[str, list[FetchedPartition]]] = []
    for _ in range(r.compact_array_len() if flexible else r.array_len(4)):
        name = r.compact_string() if flexible else r.string()
        parts = [_partition(r, version, flexible)
                 for _ in range(r.compact_array_len(30) if flexible else r.array_len(30))]
        if flexible:
            r.skip_tagged_fields()
        topics.append((name, parts))
    if flexible:
        r.skip_tagged_fields()
    return FetchResponseData(throttle, error_code, session_id, topics)


def _partition(r: Reader, version: int, flexible: bool) -> FetchedPartition:
    index, error_code, hw, lso = r.int32(), r.int16(), r.int64(), r.int64()
    log_start = r.int64() if version >= 5 else -1
    count = r.uvarint() - 1 if flexible else r.int32()
    aborted: list[AbortedTransaction] | None = None
    if count >= 0:
        if count * 16 > r.remaining():
            raise DecodeError(f"{count} aborted transactions cannot fit in {r.remaining()} bytes")
        aborted = []
        for _ in range(count):
            aborted.append(AbortedTransaction(r.int64(), r.int64()))
            if flexible:
                r.skip_tagged_fields()
    preferred = r.int32() if version >= 11 else -1
    records = (r.compact_nullable_bytes() if flexible else r.nullable_bytes())
    part = FetchedPartition(index, error_code, hw, lso, log_start, aborted, preferred,
                            records if records is not None else memoryview(b""))
    if flexible:
        _partition_tags(r, part)
    return part


def _partition_tags(r: Reader, part: FetchedPartition) -> None:
    for _ in range(r.uvarint()):
        tag = r.uvarint()
        size = r.uvarint()
        end = r.pos + size
        if size < 0 or end > r.end:
            raise DecodeError(f"tagged field {tag} of {size} bytes does not fit")
        sub = Reader(r.buf, r.pos, end)
        if tag == 0:
            part.diverging_epoch = EpochEndOffset(sub.int32(), sub.int64())
        elif tag == 1:
            part.current_leader = LeaderIdAndEpoch(sub.int32(), sub.int32())
        elif tag == 2:
            part.snapshot_id = SnapshotId(sub.int64(), sub.int32())
        r.pos = end  # unknown tags, and the structs' own tagged fields, are skipped


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
