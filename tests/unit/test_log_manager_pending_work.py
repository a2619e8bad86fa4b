"""The log manager's periodic jobs visit only the logs with work pending (issue 21): timed
flushes, ``.deleted`` files, and checkpoint files rewritten only when their offsets changed."""

from __future__ import annotations

import os
from pathlib import Path

from kaflet.log.checkpoints import REPLICATION_OFFSET_CHECKPOINT
from kaflet.log.log_manager import LogManager
from kaflet.protocol.records import Record, build_batch


def _batch() -> bytes:
    return build_batch([Record(i, 0, None, b"x" * 30) for i in range(4)], base_timestamp=1000)


def _manager(tmp_path: Path, clock: list[int], **cfg: str) -> LogManager:
    lm = LogManager([str(tmp_path / "a")], cfg, now_ms=lambda: clock[0])
    lm.startup()
    return lm


async def test_only_logs_with_a_finite_flush_ms_and_unflushed_data_wait_for_the_timed_flush(
        tmp_path: Path) -> None:
    clock = [1_000_000]
    lm = _manager(tmp_path, clock)
    try:
        plain = lm.get_or_create_log("plain", 0)
        timed = lm.get_or_create_log("timed", 0)
        timed.update_config(lm.config_for("timed", {"flush.ms": "100"}))
        assert lm.pending_work.timed_flush == set()  # nothing unflushed yet
        plain.append_as_leader(_batch(), 0)
        timed.append_as_leader(_batch(), 0)
        assert lm.pending_work.timed_flush == {timed}  # flush.ms is infinite for "plain"
        assert lm._timed_flushes_due(clock[0]) == []  # not 100 ms old yet
        clock[0] += 100
        assert lm._timed_flushes_due(clock[0]) == [timed]
        await timed.flush()
        assert timed.recovery_point == 4
        assert lm._timed_flushes_due(clock[0]) == [] and lm.pending_work.timed_flush == set()
        # A config change to a finite flush.ms registers a log that already holds unflushed data.
        plain.update_config(lm.config_for("plain", {"flush.ms": "0"}))
        assert lm._timed_flushes_due(clock[0]) == [plain]
    finally:
        lm.shutdown()


async def test_deleted_segment_files_are_unlinked_when_due_then_the_log_is_forgotten(tmp_path: Path) -> None:
    clock = [1_000_000]
    lm = _manager(tmp_path, clock, **{"segment.bytes": "300", "file.delete.delay.ms": "1000"})
    try:
        lg = lm.get_or_create_log("t", 0)
        idle = lm.get_or_create_log("idle", 0)
        for _ in range(6):
            lg.append_as_leader(_batch(), 0)
        lg.update_high_watermark(lg.log_end_offset)
        assert lm.pending_work.file_deletes == set()
        lg.maybe_increment_log_start_offset(20)
        assert lg.delete_log_start_offset_breached(clock[0]) > 0
        assert lm.pending_work.file_deletes == {lg}  # not the idle log
        deleted = [n for n in os.listdir(lg.dir) if n.endswith(".deleted")]
        assert deleted
        assert lm._next_wake_ms(clock[0], clock[0], clock[0], clock[0]) == 1000
        assert await lm.remove_due_segment_files(clock[0]) == 0  # the delay has not passed
        assert lm.pending_work.file_deletes == {lg}
        clock[0] += 1000
        assert await lm.remove_due_segment_files(clock[0]) == len(deleted)
        assert not [n for n in os.listdir(lg.dir) if n.endswith(".deleted")]
        assert lm.pending_work.file_deletes == set()
        assert idle.next_file_delete_ms is None
    finally:
        lm.shutdown()


async def test_periodic_checkpoint_is_rewritten_only_when_an_offset_changed(tmp_path: Path) -> None:
    clock = [1_000_000]
    lm = _manager(tmp_path, clock)
    path = tmp_path / "a" / REPLICATION_OFFSET_CHECKPOINT
    try:
        lg = lm.get_or_create_log("t", 0)
        lm.get_or_create_log("t", 1)
        lg.append_as_leader(_batch(), 0)
        lg.update_high_watermark(2)
        await lm._write_checkpoint_async(REPLICATION_OFFSET_CHECKPOINT, "high_watermark")
        assert path.read_text() == "0\n2\nt 0 2\nt 1 0\n"
        written = os.stat(path).st_ino  # each write replaces the file (tmp + rename)
        await lm._write_checkpoint_async(REPLICATION_OFFSET_CHECKPOINT, "high_watermark")
        assert os.stat(path).st_ino == written  # unchanged offsets: not written again
        lg.update_high_watermark(4)
        await lm._write_checkpoint_async(REPLICATION_OFFSET_CHECKPOINT, "high_watermark")
        assert path.read_text() == "0\n2\nt 0 4\nt 1 0\n"
        lm.delete_log("t", 1)  # a partition gone changes the file too
        await lm._write_checkpoint_async(REPLICATION_OFFSET_CHECKPOINT, "high_watermark")
        assert path.read_text() == "0\n1\nt 0 4\n"
    finally:
        lm.shutdown()
    # Shutdown writes the file whatever it holds.
    assert path.read_text() == "0\n1\nt 0 4\n"
