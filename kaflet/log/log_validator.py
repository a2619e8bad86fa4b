"""``validate_and_assign``: what a leader checks in a produce record set before it appends it, and
the offsets, epochs and timestamps it stamps on it (Kafka's LogValidator); ``validate_fetched``:
the lighter checks of the batches a follower copies from its leader.

Pure: both read the records memoryview and what the caller passes (config, leader epoch, now,
next offset) and return the bytes to write and their headers; neither writes a file or keeps state,
so they are fuzzed on their own (tests/unit/test_log_validator.py) and the ``Log`` keeps only the
writing. The one outside read is the producer-state check, a hook that the ``Log`` fills with
``ProducerStateManager.check_batches`` (which changes nothing).

This is the produce hot path: one plain loop over the batch headers, the records read only when
a config or a batch header needs it, one copy of the record set (two when recompressing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from kaflet.log.append_origin import AppendOrigin
from kaflet.log.config import LONG_MAX, LogConfig
from kaflet.log.errors import LogError
from kaflet.log.producer_state import BatchMetadata
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.records import (
    BATCH_HEADER_SIZE,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    BatchInfo,
    RecordError,
    RecordValidationError,
    check_crc,
    has_trusted_timestamps,
    parse_batch_header,
    recompress_batch,
    scan_records,
    set_base_offset,
    set_log_append_time,
    set_max_timestamp,
    set_partition_leader_epoch,
    validate_produce_batches,
)

#: Reads the producer state for an append's batch headers (from its origin) without changing it:
#: the original append's metadata for a duplicate, None to go on; raises ProducerStateError.
ProducerCheck = Callable[[list[BatchHeader], AppendOrigin], BatchMetadata | None]


class ValidatedRecords(NamedTuple):
    """A produce record set ready to append: offsets from ``first_offset``, the leader epoch
    and timestamps stamped, the CRCs right."""

    buffer: bytearray
    headers: list[BatchHeader]  # of the batches in ``buffer``, as written
    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int  # last offset of the batch holding ``max_timestamp``
    log_append_time: int  # now on a LogAppendTime topic, else -1


def validate_and_assign(records: memoryview, config: LogConfig, leader_epoch: int, now: int, next_offset: int,
                        topic_partition: str, check_producers: ProducerCheck | None = None,
                        origin: AppendOrigin = AppendOrigin.CLIENT) -> ValidatedRecords | BatchMetadata:
    """Validate a produce record set and give it offsets from ``next_offset``; ``records`` is
    left as it came.

    Returns the ``BatchMetadata`` of the original append when ``check_producers`` finds the
    batches a duplicate (nothing is to be written then); ``origin`` says how much of the
    producer state ``check_producers`` checks. Raises RecordError (CORRUPT_MESSAGE,
    INVALID_RECORD, MESSAGE_TOO_LARGE, UNSUPPORTED_COMPRESSION_TYPE), RecordValidationError
    (INVALID_RECORD, INVALID_TIMESTAMP, with the offending records) or, from
    ``check_producers``, ProducerStateError (OUT_OF_ORDER_SEQUENCE_NUMBER,
    INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE).

    A CreateTime batch's MaxTimestamp is kept as it came when its header is consistent
    (``has_trusted_timestamps``); otherwise it is recomputed from the records (-1 when no
    record has a timestamp), as Kafka's LogValidator does for every batch.
    """
    cfg = config
    infos = validate_produce_batches(records, cfg.max_message_bytes)
    headers = [i.header for i in infos]
    lat = cfg.log_append_time
    idempotent = False
    suspects: list[int] = []  # batches whose records must be read
    for i, h in enumerate(headers):  # one plain loop: this is the hot path
        if h.producer_id >= 0:
            idempotent = True
        # On a LogAppendTime topic MaxTimestamp becomes the append time: only a
        # producer-set LogAppendTime is wrong there.
        if (h.attributes & TIMESTAMP_TYPE_MASK) if lat else not has_trusted_timestamps(h):
            suspects.append(i)
    # A retried batch is answered with its first append's offsets before its records are
    # checked again, so a retry that now falls outside the timestamp bounds still succeeds.
    if idempotent and check_producers is not None:
        dup = check_producers(headers, origin)
        if dup is not None:
            return dup
    check_all = cfg.compact or cfg.timestamp_before_max_ms < LONG_MAX or cfg.timestamp_after_max_ms < LONG_MAX
    # batch index -> the MaxTimestamp its records give (CreateTime batches to rewrite)
    max_timestamps = (_check_records(records, infos, cfg, now, check_all, suspects, topic_partition)
                      if check_all or suspects else {})

    target = cfg.target_codec
    offset = next_offset
    if target < 0 or all(h.compression == target for h in headers):
        buf = bytearray(records)
        positions = []
        for i, info in enumerate(infos):
            pos = info.position
            set_base_offset(buf, pos, offset)
            set_partition_leader_epoch(buf, pos, leader_epoch)
            if lat:
                set_log_append_time(buf, pos, now)
            elif max_timestamps and i in max_timestamps:
                set_max_timestamp(buf, pos, TIMESTAMP_CREATE_TIME, max_timestamps[i])
            positions.append(pos)
            offset += info.header.records_count
    else:
        chunks: list[bytes | bytearray] = []
        positions = []
        pos = 0
        for i, info in enumerate(infos):
            b = bytearray(records[info.position : info.position + info.size])
            if info.header.compression != target:
                b = bytearray(recompress_batch(b, target, level=cfg.target_level))
                if len(b) > cfg.max_message_bytes:
                    raise RecordError(ErrorCode.MESSAGE_TOO_LARGE,
                                      f"recompressed batch of {len(b)} bytes exceeds max.message.bytes")
            set_base_offset(b, 0, offset)
            set_partition_leader_epoch(b, 0, leader_epoch)
            if lat:
                set_log_append_time(b, 0, now)
            elif i in max_timestamps:
                set_max_timestamp(b, 0, TIMESTAMP_CREATE_TIME, max_timestamps[i])
            chunks.append(b)
            positions.append(pos)
            pos += len(b)
            offset += info.header.records_count
        buf = bytearray(b"".join(chunks))
    last = offset - 1

    final = [parse_batch_header(buf, p) for p in positions]
    max_ts, shallow = -1, -1
    for h in final:
        ts = h.max_timestamp
        if ts > max_ts:
            max_ts, shallow = ts, h.base_offset + h.last_offset_delta
    if lat:
        shallow = last
    return ValidatedRecords(buf, final, next_offset, last, max_ts, shallow, now if lat else -1)


def _check_records(mv: memoryview, infos: list[BatchInfo], cfg: LogConfig, now: int, check_all: bool,
                   suspects: list[int], tp: str) -> dict[int, int]:
    """Kafka's record checks, on every batch (``check_all``) or only on ``suspects``.

    Every record of a batch is checked, so the error lists each offending one (KIP-467):
    a compacted topic's record without a key (INVALID_RECORD); on a CreateTime topic a
    timestamp more than message.timestamp.before.max.ms behind now or after.max.ms ahead of
    it (each falling back to message.timestamp.difference.max.ms, KIP-937), records without
    a timestamp (-1) being exempt (INVALID_TIMESTAMP); a producer-set LogAppendTime on a
    LogAppendTime topic or without any timestamp (INVALID_TIMESTAMP).  Raises
    RecordValidationError for the first batch with errors.  On a CreateTime topic, returns
    the largest record timestamp (-1 if none) of each suspect batch, by batch index.
    """
    compact = cfg.compact
    before, after = cfg.timestamp_before_max_ms, cfg.timestamp_after_max_ms
    lat_topic = cfg.log_append_time
    out: dict[int, int] = {}
    for i, info in enumerate(infos):
        if not check_all and i not in suspects:
            continue
        h = info.header
        lat_batch = h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
        errors: list[tuple[int, str | None]] = []
        timestamp_error = False
        batch_max = NO_TIMESTAMP
        records = scan_records(mv[info.position : info.position + info.size])
        for index, (offset_delta, ts_delta, key_len, value_len) in enumerate(records):
            # A LogAppendTime batch's records all carry its MaxTimestamp.
            ts = h.max_timestamp if lat_batch else h.base_timestamp + ts_delta
            if ts > batch_max:
                batch_max = ts
            if compact and key_len < 0:
                errors.append((index, f"Compacted topic cannot accept message without key in topic partition {tp}"))
            elif not lat_topic and ts != NO_TIMESTAMP:
                if now - ts > before or ts - now > after:
                    timestamp_error = True
                    # The bounds as Kafka prints them: Java longs, so now + Long.MAX_VALUE wraps.
                    errors.append((index, f"Timestamp {ts} of message with offset {h.base_offset + offset_delta} "
                                          f"is out of range. The timestamp should be within "
                                          f"[{_java_long(now - before)}, {_java_long(now + after)}]"))
            elif lat_batch:
                timestamp_error = True
                errors.append((index, f"Invalid timestamp type in message DefaultRecord(offset="
                                      f"{h.base_offset + offset_delta}, timestamp={ts}, key={max(key_len, 0)} "
                                      f"bytes, value={max(value_len, 0)} bytes). Producer should not set "
                                      "timestamp type to LogAppendTime."))
        if errors:
            raise _record_validation_error(errors, timestamp_error)
        if not lat_topic and not has_trusted_timestamps(h):
            out[i] = batch_max
    return out


def _java_long(v: int) -> int:
    """``v`` as a signed 64-bit integer (Java's long arithmetic wraps around)."""
    return (v + 2**63) % 2**64 - 2**63


def _record_validation_error(errors: list[tuple[int, str | None]], timestamp_error: bool) -> RecordValidationError:
    # Kafka's choice of partition error and its summary message (LogValidator.processRecordErrors).
    if timestamp_error:
        return RecordValidationError(ErrorCode.INVALID_TIMESTAMP,
                                     "One or more records have been rejected due to invalid timestamp", errors)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return RecordValidationError(
        ErrorCode.INVALID_RECORD,
        f"One or more records have been rejected due to {len(errors)} record errors in total, and only "
        f"showing the first three errors at most: [{shown}]",
        errors,
    )


def validate_fetched(records: memoryview, topic_partition: str) -> tuple[list[BatchHeader], int]:
    """The whole batches at the start of a follower's fetched ``records`` and their size in bytes.

    A fetch response may end with part of a batch (a size limit cut it off): it is left out.
    Each batch's CRC is checked and its offsets must move forward; keys, timestamps, sizes and
    sequences were the leader's to check and are not checked again (Kafka's appendAsFollower).
    Raises RecordError (CORRUPT_MESSAGE) for a corrupt or malformed batch and LogError
    (UNKNOWN_SERVER_ERROR) for offsets that go back.
    """
    headers: list[BatchHeader] = []
    n = len(records)
    pos = 0
    prev_last = -1
    while n - pos >= BATCH_HEADER_SIZE:
        h = parse_batch_header(records, pos)
        if h.length < MIN_BATCH_LENGTH:
            raise RecordError(ErrorCode.CORRUPT_MESSAGE,
                              f"batch length {h.length} at position {pos} is below the minimum {MIN_BATCH_LENGTH}")
        if pos + h.size > n:
            break
        if h.magic != MAGIC_V2:
            raise RecordError(ErrorCode.CORRUPT_MESSAGE, f"batch with magic {h.magic} at offset {h.base_offset}: "
                              "kaflet stores only magic 2 batches")
        if not check_crc(records, pos, h):
            raise RecordError(ErrorCode.CORRUPT_MESSAGE,
                              f"Record batch at offset {h.base_offset} is corrupt (stored crc = {h.crc}) in "
                              f"{topic_partition}")
        if h.last_offset_delta < 0 or h.base_offset <= prev_last:
            raise LogError(ErrorCode.UNKNOWN_SERVER_ERROR,
                           f"Out of order offsets found in append to {topic_partition}: batch "
                           f"{h.base_offset}..{h.last_offset} after offset {prev_last}")
        prev_last = h.last_offset
        headers.append(h)
        pos += h.size
    return headers, pos
