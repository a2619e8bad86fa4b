"""__consumer_offsets record formats (byte-exact) and the group -> partition hash."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaflet.coordinator.group import schemas
from kaflet.coordinator.group.hashing import java_string_hash, java_utils_abs, partition_for


@pytest.mark.parametrize(("group", "hash_", "partition"), [
    ("Hello", 69609650, 0),
    ("Java Exercises.", -1762987343, 43),
    ("www.runoob.com", 321005537, 37),
    ("my-group", -1906497762, 12),
    ("test-group", 627841412, 12),
    ("console-consumer-1", 35782224, 24),
    ("", 0, 0),
])
def test_java_hash_vectors(group: str, hash_: int, partition: int) -> None:
    assert java_string_hash(group) == hash_
    assert partition_for(group, 50) == partition


def test_hash_uses_utf16_code_units() -> None:
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16: 0xD83D * 31 + 0xDE00.
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00
    assert java_utils_abs(-(2**31)) == 0 and java_utils_abs(-5) == 5


def test_offset_key_bytes() -> None:
    assert schemas.encode_offset_key("g", "t", 3) == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    assert schemas.decode_key(schemas.encode_offset_key("g", "t", 3)) == schemas.OffsetKey("g", "t", 3)
    assert schemas.decode_key(b"\x00\x00\x00\x01g\x00\x01t\x00\x00\x00\x03") == schemas.OffsetKey("g", "t", 3)


def test_group_key_bytes() -> None:
    assert schemas.encode_group_key("grp") == b"\x00\x02\x00\x03grp"
    assert schemas.decode_key(b"\x00\x02\x00\x03grp") == schemas.GroupKey("grp")
    assert schemas.decode_key(b"\x00\x07\x00\x03grp") is None  # unknown versions are skipped


def test_offset_value_v3_bytes() -> None:
    v = schemas.OffsetValue(offset=42, metadata="m", commit_timestamp=1000, leader_epoch=7)
    assert schemas.encode_offset_value(v) == struct.pack(">hqih", 3, 42, 7, 1) + b"m" + struct.pack(">q", 1000)


def test_offset_value_v1_with_expiry_bytes() -> None:
    v = schemas.OffsetValue(offset=1, metadata="", commit_timestamp=5, expire_timestamp=9)
    assert schemas.encode_offset_value(v) == struct.pack(">hqhqq", 1, 1, 0, 5, 9)


def test_offset_value_old_and_flexible_versions_decode() -> None:
    v0 = struct.pack(">hqh", 0, 10, 2) + b"ab" + struct.pack(">q", 77)
    assert schemas.decode_offset_value(v0) == schemas.OffsetValue(10, "ab", 77)
    v4 = struct.pack(">hqi", 4, 10, 3) + b"\x03ab" + struct.pack(">q", 77) + b"\x00"
    assert schemas.decode_offset_value(v4) == schemas.OffsetValue(10, "ab", 77, 3)


def test_group_value_v3_bytes() -> None:
    v = schemas.GroupValue("consumer", 2, "range", "m1", 123, [
        schemas.MemberValue("m1", "c", "/h", 300, 100, b"S", b"A", "i1")])
    expected = (struct.pack(">h", 3) + b"\x00\x08consumer" + struct.pack(">i", 2) + b"\x00\x05range" + b"\x00\x02m1"
                + struct.pack(">q", 123) + struct.pack(">i", 1) + b"\x00\x02m1" + b"\x00\x02i1" + b"\x00\x01c"
                + b"\x00\x02/h" + struct.pack(">ii", 300, 100) + struct.pack(">i", 1) + b"S"
                + struct.pack(">i", 1) + b"A")
    assert schemas.encode_group_value(v) == expected


def test_empty_group_value_has_null_protocol_and_leader() -> None:
    v = schemas.GroupValue("consumer", 5, None, None, 9, [])
    data = schemas.encode_group_value(v)
    assert data == struct.pack(">h", 3) + b"\x00\x08consumer" + struct.pack(">ihhqi", 5, -1, -1, 9, 0)
    assert schemas.decode_group_value(data) == v


def test_consumer_subscription_topics() -> None:
    sub = struct.pack(">hi", 1, 2) + b"\x00\x01a" + b"\x00\x02bc" + struct.pack(">i", -1)
    assert schemas.consumer_subscription_topics(sub) == {"a", "bc"}
    assert schemas.consumer_subscription_topics(b"\x00") is None


_text = st.text(max_size=20)
_int32 = st.integers(-(2**31), 2**31 - 1)
_int64 = st.integers(-(2**63), 2**63 - 1)


@given(st.builds(schemas.OffsetValue, offset=_int64, metadata=_text, commit_timestamp=_int64, leader_epoch=_int32,
                 expire_timestamp=st.one_of(st.just(-1), st.integers(0, 2**62))))
def test_offset_value_round_trip(v: schemas.OffsetValue) -> None:
    got = schemas.decode_offset_value(schemas.encode_offset_value(v))
    if v.expire_timestamp >= 0:
        v.leader_epoch = -1  # v1 has no leader epoch
    assert got == v


_member = st.builds(schemas.MemberValue, member_id=_text, client_id=_text, client_host=_text,
                    rebalance_timeout=_int32, session_timeout=_int32, subscription=st.binary(max_size=30),
                    assignment=st.binary(max_size=30), group_instance_id=st.one_of(st.none(), _text))


@given(st.builds(schemas.GroupValue, protocol_type=_text, generation=_int32, protocol=st.one_of(st.none(), _text),
                 leader=st.one_of(st.none(), _text), current_state_timestamp=_int64,
                 members=st.lists(_member, max_size=4)))
def test_group_value_round_trip(v: schemas.GroupValue) -> None:
    assert schemas.decode_group_value(schemas.encode_group_value(v)) == v


@given(_text, _text, _int32)
def test_offset_key_round_trip(g: str, t: str, p: int) -> None:
    assert schemas.decode_key(schemas.encode_offset_key(g, t, p)) == schemas.OffsetKey(g, t, p)


@given(st.binary(max_size=64))
def test_decoders_reject_garbage_cleanly(data: bytes) -> None:
    from kaflet.protocol.primitives import DecodeError

    for fn in (schemas.decode_key, schemas.decode_offset_value, schemas.decode_group_value):
        try:
            fn(data)
        except DecodeError:
            pass
