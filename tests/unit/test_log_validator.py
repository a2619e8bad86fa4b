"""``validate_and_assign`` and ``validate_fetched`` (log/log_validator.py) fuzzed with hypothesis.

Whatever the bytes, a produce record set either comes back ready to append (offsets from the
next offset, the leader epoch stamped, every CRC right, the input untouched) or is refused with
one of the error codes the validator documents (the records themselves are only read when a
config or a batch header asks for it, so a CRC-correct batch of bad records may pass, as before); a follower's fetched bytes give whole batches
or one of ``validate_fetched``'s errors. Nothing else may escape: any other exception would
become UNKNOWN_SERVER_ERROR for a client that only sent bad bytes.
"""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaflet.log.config import LogConfig
from kaflet.log.errors import LogError, ProducerStateError
from kaflet.log.log_validator import ValidatedRecords, validate_and_assign, validate_fetched
from kaflet.log.producer_state import BatchMetadata, ProducerStateManager
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LOG_OVERHEAD,
    TIMESTAMP_LOG_APPEND_TIME,
    RecordError,
    RecordValidationError,
    build_batch,
    check_crc,
    parse_batch_header,
)
from kaflet.protocol.records import Record as R

NOW = 1_700_000_000_000
TP = "orders-0"

RECORD_ERRORS = {ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD, ErrorCode.MESSAGE_TOO_LARGE,
                 ErrorCode.UNSUPPORTED_COMPRESSION_TYPE}
VALIDATION_ERRORS = {ErrorCode.INVALID_RECORD, ErrorCode.INVALID_TIMESTAMP}
PRODUCER_ERRORS = {ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.INVALID_PRODUCER_EPOCH,
                   ErrorCode.INVALID_TXN_STATE}

CONFIGS = [
    LogConfig.from_props({}),
    LogConfig.from_props({"cleanup.policy": "compact"}),
    LogConfig.from_props({"message.timestamp.type": "LogAppendTime"}),
    LogConfig.from_props({"message.timestamp.difference.max.ms": 60_000}),
    LogConfig.from_props({"message.timestamp.before.max.ms": 1_000, "message.timestamp.after.max.ms": 1_000}),
    LogConfig.from_props({"compression.type": "gzip"}),
    LogConfig.from_props({"compression.type": "uncompressed", "cleanup.policy": "compact,delete"}),
    LogConfig.from_props({"max.message.bytes": 200}),
]

_records = st.lists(
    st.builds(
        lambda key, value, ts: (key, value, ts),
        st.one_of(st.none(), st.binary(max_size=12)),
        st.one_of(st.none(), st.binary(max_size=60)),
        st.integers(min_value=-200_000, max_value=200_000),
    ),
    min_size=1, max_size=5,
)


@st.composite
def _batch(draw: st.DrawFn) -> bytes:
    recs = draw(_records)
    idempotent = draw(st.booleans())
    base_ts = draw(st.sampled_from([-1, 0, NOW, NOW - 10_000_000, NOW + 10_000_000]))
    return build_batch(
        [R(i, ts, key, value) for i, (key, value, ts) in enumerate(recs)],
        compression=draw(st.sampled_from([0, 1, 2, 3, 4])),
        producer_id=draw(st.sampled_from([7, 8])) if idempotent else -1,
        producer_epoch=draw(st.sampled_from([0, 1])) if idempotent else -1,
        base_sequence=draw(st.sampled_from([0, 3, 5, 2**31 - 2])) if idempotent else -1,
        is_transactional=idempotent and draw(st.booleans()),
        base_timestamp=base_ts,
        timestamp_type=draw(st.sampled_from([0, 0, 0, TIMESTAMP_LOG_APPEND_TIME])),
        max_timestamp=draw(st.one_of(st.none(), st.sampled_from([-1, 0, NOW]))),
    )


def _fix_crcs(buf: bytearray) -> None:
    """Recompute each whole batch's CRC, so a mutation reaches the checks behind the CRC."""
    pos = 0
    while len(buf) - pos >= 61:
        (length,) = struct.unpack_from(">i", buf, pos + 8)
        end = pos + LOG_OVERHEAD + length
        if length < 49 or end > len(buf):
            return
        struct.pack_into(">I", buf, pos + CRC_OFFSET, crc32c.crc32c(bytes(buf[pos + ATTRIBUTES_OFFSET : end])))
        pos = end


@st.composite
def _record_set(draw: st.DrawFn) -> bytes:
    blob = bytearray(b"".join(draw(st.lists(_batch(), min_size=1, max_size=3))))
    mode = draw(st.sampled_from(["none", "none", "flip", "flip+crc", "overwrite+crc", "cut", "random", "append"]))
    if mode in ("flip", "flip+crc"):
        for _ in range(draw(st.integers(1, 3))):
            i = draw(st.integers(0, len(blob) - 1))
            blob[i] ^= 1 << draw(st.integers(0, 7))
    elif mode == "overwrite+crc":
        # A header field set to a hostile value: offsets, lengths, counts, attributes, timestamps.
        off, fmt = draw(st.sampled_from([(0, ">q"), (8, ">i"), (12, ">i"), (16, ">b"), (21, ">h"), (23, ">i"),
                                         (27, ">q"), (35, ">q"), (43, ">q"), (51, ">h"), (53, ">i"), (57, ">i")]))
        bits = struct.calcsize(fmt) * 8
        struct.pack_into(fmt, blob, off, draw(st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)))
    elif mode == "cut":
        blob = blob[: draw(st.integers(0, len(blob)))]
    elif mode == "random":
        blob = bytearray(draw(st.binary(max_size=300)))
    elif mode == "append":
        blob += draw(st.binary(min_size=1, max_size=70))
    if mode.endswith("+crc"):
        _fix_crcs(blob)
    return bytes(blob)


@pytest.fixture(scope="module")
def producers(tmp_path_factory: pytest.TempPathFactory) -> ProducerStateManager:
    """Producer 7 known at epoch 0 with sequences 0..2, in an open transaction: the fuzzed
    batches meet duplicates, gaps, fenced epochs and non-transactional writes."""
    ps = ProducerStateManager(str(Path(tmp_path_factory.mktemp("ps"))))
    known = build_batch([R(i, 0, b"k", b"v") for i in range(3)], producer_id=7, producer_epoch=0, base_sequence=0,
                        is_transactional=True, base_timestamp=NOW)
    ps.update(parse_batch_header(known))
    return ps


@settings(max_examples=600, deadline=None)
@given(records=_record_set(), config=st.sampled_from(CONFIGS), leader_epoch=st.integers(-1, 5),
       next_offset=st.sampled_from([0, 1, 1000, 2**40]))
def test_validate_and_assign_returns_a_result_or_a_documented_error(
        records: bytes, config: LogConfig, leader_epoch: int, next_offset: int,
        producers: ProducerStateManager) -> None:
    mv = memoryview(records)
    try:
        v = validate_and_assign(mv, config, leader_epoch, NOW, next_offset, TP, producers.check_batches)
    except RecordValidationError as e:
        assert e.error_code in VALIDATION_ERRORS and e.record_errors
        return
    except RecordError as e:
        assert e.error_code in RECORD_ERRORS, e
        return
    except ProducerStateError as e:
        assert e.error_code in PRODUCER_ERRORS, e
        return
    assert bytes(mv) == records  # the request's bytes are left as they came
    if isinstance(v, BatchMetadata):
        return
    assert isinstance(v, ValidatedRecords)
    _assert_ready_to_append(v, config, leader_epoch, next_offset)


def _assert_ready_to_append(v: ValidatedRecords, config: LogConfig, leader_epoch: int, next_offset: int) -> None:
    assert v.first_offset == next_offset
    pos, offset = 0, next_offset
    max_ts = -1
    for h in v.headers:
        assert h == parse_batch_header(v.buffer, pos)
        assert check_crc(v.buffer, pos, h)
        assert h.base_offset == offset and h.partition_leader_epoch == leader_epoch
        if config.log_append_time:
            assert h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME and h.max_timestamp == NOW
        if config.target_codec >= 0:
            assert h.compression == config.target_codec
        max_ts = max(max_ts, h.max_timestamp)
        offset += h.records_count
        pos += h.size
    assert pos == len(v.buffer)
    assert v.last_offset == offset - 1
    assert v.max_timestamp == max_ts
    assert v.log_append_time == (NOW if config.log_append_time else -1)


@settings(max_examples=400, deadline=None)
@given(records=_record_set(), base=st.sampled_from([0, 5, 2**40]))
def test_validate_fetched_returns_whole_batches_or_a_documented_error(records: bytes, base: int) -> None:
    blob = bytearray(records)
    # A leader's batches carry their offsets: give the well-formed ones consecutive ones.
    pos, offset = 0, base
    while len(blob) - pos >= 61:
        h = parse_batch_header(blob, pos)
        if h.length < 49 or pos + h.size > len(blob) or h.last_offset_delta < 0:
            break
        struct.pack_into(">q", blob, pos, offset)
        offset += h.last_offset_delta + 1
        pos += h.size
    try:
        headers, size = validate_fetched(memoryview(blob), TP)
    except RecordError as e:
        assert e.error_code == ErrorCode.CORRUPT_MESSAGE, e
        return
    except LogError as e:
        assert e.error_code == ErrorCode.UNKNOWN_SERVER_ERROR, e
        return
    assert size == sum(h.size for h in headers) <= len(blob)
    assert len(blob) - size < 61 or parse_batch_header(blob, size).size > len(blob) - size
    last = -1
    pos = 0
    for h in headers:
        assert check_crc(blob, pos, h) and h.base_offset > last
        last = h.last_offset
        pos += h.size


def test_a_retried_batch_is_answered_before_its_records_are_checked_again(
        producers: ProducerStateManager) -> None:
    # Producer 7's sequences 0..2, long after the bounds would refuse its timestamps.
    retry = build_batch([R(i, 0, b"k", b"v") for i in range(3)], producer_id=7, producer_epoch=0, base_sequence=0,
                        is_transactional=True, base_timestamp=NOW - 10**9)
    cfg = LogConfig.from_props({"message.timestamp.difference.max.ms": 1000})
    dup = validate_and_assign(memoryview(retry), cfg, 0, NOW, 50, TP, producers.check_batches)
    assert isinstance(dup, BatchMetadata) and (dup.first_offset, dup.last_offset) == (0, 2)
