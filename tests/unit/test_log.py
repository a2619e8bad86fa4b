"""Log: append/read/roll, recovery after crashes, restart, producer state, flushing."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
from pathlib import Path

import pytest

from kaflet.log.append_origin import AppendOrigin
from kaflet.log.config import LogConfig
from kaflet.log.errors import OffsetOutOfRangeError, ProducerStateError
from kaflet.log.log import Log
from kaflet.log.producer_state import ProducerStateManager
from kaflet.protocol.records import (
    Record,
    RecordError,
    RecordValidationError,
    build_batch,
    decode_records,
    iter_batches,
    parse_batch_header,
)


def _cfg(**props) -> LogConfig:  # type: ignore[no-untyped-def]
    return LogConfig.from_props({"segment.bytes": 4000, "index.interval.bytes": 300, **props})


def _batch(n: int = 3, ts: int = 1000, size: int = 40, **kw) -> bytes:  # type: ignore[no-untyped-def]
    return build_batch([Record(i, i, b"k%d" % i, b"v" * size) for i in range(n)], base_timestamp=ts, **kw)


def _fill(lg: Log, batches: int, start_ts: int = 1000) -> None:
    for i in range(batches):
        lg.append_as_leader(_batch(ts=start_ts + i), leader_epoch=1, now_ms=5000)


def _all_offsets(lg: Log) -> list[int]:
    out = []
    for seg in lg.segments:
        for _, h in seg.batches():
            out.extend(range(h.base_offset, h.base_offset + h.records_count))
    return out


def test_append_assigns_offsets_and_rolls(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg())
    r = lg.append_as_leader(_batch() + _batch(2), leader_epoch=4, now_ms=5000)
    assert (r.base_offset, r.last_offset, r.record_count, r.duplicate, r.log_append_time) == (0, 4, 5, False, -1)
    _fill(lg, 60)
    # Appends leave the high watermark alone: the partition moves it, clamped to the LEO.
    assert lg.log_end_offset == 185 and lg.high_watermark == 0
    assert lg.update_high_watermark(1000) == 185 and lg.high_watermark == 185
    assert len(lg.segments) > 3
    assert _all_offsets(lg) == list(range(185))
    for seg, nxt in zip(lg.segments, lg.segments[1:], strict=False):
        assert seg.read_next_offset() == nxt.base_offset
        assert os.path.exists(os.path.join(lg.dir, f"{nxt.base_offset:020d}.snapshot"))
    data = lg.read_batches(0, 1 << 20)
    h = parse_batch_header(data)
    assert h.partition_leader_epoch == 4 and h.base_offset == 0
    assert lg.leader_epoch_cache.entries == [(4, 0)]


def test_read_semantics(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg())
    _fill(lg, 40)
    for off in (0, 1, 50, 119):
        res = lg.read(off, 1)  # min_one_message: at least a whole batch
        data = res.regions[0].read_bytes()
        h = parse_batch_header(data)
        assert h.base_offset <= off <= h.base_offset + h.last_offset_delta and len(data) == h.size
    assert lg.read(120, 100).regions == []
    # Without min_one_message: Fetch v0-2 get the piece of the first batch that fits, v3+ nothing.
    size = parse_batch_header(lg.read_batches(0)).size
    assert [r.size for r in lg.read(0, size - 1, None, False).regions] == [size - 1]
    assert lg.read(0, size - 1, None, False, hard_max_bytes_limit=False).regions == []
    assert [r.size for r in lg.read(0, size + 1, None, False, hard_max_bytes_limit=False).regions] == [size + 1]
    with pytest.raises(OffsetOutOfRangeError) as ei:
        lg.read(121, 100)
    assert ei.value.error_code == 1
    res = lg.read(0, 1 << 20, max_offset=6)
    got = [h.base_offset for _, h in iter_batches(res.regions[0].read_bytes())]
    assert got == [0, 3]
    assert lg.read(6, 100, max_offset=6).regions == []


def test_offset_for_timestamp(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg())
    _fill(lg, 40)  # batch i: ts 1000+i .. 1002+i, offsets 3i..3i+2
    assert lg.offset_for_timestamp(-2) == (0, -1)
    assert lg.offset_for_timestamp(-1) == (120, -1)
    assert lg.offset_for_timestamp(-3) == (119, 1041)
    assert lg.offset_for_timestamp(0) == (0, 1000)
    assert lg.offset_for_timestamp(1025) == (3 * 23 + 2, 1025)
    assert lg.offset_for_timestamp(1041) == (119, 1041)
    assert lg.offset_for_timestamp(1042) is None


def test_log_append_time_and_recompression(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"message.timestamp.type": "LogAppendTime", "compression.type": "zstd"}))
    r = lg.append_as_leader(_batch(compression=1), leader_epoch=0, now_ms=777)
    assert r.log_append_time == 777
    data = lg.read_batches(0)
    h = parse_batch_header(data)
    assert h.compression == 4 and h.timestamp_type == 1 and h.max_timestamp == 777
    assert [r.value for r in decode_records(data)] == [b"v" * 40] * 3
    lg.update_config(_cfg(**{"compression.type": "uncompressed"}))
    lg.append_as_leader(_batch(compression=3), leader_epoch=0)
    assert parse_batch_header(lg.read_batches(3)).compression == 0


def test_rejections_write_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"max.message.bytes": 200, "cleanup.policy": "compact"}))
    with pytest.raises(RecordError) as ei:
        lg.append_as_leader(_batch(size=500), 0)
    assert ei.value.error_code == 10
    with pytest.raises(RecordError) as ei:
        lg.append_as_leader(build_batch([Record(0, 0, None, b"x")]), 0)
    assert ei.value.error_code == 87
    assert lg.log_end_offset == 0 and lg.active_segment.size == 0


def _crash_copy(src: str, dst: str) -> str:
    shutil.copytree(src, dst)
    return dst


def test_torn_tail_recovery_at_random_points(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = str(tmp_path / "src" / "t-0")
    lg = Log(src, _cfg(**{"segment.bytes": 100_000}))
    ends = []
    for i in range(30):
        lg.append_as_leader(_batch(ts=1000 + i, size=random.Random(i).randint(1, 200)), 0, now_ms=1)
        ends.append(lg.active_segment.size)
    rng = random.Random(42)
    for trial in range(15):
        dst = _crash_copy(src, str(tmp_path / f"c{trial}" / "t-0"))
        cut = rng.randint(0, ends[-1])
        with open(os.path.join(dst, "00000000000000000000.log"), "r+b") as f:
            f.truncate(cut)
        whole = sum(1 for e in ends if e <= cut)
        rec = Log(dst, _cfg(**{"segment.bytes": 100_000}), had_clean_shutdown=False)
        assert rec.log_end_offset == whole * 3
        assert rec.active_segment.size == (ends[whole - 1] if whole else 0)
        assert _all_offsets(rec) == list(range(whole * 3))
        rec.append_as_leader(_batch(), 0)
        assert rec.log_end_offset == whole * 3 + 3
        rec.close()


def test_bad_crc_in_middle_truncates_there(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path / "t-0")
    lg = Log(d, _cfg(**{"segment.bytes": 100_000}))
    ends = []
    for i in range(10):
        lg.append_as_leader(_batch(ts=1000 + i), 0)
        ends.append(lg.active_segment.size)
    lg.close()
    with open(os.path.join(d, "00000000000000000000.log"), "r+b") as f:
        f.seek(ends[4] + 70)
        b = f.read(1)
        f.seek(ends[4] + 70)
        f.write(bytes([b[0] ^ 0xFF]))
    rec = Log(d, _cfg(**{"segment.bytes": 100_000}), had_clean_shutdown=False)
    assert rec.log_end_offset == 15 and rec.active_segment.size == ends[4]


@pytest.mark.parametrize("damage", ["missing", "truncated", "garbage", "timeindex"])
def test_damaged_indexes_rebuilt_after_clean_shutdown(tmp_path, damage: str) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path / "t-0")
    cfg = _cfg(**{"segment.bytes": 100_000, "index.interval.bytes": 100})
    lg = Log(d, cfg)
    _fill(lg, 40)
    lg.flush_sync()
    lg.close(sync=True)
    idx = os.path.join(d, "00000000000000000000.index")
    if damage == "missing":
        os.unlink(idx)
    elif damage == "truncated":
        with open(idx, "r+b") as f:
            f.truncate(os.path.getsize(idx) - 3)
    elif damage == "garbage":
        with open(idx, "r+b") as f:
            f.write(os.urandom(os.path.getsize(idx)))
    else:
        with open(os.path.join(d, "00000000000000000000.timeindex"), "wb") as f:
            f.write(b"\x00" * 7)
    rec = Log(d, cfg, had_clean_shutdown=True)
    assert rec.log_end_offset == 120
    for off in (0, 55, 119):
        h = parse_batch_header(rec.read(off, 1).regions[0].read_bytes())
        assert h.base_offset <= off <= h.base_offset + 2
    assert rec.offset_for_timestamp(1020) == (3 * 18 + 2, 1020)


def test_restart_after_clean_shutdown_keeps_everything(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path / "t-0")
    lg = Log(d, _cfg())
    _fill(lg, 50)
    lg.append_as_leader(_batch(producer_id=7, producer_epoch=0, base_sequence=0), 2)
    segs = len(lg.segments)
    lg.flush_sync()
    lg.close(sync=True)
    again = Log(d, _cfg(), had_clean_shutdown=True)
    assert again.log_end_offset == 153 and len(again.segments) == segs
    assert again.recovery_point == 153
    assert again.producer_state.producers[7].last_seq == 2
    assert again.leader_epoch_cache.entries == [(1, 0), (2, 150)]
    assert again.epoch_for_offset(149) == 1 and again.epoch_for_offset(151) == 2
    assert again.end_offset_for_epoch(1) == (1, 150)
    r = again.append_as_leader(_batch(), 2)
    assert r.base_offset == 153


def test_truncate_to(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg())
    _fill(lg, 50)
    lg.truncate_to(100)  # offset 100 is inside batch 99..101: truncation is per batch
    assert lg.log_end_offset == 99 and _all_offsets(lg) == list(range(99))
    lg.append_as_leader(_batch(), 1)
    assert lg.log_end_offset == 102
    lg.truncate_to(0)
    assert lg.log_end_offset == 0 and lg.log_start_offset == 0


# ---- producer state ----

def _pbatch(seq: int, epoch: int = 0, pid: int = 11, n: int = 3) -> bytes:
    return _batch(n=n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_idempotent_dedup_and_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg())
    assert lg.append_as_leader(_pbatch(5), 0).base_offset == 0  # unknown producer: any sequence
    r2 = lg.append_as_leader(_pbatch(8), 0)
    dup = lg.append_as_leader(_pbatch(5), 0)
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (0, 2)
    assert lg.log_end_offset == 6
    dup2 = lg.append_as_leader(_pbatch(8), 0)
    assert dup2.duplicate and dup2.base_offset == r2.base_offset
    with pytest.raises(ProducerStateError) as ei:
        lg.append_as_leader(_pbatch(20), 0)
    assert ei.value.error_code == 45
    with pytest.raises(ProducerStateError) as ei:
        lg.append_as_leader(_pbatch(3, epoch=1), 0)
    assert ei.value.error_code == 45  # new epoch must start at 0
    lg.append_as_leader(_pbatch(0, epoch=1), 0)
    with pytest.raises(ProducerStateError) as ei:
        lg.append_as_leader(_pbatch(3, epoch=0), 0)
    assert ei.value.error_code == 47
    assert lg.log_end_offset == 9


def test_coordinator_origin_checks_only_the_epoch(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Kafka's ProducerAppendInfo for AppendOrigin.Coordinator: a coordinator writes every
    batch of a producer at sequence 0 (TxnOffsetCommit), so neither the sequence nor the
    duplicate check applies; a stale epoch is still refused."""
    lg = Log(str(tmp_path / "t-0"), _cfg())
    coord = AppendOrigin.COORDINATOR
    assert lg.append_as_leader(_pbatch(5, epoch=1), 0).base_offset == 0  # a client's batch
    again = lg.append_as_leader(_pbatch(0, epoch=1), 0, origin=coord)
    assert not again.duplicate and again.base_offset == 3
    repeat = lg.append_as_leader(_pbatch(0, epoch=1), 0, origin=coord)
    assert not repeat.duplicate and repeat.base_offset == 6
    assert lg.append_as_leader(_pbatch(7, epoch=2), 0, origin=coord).base_offset == 9
    with pytest.raises(ProducerStateError) as ei:
        lg.append_as_leader(_pbatch(0, epoch=1), 0, origin=coord)
    assert ei.value.error_code == 47
    with pytest.raises(ProducerStateError) as ei:
        lg.append_as_leader(_pbatch(0, epoch=2), 0)  # a client's is still checked
    assert ei.value.error_code == 45
    assert lg.log_end_offset == 12


def test_sequence_wrap(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg())
    lg.append_as_leader(_pbatch(2**31 - 3, n=3), 0)  # last seq = Int.MAX
    assert lg.append_as_leader(_pbatch(0), 0).base_offset == 3


def test_only_last_five_batches_deduplicated(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg())
    for i in range(7):
        lg.append_as_leader(_pbatch(i * 3), 0)
    assert lg.append_as_leader(_pbatch(6), 0).duplicate
    with pytest.raises(ProducerStateError):
        lg.append_as_leader(_pbatch(0), 0)  # fell out of the 5-batch cache


def test_snapshot_round_trip_and_format(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path)
    lg = Log(os.path.join(d, "t-0"), _cfg())
    lg.append_as_leader(_pbatch(0, pid=1), 0)
    lg.append_as_leader(_pbatch(0, pid=2, epoch=3), 0, now_ms=1)
    path = lg.producer_state.take_snapshot()
    assert os.path.basename(path) == "00000000000000000006.snapshot"
    data = Path(path).read_bytes()
    assert len(data) == 10 + 46 * 2 and data[:2] == b"\x00\x01"
    loaded = ProducerStateManager.decode_snapshot(data)
    assert loaded[2].producer_epoch == 3 and loaded[2].last_seq == 2 and loaded[2].batches[-1].last_offset == 5
    corrupt = bytearray(data)
    corrupt[20] ^= 1
    with pytest.raises(ValueError):
        ProducerStateManager.decode_snapshot(bytes(corrupt))
    # Unclean restart: state rebuilt from the snapshot plus replay of later batches.
    lg.append_as_leader(_pbatch(3, pid=1), 0)
    lg.flush_sync()
    crash = _crash_copy(lg.dir, os.path.join(d, "crash", "t-0"))
    assert not os.path.exists(os.path.join(crash, "00000000000000000000.snapshot"))  # none for a new log
    rec = Log(crash, _cfg(), had_clean_shutdown=False)
    assert rec.producer_state.producers[1].last_seq == 5
    assert rec.append_as_leader(_pbatch(3, pid=1), 0).duplicate


# ---- flushing ----

async def test_flush_until_group_commits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"flush.messages": 1}))
    calls = []
    orig = Log._fsync_segments

    def counting(segs, dirs):  # type: ignore[no-untyped-def]
        calls.append(len(segs))
        orig(segs, dirs)

    lg._fsync_segments = counting  # type: ignore[method-assign]
    results = [lg.append_as_leader(_batch(), 0) for _ in range(5)]
    assert all(r.flush_needed for r in results)
    await asyncio.gather(*(lg.flush_until(r.last_offset + 1) for r in results))
    assert lg.recovery_point == 15 and len(calls) == 1
    await lg.flush_until(15)
    assert len(calls) == 1
    assert lg.flush_due(10**15) is False


def test_timestamp_difference_limit(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"message.timestamp.difference.max.ms": 60_000}))
    now = 10_000_000
    with pytest.raises(RecordError) as ei:
        lg.append_as_leader(_batch(ts=now - 120_000), leader_epoch=0, now_ms=now)
    assert ei.value.error_code == 32  # INVALID_TIMESTAMP
    assert lg.log_end_offset == 0
    r = lg.append_as_leader(_batch(ts=now - 30_000), leader_epoch=0, now_ms=now)
    assert r.base_offset == 0 and lg.log_end_offset == 3


def test_record_errors_name_every_keyless_record_of_a_compacted_topic(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "c-3"), _cfg(**{"cleanup.policy": "compact"}))
    keys = [b"a", None, b"b", None, None, b"c", None]
    for codec in (0, 4):  # the records of a compressed batch are checked the same way
        with pytest.raises(RecordValidationError) as ei:
            lg.append_as_leader(build_batch([Record(i, 0, k, b"v") for i, k in enumerate(keys)], compression=codec), 0)
        e = ei.value
        msg = "Compacted topic cannot accept message without key in topic partition c-3"
        assert e.error_code == 87  # INVALID_RECORD
        assert e.record_errors == [(1, msg), (3, msg), (4, msg), (6, msg)]
        assert e.message == (
            "One or more records have been rejected due to 4 record errors in total, and only showing the first "
            f"three errors at most: [RecordError(batchIndex=1, message='{msg}'), RecordError(batchIndex=3, "
            f"message='{msg}'), RecordError(batchIndex=4, message='{msg}')]"
        )
    assert lg.log_end_offset == 0 and lg.active_segment.size == 0
    lg.append_as_leader(build_batch([Record(0, 0, b"a", b"v")]), 0)
    assert lg.log_end_offset == 1


def test_record_errors_for_timestamps_out_of_range(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"message.timestamp.difference.max.ms": 60_000, "cleanup.policy": "compact"}))
    now = 10_000_000
    deltas = [0, 120_000, 30_000, -70_000]
    recs = [Record(i, d, b"k", b"v") for i, d in enumerate(deltas)]
    recs.append(Record(4, 0, None, b"v"))  # a key error as well: the partition error is INVALID_TIMESTAMP
    with pytest.raises(RecordValidationError) as ei:
        lg.append_as_leader(build_batch(recs, base_timestamp=now), 0, now_ms=now)
    e = ei.value
    assert e.error_code == 32 and e.message == "One or more records have been rejected due to invalid timestamp"
    assert [i for i, _ in e.record_errors] == [1, 3, 4]
    assert e.record_errors[0][1] == (f"Timestamp {now + 120_000} of message with offset 1 is out of range. "
                                     f"The timestamp should be within [{now - 60_000}, {now + 60_000}]")
    assert lg.log_end_offset == 0


def _compressible_batch() -> bytes:
    # Text-like values: every codec and level compresses them, by different amounts.
    rng = random.Random(7)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"epsilon", b"zeta", b"eta", b"theta"]
    return build_batch([Record(i, i, None, b" ".join(rng.choice(words) + b"%d" % rng.randint(0, 999)
                                                   for _ in range(200))) for i in range(50)], base_timestamp=1000)


@pytest.mark.parametrize("codec,key,low,high", [
    ("gzip", "compression.gzip.level", "1", "9"),
    ("lz4", "compression.lz4.level", "9", "17"),  # 9, the default: the fast compressor
    ("zstd", "compression.zstd.level", "-50", "19"),
])
def test_recompression_uses_the_topics_level(tmp_path, codec: str, key: str, low: str, high: str) -> None:  # type: ignore[no-untyped-def]
    """KIP-390: a batch the broker recompresses (compression.type differs from the producer's)
    is written at compression.<codec>.level: the same records take more room at a lower level."""
    sizes = []
    for level in (low, high):
        lg = Log(str(tmp_path / f"{codec}{level}-0"), _cfg(**{"segment.bytes": 1 << 20, "compression.type": codec,
                                                              key: level}))
        lg.append_as_leader(_compressible_batch(), leader_epoch=0)
        data = lg.read_batches(0)
        h = parse_batch_header(data)
        assert h.compression == {"gzip": 1, "lz4": 3, "zstd": 4}[codec]
        assert len(decode_records(data)) == 50
        sizes.append(len(data))
        lg.close()
    assert sizes[0] > sizes[1] * 1.05, sizes


@pytest.mark.parametrize("key,value", [("compression.gzip.level", "0"), ("compression.gzip.level", "10"),
                                       ("compression.lz4.level", "18"), ("compression.zstd.level", "23"),
                                       ("compression.zstd.level", "-131073")])
def test_out_of_range_compression_levels_refused(key: str, value: str) -> None:
    with pytest.raises(ValueError):
        LogConfig.from_props({key: value})
    from kaflet.server.topic_config import InvalidConfigError, validate_topic_config

    with pytest.raises(InvalidConfigError, match=f"Invalid value {value} for configuration {key}: Value must be"):
        validate_topic_config(key, value)


def test_timestamp_before_and_after_limits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """KIP-937: separate bounds behind and ahead of the broker's clock."""
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"message.timestamp.before.max.ms": 60_000,
                                            "message.timestamp.after.max.ms": 1_000}))
    now = 10_000_000
    lg.append_as_leader(_batch(ts=now - 59_000), leader_epoch=0, now_ms=now)  # 59 s old: within before
    with pytest.raises(RecordValidationError) as ei:
        lg.append_as_leader(_batch(n=1, ts=now - 61_000), leader_epoch=0, now_ms=now)
    assert ei.value.error_code == 32  # INVALID_TIMESTAMP
    assert ei.value.record_errors == [(0, f"Timestamp {now - 61_000} of message with offset 0 is out of range. "
                                          f"The timestamp should be within [{now - 60_000}, {now + 1_000}]")]
    with pytest.raises(RecordValidationError):
        lg.append_as_leader(_batch(n=1, ts=now + 2_000), leader_epoch=0, now_ms=now)  # 2 s ahead: past after
    lg.append_as_leader(_batch(n=1, ts=now + 1_000), leader_epoch=0, now_ms=now)
    assert lg.log_end_offset == 4


def test_timestamp_bounds_fall_back_to_difference_max(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Kafka 3.6+: a bound left at its default takes message.timestamp.difference.max.ms; one that
    is set wins over it. The other side unbounded prints as Java's wrapped long."""
    now = 10_000_000
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"message.timestamp.difference.max.ms": 5_000,
                                            "message.timestamp.after.max.ms": 100_000}))
    lg.append_as_leader(_batch(n=1, ts=now + 50_000), leader_epoch=0, now_ms=now)  # after: 100 s
    with pytest.raises(RecordValidationError) as ei:
        lg.append_as_leader(_batch(n=1, ts=now - 6_000), leader_epoch=0, now_ms=now)  # before: difference, 5 s
    assert f"should be within [{now - 5_000}, {now + 100_000}]" in ei.value.record_errors[0][1]
    lg = Log(str(tmp_path / "u-0"), _cfg(**{"message.timestamp.before.max.ms": 1_000}))
    lg.append_as_leader(_batch(n=1, ts=now + 10**12), leader_epoch=0, now_ms=now)  # after: unbounded
    with pytest.raises(RecordValidationError) as ei:
        lg.append_as_leader(_batch(n=1, ts=now - 2_000), leader_epoch=0, now_ms=now)
    assert f"should be within [{now - 1_000}, {now + 2**63 - 1 - 2**64}]" in ei.value.record_errors[0][1]


def test_segment_jitter_moves_each_segments_roll_time(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """segment.jitter.ms: each new segment rolls at segment.ms minus its own random jitter (in
    [0, min(segment.jitter.ms, segment.ms)), Kafka's randomSegmentJitter), by record time."""
    segment_ms = 100_000
    jitters = []
    for n in range(8):
        lg = Log(str(tmp_path / f"j{n}-0"), _cfg(**{"segment.bytes": 1 << 20, "segment.ms": segment_ms,
                                                    "segment.jitter.ms": 10 * segment_ms}))
        j = lg.active_segment.roll_jitter_ms
        assert 0 <= j < segment_ms
        jitters.append(j)
        lg.append_as_leader(_batch(n=1, ts=0), leader_epoch=0, now_ms=1)
        lg.append_as_leader(_batch(n=1, ts=segment_ms - j), leader_epoch=0, now_ms=1)  # waited = segment.ms - j
        assert len(lg.segments) == 1
        lg.append_as_leader(_batch(n=1, ts=segment_ms - j + 1), leader_epoch=0, now_ms=1)
        assert len(lg.segments) == 2  # without jitter it would roll only after segment.ms
        assert 0 <= lg.active_segment.roll_jitter_ms < segment_ms  # the new segment draws its own
        lg.close()
    assert len(set(jitters)) > 1 and max(jitters) > 0
    # Without segment.jitter.ms there is none.
    lg = Log(str(tmp_path / "none-0"), _cfg(**{"segment.ms": segment_ms}))
    assert lg.active_segment.roll_jitter_ms == 0
