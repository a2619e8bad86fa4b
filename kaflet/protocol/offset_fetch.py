"""OffsetFetch (key 9) v8 responses (many groups in one answer, KIP-709), hand-written.

The active controller asks every coordinator for all its groups' committed offsets at each
scrape of kafka_exporter's series (kaflet/metrics/cluster_view.py): with 10,000 committed
offsets the generic codec's ~25 us an offset to encode held the coordinator's event loop for a
quarter of a second a scrape. The attribute names are the generic codec's, so the handler and the
gateway's renumbering (server/renumbering.py) walk them the same way;
tests/unit/test_list_offsets_codec.py checks the bytes against the generic codec. Older versions
(one group an answer, what consumers send) stay with the generic codec.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kaflet.protocol.primitives import Reader, Writer
from kaflet.protocol.response import OwnEncoding

VERSION = 8

_PARTITION = struct.Struct(">iqi")


@dataclass(slots=True)
class OffsetFetchPartition:
    """One partition's committed offset (-1: none)."""

    partition_index: int
    committed_offset: int
    committed_leader_epoch: int
    metadata: str | None
    error_code: int


@dataclass(slots=True)
class OffsetFetchTopic:
    name: str
    partitions: list[OffsetFetchPartition]


@dataclass(slots=True)
class OffsetFetchGroup:
    group_id: str
    topics: list[OffsetFetchTopic]
    error_code: int


def encode_offset_fetch_response(groups: list[OffsetFetchGroup], throttle_ms: int) -> bytes:
    """A v8 response body."""
    w = Writer()
    w.int32(throttle_ms)
    w.array_len(len(groups), True)
    for g in groups:
        w.string(g.group_id, True)
        w.array_len(len(g.topics), True)
        for t in g.topics:
            w.string(t.name, True)
            w.array_len(len(t.partitions), True)
            for p in t.partitions:
                w.raw(_PARTITION.pack(p.partition_index, p.committed_offset, p.committed_leader_epoch))
                w.nullable_string(p.metadata, True)
                w.int16(p.error_code)
                w.tagged_fields(True)
            w.tagged_fields(True)
        w.int16(g.error_code)
        w.tagged_fields(True)
    w.tagged_fields(True)
    return bytes(w.buf)


def read_committed(body: memoryview | bytes) -> dict[str, dict[tuple[str, int], int]]:
    """The committed offsets of each group a v8 response body answers without an error, by
    (topic, partition), leaving out the partitions with an error or without an offset (-1);
    raises DecodeError. Plain dictionaries rather than the response's objects, for the garbage
    collector's sake (see read_offsets in list_offsets.py)."""
    r = Reader(body)
    r.int32()  # the throttle time: the caller sends a few requests a scrape
    groups: dict[str, dict[tuple[str, int], int]] = {}
    for _ in range(r.compact_array_len(4)):
        group_id = r.compact_string()
        committed: dict[tuple[str, int], int] = {}
        for _ in range(r.compact_array_len(3)):
            name = r.compact_string()
            for _ in range(r.compact_array_len(20)):
                index = r.int32()
                offset = r.int64()
                r.int32()  # the leader epoch
                r.compact_nullable_string()  # the metadata
                error = r.int16()
                r.skip_tagged_fields()
                if error == 0 and offset >= 0:
                    committed[(name, index)] = offset
            r.skip_tagged_fields()
        if r.int16() == 0:
            groups[group_id] = committed
        r.skip_tagged_fields()
    r.skip_tagged_fields()
    return groups


@dataclass(slots=True)
class OffsetFetchResponse(OwnEncoding):
    """A v8 answer waiting for its throttle time (see protocol/response.py)."""

    groups: list[OffsetFetchGroup]

    def encode(self, throttle_time_ms: int) -> bytes:
        return encode_offset_fetch_response(self.groups, throttle_time_ms)
