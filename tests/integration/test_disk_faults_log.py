"""The log layer on real file systems that fill up (tmpfs: ENOSPC) or fail (ext4 turned
read-only by the kernel: EROFS): a failed write leaves the segment as it was, no acknowledged
record is lost after space comes back or after a restart, and a failed directory goes offline
without holding back the checkpoints and retention of the healthy ones."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kaflet.log.checkpoints import (
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_offset_checkpoint,
)
from kaflet.log.config import LogConfig
from kaflet.log.dir_failure import LogDirFailureChannel, is_resource_exhaustion
from kaflet.log.errors import KafkaStorageError
from kaflet.log.log import Log
from kaflet.log.log_manager import LogManager
from kaflet.protocol.records import Record, build_batch, iter_batches
from tests.support import filesystems
from tests.support.filesystems import Ext4

pytestmark = pytest.mark.skipif(filesystems.mounts_unavailable_reason() is not None,
                                reason=str(filesystems.mounts_unavailable_reason()))

RECORD = 20 * 1024


def _batch(i: int, records: int = 4) -> bytes:
    # Random values: tmpfs stores what it is given, so the size on disk is the batch's.
    return build_batch([Record(n, n, b"%d" % i, os.urandom(RECORD)) for n in range(records)], base_timestamp=1000 + i)


def _offsets(lg: Log) -> list[int]:
    out: list[int] = []
    for seg in lg.segments:
        data = Path(seg.log_path).read_bytes()
        assert len(data) == seg.size, f"{seg.log_path}: {len(data)} bytes on disk, {seg.size} in the segment"
        for _, h in iter_batches(data):
            out.extend(range(h.base_offset, h.base_offset + h.records_count))
    return out


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    with filesystems.tmpfs(tmp_path, 2 << 20) as point:
        yield point


def test_a_write_cut_short_by_a_full_disk_leaves_the_segment_as_it_was(small_fs: Path) -> None:
    """The data-loss defect: a batch half-written at ENOSPC stayed in the file while the
    segment's size did not count it; after space came back the next records went after the
    half batch, and a clean restart lost them and handed their offsets out again."""
    d = str(small_fs / "t-0")
    cfg = LogConfig.from_props({"segment.bytes": 8 << 20})
    lg = Log(d, cfg)
    acked: list[int] = []
    failures = 0
    for i in range(200):
        try:
            r = lg.append_as_leader(_batch(i), leader_epoch=0)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            failures += 1
            if failures == 3:
                break
            continue
        acked.extend(range(r.base_offset, r.last_offset + 1))
    assert failures == 3 and acked, "the file system never filled up"
    # Nothing of the failed batches is in the file, and the indexes point at whole batches.
    assert _offsets(lg) == acked
    # Space comes back (a truncation frees the last 10 batches): appends go on right after
    # the last whole batch.
    lg.truncate_to(acked[-40])
    del acked[-40:]
    for i in range(3):
        r = lg.append_as_leader(_batch(1000 + i), leader_epoch=0)
        assert r.base_offset == acked[-1] + 1
        acked.extend(range(r.base_offset, r.last_offset + 1))
    lg.flush_sync()
    lg.close(sync=True)
    # A clean restart does not scan the segments: what it finds must be exactly what was acked.
    again = Log(d, cfg, had_clean_shutdown=True)
    assert again.log_end_offset == acked[-1] + 1
    assert _offsets(again) == acked
    r = again.append_as_leader(_batch(2000), leader_epoch=0)
    assert r.base_offset == acked[-1] + 1
    again.close()


def test_a_roll_that_cannot_create_its_files_keeps_the_active_segment(small_fs: Path) -> None:
    d = str(small_fs / "t-0")
    cfg = LogConfig.from_props({"segment.bytes": 3 * 90_000})
    lg = Log(d, cfg)
    acked: list[int] = []
    filler = filesystems.fill(small_fs, 0)
    with pytest.raises(OSError):
        for i in range(50):
            r = lg.append_as_leader(_batch(i), leader_epoch=0)
            acked.extend(range(r.base_offset, r.last_offset + 1))
    assert _offsets(lg) == acked
    filler.unlink()
    for i in range(6):  # past the next roll
        r = lg.append_as_leader(_batch(100 + i), leader_epoch=0)
        acked.extend(range(r.base_offset, r.last_offset + 1))
    assert len(lg.segments) > 1
    assert _offsets(lg) == acked
    lg.close()


def test_the_failure_channel_takes_the_dir_offline_and_the_log_refuses_everything(small_fs: Path) -> None:
    channel = LogDirFailureChannel()
    lg = Log(str(small_fs / "t-0"), LogConfig.from_props({}), failure_channel=channel)
    r = lg.append_as_leader(_batch(0), leader_epoch=0)
    filesystems.fill(small_fs, 0)
    with pytest.raises(OSError) as failed:
        for i in range(1, 50):
            lg.append_as_leader(_batch(i), leader_epoch=0)
    assert failed.value.errno == errno.ENOSPC
    assert channel.is_offline(str(small_fs))
    assert "No space left on device" in channel.offline_dirs[str(small_fs)]
    lg.go_offline()
    for attempt in (lambda: lg.append_as_leader(_batch(99), leader_epoch=0), lambda: lg.read(r.base_offset, 1000),
                    lambda: lg.truncate_to(0)):
        with pytest.raises(KafkaStorageError):
            attempt()


def test_resource_exhaustion_is_not_a_disk_fault() -> None:
    channel = LogDirFailureChannel()
    for code in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
        exc = OSError(code, os.strerror(code))
        assert is_resource_exhaustion(exc)
        assert not channel.maybe_add_offline_log_dir("/data", "roll", exc)
    assert not channel.any_offline
    assert channel.maybe_add_offline_log_dir("/data", "append", OSError(errno.EIO, "Input/output error"))
    assert not channel.maybe_add_offline_log_dir("/data", "append", OSError(errno.EIO, "again"))  # once


@pytest.fixture
def failing_disk(tmp_path: Path) -> Iterator[Ext4]:
    with filesystems.ext4(tmp_path, 32) as fs:
        yield fs


async def test_a_failed_dir_does_not_hold_back_the_healthy_ones(tmp_path: Path, failing_disk: Ext4) -> None:
    """The second defect: one pass wrote every dir's checkpoints and caught its error once, so
    with the failed dir first the healthy dirs were never checkpointed again, and retention and
    producer expiry were skipped as long as the dir stayed failed."""
    healthy = tmp_path / "healthy"
    channel = LogDirFailureChannel()
    went_offline: list[str] = []
    channel.set_listener(asyncio.get_running_loop(), went_offline.append)
    manager = LogManager([str(failing_disk.point), str(healthy)], {"retention.ms": "60000"},
                         high_watermark_checkpoint_interval_ms=50, recovery_point_checkpoint_interval_ms=50,
                         retention_check_interval_ms=50, flush_check_interval_ms=50, failure_channel=channel)
    manager.startup()
    failed_log = manager.get_or_create_log("a", 0)
    healthy_log = manager.get_or_create_log("b", 0)
    assert manager.log_dir_of("a", 0) == str(failing_disk.point)
    assert manager.log_dir_of("b", 0) == str(healthy)
    for i in range(3):
        failed_log.append_as_leader(_batch(i, 1), leader_epoch=0)
    stop = asyncio.Event()
    background = asyncio.create_task(manager.run_background(stop))
    try:
        failing_disk.fail()
        with pytest.raises(OSError):
            failed_log.append_as_leader(_batch(9, 1), leader_epoch=0)
        for _ in range(100):
            if went_offline:
                break
            await asyncio.sleep(0.05)
        assert went_offline == [str(failing_disk.point)]
        assert manager.handle_log_dir_failure(went_offline[0]) == [("a", 0)]
        assert failed_log.offline and manager.get_log("a", 0) is None
        assert manager.live_log_dirs == [str(healthy)]
        # The healthy dir's checkpoints keep moving, retention keeps running there.
        healthy_log.append_as_leader(_batch(0, 1), leader_epoch=0, now_ms=0)
        healthy_log.roll()
        healthy_log.append_as_leader(_batch(1, 1), leader_epoch=0)
        healthy_log.update_high_watermark(2)
        await healthy_log.flush()
        for _ in range(100):
            hw = read_offset_checkpoint(str(healthy / REPLICATION_OFFSET_CHECKPOINT))
            rp = read_offset_checkpoint(str(healthy / RECOVERY_POINT_CHECKPOINT))
            if hw.get(("b", 0)) == 2 and rp.get(("b", 0)) == 2 and healthy_log.log_start_offset > 0:
                break
            await asyncio.sleep(0.05)
        assert hw.get(("b", 0)) == 2 and rp.get(("b", 0)) == 2
        assert healthy_log.log_start_offset > 0, "retention did not run in the healthy dir"
        # New logs go to the live dir only.
        assert manager.get_or_create_log("c", 0) and manager.log_dir_of("c", 0) == str(healthy)
    finally:
        stop.set()
        await background
    manager.shutdown()
    # Only the healthy dir is marked as cleanly shut down: the failed one must be recovered.
    assert (healthy / ".kafka_cleanshutdown").exists()
    assert not (failing_disk.point / ".kafka_cleanshutdown").exists()


def test_a_dir_that_fails_at_start_up_starts_offline(tmp_path: Path, failing_disk: Ext4) -> None:
    healthy = tmp_path / "healthy"
    first = LogManager([str(failing_disk.point), str(healthy)])
    first.startup()
    first.get_or_create_log("a", 0).append_as_leader(_batch(0, 1), leader_epoch=0)
    first.get_or_create_log("b", 0).append_as_leader(_batch(0, 1), leader_epoch=0)
    first.shutdown()
    failing_disk.fail()
    channel = LogDirFailureChannel()
    second = LogManager([str(failing_disk.point), str(healthy)], failure_channel=channel)
    second.startup()
    try:
        assert channel.is_offline(str(failing_disk.point))
        assert "Read-only file system" in channel.offline_dirs[str(failing_disk.point)]
        assert second.get_log("a", 0) is None
        assert second.get_log("b", 0) is not None and second.get_log("b", 0).log_end_offset == 1  # type: ignore[union-attr]
    finally:
        second.shutdown()
    # With every dir failed there is nothing to serve: start-up fails with the disk's error.
    only_failed = LogManager([str(failing_disk.point)])
    with pytest.raises(OSError):
        only_failed.startup()
