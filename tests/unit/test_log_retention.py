"""Retention (retention.ms, retention.bytes, log start offset) and DeleteRecords in the log layer."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from kaflet.log.checkpoints import LOG_START_OFFSET_CHECKPOINT, read_offset_checkpoint
from kaflet.log.config import LogConfig
from kaflet.log.errors import OffsetOutOfRangeError
from kaflet.log.log import EARLIEST_TIMESTAMP, Log, unlink_files
from kaflet.log.log_manager import LogManager
from kaflet.protocol.records import Record, build_batch


class Clock:
    """A settable wall clock for Log(now_ms=...)."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def _cfg(**props: str | int) -> LogConfig:
    base: dict[str, str | int] = {"segment.bytes": 1000, "index.interval.bytes": 200, "file.delete.delay.ms": 500}
    base.update(props)
    return LogConfig.from_props(base)


def _batch(ts: int, n: int = 3, size: int = 60) -> bytes:
    return build_batch([Record(i, 0, b"k%d" % i, b"v" * size) for i in range(n)], base_timestamp=ts)


def _fill(lg: Log, batches: int, ts: int, committed: bool = True) -> None:
    for _ in range(batches):
        lg.append_as_leader(_batch(ts), leader_epoch=0, now_ms=ts)
    if committed:  # as the partition of a leader that is its own ISR would
        lg.update_high_watermark(lg.log_end_offset)


def _files(lg: Log, suffix: str) -> list[str]:
    return sorted(n for n in os.listdir(lg.dir) if n.endswith(suffix))


def test_retention_ms_uses_largest_timestamp_and_renames_then_unlinks(tmp_path: Path) -> None:
    clock = Clock(1_000_000)
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"retention.ms": 10_000}), now_ms=clock)
    _fill(lg, 12, ts=900_000)  # old records: several full segments
    old_bases = [s.base_offset for s in lg.segments]
    _fill(lg, 2, ts=995_000)  # new records, forcing at least one more segment
    assert len(lg.segments) > 3
    # The segment holding both old and new records is kept: its *largest* timestamp counts.
    keep_from = next(s.base_offset for s in lg.segments if s.largest_timestamp >= 995_000)
    deleted = lg.delete_old_segments()
    assert deleted == sum(1 for b in old_bases if b < keep_from)
    assert lg.segments[0].base_offset == keep_from == lg.log_start_offset
    # Deleted segments are renamed first; nothing is unlinked before file.delete.delay.ms.
    renamed = _files(lg, ".deleted")
    assert renamed and all(n.split(".")[0].isdigit() for n in renamed)
    assert lg.take_due_file_deletes() == []
    clock.now += 500
    due = lg.take_due_file_deletes()
    assert sorted(os.path.basename(p) for p in due) == renamed
    assert unlink_files(due) == len(due)
    assert _files(lg, ".deleted") == []
    # Reads and ListOffsets follow the new start.
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 1000)
    assert lg.offset_for_timestamp(EARLIEST_TIMESTAMP).offset == keep_from
    assert lg.delete_old_segments() == 0


def test_active_segment_rolled_and_deleted_when_all_expired(tmp_path: Path) -> None:
    clock = Clock(1_000_000)
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"retention.ms": 1000, "segment.bytes": 100_000}), now_ms=clock)
    _fill(lg, 3, ts=990_000)
    assert len(lg.segments) == 1 and lg.active_segment.size > 0
    leo = lg.log_end_offset
    assert lg.delete_old_segments() == 1
    assert len(lg.segments) == 1 and lg.active_segment.base_offset == leo and lg.active_segment.size == 0
    assert lg.log_start_offset == leo == lg.high_watermark
    assert lg.read(leo, 1000).regions == []
    # The empty active segment is never deleted; appends continue at the LEO.
    assert lg.delete_old_segments() == 0
    r = lg.append_as_leader(_batch(1_000_000), leader_epoch=0, now_ms=clock.now)
    assert r.base_offset == leo
    assert lg.delete_old_segments() == 0


def test_nothing_deleted_above_the_high_watermark(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"retention.ms": 1000}), now_ms=Clock(1_000_000))
    _fill(lg, 12, ts=1, committed=False)
    second = lg.segments[1].base_offset
    lg.update_high_watermark(second)  # only the first segment is fully below the HW
    assert lg.delete_old_segments() == 1
    assert lg.log_start_offset == second and lg.segments[0].base_offset == second


def test_retention_bytes_keeps_at_least_the_limit(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"retention.bytes": 2500}), now_ms=Clock())
    _fill(lg, 20, ts=1_000_000)
    sizes = [s.size for s in lg.segments]
    total = sum(sizes)
    assert total > 2500
    deleted = lg.delete_old_segments()
    assert deleted > 0
    remaining = lg.size_in_bytes
    assert remaining == total - sum(sizes[:deleted])
    assert remaining >= 2500 and remaining - lg.segments[0].size < 2500
    assert lg.log_start_offset == lg.segments[0].base_offset
    assert lg.delete_old_segments() == 0


def test_retention_bytes_zero_empties_the_log(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"retention.bytes": 0}), now_ms=Clock())
    _fill(lg, 8, ts=1_000_000)
    leo = lg.log_end_offset
    lg.delete_old_segments()
    assert lg.size_in_bytes == 0 and lg.log_start_offset == leo and len(lg.segments) == 1


def test_unlimited_and_compact_policies_keep_everything(tmp_path: Path) -> None:
    for i, props in enumerate(({"retention.ms": -1}, {"retention.ms": 1, "cleanup.policy": "compact"})):
        lg = Log(str(tmp_path / f"t-{i}"), _cfg(**props), now_ms=Clock())
        _fill(lg, 10, ts=1)
        n = len(lg.segments)
        assert lg.delete_old_segments() == 0 and len(lg.segments) == n and lg.log_start_offset == 0


def test_legacy_segment_without_timestamps_uses_file_mtime(tmp_path: Path) -> None:
    clock = Clock(10_000_000)
    lg = Log(str(tmp_path / "t-0"), _cfg(**{"retention.ms": 60_000}), now_ms=clock)
    _fill(lg, 12, ts=clock.now)
    first = lg.segments[0]
    # Pretend the first segment carried no timestamps (as old message formats): its age is
    # then the .log file's modification time.
    first._max_ts = -1
    assert lg.delete_old_segments() == 0
    old = (clock.now - 120_000) / 1000
    os.utime(first.log_path, (old, old))
    assert first.largest_timestamp == clock.now - 120_000
    assert lg.delete_old_segments() == 1


def test_delete_records_moves_start_and_drops_whole_segments(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), _cfg(), now_ms=Clock())
    _fill(lg, 12, ts=1_000_000)
    segs = lg.segments
    target = segs[2].base_offset + 1  # inside the third segment
    with pytest.raises(OffsetOutOfRangeError):
        lg.maybe_increment_log_start_offset(lg.high_watermark + 1)
    assert lg.maybe_increment_log_start_offset(target)
    assert not lg.maybe_increment_log_start_offset(target - 1)  # never moves back
    assert lg.log_start_offset == target
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(target - 1, 1000)
    assert lg.read(target, 1000).regions
    assert lg.offset_for_timestamp(EARLIEST_TIMESTAMP).offset == target
    assert lg.delete_log_start_offset_breached() == 2
    assert lg.segments[0].base_offset == segs[2].base_offset and lg.log_start_offset == target
    # Up to the high watermark: every segment but the active one goes (as in Kafka, the
    # active segment has no next segment whose base proves it is wholly below the start).
    assert lg.maybe_increment_log_start_offset(lg.high_watermark)
    lg.delete_log_start_offset_breached()
    assert lg.log_start_offset == lg.log_end_offset and len(lg.segments) == 1
    assert lg.read(lg.log_end_offset, 100).regions == []


def test_start_offset_survives_restart_and_deleted_files_are_removed(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    lg = Log(d, _cfg(), now_ms=Clock())
    _fill(lg, 12, ts=1_000_000)
    target = lg.segments[1].base_offset + 2
    lg.maybe_increment_log_start_offset(target)
    lg.delete_log_start_offset_breached()
    assert _files(lg, ".deleted")
    lg.flush_sync()
    lg.close()
    # As the LogManager would: the checkpointed start offset is handed back at start-up.
    again = Log(d, _cfg(), log_start_offset=target, had_clean_shutdown=True, now_ms=Clock())
    assert again.log_start_offset == target
    assert _files(again, ".deleted") == []
    with pytest.raises(OffsetOutOfRangeError):
        again.read(target - 1, 100)


async def test_log_manager_retention_pass_checkpoints_and_frees_disk(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    props = {"segment.bytes": "1000", "retention.ms": "60000", "file.delete.delay.ms": "0"}
    mgr = LogManager([str(tmp_path / "d")], props, retention_check_interval_ms=50, flush_check_interval_ms=20)
    mgr.startup()
    lg = mgr.get_or_create_log("t", 0)
    _fill(lg, 12, ts=now - 120_000)
    _fill(lg, 1, ts=now)
    before = sum(os.path.getsize(os.path.join(lg.dir, n)) for n in _files(lg, ".log"))
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.run_background(stop))
    try:
        for _ in range(150):
            await asyncio.sleep(0.02)
            if lg.log_start_offset > 0 and not _files(lg, ".deleted"):
                break
    finally:
        stop.set()
        await task
    after = sum(os.path.getsize(os.path.join(lg.dir, n)) for n in _files(lg, ".log"))
    assert lg.log_start_offset == lg.segments[0].base_offset > 0
    assert after < before and _files(lg, ".deleted") == []
    cp = read_offset_checkpoint(os.path.join(str(tmp_path / "d"), LOG_START_OFFSET_CHECKPOINT))
    # The first segment starts at the log start offset, so Kafka leaves it out of the file.
    assert cp == {}
    # DeleteRecords inside a segment: checkpointed right away.
    target = lg.segments[0].base_offset + 1
    lg.maybe_increment_log_start_offset(target)
    await mgr.log_start_offset_moved(lg)
    cp = read_offset_checkpoint(os.path.join(str(tmp_path / "d"), LOG_START_OFFSET_CHECKPOINT))
    assert cp == {("t", 0): target}
    mgr.shutdown()
    mgr2 = LogManager([str(tmp_path / "d")], props)
    mgr2.startup()
    assert mgr2.get_log("t", 0).log_start_offset == target  # type: ignore[union-attr]
    mgr2.shutdown()
