"""Moving a replica between log dirs of one broker: the future log, its copy, the swap and what a
crash at each of the swap's renames leaves (LogManager, AlterLogDirsMover, ReplicaManager)."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
from pathlib import Path

import pytest

from kaflet.log.log import Log
from kaflet.log.log_manager import FUTURE_DIR_SUFFIX, LogManager
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.records import Record, build_batch
from kaflet.quota.replication import ALTER_LOG_DIRS, ReplicationQuota
from kaflet.replication.alter_log_dirs import AlterLogDirsMover, truncate_future_log
from kaflet.replication.partition import Partition
from kaflet.replication.quota import UnboundedQuota
from kaflet.replication.replica_manager import ReplicaManager

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def _batch(i: int) -> bytes:
    return build_batch([Record(k, 0, f"k{i}".encode(), f"value-{i}-{k}".encode() * 3) for k in range(4)],
                       base_timestamp=1000 + i)


def _all_bytes(lg: Log) -> bytes:
    out, offset = [], lg.log_start_offset
    while offset < lg.log_end_offset:
        data = lg.read_batches(offset)
        assert data, offset
        out.append(data)
        offset = _next_offset(data)
    return b"".join(out)


def _next_offset(data: bytes) -> int:
    from kaflet.protocol.records import parse_batch_header

    pos, last = 0, -1
    while pos < len(data):
        h = parse_batch_header(memoryview(data)[pos:])
        last, pos = h.last_offset, pos + h.size
    return last + 1


def _copy(cur: Log, future: Log) -> None:
    while future.log_end_offset < cur.log_end_offset:
        assert future.append_as_follower(cur.read_batches(future.log_end_offset)) is not None


def _manager(root: Path) -> LogManager:
    lm = LogManager([str(root / "a"), str(root / "b")], {"segment.bytes": "3000"})
    lm.startup()
    return lm


def test_crash_at_every_step_of_the_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every on-disk state a crash between the swap's renames leaves loads with one complete
    log: before the first, the current log and the future one (the move resumes); after it,
    the future log without a current one, which becomes the log; after the second, the log in
    its new dir. Never two logs of the partition, never a record lost."""
    root = tmp_path / "live"
    lm = _manager(root)
    cur = lm.get_or_create_log("t", 0, topic_id=TOPIC_ID)
    assert lm.log_dir_of("t", 0) == str(root / "a")
    for i in range(40):
        cur.append_as_leader(_batch(i), 3)
    cur.update_high_watermark(cur.log_end_offset)
    future = lm.create_future_log("t", 0, str(root / "b"))
    assert os.path.basename(future.dir).endswith(FUTURE_DIR_SUFFIX) and future.topic == "t"
    _copy(cur, future)
    expected, leo = _all_bytes(cur), cur.log_end_offset
    assert len(cur.segments) >= 3
    pre = tmp_path / "pre"
    shutil.copytree(root, pre)
    renames: list[tuple[str, str]] = []
    real = os.rename

    def recording(a: str, b: str) -> None:
        real(a, b)
        renames.append((os.path.relpath(a, root), os.path.relpath(b, root)))

    monkeypatch.setattr(os, "rename", recording)
    new = lm.replace_current_with_future_log("t", 0)
    monkeypatch.setattr(os, "rename", real)
    # The current log's dir goes first, then the future one takes the plain name.
    assert [(os.path.dirname(a), os.path.dirname(b)) for a, b in renames] == [("a", "a"), ("b", "b")]
    assert renames[0][1].endswith("-delete") and renames[1][0].endswith(FUTURE_DIR_SUFFIX)
    assert renames[1][1] == "b/t-0"
    assert new.dir == str(root / "b" / "t-0") and lm.get_log("t", 0) is new and lm.get_future_log("t", 0) is None
    assert _all_bytes(new) == expected and new.high_watermark == leo and new.topic_id == TOPIC_ID
    # The new log goes on: appends, rolls (its files moved with the directory).
    for i in range(40, 60):
        new.append_as_leader(_batch(i), 4)
    assert new.latest_epoch() == 4 and len(new.segments) > 3
    lm.shutdown()
    for k in range(len(renames) + 1):
        state = tmp_path / f"state{k}"
        shutil.copytree(pre, state)
        for a, b in renames[:k]:
            os.rename(state / a, state / b)
        lm2 = _manager(state)
        try:
            lg = lm2.get_log("t", 0)
            assert lg is not None, k
            assert _all_bytes(lg) == expected and lg.log_end_offset == leo, k
            if k == 0:
                assert lm2.log_dir_of("t", 0) == str(state / "a")
                resumed = lm2.get_future_log("t", 0)
                assert resumed is not None and _all_bytes(resumed) == expected
            else:
                assert lm2.log_dir_of("t", 0) == str(state / "b") and lm2.get_future_log("t", 0) is None
                assert not [n for n in os.listdir(state / "b") if n.endswith(FUTURE_DIR_SUFFIX)]
            lg.append_as_leader(_batch(99), 5)  # and it takes appends
        finally:
            lm2.shutdown()
        # What is left of the old log (a -delete dir) is gone after the next start.
        lm3 = _manager(state)
        lm3.remove_deleted_dirs(now_ms=2**62)
        assert not [n for n in os.listdir(state / "a") if n.endswith("-delete")]
        assert lm3.get_log("t", 0) is not None
        lm3.shutdown()


def test_future_log_without_current_is_left_alone_when_a_dir_failed(tmp_path: Path) -> None:
    """With a log dir that failed to load, a future log without a current one may belong to a
    current log in that dir: it is neither promoted nor deleted."""
    root = tmp_path / "live"
    lm = LogManager([str(root / "a"), str(root / "b"), str(root / "c")])
    lm.startup()
    cur = lm.get_or_create_log("t", 0)
    assert lm.log_dir_of("t", 0) == str(root / "a")
    cur.append_as_leader(_batch(0), 0)
    future = lm.create_future_log("t", 0, str(root / "b"))
    _copy(cur, future)
    lm.shutdown()
    shutil.rmtree(root / "a")
    (root / "a").write_text("not a directory")  # the dir fails to load
    lm2 = LogManager([str(root / "a"), str(root / "b"), str(root / "c")])
    lm2.startup()
    assert lm2.get_log("t", 0) is None and lm2.get_future_log("t", 0) is None
    assert [n for n in os.listdir(root / "b") if n.endswith(FUTURE_DIR_SUFFIX)]
    lm2.shutdown()


def test_truncate_future_log_to_the_common_prefix(tmp_path: Path) -> None:
    """The current log truncated by a new leader and written on in a new epoch: the future log
    drops what the current one no longer has, by their epochs, and copies on."""
    lm = _manager(tmp_path)
    cur = lm.get_or_create_log("t", 0)
    for i in range(30):
        cur.append_as_leader(_batch(i), 1)
    future = lm.create_future_log("t", 0, str(tmp_path / "b"))
    _copy(cur, future)
    cur.truncate_to(40)
    for i in range(30, 45):
        cur.append_as_leader(_batch(i), 2)
    assert cur.log_end_offset == 100 and future.log_end_offset == 120
    truncate_future_log(cur, future)
    assert future.log_end_offset == 40
    _copy(cur, future)
    assert _all_bytes(future) == _all_bytes(cur) and future.latest_epoch() == 2
    # Everything gone from the current log (a follower truncated fully): start over there.
    cur.truncate_fully_and_start_at(200)
    truncate_future_log(cur, future)
    assert future.log_start_offset == 200 == future.log_end_offset
    lm.shutdown()


async def test_mover_follows_appends_and_swaps(tmp_path: Path) -> None:
    """Appends go on while the mover copies (with small reads, so many steps); the swap comes
    once the future log has caught up, and the partition serves from the new log."""
    lm = _manager(tmp_path)
    cur = lm.get_or_create_log("t", 0, topic_id=TOPIC_ID)
    part = Partition("t", 0, TOPIC_ID, cur, 1)
    part.make_leader(7, [1], [1])
    for i in range(100):
        part.append(memoryview(_batch(i)), 1)
    lm.create_future_log("t", 0, str(tmp_path / "b"))
    quota = ReplicationQuota(ALTER_LOG_DIRS)
    mover = AlterLogDirsMover(lm, lambda t, p: part if (t, p) == ("t", 0) else None, quota, fetch_max_bytes=600)
    mover.add("t", 0)
    i = 100
    async with asyncio.timeout(20):
        while mover.completed == 0:
            part.append(memoryview(_batch(i)), 1)
            i += 1
            await asyncio.sleep(0)
    assert part.log is not cur and cur.closed and part.log.dir == str(tmp_path / "b" / "t-0")
    assert part.log.log_end_offset == 4 * i and part.log.high_watermark == 4 * i
    assert part.log.latest_epoch() == 7 and quota.byte_rate() > 0
    assert not (tmp_path / "a" / "t-0").exists()
    appended = part.append(memoryview(_batch(i)), 1)
    assert appended.base_offset == 4 * i
    assert _next_offset(part.log.read_batches(4 * i)) == 4 * (i + 1)
    assert len(_all_bytes(part.log)) == sum(len(_batch(k)) for k in range(i + 1))
    await mover.stop()
    lm.shutdown()


async def test_mover_waits_while_over_its_throttle(tmp_path: Path) -> None:
    lm = _manager(tmp_path)
    cur = lm.get_or_create_log("t", 0)
    part = Partition("t", 0, "", cur, 1)
    part.make_leader(0, [1], [1])
    for i in range(50):
        part.append(memoryview(_batch(i)), 1)
    future = lm.create_future_log("t", 0, str(tmp_path / "b"))
    quota = ReplicationQuota(ALTER_LOG_DIRS)
    quota.set_bound(1)
    quota.record(10_000)  # over its bound for the whole window
    mover = AlterLogDirsMover(lm, lambda t, p: part, quota)
    mover.add("t", 0)
    await asyncio.sleep(0.3)
    assert future.log_end_offset == 0 and mover.completed == 0
    quota.set_bound(None)
    async with asyncio.timeout(10):
        while mover.completed == 0:
            await asyncio.sleep(0.01)
    assert part.log is future
    await mover.stop()
    lm.shutdown()


def _three_dirs(tmp_path: Path) -> tuple[list[str], LogManager]:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c")]
    lm = LogManager(dirs)
    lm.startup()
    return dirs, lm


async def test_alter_replica_log_dirs_answers(tmp_path: Path) -> None:
    """The replica manager's answers, as AlterReplicaLogDirs gives them."""
    dirs, lm = _three_dirs(tmp_path)
    known = {("t", 0), ("t", 1), ("t", 2)}
    rm = ReplicaManager(1, lm, partition_known=lambda t, p: (t, p) in known)
    part = rm._new_partition("t", 0, None, lm.config_for("t"))
    part.make_leader(0, [1], [1])
    here = lm.log_dir_of("t", 0)
    assert here == dirs[0]
    answers = rm.alter_replica_log_dirs({
        ("t", 0): here,  # already there
        ("u", 0): dirs[1],  # no such partition
        ("t", 1): dirs[2],  # not here yet: created there later
        ("t", 2): "relative/b",  # not one of log.dirs
    })
    assert answers == {("t", 0): ErrorCode.NONE, ("u", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       ("t", 1): ErrorCode.REPLICA_NOT_AVAILABLE, ("t", 2): ErrorCode.LOG_DIR_NOT_FOUND}
    assert lm.get_future_log("t", 0) is None
    assert rm.alter_replica_log_dirs({("t", 0): dirs[1] + "/"}) == {("t", 0): ErrorCode.LOG_DIR_NOT_FOUND}
    rm._new_partition("t", 1, None, lm.config_for("t"))
    assert lm.log_dir_of("t", 1) == dirs[2]  # the preferred dir, not the emptiest
    lm.failure_channel.maybe_add_offline_log_dir(dirs[2], "a test", OSError(errno.EIO, "I/O error"))
    assert rm.alter_replica_log_dirs({("t", 0): dirs[2]}) == {("t", 0): ErrorCode.KAFKA_STORAGE_ERROR}
    # While a dir is offline no future log is made (it could make a second one).
    assert rm.alter_replica_log_dirs({("t", 0): dirs[1]}) == {("t", 0): ErrorCode.KAFKA_STORAGE_ERROR}
    assert lm.get_future_log("t", 0) is None
    await rm.stop()
    lm.shutdown()


async def test_moving_elsewhere_abandons_the_first_future_log(tmp_path: Path) -> None:
    dirs, lm = _three_dirs(tmp_path)
    rm = ReplicaManager(1, lm, alter_log_dirs_quota=UnboundedQuota())
    rm.alter_log_dirs.quota = _never_free()
    part = rm._new_partition("t", 0, None, lm.config_for("t"))
    part.make_leader(0, [1], [1])
    assert rm.alter_replica_log_dirs({("t", 0): dirs[1]}) == {("t", 0): ErrorCode.NONE}
    first = lm.get_future_log("t", 0)
    assert first is not None and lm.future_log_dir_of("t", 0) == dirs[1]
    assert rm.alter_replica_log_dirs({("t", 0): dirs[2]}) == {("t", 0): ErrorCode.NONE}
    assert first.closed and lm.future_log_dir_of("t", 0) == dirs[2]
    assert not [n for n in os.listdir(dirs[1]) if n.endswith(FUTURE_DIR_SUFFIX)]
    # Deleting the partition deletes its future log too.
    lm.delete_log("t", 0)
    assert lm.get_future_log("t", 0) is None
    assert not [n for n in os.listdir(dirs[2]) if n.endswith(FUTURE_DIR_SUFFIX)]
    await rm.stop()
    lm.shutdown()


def _never_free() -> ReplicationQuota:
    quota = ReplicationQuota(ALTER_LOG_DIRS)
    quota.set_bound(1)
    quota.record(1 << 30)
    return quota


async def test_what_the_current_log_fsyncd_is_fsyncd_in_the_new_one(tmp_path: Path) -> None:
    """flush.messages=1: every acknowledged batch was fsync'd in the current log; after the swap
    the new log's recovery point covers them too."""
    lm = LogManager([str(tmp_path / "a"), str(tmp_path / "b")], {"flush.messages": "1", "segment.bytes": "3000"})
    lm.startup()
    cur = lm.get_or_create_log("t", 0)
    part = Partition("t", 0, "", cur, 1)
    part.make_leader(0, [1], [1])
    for i in range(60):
        part.append(memoryview(_batch(i)), 1)
        await cur.flush_until(cur.log_end_offset)
    lm.create_future_log("t", 0, str(tmp_path / "b"))
    mover = AlterLogDirsMover(lm, lambda t, p: part, UnboundedQuota())
    mover.add("t", 0)
    async with asyncio.timeout(10):
        while mover.completed == 0:
            await asyncio.sleep(0.01)
    assert part.log is not cur and part.log.recovery_point == part.log.log_end_offset == cur.recovery_point == 240
    await mover.stop()
    lm.shutdown()
