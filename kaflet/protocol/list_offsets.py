"""ListOffsets (key 2) requests and responses, hand-written for every version the broker serves (0-7).

The active controller asks every leader for the offsets of each of its partitions at each
scrape of kafka_exporter's series (kaflet/metrics/cluster_view.py): at 10,000 partitions the
generic codec's ~25 us a partition to encode and ~8 us to decode, on each side, held both event
loops for over a second. These take ~1 us. The attribute names are the generic codec's, so the
handler and the gateway's renumbering (server/renumbering.py) walk them the same way;
tests/unit/test_list_offsets_codec.py checks every version byte for byte against the generic codec.

Versions: v1 drops v0's max_num_offsets and old-style offset list for one timestamp and offset,
v2 adds isolation_level and the throttle time, v4 the leader epochs, v6 is flexible, v7 the same
as v6 (it allows the max-timestamp lookup).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kaflet.protocol.primitives import Reader, Writer
from kaflet.protocol.response import OwnEncoding

MAX_VERSION = 7
_FLEXIBLE = 6

_I64 = struct.Struct(">q")
_I32_I64 = struct.Struct(">iq")
_I32_I32_I64 = struct.Struct(">iiq")
_I32_I64_I32 = struct.Struct(">iqi")
_I32_I16 = struct.Struct(">ih")
_I64_I64 = struct.Struct(">qq")
_I64_I64_I32 = struct.Struct(">qqi")


@dataclass(slots=True)
class ListOffsetsPartition:
    """One partition asked for: the offset at `timestamp` (-1 latest, -2 earliest, -3 max timestamp)."""

    partition_index: int
    timestamp: int
    current_leader_epoch: int = -1
    #: v0 only: how many offsets to answer (the broker answers one).
    max_num_offsets: int = 1


@dataclass(slots=True)
class ListOffsetsTopic:
    name: str
    partitions: list[ListOffsetsPartition]


@dataclass(slots=True)
class ListOffsetsRequest:
    """A decoded ListOffsets request (replica_id -1: a consumer; >= 0: a follower)."""

    replica_id: int
    isolation_level: int
    topics: list[ListOffsetsTopic]


def encode_list_offsets_request(req: ListOffsetsRequest, version: int) -> bytes:
    """The request body of `version`."""
    flexible = version >= _FLEXIBLE
    w = Writer()
    w.int32(req.replica_id)
    if version >= 2:
        w.int8(req.isolation_level)
    w.array_len(len(req.topics), flexible)
    for t in req.topics:
        w.string(t.name, flexible)
        w.array_len(len(t.partitions), flexible)
        for p in t.partitions:
            if version >= 4:
                w.raw(_I32_I32_I64.pack(p.partition_index, p.current_leader_epoch, p.timestamp))
            elif version >= 1:
                w.raw(_I32_I64.pack(p.partition_index, p.timestamp))
            else:
                w.raw(_I32_I64_I32.pack(p.partition_index, p.timestamp, p.max_num_offsets))
            w.tagged_fields(flexible)
        w.tagged_fields(flexible)
    w.tagged_fields(flexible)
    return bytes(w.buf)


def decode_list_offsets_request(body: memoryview | bytes, version: int) -> ListOffsetsRequest:
    """Decode a request body; raises DecodeError for anything malformed."""
    r = Reader(body)
    flexible = version >= _FLEXIBLE
    replica_id = r.int32()
    isolation = r.int8() if version >= 2 else 0
    topics = []
    for _ in range(r.compact_array_len(2) if flexible else r.array_len(6)):
        name = r.compact_string() if flexible else r.string()
        parts = []
        for _ in range(r.compact_array_len(12) if flexible else r.array_len(12)):
            index = r.int32()
            epoch = r.int32() if version >= 4 else -1
            ts = r.int64()
            max_num = r.int32() if version == 0 else 1
            if flexible:
                r.skip_tagged_fields()
            parts.append(ListOffsetsPartition(index, ts, epoch, max_num))
        if flexible:
            r.skip_tagged_fields()
        topics.append(ListOffsetsTopic(name, parts))
    if flexible:
        r.skip_tagged_fields()
    return ListOffsetsRequest(replica_id, isolation, topics)


@dataclass(slots=True)
class ListOffsetsPartitionResponse:
    """One partition's answer (v0: `old_style_offsets`; v1+: `timestamp` and `offset`)."""

    partition_index: int
    error_code: int = 0
    old_style_offsets: list[int] = field(default_factory=list)
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1


@dataclass(slots=True)
class ListOffsetsTopicResponse:
    name: str
    partitions: list[ListOffsetsPartitionResponse]


def encode_list_offsets_response(topics: list[ListOffsetsTopicResponse], throttle_ms: int, version: int) -> bytes:
    """The response body of `version` (the throttle time from v2 on)."""
    flexible = version >= _FLEXIBLE
    w = Writer()
    if version >= 2:
        w.int32(throttle_ms)
    w.array_len(len(topics), flexible)
    for t in topics:
        w.string(t.name, flexible)
        w.array_len(len(t.partitions), flexible)
        for p in t.partitions:
            w.raw(_I32_I16.pack(p.partition_index, p.error_code))
            if version == 0:
                w.array_len(len(p.old_style_offsets), False)
                for offset in p.old_style_offsets:
                    w.raw(_I64.pack(offset))
            elif version >= 4:
                w.raw(_I64_I64_I32.pack(p.timestamp, p.offset, p.leader_epoch))
            else:
                w.raw(_I64_I64.pack(p.timestamp, p.offset))
            w.tagged_fields(flexible)
        w.tagged_fields(flexible)
    w.tagged_fields(flexible)
    return bytes(w.buf)


def read_offsets(body: memoryview | bytes, version: int) -> dict[tuple[str, int], int]:
    """The offset of each (topic, partition) a response body answers without an error (v0: its
    first old-style offset, when it has one); raises DecodeError.

    Plain tuples rather than the response's objects: the active controller reads 10,000 of these
    at each scrape, and tuples of numbers and strings cost the garbage collector nothing after
    its first look at them (cluster_view.py says why that matters)."""
    r = Reader(body)
    flexible = version >= _FLEXIBLE
    if version >= 2:
        r.int32()  # the throttle time: the caller sends a few requests a scrape, not a stream of them
    offsets: dict[tuple[str, int], int] = {}
    for _ in range(r.compact_array_len(2) if flexible else r.array_len(6)):
        name = r.compact_string() if flexible else r.string()
        for _ in range(r.compact_array_len(6) if flexible else r.array_len(6)):
            index = r.int32()
            error = r.int16()
            if version == 0:
                old_style = [r.int64() for _ in range(r.array_len(8))]
                offset = old_style[0] if old_style else None
            else:
                r.int64()  # the timestamp
                offset = r.int64()
                if version >= 4:
                    r.int32()  # the leader epoch
            if flexible:
                r.skip_tagged_fields()
            if error == 0 and offset is not None:
                offsets[(name, index)] = offset
        if flexible:
            r.skip_tagged_fields()
    if flexible:
        r.skip_tagged_fields()
    return offsets


@dataclass(slots=True)
class ListOffsetsResponse(OwnEncoding):
    """A ListOffsets answer waiting for its throttle time (see protocol/response.py)."""

    topics: list[ListOffsetsTopicResponse]
    version: int

    def encode(self, throttle_time_ms: int) -> bytes:
        return encode_list_offsets_response(self.topics, throttle_time_ms, self.version)
