"""Records without a timestamp: the stored MaxTimestamp, the time index, retention and ListOffsets.

librdkafka writes BaseTimestamp -1 and MaxTimestamp 0 for a batch whose records carry no
timestamp (-1).  Kafka recomputes a CreateTime batch's MaxTimestamp from its records (-1 then),
and retention falls back to the segment file's mtime when a segment has no timestamp.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kaflet.log.config import LogConfig
from kaflet.log.log import MAX_TIMESTAMP, Log
from kaflet.protocol.compression import GZIP, ZSTD
from kaflet.protocol.records import (
    BATCH_HEADER_SIZE,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Record,
    RecordValidationError,
    build_batch,
    check_crc,
    decode_records,
    iter_batches,
    parse_batch_header,
)

WEEK_MS = 7 * 24 * 3600 * 1000


def _now() -> int:
    return int(time.time() * 1000)


def _cfg(**props: str | int) -> LogConfig:
    base: dict[str, str | int] = {"retention.ms": WEEK_MS, "file.delete.delay.ms": 0}
    base.update(props)
    return LogConfig.from_props(base)


def _no_timestamp_batch(n: int = 3, compression: int = 0, max_timestamp: int = 0) -> bytes:
    """What librdkafka sends when the application gives every record timestamp -1."""
    return build_batch([Record(i, 0, b"k%d" % i, b"v%d" % i) for i in range(n)], base_timestamp=-1,
                       max_timestamp=max_timestamp, compression=compression)


def _stored(lg: Log) -> list[tuple[int, bytes]]:
    data = lg.read_batches(lg.log_start_offset)
    return [(pos, data[pos : pos + h.size]) for pos, h in iter_batches(data)]


def test_batch_without_timestamps_survives_retention(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), _cfg())
    lg.append_as_leader(_no_timestamp_batch(), leader_epoch=0)
    lg.update_high_watermark(lg.log_end_offset)  # replicated: retention may take all of it
    assert lg.delete_old_segments() == 0
    assert lg.log_start_offset == 0 and lg.log_end_offset == 3
    ((_, batch),) = _stored(lg)
    h = parse_batch_header(batch)
    # MaxTimestamp recomputed from the records, CRC valid, records untouched.
    assert (h.base_timestamp, h.max_timestamp, h.timestamp_type) == (-1, -1, TIMESTAMP_CREATE_TIME)
    assert check_crc(batch, 0, h)
    assert [(r.key, r.value, r.timestamp_delta) for r in decode_records(batch)] == [
        (b"k0", b"v0", 0), (b"k1", b"v1", 0), (b"k2", b"v2", 0)]
    assert lg.active_segment.max_timestamp_so_far == -1
    # After a restart with recovery (indexes rebuilt from the batches) it still survives.
    lg.close()
    lg2 = Log(str(tmp_path / "t-0"), _cfg(), had_clean_shutdown=False, high_watermark=3)
    assert lg2.active_segment.max_timestamp_so_far == -1
    assert lg2.delete_old_segments() == 0 and lg2.log_end_offset == 3
    lg2.close()


def test_time_index_holds_no_entry_for_records_without_timestamps(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"index.interval.bytes": 1}))
    for _ in range(3):
        lg.append_as_leader(_no_timestamp_batch(), leader_epoch=0)
    now = _now()
    lg.append_as_leader(build_batch([Record(0, 0, b"k", b"v")], base_timestamp=now), leader_epoch=0)
    seg = lg.active_segment
    lg.roll()  # the rolled segment gets its final time-index entry
    assert seg.offset_index.entries == 3
    assert [seg.time_index.lookup(ts) for ts in (0, now - 1, now)] == [(-1, 0), (-1, 0), (now, 9)]
    assert seg.time_index.entries == 1
    lg.close()


def test_segment_without_timestamps_expires_by_file_mtime(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"segment.bytes": 150}))
    for _ in range(4):
        lg.append_as_leader(_no_timestamp_batch(), leader_epoch=0)
    lg.update_high_watermark(lg.log_end_offset)
    segs = lg.segments
    assert len(segs) >= 3
    assert lg.delete_old_segments() == 0  # the files were written just now
    old = (time.time() * 1000 - WEEK_MS - 60_000) / 1000
    for seg in segs[:2]:
        os.utime(seg.log_path, (old, old))
    assert lg.delete_old_segments() == 2
    assert lg.log_start_offset == segs[2].base_offset
    lg.close()


def test_compressed_batch_header_rewritten_payload_kept(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), _cfg())
    sent = _no_timestamp_batch(5, compression=ZSTD)
    lg.append_as_leader(sent, leader_epoch=0)
    ((_, batch),) = _stored(lg)
    h = parse_batch_header(batch)
    assert h.max_timestamp == -1 and h.compression == ZSTD and check_crc(batch, 0, h)
    assert batch[BATCH_HEADER_SIZE:] == sent[BATCH_HEADER_SIZE:]  # not recompressed
    assert lg.delete_old_segments() == 0
    lg.close()


def test_mixed_records_give_the_largest_real_timestamp(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"compression.type": "gzip"}))
    now = _now()
    # BaseTimestamp -1: a record's timestamp is -1 + its delta (librdkafka when the first record
    # has no timestamp and later ones do); recompression to gzip on the way.
    recs = [Record(0, 0, b"a", b"1"), Record(1, now + 1, b"b", b"2"), Record(2, now - 4, b"c", b"3")]
    lg.append_as_leader(build_batch(recs, base_timestamp=-1, max_timestamp=0), leader_epoch=0)
    ((_, batch),) = _stored(lg)
    h = parse_batch_header(batch)
    assert h.compression == GZIP and h.max_timestamp == now and check_crc(batch, 0, h)
    assert lg.active_segment.max_timestamp_so_far == now
    assert lg.offset_for_timestamp(now - 10) == (1, now)
    assert lg.offset_for_timestamp(MAX_TIMESTAMP) == (1, now)
    lg.close()


def test_inconsistent_max_timestamp_is_recomputed(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), _cfg())
    now = _now()
    recs = [Record(i, i * 10, b"k", b"v") for i in range(3)]
    lg.append_as_leader(build_batch(recs, base_timestamp=now, max_timestamp=5), leader_epoch=0)
    ((_, batch),) = _stored(lg)
    assert parse_batch_header(batch).max_timestamp == now + 20
    lg.close()


def test_consistent_header_is_stored_as_it_came(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), _cfg())
    now = _now()
    # A header that is consistent is trusted: the records are not read (nor is the CRC redone).
    sent = build_batch([Record(i, i, b"k", b"v") for i in range(3)], base_timestamp=now, max_timestamp=now + 7)
    lg.append_as_leader(sent, leader_epoch=3)
    ((_, batch),) = _stored(lg)
    assert batch[12:16] == (3).to_bytes(4, "big") and batch[16:] == sent[16:]
    lg.close()


def test_list_offsets_by_time_ignores_records_without_timestamps(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), _cfg())
    lg.append_as_leader(_no_timestamp_batch(), leader_epoch=0)
    # Nothing has a timestamp yet: no offset for any time, and no max timestamp.
    assert lg.offset_for_timestamp(0) is None
    assert lg.offset_for_timestamp(MAX_TIMESTAMP) == (-1, -1)
    now = _now()
    lg.append_as_leader(build_batch([Record(0, 0, b"x", b"1"), Record(1, 5, b"y", b"2")], base_timestamp=now),
                        leader_epoch=0)
    lg.append_as_leader(_no_timestamp_batch(), leader_epoch=0)
    assert lg.offset_for_timestamp(0) == (3, now)
    assert lg.offset_for_timestamp(now + 1) == (4, now + 5)
    assert lg.offset_for_timestamp(now + 6) is None
    assert lg.offset_for_timestamp(MAX_TIMESTAMP) == (4, now + 5)
    lg.close()


def test_timestamp_difference_limit_exempts_records_without_timestamp(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"message.timestamp.difference.max.ms": 60_000}))
    r = lg.append_as_leader(_no_timestamp_batch(), leader_epoch=0)
    assert r.base_offset == 0 and lg.log_end_offset == 3
    # A record with a timestamp in the same batch is still checked.
    now = _now()
    bad = build_batch([Record(0, 0, b"a", b"1"), Record(1, now - 3_600_000 + 1, b"b", b"2")], base_timestamp=-1,
                      max_timestamp=0)
    with pytest.raises(RecordValidationError) as ei:
        lg.append_as_leader(bad, leader_epoch=0)
    assert ei.value.error_code == 32 and [i for i, _ in ei.value.record_errors] == [1]
    assert lg.log_end_offset == 3
    lg.close()


def test_log_append_time_topic_stamps_batches_without_timestamps(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"message.timestamp.type": "LogAppendTime"}))
    now = _now()
    r = lg.append_as_leader(_no_timestamp_batch(), leader_epoch=0, now_ms=now)
    assert r.log_append_time == now
    ((_, batch),) = _stored(lg)
    h = parse_batch_header(batch)
    assert (h.timestamp_type, h.max_timestamp) == (TIMESTAMP_LOG_APPEND_TIME, now) and check_crc(batch, 0, h)
    assert lg.delete_old_segments() == 0
    lg.close()


def test_producer_set_log_append_time(tmp_path: Path) -> None:
    now = _now()
    lat = build_batch([Record(0, 0, b"a", b"1"), Record(1, 0, b"b", b"2")], base_timestamp=now - 9,
                      timestamp_type=TIMESTAMP_LOG_APPEND_TIME, max_timestamp=now)
    # On a LogAppendTime topic Kafka refuses it, every record named.
    lg = Log(str(tmp_path / "l-0"), _cfg(**{"message.timestamp.type": "LogAppendTime"}))
    with pytest.raises(RecordValidationError) as ei:
        lg.append_as_leader(lat, leader_epoch=0, now_ms=now)
    assert ei.value.error_code == 32 and [i for i, _ in ei.value.record_errors] == [0, 1]
    assert "Producer should not set timestamp type to LogAppendTime" in (ei.value.record_errors[0][1] or "")
    assert lg.log_end_offset == 0
    lg.close()
    # On a CreateTime topic its records carry its MaxTimestamp: stored as CreateTime.
    lg = Log(str(tmp_path / "c-0"), _cfg())
    lg.append_as_leader(lat, leader_epoch=0, now_ms=now)
    ((_, batch),) = _stored(lg)
    h = parse_batch_header(batch)
    assert (h.timestamp_type, h.max_timestamp) == (TIMESTAMP_CREATE_TIME, now) and check_crc(batch, 0, h)
    # ... unless it has no timestamp at all.
    with pytest.raises(RecordValidationError) as ei:
        lg.append_as_leader(build_batch([Record(0, 0, b"a", b"1")], base_timestamp=-1,
                                        timestamp_type=TIMESTAMP_LOG_APPEND_TIME, max_timestamp=-1), leader_epoch=0)
    assert ei.value.error_code == 32 and [i for i, _ in ei.value.record_errors] == [0]
    lg.close()
