"""MetadataWriter and what uses it: a log's small files and directory fsyncs leave the event loop,
in batches, and are durable before the data they describe (partition.metadata and epoch entries
before a flush moves the recovery point); log creation on threads; clean shutdown on threads."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from kaflet.log import metadata_writer as mw
from kaflet.log.checkpoints import read_leader_epoch_checkpoint, read_partition_metadata
from kaflet.log.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from kaflet.log.metadata_writer import MetadataWriter
from kaflet.protocol.records import Record, build_batch

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def _batch() -> bytes:
    return build_batch([Record(i, 0, None, b"x" * 30) for i in range(4)], base_timestamp=1000)


class Gate:
    """Holds every batch's thread work until opened, counting the groups and fsyncs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.open = threading.Event()
        self.groups: list[list[str]] = []
        self.fsyncs = 0
        real_group, real_fsync = mw._write_group, os.fsync

        def group(dir_fd: int, files: list[tuple[str, bytes]]) -> None:
            self.open.wait(10)
            self.groups.append([name for name, _ in files])
            real_group(dir_fd, files)

        def fsync(fd: int) -> None:
            self.fsyncs += 1
            real_fsync(fd)

        monkeypatch.setattr(mw, "_write_group", group)
        monkeypatch.setattr(mw.os, "fsync", fsync)


async def test_writes_are_batched_and_the_newest_content_wins(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(monkeypatch)
    w = MetadataWriter()
    dirs = [tmp_path / f"t-{i}" for i in range(50)]
    for d in dirs:
        d.mkdir()
    owners = [object() for _ in dirs]
    for owner, d in zip(owners, dirs, strict=True):
        w.write(owner, str(d), "a", b"old")
        w.write(owner, str(d), "a", b"new")  # replaces the queued content
        w.write(owner, str(d), "b", b"b")
    assert w.pending(owners[0]) and not (dirs[0] / "a").exists()  # nothing written on the loop
    await asyncio.sleep(0.05)
    assert not (dirs[0] / "a").exists()
    gate.open.set()
    await asyncio.gather(*(w.wait(o) for o in owners))
    assert all((d / "a").read_bytes() == b"new" and (d / "b").read_bytes() == b"b" for d in dirs)
    assert not any(p.name.endswith(".tmp") for d in dirs for p in d.iterdir())
    # One batch: per directory both files, then one directory fsync.
    assert sorted(map(sorted, gate.groups)) == [["a", "b"]] * 50 and gate.fsyncs == 50 * 3
    assert not w.pending(owners[0])
    w.close()


async def test_a_renamed_directory_keeps_its_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch that has opened a directory writes into it, even after that directory was renamed
    (deletion) and a new one took its name."""
    gate = Gate(monkeypatch)
    w = MetadataWriter()
    old = tmp_path / "t-0"
    old.mkdir()
    owner = object()
    w.write(owner, str(old), "partition.metadata", b"old topic")
    waiting = asyncio.create_task(w.wait(owner))
    await asyncio.sleep(0.05)  # the batch has opened the directory and waits at the gate
    old.rename(tmp_path / "t-0.x-delete")
    old.mkdir()
    gate.open.set()
    await waiting
    assert (tmp_path / "t-0.x-delete" / "partition.metadata").read_bytes() == b"old topic"
    assert list(old.iterdir()) == []
    w.close()


async def test_a_directory_replaced_before_its_write_gets_nothing(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory renamed (deletion) and replaced by a new one of the same name after the batch
    took its identity: neither gets the old log's file, and no descriptor stays open."""
    w = MetadataWriter()
    old = tmp_path / "t-0"
    old.mkdir()
    before = len(os.listdir("/proc/self/fd"))
    real_stat = os.stat
    replaced = threading.Event()

    def stat_then_replace(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        result = real_stat(path, *args, **kwargs)
        if str(path) == str(old) and not replaced.is_set():
            replaced.set()
            old.rename(tmp_path / "t-0.x-delete")
            old.mkdir()
        return result

    monkeypatch.setattr(mw.os, "stat", stat_then_replace)
    owner = object()
    w.write(owner, str(old), "leader-epoch-checkpoint", b"old topic")
    await w.wait(owner)
    monkeypatch.undo()
    assert replaced.is_set() and list(old.iterdir()) == []
    assert not (tmp_path / "t-0.x-delete" / "leader-epoch-checkpoint").exists()
    assert len(os.listdir("/proc/self/fd")) <= before
    w.close()


async def test_a_failed_write_is_reported_and_tried_again(tmp_path: Path) -> None:
    w = MetadataWriter()
    bad, good = object(), object()
    w.write(bad, str(tmp_path), "x" * 300, b"name too long")
    w.write(good, str(tmp_path / "gone"), "f", b"directory never existed: nothing to do")
    with pytest.raises(OSError):
        await w.wait(bad)
    await w.wait(good)
    assert w.pending(bad)  # queued again
    with pytest.raises(OSError):
        await w.wait(bad)
    w.discard(bad)
    await w.wait(bad)
    w.close()


def test_without_a_loop_or_once_closed_writes_happen_at_once(tmp_path: Path) -> None:
    w = MetadataWriter()
    w.write(object(), str(tmp_path), "f", b"1")
    assert (tmp_path / "f").read_bytes() == b"1"
    w.close()
    w.sync_dir(str(tmp_path))


async def test_close_writes_what_is_pending(tmp_path: Path) -> None:
    w = MetadataWriter()
    w.write(object(), str(tmp_path), "f", b"queued")
    w.sync_dir(str(tmp_path))
    w.close()  # the loop never ran the batch
    assert (tmp_path / "f").read_bytes() == b"queued"
    w.write(object(), str(tmp_path), "f", b"after close")
    assert (tmp_path / "f").read_bytes() == b"after close"


async def test_flush_waits_for_the_logs_metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recovery point never passes data whose partition.metadata and epoch entry are not on
    disk: the flush waits for the batch that writes them."""
    gate = Gate(monkeypatch)
    lm = LogManager([str(tmp_path)], {"flush.messages": "1"})
    lm.startup()
    lg = lm.get_or_create_log("t", 0, topic_id=TOPIC_ID)
    lg.maybe_assign_epoch_start_offset(3, 0)
    r = lg.append_as_leader(_batch(), 3)
    flushing = asyncio.create_task(lg.flush_until(r.last_offset + 1))
    await asyncio.sleep(0.1)
    assert not flushing.done() and lg.recovery_point == 0
    assert not os.path.exists(os.path.join(lg.dir, "partition.metadata"))
    gate.open.set()
    await flushing
    assert lg.recovery_point == 4
    assert read_partition_metadata(os.path.join(lg.dir, "partition.metadata")) == TOPIC_ID
    assert read_leader_epoch_checkpoint(os.path.join(lg.dir, "leader-epoch-checkpoint")) == [(3, 0)]
    lm.shutdown()


async def test_flush_sync_writes_the_logs_metadata_first(tmp_path: Path) -> None:
    lm = LogManager([str(tmp_path)])
    lm.startup()
    lg = lm.get_or_create_log("t", 0, topic_id=TOPIC_ID)
    lg.maybe_assign_epoch_start_offset(1, 0)
    lg.append_as_leader(_batch(), 1)
    lg.flush_sync()  # on the loop thread, before any batch ran
    assert read_partition_metadata(os.path.join(lg.dir, "partition.metadata")) == TOPIC_ID
    assert read_leader_epoch_checkpoint(os.path.join(lg.dir, "leader-epoch-checkpoint")) == [(1, 0)]
    assert not lm.metadata_writer.pending(lg)
    lm.shutdown()


async def test_create_logs_on_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    lm = LogManager(dirs)
    lm.startup()
    loop_thread = threading.get_ident()
    made_on: set[int] = set()
    real_new_log = lm._new_log

    def new_log(*args: Any) -> Any:
        made_on.add(threading.get_ident())
        return real_new_log(*args)

    existing = lm.get_or_create_log("t", 0)
    monkeypatch.setattr(lm, "_new_log", new_log)
    await lm.create_logs(("t", p) for p in range(40))
    assert loop_thread not in made_on and len(made_on) >= 1
    assert lm.get_log("t", 0) is existing
    assert [lm.log_dir_of("t", p) for p in range(40)].count(dirs[0]) == 20  # balanced
    lg = lm.get_log("t", 7)
    assert lg is not None and lg.topic_id is None
    # The replica manager's get_or_create_log gives it the request's topic id.
    assert lm.get_or_create_log("t", 7, topic_id=TOPIC_ID) is lg and lg.topic_id == TOPIC_ID
    await lm.metadata_writer.wait(lg)
    assert read_partition_metadata(os.path.join(lg.dir, "partition.metadata")) == TOPIC_ID
    lg.append_as_leader(_batch(), 0)
    lm.shutdown()
    lm2 = LogManager(dirs)
    lm2.startup()
    again = lm2.get_log("t", 7)
    assert again is not None and again.topic_id == TOPIC_ID and again.log_end_offset == 4
    assert len(lm2.all_logs()) == 40
    lm2.shutdown()


async def test_a_log_made_meanwhile_on_the_loop_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lm = LogManager([str(tmp_path)])
    lm.startup()
    started, release = threading.Event(), threading.Event()
    real_new_log = lm._new_log

    def slow(*args: Any) -> Any:
        started.set()
        release.wait(10)
        return real_new_log(*args)

    monkeypatch.setattr(lm, "_new_log", slow)
    creating = asyncio.create_task(lm.create_logs([("t", 0)]))
    await asyncio.to_thread(started.wait, 10)
    monkeypatch.setattr(lm, "_new_log", real_new_log)
    mine = lm.get_or_create_log("t", 0, topic_id=TOPIC_ID)
    release.set()
    await creating
    assert lm.get_log("t", 0) is mine and not mine.closed
    mine.append_as_leader(_batch(), 0)
    lm.shutdown()


async def test_deletion_fsyncs_the_log_dir_once_per_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lm = LogManager([str(tmp_path)])
    lm.startup()
    for p in range(20):
        lm.get_or_create_log("t", p, topic_id=TOPIC_ID)
    await asyncio.sleep(0.05)
    await asyncio.gather(*(lm.metadata_writer.wait(lg) for lg in lm.all_logs().values()))
    gate = Gate(monkeypatch)
    gate.open.set()
    deleted = [lm.delete_log("t", p) for p in range(20)]
    assert all(d is not None and os.path.isdir(d) for d in deleted)
    await asyncio.sleep(0.1)
    assert gate.groups == [[]] and gate.fsyncs == 1
    lm.shutdown()


async def test_shutdown_closes_logs_on_threads_and_skips_idle_snapshots(tmp_path: Path) -> None:
    lm = LogManager([str(tmp_path)])
    lm.startup()
    busy = lm.get_or_create_log("t", 0, topic_id=TOPIC_ID)
    idle = lm.get_or_create_log("t", 1, topic_id=TOPIC_ID)
    busy.maybe_assign_epoch_start_offset(2, 0)
    busy.append_as_leader(_batch(), 2)
    lm.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert [p.name for p in Path(busy.dir).glob("*.snapshot")] == ["00000000000000000004.snapshot"]
    assert list(Path(idle.dir).glob("*.snapshot")) == []  # an empty log needs none
    assert read_leader_epoch_checkpoint(os.path.join(busy.dir, "leader-epoch-checkpoint")) == [(2, 0)]
    lm2 = LogManager([str(tmp_path)])
    lm2.startup()
    lg = lm2.get_log("t", 0)
    assert lg is not None and lg.log_end_offset == 4 and lg.latest_epoch() == 2
    lm2.shutdown()


async def test_dropped_or_written_at_once_writes_release_their_waiters(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(monkeypatch)
    w = MetadataWriter()
    busy, owner = object(), object()
    w.write(busy, str(tmp_path), "busy", b"b")
    await asyncio.sleep(0.05)  # a batch is running (held at the gate)
    w.write(owner, str(tmp_path), "f", b"x")  # for the next batch
    waiting = asyncio.create_task(w.wait(owner))
    await asyncio.sleep(0.05)
    w.discard(owner)  # its log is being deleted
    await asyncio.wait_for(waiting, 5)
    w.write(owner, str(tmp_path), "g", b"y")
    waiting = asyncio.create_task(w.wait(owner))
    await asyncio.sleep(0.05)
    threading.Timer(0.2, gate.open.set).start()
    w.write_now(owner)  # Log.flush_sync: blocks until the running batch is done, then writes
    assert (tmp_path / "g").read_bytes() == b"y" and (tmp_path / "busy").read_bytes() == b"b"
    await asyncio.wait_for(waiting, 5)
    await w.wait(busy)
    assert not (tmp_path / "f").exists()
    w.close()


def _epoch_writes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The contents of every leader-epoch-checkpoint the batches write."""
    written: list[bytes] = []
    real_group = mw._write_group

    def group(dir_fd: int, files: list[tuple[str, bytes]]) -> None:
        written.extend(data for name, data in files if name == "leader-epoch-checkpoint")
        real_group(dir_fd, files)

    monkeypatch.setattr(mw, "_write_group", group)
    return written


def _kill(lm: LogManager) -> None:
    """A SIGKILL: no shutdown, no batch that has not started; only the locks go."""
    for fd in lm._locks.values():
        os.close(fd)


async def test_a_restart_writes_each_epoch_checkpoint_at_most_once(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The load drops the entry at the log end offset (an empty log's, or the last epoch's of a
    log nothing was written in since), but that rewrite waits for a batch: the election at the
    same epoch takes it back and writes nothing, one at a new epoch writes once, and a SIGKILL
    at any point finds the epochs of the log's data."""
    written = _epoch_writes(monkeypatch)
    lm = LogManager([str(tmp_path)])
    lm.startup()
    empty = lm.get_or_create_log("t", 0, topic_id=TOPIC_ID)
    full = lm.get_or_create_log("t", 1, topic_id=TOPIC_ID)
    empty.maybe_assign_epoch_start_offset(0, 0)
    full.maybe_assign_epoch_start_offset(2, 0)
    full.append_as_leader(_batch(), 2)
    full.maybe_assign_epoch_start_offset(3, 4)
    lm.shutdown()
    epochs = {lg: os.path.join(lg.dir, "leader-epoch-checkpoint") for lg in (empty, full)}
    assert [read_leader_epoch_checkpoint(p) for p in epochs.values()] == [[(0, 0)], [(2, 0), (3, 4)]]
    written.clear()

    lm = LogManager([str(tmp_path)])
    lm.startup()
    empty2, full2 = lm.get_log("t", 0), lm.get_log("t", 1)
    assert empty2 is not None and full2 is not None
    assert empty2.leader_epoch_cache.entries == [] and full2.leader_epoch_cache.entries == [(2, 0)]
    assert lm.metadata_writer.pending(empty2) and lm.metadata_writer.pending(full2)
    await asyncio.sleep(0.05)
    assert written == []  # no batch started for the load alone
    empty2.maybe_assign_epoch_start_offset(0, 0)  # the same epochs again: what the files hold
    full2.maybe_assign_epoch_start_offset(3, 4)
    assert not lm.metadata_writer.pending(empty2) and not lm.metadata_writer.pending(full2)
    lm.metadata_writer.sync_dir(str(tmp_path))  # some other work's batch
    await asyncio.sleep(0.05)
    assert written == []
    assert [read_leader_epoch_checkpoint(p) for p in epochs.values()] == [[(0, 0)], [(2, 0), (3, 4)]]
    _kill(lm)

    lm = LogManager([str(tmp_path)])
    lm.startup()
    empty3, full3 = lm.get_log("t", 0), lm.get_log("t", 1)
    assert empty3 is not None and full3 is not None
    empty3.maybe_assign_epoch_start_offset(1, 0)  # elected at new epochs: one write each
    full3.maybe_assign_epoch_start_offset(4, 4)
    await asyncio.gather(lm.metadata_writer.wait(empty3), lm.metadata_writer.wait(full3))
    assert sorted(written) == [b"0\n1\n1 0\n", b"0\n2\n2 0\n4 4\n"]
    _kill(lm)

    written.clear()
    lm = LogManager([str(tmp_path)])
    lm.startup()
    full4 = lm.get_log("t", 1)
    assert full4 is not None and full4.leader_epoch_cache.entries == [(2, 0)]
    await lm.metadata_writer.wait(full4)  # a flush's wait takes the load's rewrite along
    assert sorted(written) == [b"0\n0\n", b"0\n1\n2 0\n"]
    assert [read_leader_epoch_checkpoint(p) for p in epochs.values()] == [[], [(2, 0)]]
    full4.maybe_assign_epoch_start_offset(4, 4)  # no longer what the load read: written again
    await lm.metadata_writer.wait(full4)
    assert read_leader_epoch_checkpoint(epochs[full]) == [(2, 0), (4, 4)]
    lm.shutdown()
