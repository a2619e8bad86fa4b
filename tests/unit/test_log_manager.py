"""LogManager: dirs, locking, loading, clean/unclean restarts, deletion, checkpoints."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from kaflet.log.log_manager import CLEAN_SHUTDOWN_FILE, LogDirLockedError, LogManager
from kaflet.protocol.records import Record, build_batch


def _batch() -> bytes:
    return build_batch([Record(i, 0, None, b"x" * 30) for i in range(4)], base_timestamp=1000)


def test_lifecycle(tmp_path) -> None:  # type: ignore[no-untyped-def]
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    lm = LogManager(dirs, {"segment.bytes": "2000"})
    lm.startup()
    with pytest.raises(LogDirLockedError):
        LogManager(dirs).startup()
    logs = [lm.get_or_create_log("orders", p, topic_id="AAAAAAAAAAAAAAAAAAAAAA") for p in range(4)]
    assert sorted(lm.log_dir_of("orders", p) for p in range(4)) == sorted(dirs * 2)  # balanced
    for lg in logs:
        for _ in range(30):
            lg.append_as_leader(_batch(), 0)
    assert lm.get_or_create_log("orders", 0) is logs[0]
    os.makedirs(os.path.join(dirs[0], "junk.dir"))
    open(os.path.join(dirs[0], "stray-file"), "w").close()
    lm.shutdown()
    for d in dirs:
        assert os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
        assert os.path.getsize(os.path.join(d, CLEAN_SHUTDOWN_FILE)) == 0
        text = Path(os.path.join(d, "recovery-point-offset-checkpoint")).read_text()
        assert text.startswith("0\n2\n") and " 120\n" in text

    lm2 = LogManager(dirs, {"segment.bytes": "2000"})
    lm2.startup()
    assert not os.path.exists(os.path.join(dirs[0], CLEAN_SHUTDOWN_FILE))
    assert set(lm2.all_logs()) == {("orders", p) for p in range(4)}
    lg = lm2.get_log("orders", 2)
    assert lg is not None and lg.log_end_offset == 120 and lg.topic_id == "AAAAAAAAAAAAAAAAAAAAAA"
    assert lg.append_as_leader(_batch(), 0).base_offset == 120

    deleted = lm2.delete_log("orders", 2)
    assert deleted is not None and deleted.endswith("-delete") and os.path.isdir(deleted)
    assert lm2.get_log("orders", 2) is None
    assert lm2.remove_deleted_dirs(now_ms=2**62) == 1 and not os.path.exists(deleted)
    lm2.shutdown()


def test_clean_shutdown_syncs_each_file_system_once(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The trimmed indexes of every log are made durable by one syncfs per log dir, not an fsync
    per index file; a dir whose syncfs fails gets no clean-shutdown marker (recovered next start)."""
    from kaflet.log import checkpoints, index_file
    from kaflet.log import log_manager as lm_module

    if not checkpoints.has_syncfs():
        pytest.skip("no syncfs(2) here")
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    lm = LogManager(dirs, {"segment.bytes": "2000"})
    lm.startup()
    logs = [lm.get_or_create_log("t", p) for p in range(6)]
    for lg in logs[:3]:
        lg.append_as_leader(_batch(), 0)
    synced: list[str] = []
    index_fsyncs: list[str] = []

    def fake_syncfs(path: str) -> None:
        synced.append(path)
        checkpoints.syncfs(path)
        if path == dirs[1]:
            raise OSError(5, "Input/output error")

    real_flush = index_file.IndexFile.flush
    monkeypatch.setattr(lm_module, "syncfs", fake_syncfs)
    monkeypatch.setattr(index_file.IndexFile, "flush",
                        lambda self: (index_fsyncs.append(self.path), real_flush(self))[1])
    lm.shutdown()
    assert sorted(synced) == sorted(dirs)
    # Only the flush of unflushed data fsyncs indexes (its own); the idle logs' trims none.
    assert index_fsyncs and not [f for f in index_fsyncs if any(f.startswith(lg.dir + os.sep) for lg in logs[3:])]
    assert os.path.exists(os.path.join(dirs[0], CLEAN_SHUTDOWN_FILE))
    assert not os.path.exists(os.path.join(dirs[1], CLEAN_SHUTDOWN_FILE))
    # The indexes were trimmed to their entries all the same (an empty log's to nothing).
    for lg in logs:
        for seg in os.listdir(lg.dir):
            if seg.endswith(".index") and lg.log_end_offset == 0:
                assert os.path.getsize(os.path.join(lg.dir, seg)) == 0


def test_unclean_restart_recovers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path / "a")
    lm = LogManager([d])
    lm.startup()
    lg = lm.get_or_create_log("t", 0)
    for _ in range(10):
        lg.append_as_leader(_batch(), 0)
    size = lg.active_segment.size
    # "crash": no shutdown; tear the last batch
    with open(os.path.join(d, "t-0", "00000000000000000000.log"), "r+b") as f:
        f.truncate(size - 5)
    for fd in lm._locks.values():
        os.close(fd)
    lm2 = LogManager([d])
    lm2.startup()
    assert lm2.get_log("t", 0).log_end_offset == 36
    lm2.shutdown()


async def test_background_checkpoints_and_flush(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path / "a")
    lm = LogManager([d], {"flush.ms": 0}, recovery_point_checkpoint_interval_ms=0, flush_check_interval_ms=10)
    lm.startup()
    lg = lm.get_or_create_log("t", 0)
    lg.append_as_leader(_batch(), 0)
    stop = asyncio.Event()
    task = asyncio.create_task(lm.run_background(stop))
    for _ in range(100):
        await asyncio.sleep(0.01)
        ckpt = os.path.join(d, "recovery-point-offset-checkpoint")
        if lg.recovery_point == 4 and os.path.exists(ckpt) and "t 0 4" in Path(ckpt).read_text():
            break
    stop.set()
    await task
    assert lg.recovery_point == 4
    lm.shutdown()
