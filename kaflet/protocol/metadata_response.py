"""Metadata response (key 3, v0-v12), hand-written for the answer about every topic.

A client refreshing its metadata asks about every topic; at 20,000 partitions the generic codec
took about as long to build the answer's objects as to encode them, 100-200 ms together on the
event loop. Here a topic's part of the answer is encoded from the metadata cache's partitions in
one pass, and the broker keeps it until the topic changes (``TopicInfo.wire``), so an unchanged
cluster is answered by joining bytes. The layout is MetadataResponse.json's; tests compare it
with the generic codec's for every version.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kaflet.protocol.primitives import Writer, uvarint_bytes
from kaflet.protocol.response import OwnEncoding

MAX_VERSION = 12
#: The authorized-operations field when they were not asked for (Kafka's default, INT32_MIN).
NO_OPERATIONS = -(2**31)

_I32 = struct.Struct(">i")
_PART_V0 = struct.Struct(">hii")  # error code, index, leader
_PART_V7 = struct.Struct(">hiii")  # + leader epoch
_LEADER_NOT_AVAILABLE = 5


class PartitionState(Protocol):
    """What a partition's entry shows (the metadata cache's PartitionInfo)."""

    @property
    def leader(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def replicas(self) -> list[int]: ...
    @property
    def isr(self) -> list[int]: ...
    @property
    def offline_replicas(self) -> list[int]: ...


def operations_bits(ops: Iterable[int] | None) -> int:
    """The int32 bit field of a set of ACL operation codes (None: not asked for)."""
    if ops is None:
        return NO_OPERATIONS
    bits = 0
    for op in ops:
        bits |= 1 << op
    return bits - (1 << 32) if bits >= 1 << 31 else bits


def _int32_array(values: Sequence[int], flexible: bool) -> bytes:
    head = uvarint_bytes(len(values) + 1) if flexible else _I32.pack(len(values))
    return head + struct.pack(f">{len(values)}i", *values)


def encode_partitions(version: int, partitions: Iterable[tuple[int, PartitionState]]) -> bytes:
    """The partitions array of a topic, (index, state) in the order given. A partition without
    a leader carries LEADER_NOT_AVAILABLE, as Kafka's."""
    flexible = version >= 9
    items = list(partitions)
    out = bytearray(uvarint_bytes(len(items) + 1) if flexible else _I32.pack(len(items)))
    for index, p in items:
        code = 0 if p.leader >= 0 else _LEADER_NOT_AVAILABLE
        if version >= 7:
            out += _PART_V7.pack(code, index, p.leader, p.leader_epoch)
        else:
            out += _PART_V0.pack(code, index, p.leader)
        out += _int32_array(p.replicas, flexible)
        out += _int32_array(p.isr, flexible)
        if version >= 5:
            out += _int32_array(p.offline_replicas, flexible)
        if flexible:
            out.append(0)  # no tagged fields
    return bytes(out)


def encode_topic(version: int, error_code: int, name: str | None, topic_id: bytes, internal: bool,
                 partitions: bytes, operations: int = NO_OPERATIONS) -> bytes:
    """One topic of the answer, its partitions already encoded (``encode_partitions``)."""
    flexible = version >= 9
    w = Writer()
    w.int16(error_code)
    if name is None and version < 12:
        name = ""  # nullable only from v12; earlier versions never name a topic by id
    w.nullable_string(name, flexible)
    if version >= 10:
        w.raw(topic_id)
    if version >= 1:
        w.boolean(internal)
    w.raw(partitions)
    if version >= 8:
        w.int32(operations)
    w.tagged_fields(flexible)
    return bytes(w.buf)


@dataclass(slots=True)
class MetadataBroker:
    """A broker of the answer."""

    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(slots=True)
class MetadataAnswer(OwnEncoding):
    """A Metadata response waiting for its throttle time, each topic already encoded."""

    version: int
    brokers: list[MetadataBroker]
    cluster_id: str | None
    controller_id: int
    topics: list[bytes]
    cluster_operations: int = NO_OPERATIONS

    def encode(self, throttle_time_ms: int) -> bytes:
        v = self.version
        flexible = v >= 9
        w = Writer()
        if v >= 3:
            w.int32(throttle_time_ms)
        w.array_len(len(self.brokers), flexible)
        for b in self.brokers:
            w.int32(b.node_id)
            w.string(b.host, flexible)
            w.int32(b.port)
            if v >= 1:
                w.nullable_string(b.rack, flexible)
            w.tagged_fields(flexible)
        if v >= 2:
            w.nullable_string(self.cluster_id, flexible)
        if v >= 1:
            w.int32(self.controller_id)
        w.array_len(len(self.topics), flexible)
        tail = Writer()
        if 8 <= v <= 10:
            tail.int32(self.cluster_operations)
        tail.tagged_fields(flexible)
        return b"".join((w.buf, *self.topics, tail.buf))
