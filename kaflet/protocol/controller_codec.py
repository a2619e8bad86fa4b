"""LeaderAndIsr v5 and UpdateMetadata v7, requests and responses, by hand.

These carry a state per partition: after a controller change or a restart, every partition of
the cluster. At 20,000 partitions the generic codec took about 0.1 s to build such a request's
objects, 0.1 s to encode them and 0.1 s to decode them on the receiving broker, each on an
event loop that also serves clients. Here the messages are plain slotted objects, packed and
parsed in one pass with ``struct``. They have the fields the generic codec's objects have (the
``controller_messages`` Protocols) and the same ``encode(version=...)``, so the controller's
channel sends either, and the broker applies either. The layouts are
kaflet/protocol/schemas/*.json (flexible versions: compact arrays and strings, tagged fields);
tests compare bytes and objects with the generic codec's.
"""

from __future__ import annotations

import gc
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from kaflet.protocol.primitives import DecodeError, Reader, uvarint_bytes

LEADER_AND_ISR_VERSION = 5
UPDATE_METADATA_VERSION = 7

_HEAD = struct.Struct(">iiii")  # partition index, controller epoch, leader, leader epoch
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_REQUEST_HEAD = struct.Struct(">iiq")  # controller id, controller epoch, broker epoch
_PARTITION_ERROR = struct.Struct(">ih")
#: Packers of int32 arrays by length: an ISR or replica list is short.
_INT32S = [struct.Struct(f">{n}i") for n in range(127)]

T = TypeVar("T")
P = TypeVar("P")
Q = TypeVar("Q")
_NO_TAGS = b"\x00"


@dataclass(slots=True)
class PartitionLeadership:
    """What both requests say of a partition first."""

    partition_index: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: list[int]
    zk_version: int
    replicas: list[int]


@dataclass(slots=True)
class LeaderAndIsrPartitionState(PartitionLeadership):
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)
    is_new: bool = False


@dataclass(slots=True)
class LeaderAndIsrTopicState:
    topic_name: str
    topic_id: uuid.UUID
    partition_states: list[LeaderAndIsrPartitionState]


@dataclass(slots=True)
class LeaderAndIsrLiveLeader:
    broker_id: int
    host_name: str
    port: int


@dataclass(slots=True)
class LeaderAndIsrRequest:
    """LeaderAndIsr v5 (``type`` 0: incremental, 1: every partition of the broker)."""

    controller_id: int
    controller_epoch: int
    broker_epoch: int
    type: int
    topic_states: list[LeaderAndIsrTopicState]
    live_leaders: list[LeaderAndIsrLiveLeader]

    def encode(self, version: int = LEADER_AND_ISR_VERSION) -> bytes:
        _check_version("LeaderAndIsr request", version, LEADER_AND_ISR_VERSION)
        out = bytearray(_REQUEST_HEAD.pack(self.controller_id, self.controller_epoch, self.broker_epoch))
        out.append(self.type & 0xFF)
        out += _length(len(self.topic_states))
        for t in self.topic_states:
            out += _string(t.topic_name)
            out += t.topic_id.bytes
            out += _length(len(t.partition_states))
            for p in t.partition_states:
                out += _leader_and_isr_partition(p)
            out.append(0)
        out += _length(len(self.live_leaders))
        for b in self.live_leaders:
            out += _I32.pack(b.broker_id)
            out += _string(b.host_name)
            out += _I32.pack(b.port)
            out.append(0)
        out.append(0)
        return bytes(out)


@dataclass(slots=True)
class LeaderAndIsrPartitionError:
    partition_index: int
    error_code: int


@dataclass(slots=True)
class LeaderAndIsrTopicError:
    topic_id: uuid.UUID
    partition_errors: list[LeaderAndIsrPartitionError]


@dataclass(slots=True)
class LeaderAndIsrResponse:
    """LeaderAndIsr v5's response: an error per partition, topics named by id."""

    error_code: int
    topics: list[LeaderAndIsrTopicError]

    def encode(self, version: int = LEADER_AND_ISR_VERSION) -> bytes:
        _check_version("LeaderAndIsr response", version, LEADER_AND_ISR_VERSION)
        out = bytearray(_I16.pack(self.error_code))
        out += _length(len(self.topics))
        pack = _PARTITION_ERROR.pack
        for t in self.topics:
            out += t.topic_id.bytes
            out += _length(len(t.partition_errors))
            for e in t.partition_errors:
                out += pack(e.partition_index, e.error_code)
                out.append(0)
            out.append(0)
        out.append(0)
        return bytes(out)


@dataclass(slots=True)
class UpdateMetadataPartitionState(PartitionLeadership):
    offline_replicas: list[int] = field(default_factory=list)


@dataclass(slots=True)
class UpdateMetadataTopicState:
    topic_name: str
    topic_id: uuid.UUID
    partition_states: list[UpdateMetadataPartitionState]


@dataclass(slots=True)
class UpdateMetadataEndpoint:
    port: int
    host: str
    listener: str
    security_protocol: int


@dataclass(slots=True)
class UpdateMetadataBroker:
    id: int
    endpoints: list[UpdateMetadataEndpoint]
    rack: str | None


@dataclass(slots=True)
class UpdateMetadataRequest:
    """UpdateMetadata v7."""

    controller_id: int
    controller_epoch: int
    broker_epoch: int
    topic_states: list[UpdateMetadataTopicState]
    live_brokers: list[UpdateMetadataBroker]
    #: Shared by requests that differ only in their broker epoch (the controller's broadcast
    #: to every broker): the topic states, the bulk of the bytes, encoded by the first of them
    #: and reused by the others (about 12 ms a broker at 20,000 partitions). None: not shared.
    encoded_topics: list[bytes] | None = field(default=None, compare=False, repr=False)

    def encode(self, version: int = UPDATE_METADATA_VERSION) -> bytes:
        _check_version("UpdateMetadata request", version, UPDATE_METADATA_VERSION)
        out = bytearray(_REQUEST_HEAD.pack(self.controller_id, self.controller_epoch, self.broker_epoch))
        shared = self.encoded_topics
        if shared:
            out += shared[0]
        else:
            topics = _update_metadata_topics(self.topic_states)
            if shared is not None:
                shared.append(topics)
            out += topics
        out += _length(len(self.live_brokers))
        for b in self.live_brokers:
            out += _I32.pack(b.id)
            out += _length(len(b.endpoints))
            for ep in b.endpoints:
                out += _I32.pack(ep.port)
                out += _string(ep.host)
                out += _string(ep.listener)
                out += _I16.pack(ep.security_protocol)
                out.append(0)
            out += _nullable_string(b.rack)
            out.append(0)
        out.append(0)
        return bytes(out)


@dataclass(slots=True)
class UpdateMetadataResponse:
    """UpdateMetadata v7's response: one error code."""

    error_code: int

    def encode(self, version: int = UPDATE_METADATA_VERSION) -> bytes:
        _check_version("UpdateMetadata response", version, UPDATE_METADATA_VERSION)
        return _I16.pack(self.error_code) + _NO_TAGS


def _update_metadata_topics(topics: list[UpdateMetadataTopicState]) -> bytes:
    """The topic states array of an UpdateMetadata v7 request."""
    out = bytearray(_length(len(topics)))
    for t in topics:
        out += _string(t.topic_name)
        out += t.topic_id.bytes
        out += _length(len(t.partition_states))
        for p in t.partition_states:
            out += _update_metadata_partition(p)
        out.append(0)
    return bytes(out)


# -- encoding helpers ---------------------------------------------------------------------------


def _check_version(what: str, version: int, supported: int) -> None:
    if version != supported:
        raise ValueError(f"{what}: only version {supported} is supported, not {version}")


# A partition state is packed by one struct call for its shape (its arrays' lengths): 0.8 us
# where a pack per field took 2 us. Shapes are few (replication factors, ISR sizes); an array
# of more than _SHAPED items takes the general path and adds no shape.
_SHAPED = 16
_LEADER_AND_ISR_SHAPES: dict[tuple[int, int, int, int], struct.Struct] = {}
_UPDATE_METADATA_SHAPES: dict[tuple[int, int, int], struct.Struct] = {}


def _leader_and_isr_partition(p: LeaderAndIsrPartitionState) -> bytes:
    isr, replicas, adding, removing = p.isr, p.replicas, p.adding_replicas, p.removing_replicas
    shape = (len(isr), len(replicas), len(adding), len(removing))
    packer = _LEADER_AND_ISR_SHAPES.get(shape)
    if packer is None:
        if max(shape) > _SHAPED:
            out = bytearray()
            _pack_leadership(out, p)
            return bytes(out + _int32s(adding) + _int32s(removing) + bytes((1 if p.is_new else 0, 0)))
        # head, ISR, ZooKeeper version, replicas, adding, removing, is_new, no tagged fields
        packer = _LEADER_AND_ISR_SHAPES[shape] = struct.Struct(">4iB{}iiB{}iB{}iB{}iBB".format(*shape))
    return packer.pack(p.partition_index, p.controller_epoch, p.leader, p.leader_epoch, shape[0] + 1, *isr,
                       p.zk_version, shape[1] + 1, *replicas, shape[2] + 1, *adding, shape[3] + 1, *removing,
                       1 if p.is_new else 0, 0)


def _update_metadata_partition(p: UpdateMetadataPartitionState) -> bytes:
    isr, replicas, offline = p.isr, p.replicas, p.offline_replicas
    shape = (len(isr), len(replicas), len(offline))
    packer = _UPDATE_METADATA_SHAPES.get(shape)
    if packer is None:
        if max(shape) > _SHAPED:
            out = bytearray()
            _pack_leadership(out, p)
            return bytes(out + _int32s(offline) + b"\x00")
        packer = _UPDATE_METADATA_SHAPES[shape] = struct.Struct(">4iB{}iiB{}iB{}iB".format(*shape))
    return packer.pack(p.partition_index, p.controller_epoch, p.leader, p.leader_epoch, shape[0] + 1, *isr,
                       p.zk_version, shape[1] + 1, *replicas, shape[2] + 1, *offline, 0)


def _pack_leadership(out: bytearray, p: PartitionLeadership) -> None:
    """The fields both requests' partition states start with (``_leadership_at`` reads them)."""
    out += _HEAD.pack(p.partition_index, p.controller_epoch, p.leader, p.leader_epoch)
    out += _int32s(p.isr)
    out += _I32.pack(p.zk_version)
    out += _int32s(p.replicas)


def _length(n: int) -> bytes:
    """A compact array's (or string's) length prefix: n + 1 as an unsigned varint."""
    return bytes((n + 1,)) if n < 127 else uvarint_bytes(n + 1)


def _int32s(values: list[int]) -> bytes:
    n = len(values)
    packer = _INT32S[n] if n < len(_INT32S) else struct.Struct(f">{n}i")
    return _length(n) + packer.pack(*values)


def _string(s: str) -> bytes:
    b = s.encode()
    return _length(len(b)) + b


def _nullable_string(s: str | None) -> bytes:
    return b"\x00" if s is None else _string(s)


# -- decoding -----------------------------------------------------------------------------------
#
# The parsers read a bytes copy of the body with struct.unpack_from and plain indexing, inline:
# at ~1 us a partition a method call per field would double the cost. Reading past the end
# raises struct.error or IndexError, which become DecodeError; every array count is checked
# against the bytes left before its items are read, so a hostile count builds nothing.

_FAILURES = (struct.error, IndexError, ValueError)


def _count(buf: bytes, pos: int, min_item_size: int) -> tuple[int, int]:
    """A compact array's item count (not null) and the position after it."""
    b = buf[pos]
    if b < 0x80:
        n, pos = b - 1, pos + 1
    else:
        r = Reader(buf, pos)
        n, pos = r.uvarint() - 1, r.pos
    if n < 0:
        raise DecodeError(f"null where an array is required at byte {pos}")
    if n * min_item_size > len(buf) - pos:
        raise DecodeError(f"{n} items cannot fit in the {len(buf) - pos} bytes left")
    return n, pos


def _int32s_at(buf: bytes, pos: int) -> tuple[list[int], int]:
    b = buf[pos]
    if 0 < b < 0x80:  # the usual case: a short array
        s = _INT32S[b - 1]
        return list(s.unpack_from(buf, pos + 1)), pos + 1 + s.size
    n, pos = _count(buf, pos, 4)
    s = struct.Struct(f">{n}i")
    return list(s.unpack_from(buf, pos)), pos + s.size


def _string_at(buf: bytes, pos: int, nullable: bool = False) -> tuple[str | None, int]:
    b = buf[pos]
    if b == 0 and nullable:
        return None, pos + 1
    n, pos = _count(buf, pos, 1)
    end = pos + n
    if end > len(buf):
        raise DecodeError("a string runs past the end")
    return buf[pos:end].decode(), end


def _name_at(buf: bytes, pos: int) -> tuple[str, int]:
    s, pos = _string_at(buf, pos)
    assert s is not None
    return s, pos


def _tags_at(buf: bytes, pos: int) -> int:
    """Skip a tagged-fields section (none of these messages defines a tag)."""
    if buf[pos] == 0:
        return pos + 1
    r = Reader(buf, pos)
    r.skip_tagged_fields()
    return r.pos


def _uuid_at(buf: bytes, pos: int) -> uuid.UUID:
    raw = buf[pos:pos + 16]
    if len(raw) != 16:
        raise DecodeError("a topic id runs past the end")
    return uuid.UUID(bytes=raw)


def _parse(what: str, body: bytes | bytearray | memoryview, parser: Callable[[bytes], tuple[T, int]]) -> T:
    buf = bytes(body)
    # The collector is paused while a message's objects are built: 20,000 partitions make
    # ~100,000 objects, none in a cycle, and the collections their allocation set off took
    # as long as the parse (gc.freeze() at start-up keeps the broker's own heap out of them).
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        message, pos = parser(buf)
    except DecodeError as exc:
        raise DecodeError(f"malformed {what}: {exc}") from None
    except _FAILURES as exc:  # read past the end, bad UTF-8, a varint too long
        raise DecodeError(f"malformed {what}: {exc or 'truncated'}") from None
    finally:
        if paused:
            gc.enable()
    if pos != len(buf):
        raise DecodeError(f"malformed {what}: {len(buf) - pos} bytes left over")
    return message


_Leadership = tuple[int, int, int, int, list[int], int, list[int], int]


def _leadership_at(buf: bytes, pos: int) -> _Leadership:
    """The fields both requests' partition states start with: index, controller epoch, leader,
    leader epoch, ISR, ZooKeeper version, replicas; and the position after them."""
    index, c_epoch, leader, l_epoch = _HEAD.unpack_from(buf, pos)
    # The short arrays' case inline: a call each would cost as much as the rest.
    b = buf[pos + 16]
    if 0 < b < 0x80:
        s = _INT32S[b - 1]
        isr = list(s.unpack_from(buf, pos + 17))
        pos += 17 + s.size
    else:
        isr, pos = _int32s_at(buf, pos + 16)
    zk_version = _I32.unpack_from(buf, pos)[0]
    b = buf[pos + 4]
    if 0 < b < 0x80:
        s = _INT32S[b - 1]
        replicas = list(s.unpack_from(buf, pos + 5))
        pos += 5 + s.size
    else:
        replicas, pos = _int32s_at(buf, pos + 4)
    return index, c_epoch, leader, l_epoch, isr, zk_version, replicas, pos


def decode_leader_and_isr_request(body: bytes | bytearray | memoryview) -> LeaderAndIsrRequest:
    """Parse a LeaderAndIsr v5 request body; raises DecodeError for anything malformed."""
    return _parse("LeaderAndIsrRequest v5", body, _leader_and_isr_request)


def _leader_and_isr_request(buf: bytes) -> tuple[LeaderAndIsrRequest, int]:
    controller_id, controller_epoch, broker_epoch = _REQUEST_HEAD.unpack_from(buf, 0)
    type_ = buf[16] - 256 if buf[16] > 127 else buf[16]
    # a partition: its head 16, the ZooKeeper version 4, four array counts, is_new, tags
    topics, pos = _topics_at(buf, 17, 26, _leader_and_isr_partition_at, LeaderAndIsrTopicState)
    leaders = []
    n, pos = _count(buf, pos, 10)
    for _ in range(n):
        broker_id = _I32.unpack_from(buf, pos)[0]
        host, pos = _name_at(buf, pos + 4)
        port = _I32.unpack_from(buf, pos)[0]
        pos = _tags_at(buf, pos + 4)
        leaders.append(LeaderAndIsrLiveLeader(broker_id, host, port))
    pos = _tags_at(buf, pos)
    return LeaderAndIsrRequest(controller_id, controller_epoch, broker_epoch, type_, topics, leaders), pos


def _leader_and_isr_partition_at(buf: bytes, pos: int) -> tuple[LeaderAndIsrPartitionState, int]:
    index, c_epoch, leader, l_epoch, isr, zk_version, replicas, pos = _leadership_at(buf, pos)
    adding: list[int]
    removing: list[int]
    if buf[pos] == 1 and buf[pos + 1] == 1:  # nothing being reassigned
        adding, removing = [], []
        pos += 2
    else:
        adding, pos = _int32s_at(buf, pos)
        removing, pos = _int32s_at(buf, pos)
    is_new = buf[pos] != 0
    pos = pos + 2 if buf[pos + 1] == 0 else _tags_at(buf, pos + 1)
    return LeaderAndIsrPartitionState(index, c_epoch, leader, l_epoch, isr, zk_version, replicas, adding, removing,
                                      is_new), pos


def _topics_at(buf: bytes, pos: int, min_partition_size: int, partition_at: Callable[[bytes, int], tuple[P, int]],
               topic: Callable[[str, uuid.UUID, list[P]], Q]) -> tuple[list[Q], int]:
    """A topic states array (name, id, partition states) of either request."""
    topics = []
    n_topics, pos = _count(buf, pos, 19)
    for _ in range(n_topics):
        name, pos = _name_at(buf, pos)
        topic_id = _uuid_at(buf, pos)
        n, pos = _count(buf, pos + 16, min_partition_size)
        states = []
        for _ in range(n):
            state, pos = partition_at(buf, pos)
            states.append(state)
        pos = _tags_at(buf, pos)
        topics.append(topic(name, topic_id, states))
    return topics, pos


def decode_update_metadata_request(body: bytes | bytearray | memoryview) -> UpdateMetadataRequest:
    """Parse an UpdateMetadata v7 request body; raises DecodeError for anything malformed."""
    return _parse("UpdateMetadataRequest v7", body, _update_metadata_request)


def _update_metadata_request(buf: bytes) -> tuple[UpdateMetadataRequest, int]:
    controller_id, controller_epoch, broker_epoch = _REQUEST_HEAD.unpack_from(buf, 0)
    # a partition: its head 16, the ZooKeeper version 4, three array counts, tags
    topics, pos = _topics_at(buf, 16, 24, _update_metadata_partition_at, UpdateMetadataTopicState)
    brokers = []
    n_brokers, pos = _count(buf, pos, 7)
    for _ in range(n_brokers):
        broker_id = _I32.unpack_from(buf, pos)[0]
        endpoints = []
        n, pos = _count(buf, pos + 4, 9)
        for _ in range(n):
            port = _I32.unpack_from(buf, pos)[0]
            host, pos = _name_at(buf, pos + 4)
            listener, pos = _name_at(buf, pos)
            protocol = _I16.unpack_from(buf, pos)[0]
            pos = _tags_at(buf, pos + 2)
            endpoints.append(UpdateMetadataEndpoint(port, host, listener, protocol))
        rack, pos = _string_at(buf, pos, nullable=True)
        pos = _tags_at(buf, pos)
        brokers.append(UpdateMetadataBroker(broker_id, endpoints, rack))
    pos = _tags_at(buf, pos)
    return UpdateMetadataRequest(controller_id, controller_epoch, broker_epoch, topics, brokers), pos


def _update_metadata_partition_at(buf: bytes, pos: int) -> tuple[UpdateMetadataPartitionState, int]:
    index, c_epoch, leader, l_epoch, isr, zk_version, replicas, pos = _leadership_at(buf, pos)
    offline: list[int]
    if buf[pos] == 1:
        offline = []
        pos += 1
    else:
        offline, pos = _int32s_at(buf, pos)
    pos = pos + 1 if buf[pos] == 0 else _tags_at(buf, pos)
    return UpdateMetadataPartitionState(index, c_epoch, leader, l_epoch, isr, zk_version, replicas, offline), pos


def decode_leader_and_isr_response(body: bytes | bytearray | memoryview) -> LeaderAndIsrResponse:
    """Parse a LeaderAndIsr v5 response body; raises DecodeError for anything malformed."""
    return _parse("LeaderAndIsrResponse v5", body, _leader_and_isr_response)


def _leader_and_isr_response(buf: bytes) -> tuple[LeaderAndIsrResponse, int]:
    error_code = _I16.unpack_from(buf, 0)[0]
    error, Error = _PARTITION_ERROR.unpack_from, LeaderAndIsrPartitionError
    topics = []
    n_topics, pos = _count(buf, 2, 18)
    for _ in range(n_topics):
        topic_id = _uuid_at(buf, pos)
        n, pos = _count(buf, pos + 16, 7)
        errors = []
        for _ in range(n):
            index, code = error(buf, pos)
            pos = pos + 7 if buf[pos + 6] == 0 else _tags_at(buf, pos + 6)
            errors.append(Error(index, code))
        pos = _tags_at(buf, pos)
        topics.append(LeaderAndIsrTopicError(topic_id, errors))
    return LeaderAndIsrResponse(error_code, topics), _tags_at(buf, pos)


def decode_update_metadata_response(body: bytes | bytearray | memoryview) -> UpdateMetadataResponse:
    """Parse an UpdateMetadata v7 response body; raises DecodeError for anything malformed."""
    return _parse("UpdateMetadataResponse v7", body,
                  lambda buf: (UpdateMetadataResponse(_I16.unpack_from(buf, 0)[0]), _tags_at(buf, 2)))
