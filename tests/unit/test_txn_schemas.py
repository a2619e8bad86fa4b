"""__transaction_state keys and values against Kafka's layout, byte for byte."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaflet.coordinator.transaction import schemas
from kaflet.coordinator.transaction.schemas import TxnLogValue, TxnState
from kaflet.protocol.primitives import DecodeError


def test_key_layout() -> None:
    assert schemas.encode_key("tx-1") == b"\x00\x00" + b"\x00\x04tx-1"
    assert schemas.decode_key(b"\x00\x00\x00\x04tx-1") == "tx-1"
    assert schemas.decode_key(b"\x00\x05\x00\x01a") is None


def test_value_v0_layout_ongoing() -> None:
    v = TxnLogValue(1000, 3, 60000, TxnState.ONGOING, {("b", 1), ("a", 2), ("a", 0)}, 1700, 1600)
    expected = (struct.pack(">hqhib", 0, 1000, 3, 60000, 1)
                + struct.pack(">i", 2)
                + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 2)
                + struct.pack(">h", 1) + b"b" + struct.pack(">ii", 1, 1)
                + struct.pack(">qq", 1700, 1600))
    assert schemas.encode_value(v) == expected
    assert schemas.decode_value(expected) == v


def test_value_v0_empty_has_null_partitions() -> None:
    v = TxnLogValue(7, 0, 100, TxnState.EMPTY, set(), 5, -1)
    data = schemas.encode_value(v)
    assert data == struct.pack(">hqhibiqq", 0, 7, 0, 100, 0, -1, 5, -1)
    with pytest.raises(ValueError):
        schemas.encode_value(TxnLogValue(7, 0, 100, TxnState.EMPTY, {("t", 0)}))


def test_value_v1_flexible_layout() -> None:
    v = TxnLogValue(9, 1, 10, TxnState.PREPARE_COMMIT, {("t", 4)}, 2, 1)
    expected = (struct.pack(">hqhib", 1, 9, 1, 10, 2)
                + bytes([2]) + bytes([2]) + b"t" + bytes([2]) + struct.pack(">i", 4) + b"\x00"
                + struct.pack(">qq", 2, 1) + b"\x00")
    assert schemas.encode_value(v, 1) == expected
    assert schemas.decode_value(expected) == v


def test_bad_values_raise_decode_error() -> None:
    with pytest.raises(DecodeError):
        schemas.decode_value(struct.pack(">h", 2) + bytes(40))
    with pytest.raises(DecodeError):
        schemas.decode_value(struct.pack(">hqhib", 0, 1, 1, 1, 9) + struct.pack(">iqq", -1, 0, 0))
    with pytest.raises(DecodeError):
        schemas.decode_value(struct.pack(">hqhib", 0, 1, 1, 1, 1) + struct.pack(">i", 1_000_000))


def test_state_names_are_kafkas() -> None:
    assert TxnState.PREPARE_EPOCH_FENCE.kafka_name == "PrepareEpochFence"
    assert TxnState.COMPLETE_COMMIT.kafka_name == "CompleteCommit"


_ids = st.text(min_size=0, max_size=40)
_tps = st.sets(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)), max_size=20)


@given(_ids)
def test_key_round_trip(txn_id: str) -> None:
    assert schemas.decode_key(schemas.encode_key(txn_id)) == txn_id


@given(st.integers(-1, 2**63 - 1), st.integers(-1, 32767), st.integers(0, 2**31 - 1),
       st.sampled_from(list(TxnState)), _tps, st.integers(-1, 2**62), st.integers(-1, 2**62),
       st.sampled_from([0, 1]))
def test_value_round_trip(pid: int, epoch: int, timeout: int, state: TxnState, tps: set[tuple[str, int]],
                          updated: int, started: int, version: int) -> None:
    if state == TxnState.EMPTY:
        tps = set()
    v = TxnLogValue(pid, epoch, timeout, state, tps, updated, started)
    data = schemas.encode_value(v, version)
    assert schemas.decode_value(data) == v
    assert schemas.encode_value(schemas.decode_value(data), version) == data
