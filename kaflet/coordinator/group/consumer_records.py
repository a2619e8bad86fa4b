"""The records of KIP-848's consumer groups in __consumer_offsets, byte for byte as Kafka 4.x
writes them (key versions 3-8; values v0, flexible), and their replay on load.

A group is the set of its records: its epoch (ConsumerGroupMetadata, key 3), its subscribed
topics' partition counts (ConsumerGroupPartitionMetadata, key 4), each member's subscription
(ConsumerGroupMemberMetadata, key 5), the target assignment's epoch (key 6) and each member's
target (key 7), and each member's current epoch, state and partitions
(ConsumerGroupCurrentMemberAssignment, key 8). ``encode_group`` gives that set for a group; the
coordinator writes what changed since its last write and a tombstone for what is gone, so the
compacted topic always holds the group's last state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kaflet.coordinator.group.assignors import Assignment, TopicId
from kaflet.coordinator.group.consumer_group import ConsumerGroup, ConsumerGroupMember, MemberState
from kaflet.protocol.primitives import DecodeError, Reader, Writer

METADATA_KEY = 3
PARTITION_METADATA_KEY = 4
MEMBER_METADATA_KEY = 5
TARGET_METADATA_KEY = 6
TARGET_MEMBER_KEY = 7
CURRENT_ASSIGNMENT_KEY = 8
KEY_VERSIONS = range(METADATA_KEY, CURRENT_ASSIGNMENT_KEY + 1)
_WITH_MEMBER = {MEMBER_METADATA_KEY, TARGET_MEMBER_KEY, CURRENT_ASSIGNMENT_KEY}
#: MemberState as Kafka stores it (its MemberState.value()).
_STATE_CODES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1, MemberState.UNRELEASED_PARTITIONS: 2}
_STATES = {v: k for k, v in _STATE_CODES.items()}


@dataclass(slots=True)
class MemberRecord:
    """A member's subscription as stored (ConsumerGroupMemberMetadataValue)."""

    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None


@dataclass(slots=True)
class CurrentRecord:
    """A member's reconciliation as stored (ConsumerGroupCurrentMemberAssignmentValue)."""

    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: Assignment
    revoking: Assignment


@dataclass(slots=True)
class ConsumerGroupRecords:
    """What the replay of a partition left of one consumer group."""

    epoch: int | None = None
    partition_metadata: dict[str, tuple[TopicId, int]] = field(default_factory=dict)
    members: dict[str, MemberRecord] = field(default_factory=dict)
    target_epoch: int = 0
    targets: dict[str, Assignment] = field(default_factory=dict)
    current: dict[str, CurrentRecord] = field(default_factory=dict)


# ---- encoding ---------------------------------------------------------------------------


def _key(version: int, group_id: str, member_id: str | None = None) -> bytes:
    w = Writer()
    w.int16(version)
    w.string(group_id, compact=False)
    if member_id is not None:
        w.string(member_id, compact=False)
    return bytes(w.buf)


def _value(write: list[tuple[str, object]]) -> bytes:
    """A flexible v0 value from (kind, value) fields, ending with no tagged fields."""
    w = Writer()
    w.int16(0)
    for kind, v in write:
        if kind == "int32":
            assert isinstance(v, int)
            w.int32(v)
        elif kind == "int8":
            assert isinstance(v, int)
            w.int8(v)
        elif kind == "string":
            assert isinstance(v, str)
            w.string(v, compact=True)
        elif kind == "nstring":
            assert v is None or isinstance(v, str)
            w.nullable_string(v, compact=True)
        elif kind == "strings":
            assert isinstance(v, list)
            w.array_len(len(v), compact=True)
            for s in v:
                w.string(s, compact=True)
        elif kind == "partitions":
            assert isinstance(v, dict)
            _partitions(w, v)
    w.tagged_fields(compact=True)
    return bytes(w.buf)


def _partitions(w: Writer, a: Assignment) -> None:
    w.array_len(len(a), compact=True)
    for t, ps in sorted(a.items()):
        w.raw(t)
        w.array_len(len(ps), compact=True)
        for p in sorted(ps):
            w.int32(p)
        w.tagged_fields(compact=True)


def _partition_metadata(meta: dict[str, tuple[TopicId, int]]) -> bytes:
    w = Writer()
    w.int16(0)
    w.array_len(len(meta), compact=True)
    for name, (tid, count) in sorted(meta.items()):
        w.raw(tid)
        w.string(name, compact=True)
        w.int32(count)
        w.array_len(0, compact=True)  # no rack information: kaflet's assignors are not rack-aware
        w.tagged_fields(compact=True)
    w.tagged_fields(compact=True)
    return bytes(w.buf)


def encode_group(group: ConsumerGroup) -> dict[bytes, bytes]:
    """Every record that describes the group now, by key."""
    gid = group.group_id
    out = {
        _key(METADATA_KEY, gid): _value([("int32", group.group_epoch)]),
        _key(PARTITION_METADATA_KEY, gid): _partition_metadata(group.subscription_metadata),
        _key(TARGET_METADATA_KEY, gid): _value([("int32", group.assignment_epoch)]),
    }
    for mid, m in group.members.items():
        out[_key(MEMBER_METADATA_KEY, gid, mid)] = _value([
            ("nstring", m.instance_id), ("nstring", m.rack_id), ("string", m.client_id), ("string", m.client_host),
            ("strings", list(m.subscribed_topic_names)), ("nstring", m.subscribed_topic_regex),
            ("int32", m.rebalance_timeout_ms), ("nstring", m.server_assignor)])
        out[_key(CURRENT_ASSIGNMENT_KEY, gid, mid)] = _value([
            ("int32", m.member_epoch), ("int32", m.previous_member_epoch), ("int8", _STATE_CODES[m.state]),
            ("partitions", m.assigned), ("partitions", m.revoking)])
    for mid, target in group.target.items():
        out[_key(TARGET_MEMBER_KEY, gid, mid)] = _value([("partitions", target)])
    return out


def changes(before: dict[bytes, bytes], after: dict[bytes, bytes]) -> list[tuple[bytes, bytes | None]]:
    """The records that turn `before` into `after`: new or changed values, tombstones for the rest.
    The group's own epoch record's tombstone goes last, as Kafka deletes a group."""
    out: list[tuple[bytes, bytes | None]] = [(k, v) for k, v in after.items() if before.get(k) != v]
    gone = [k for k in before if k not in after]
    gone.sort(key=lambda k: -int.from_bytes(k[:2], "big"))
    return out + [(k, None) for k in gone]


# ---- replay -----------------------------------------------------------------------------


def _read_partitions(r: Reader) -> Assignment:
    out: dict[TopicId, frozenset[int]] = {}
    for _ in range(r.compact_array_len(17)):
        tid = r.uuid()
        parts = frozenset(r.int32() for _ in range(r.compact_array_len(4)))
        r.skip_tagged_fields()
        if parts:
            out[tid] = parts
    return out


def _value_reader(value: bytes) -> Reader:
    r = Reader(value)
    version = r.int16()
    if version != 0:
        raise DecodeError(f"unknown consumer group record value version {version}")
    return r


def replay(groups: dict[str, ConsumerGroupRecords], key: bytes | memoryview, value: bytes | None) -> None:
    """Apply one record of key version 3-8 (a None value deletes what the key names)."""
    r = Reader(key)
    version = r.int16()
    gid = r.string()
    mid = r.string() if version in _WITH_MEMBER else None
    if value is None:
        group = groups.get(gid)
        if group is None:
            return
        if version == METADATA_KEY:
            del groups[gid]
        elif version == PARTITION_METADATA_KEY:
            group.partition_metadata = {}
        elif version == MEMBER_METADATA_KEY:
            group.members.pop(mid or "", None)
        elif version == TARGET_MEMBER_KEY:
            group.targets.pop(mid or "", None)
        elif version == CURRENT_ASSIGNMENT_KEY:
            group.current.pop(mid or "", None)
        return
    group = groups.setdefault(gid, ConsumerGroupRecords())
    v = _value_reader(value)
    if version == METADATA_KEY:
        group.epoch = v.int32()
    elif version == PARTITION_METADATA_KEY:
        meta = {}
        for _ in range(v.compact_array_len(22)):
            tid = v.uuid()
            name = v.compact_string()
            count = v.int32()
            for _p in range(v.compact_array_len(6)):
                v.int32()
                for _r in range(v.compact_array_len(1)):
                    v.compact_string()
                v.skip_tagged_fields()
            v.skip_tagged_fields()
            meta[name] = (tid, count)
        group.partition_metadata = meta
    elif version == MEMBER_METADATA_KEY:
        group.members[mid or ""] = MemberRecord(
            instance_id=v.compact_nullable_string(), rack_id=v.compact_nullable_string(),
            client_id=v.compact_string(), client_host=v.compact_string(),
            subscribed_topic_names=[v.compact_string() for _ in range(v.compact_array_len(1))],
            subscribed_topic_regex=v.compact_nullable_string(), rebalance_timeout_ms=v.int32(),
            server_assignor=v.compact_nullable_string())
    elif version == TARGET_METADATA_KEY:
        group.target_epoch = v.int32()
    elif version == TARGET_MEMBER_KEY:
        group.targets[mid or ""] = _read_partitions(v)
    elif version == CURRENT_ASSIGNMENT_KEY:
        epoch, previous, state = v.int32(), v.int32(), v.int8()
        group.current[mid or ""] = CurrentRecord(epoch, previous, _STATES.get(state, MemberState.STABLE),
                                                 _read_partitions(v), _read_partitions(v))


def restore(group_id: str, rec: ConsumerGroupRecords) -> ConsumerGroup | None:
    """The group its replayed records describe; None when its epoch record is gone (deleted)."""
    if rec.epoch is None:
        return None
    group = ConsumerGroup(group_id)
    group.group_epoch = rec.epoch
    group.assignment_epoch = rec.target_epoch
    group.subscription_metadata = dict(rec.partition_metadata)
    group.target = {m: a for m, a in rec.targets.items() if m in rec.members}
    for mid, mr in rec.members.items():
        cur = rec.current.get(mid)
        member = ConsumerGroupMember(
            member_id=mid, instance_id=mr.instance_id, rack_id=mr.rack_id, client_id=mr.client_id,
            client_host=mr.client_host, rebalance_timeout_ms=mr.rebalance_timeout_ms,
            subscribed_topic_names=list(mr.subscribed_topic_names), subscribed_topic_regex=mr.subscribed_topic_regex,
            server_assignor=mr.server_assignor)
        if cur is not None:
            member.member_epoch, member.previous_member_epoch, member.state = (
                cur.member_epoch, cur.previous_member_epoch, cur.state)
            member.assigned, member.revoking = cur.assigned, cur.revoking
        group.add(member)
    group.persisted = encode_group(group)
    return group
