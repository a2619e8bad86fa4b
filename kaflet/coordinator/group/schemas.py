"""Record formats of __consumer_offsets, byte for byte as Kafka writes them.

Every key and value starts with an int16 schema version. Keys v0/v1 are offset commits (group,
topic, partition), key v2 is a group's metadata (group). Offset commit values are written as
v3 (v1 when the commit carries an explicit expire timestamp), group metadata values as v3,
which is what Kafka 2.8-3.9 write, so Kafka's own tools can read our topic. Reading accepts
every version up to the flexible v4 (compact strings, tagged fields), and ignores unknown keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kaflet.protocol.primitives import DecodeError, Reader, Writer

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3


@dataclass(frozen=True, slots=True)
class OffsetKey:
    """Key of an offset commit record."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    """Key of a group metadata record."""

    group: str


@dataclass(slots=True)
class OffsetValue:
    """A committed offset. expire_timestamp is only stored by value v1 (-1: none)."""

    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1
    expire_timestamp: int = -1


@dataclass(slots=True)
class MemberValue:
    """One member as stored in a group metadata record."""

    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclass(slots=True)
class GroupValue:
    """A group's generation, protocol, leader and members."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberValue] = field(default_factory=list)


# ---- keys -----------------------------------------------------------------------------------


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    w = Writer()
    w.int16(OFFSET_COMMIT_KEY_VERSION)
    w.string(group, False)
    w.string(topic, False)
    w.int32(partition)
    return bytes(w.buf)


def encode_group_key(group: str) -> bytes:
    w = Writer()
    w.int16(GROUP_METADATA_KEY_VERSION)
    w.string(group, False)
    return bytes(w.buf)


def decode_key(data: bytes | memoryview) -> OffsetKey | GroupKey | None:
    """The key of a record; None for key versions this broker does not know (skipped, as Kafka does)."""
    r = Reader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetKey(r.string(), r.string(), r.int32())
    if version == 2:
        return GroupKey(r.string())
    return None


# ---- values ---------------------------------------------------------------------------------


def _str(r: Reader, flexible: bool) -> str:
    return r.compact_string() if flexible else r.string()


def _nstr(r: Reader, flexible: bool) -> str | None:
    return r.compact_nullable_string() if flexible else r.nullable_string()


def _bytes(r: Reader, flexible: bool) -> bytes:
    b = r.compact_nullable_bytes() if flexible else r.nullable_bytes()
    if b is None:
        raise DecodeError("null where bytes are required")
    return bytes(b)


def encode_offset_value(v: OffsetValue) -> bytes:
    """Value v3, or v1 when the commit has an explicit expire timestamp."""
    w = Writer()
    if v.expire_timestamp >= 0:
        w.int16(OFFSET_VALUE_VERSION_WITH_EXPIRY)
        w.int64(v.offset)
        w.string(v.metadata, False)
        w.int64(v.commit_timestamp)
        w.int64(v.expire_timestamp)
    else:
        w.int16(OFFSET_VALUE_VERSION)
        w.int64(v.offset)
        w.int32(v.leader_epoch)
        w.string(v.metadata, False)
        w.int64(v.commit_timestamp)
    return bytes(w.buf)


def decode_offset_value(data: bytes | memoryview) -> OffsetValue:
    """Any offset commit value version 0-4."""
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise DecodeError(f"unknown offset commit value version {version}")
    flexible = version >= 4
    out = OffsetValue(offset=r.int64())
    if version >= 3:
        out.leader_epoch = r.int32()
    out.metadata = _str(r, flexible)
    out.commit_timestamp = r.int64()
    if version == 1:
        out.expire_timestamp = r.int64()
    if flexible:
        r.skip_tagged_fields()
    return out


def encode_group_value(v: GroupValue, version: int = GROUP_VALUE_VERSION) -> bytes:
    """Group metadata value v0-v3 (v3 is what Kafka 2.3+ writes)."""
    if not 0 <= version <= 3:
        raise ValueError(f"cannot write group metadata value version {version}")
    w = Writer()
    w.int16(version)
    w.string(v.protocol_type, False)
    w.int32(v.generation)
    w.nullable_string(v.protocol, False)
    w.nullable_string(v.leader, False)
    if version >= 2:
        w.int64(v.current_state_timestamp)
    w.array_len(len(v.members), False)
    for m in v.members:
        w.string(m.member_id, False)
        if version >= 3:
            w.nullable_string(m.group_instance_id, False)
        w.string(m.client_id, False)
        w.string(m.client_host, False)
        if version >= 1:
            w.int32(m.rebalance_timeout)
        w.int32(m.session_timeout)
        w.nullable_bytes(m.subscription, False)
        w.nullable_bytes(m.assignment, False)
    return bytes(w.buf)


def decode_group_value(data: bytes | memoryview) -> GroupValue:
    """Any group metadata value version 0-4."""
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise DecodeError(f"unknown group metadata value version {version}")
    flexible = version >= 4
    out = GroupValue(protocol_type=_str(r, flexible), generation=r.int32(), protocol=_nstr(r, flexible),
                     leader=_nstr(r, flexible))
    if version >= 2:
        out.current_state_timestamp = r.int64()
    count = r.compact_array_len(8) if flexible else r.array_len(8)
    for _ in range(count):
        member_id = _str(r, flexible)
        instance = _nstr(r, flexible) if version >= 3 else None
        client_id = _str(r, flexible)
        client_host = _str(r, flexible)
        rebalance = r.int32() if version >= 1 else -1
        session = r.int32()
        if version == 0:
            rebalance = session  # a v0 record has no rebalance timeout; Kafka uses the session timeout
        subscription = _bytes(r, flexible)
        assignment = _bytes(r, flexible)
        if flexible:
            r.skip_tagged_fields()
        out.members.append(MemberValue(member_id, client_id, client_host, rebalance, session, subscription,
                                       assignment, instance))
    if flexible:
        r.skip_tagged_fields()
    return out


def consumer_subscription_topics(metadata: bytes) -> set[str] | None:
    """Topics of a ConsumerProtocol Subscription (version, topics, ...); None if it is not one."""
    try:
        r = Reader(metadata)
        if r.int16() < 0:
            return None
        return {r.string() for _ in range(r.array_len(2))}
    except DecodeError:
        return None
