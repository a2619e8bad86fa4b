"""The log cleaner: offset map, what survives a pass, grouping, batch attributes, delete horizon,
compaction lag limits, crash recovery of the swap, the checkpoint and the thread against a loop."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from kaflet.log.checkpoints import CLEANER_OFFSET_CHECKPOINT, read_offset_checkpoint
from kaflet.log.cleaner import Cleaner, CleanerConfig, CleanerStats, CleaningAbortedError, group_segments
from kaflet.log.cleaner_manager import LogCleaner, cleanable_section
from kaflet.log.cleaner_worker import WorkerCleaner
from kaflet.log.config import LogConfig
from kaflet.log.log import Log
from kaflet.log.log_manager import LogManager
from kaflet.log.offset_map import OffsetMap, map_capacity
from kaflet.log.segment import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    TIMESTAMP_LOG_APPEND_TIME,
    Record,
    RecordError,
    build_batch,
    decode_records,
)

T0 = 1_000_000


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def _cfg(**props: str | int | float) -> LogConfig:
    base: dict[str, str | int | float] = {
        "cleanup.policy": "compact", "segment.bytes": 600, "index.interval.bytes": 100,
        "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": 1000, "file.delete.delay.ms": 0,
    }
    base.update(props)
    return LogConfig.from_props(base)


def _put(lg: Log, key: bytes, value: bytes | None, ts: int = T0, **batch_args: object) -> int:
    batch = build_batch([Record(0, 0, key, value)], base_timestamp=ts, **batch_args)  # type: ignore[arg-type]
    offset = lg.append_as_leader(batch, leader_epoch=0, now_ms=ts).base_offset
    lg.update_high_watermark(lg.log_end_offset)  # a leader that is its own ISR: all is committed
    return offset


def _batches(lg: Log) -> list:
    out = []
    for seg in lg.segments:
        for pos, h in seg.batches():
            out.append((h, seg.read_batch(pos, h)))
    return out


def _contents(lg: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(h.base_offset + r.offset_delta, r.key, r.value) for h, b in _batches(lg) for r in decode_records(b)]


def _clean(lg: Log, now: int = T0, checkpoint: int | None = None, capacity: int = 10_000) -> tuple[int, CleanerStats]:
    view = lg.cleaner_view()
    assert view is not None
    ltc = cleanable_section(view, checkpoint, now)
    return Cleaner(capacity).clean(lg, view, ltc.first_dirty, ltc.first_uncleanable, now)


def _files(lg: Log, suffix: str) -> list[str]:
    return sorted(n for n in os.listdir(lg.dir) if n.endswith(suffix))


# ---------------------------------------------------------------- offset map


def test_offset_map_keeps_latest_and_bounds_entries() -> None:
    m = OffsetMap(3)
    m.put(b"a", 1)
    m.put(b"b", 2)
    m.put(b"a", 5)
    assert m.get(b"a") == 5 and m.get(b"b") == 2 and m.get(b"zz") == -1
    assert len(m) == 2 and m.latest_offset == 5
    long_key = b"x" * 100
    m.put(long_key, 7)  # stored as a digest, found again by the same key
    assert m.get(long_key) == 7 and m.get(b"x" * 99) == -1
    assert m.full
    with pytest.raises(OverflowError):
        m.put(b"new", 8)
    m.put(b"a", 9)  # an existing key still updates
    assert m.get(b"a") == 9
    # Kafka's sizing: buffer x load factor / 24 bytes per entry, per thread.
    assert map_capacity(134217728, 0.9, 1) == int(134217728 * 0.9) // 24
    assert map_capacity(2400, 1.0, 2) == 50


# ---------------------------------------------------------------- what survives


def test_duplicates_and_tombstones_exact_survivors(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "c-0"), _cfg(), now_ms=Clock())
    for i in range(60):
        _put(lg, b"k%d" % (i % 5), b"v%d" % i)
    _put(lg, b"k1", None)  # offset 60: tombstone for k1
    _put(lg, b"k9", b"only")  # 61
    for i in range(20):  # the active segment's records are never cleaned
        _put(lg, b"k%d" % (i % 5), b"w%d" % i)
    before = lg.size_in_bytes
    active_base = lg.active_segment.base_offset
    end, stats = _clean(lg)
    assert end == active_base
    got = _contents(lg)
    cleaned = [x for x in got if x[0] < active_base]
    dirty_tail = [x for x in got if x[0] >= active_base]
    # Below the active segment: for each key only its latest record below `end`... unless a later
    # one exists in the map's range.  The map covers [0, end), so superseded records there go.
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for off, k, v in [(i, b"k%d" % (i % 5), b"v%d" % i) for i in range(60)] + [(60, b"k1", None), (61, b"k9", b"only")]:
        if off < active_base:
            latest[k] = (off, v)
    for i in range(20):
        off = 62 + i
        if off < active_base:
            latest[b"k%d" % (i % 5)] = (off, b"w%d" % i)
    assert sorted(cleaned) == sorted((off, k, v) for k, (off, v) in latest.items())
    assert dirty_tail == [(o, k, v) for o, k, v in [(62 + i, b"k%d" % (i % 5), b"w%d" % i) for i in range(20)]
                          if o >= active_base]
    assert lg.size_in_bytes < before
    assert stats.records_kept == len(cleaned)
    # Offsets never change; the log end and start stay where they were.
    assert lg.log_end_offset == 82 and lg.log_start_offset == 0
    assert not _files(lg, CLEANED_SUFFIX) and not _files(lg, SWAP_SUFFIX)


def test_tombstone_gets_horizon_then_is_removed(tmp_path: Path) -> None:
    clock = Clock()
    lg = Log(str(tmp_path / "c-0"), _cfg(**{"delete.retention.ms": 5000}), now_ms=clock)
    _put(lg, b"a", b"1")
    _put(lg, b"b", b"1")
    _put(lg, b"a", None)  # tombstone at 2
    for i in range(30):
        _put(lg, b"f%d" % i, b"x" * 30)
    _put(lg, b"b", b"2")
    lg.roll()
    _, stats = _clean(lg, now=T0)
    got = _contents(lg)
    assert (2, b"a", None) in got and not any(o == 0 for o, _, _ in got)
    h = next(h for h, _ in _batches(lg) if h.base_offset == 2)
    assert h.delete_horizon_ms == T0 + 5000
    assert stats.next_horizon_ms == T0 + 5000
    # Its record keeps its own timestamp although BaseTimestamp now holds the horizon.
    r = decode_records(next(b for h2, b in _batches(lg) if h2.base_offset == 2))[0]
    assert h.base_timestamp + r.timestamp_delta == T0
    # Before the horizon: kept.  After it: removed, and nothing else changes.
    _clean(lg, now=T0 + 4999, checkpoint=lg.log_end_offset)
    assert (2, b"a", None) in _contents(lg)
    _, stats = _clean(lg, now=T0 + 5000, checkpoint=lg.log_end_offset)
    got = _contents(lg)
    assert not any(k == b"a" for _, k, _ in got)
    assert stats.tombstones_removed == 1 and stats.next_horizon_ms is None
    assert (33, b"b", b"2") in got and len([1 for _, k, _ in got if k == b"b"]) == 1


def test_codec_producer_fields_and_timestamp_type_preserved(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "c-0"), _cfg(**{"segment.bytes": 100000}), now_ms=Clock())
    recs = [Record(i, i, b"k%d" % (i % 3), b"v%d" % i) for i in range(9)]
    lg.append_as_leader(build_batch(recs, base_timestamp=T0, compression=COMPRESSION_GZIP, producer_id=77,
                                    producer_epoch=3, base_sequence=0), leader_epoch=4, now_ms=T0)
    # A LogAppendTime batch comes from the topic's config (a producer may not set that type).
    lg.update_config(_cfg(**{"segment.bytes": 100000, "message.timestamp.type": "LogAppendTime"}))
    lg.append_as_leader(build_batch([Record(0, 0, b"z", b"1"), Record(1, 0, b"z", b"2")], base_timestamp=T0,
                                    compression=COMPRESSION_LZ4), leader_epoch=4, now_ms=T0 + 50)
    lg.update_high_watermark(lg.log_end_offset)
    lg.roll()
    _clean(lg)
    (h1, b1), (h2, b2) = _batches(lg)
    assert h1.compression == COMPRESSION_GZIP and h1.producer_id == 77 and h1.producer_epoch == 3
    assert h1.base_sequence == 0 and h1.partition_leader_epoch == 4
    # The batch keeps its last offset (so the producer's last sequence) although records went.
    assert h1.base_offset == 0 and h1.last_offset_delta == 8 and h1.records_count == 3
    assert [(h1.base_offset + r.offset_delta, r.key, r.value, h1.base_timestamp + r.timestamp_delta)
            for r in decode_records(b1)] == [(6, b"k0", b"v6", T0 + 6), (7, b"k1", b"v7", T0 + 7), (8, b"k2", b"v8", T0 + 8)]
    assert h1.max_timestamp == T0 + 8
    assert h2.compression == COMPRESSION_LZ4 and h2.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    assert h2.max_timestamp == T0 + 50 and [r.value for r in decode_records(b2)] == [b"2"]


def test_last_batch_of_producer_kept_empty_and_state_reloads(tmp_path: Path) -> None:
    d = str(tmp_path / "c-0")
    lg = Log(d, _cfg(**{"segment.bytes": 100000}), now_ms=Clock())
    lg.append_as_leader(build_batch([Record(0, 0, b"p", b"1")], base_timestamp=T0, producer_id=5,
                                    producer_epoch=0, base_sequence=0), leader_epoch=0, now_ms=T0)
    lg.append_as_leader(build_batch([Record(0, 0, b"p", b"2")], base_timestamp=T0), leader_epoch=0, now_ms=T0)
    lg.update_high_watermark(lg.log_end_offset)
    lg.roll()
    _clean(lg)
    hs = [h for h, _ in _batches(lg)]
    assert [(h.base_offset, h.records_count, h.producer_id) for h in hs] == [(0, 0, 5), (1, 1, -1)]
    # Without any snapshot, producer state is rebuilt from the log and still knows sequence 0.
    lg.close()
    for n in os.listdir(d):
        if n.endswith(".snapshot"):
            os.unlink(os.path.join(d, n))
    lg2 = Log(d, _cfg(**{"segment.bytes": 100000}), now_ms=Clock())
    dup = lg2.append_as_leader(build_batch([Record(0, 0, b"p", b"1")], base_timestamp=T0, producer_id=5,
                                           producer_epoch=0, base_sequence=0), leader_epoch=0, now_ms=T0)
    assert dup.duplicate and dup.base_offset == 0
    lg2.close()


def test_compacted_topic_rejects_unkeyed_records(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "c-0"), _cfg(), now_ms=Clock())
    with pytest.raises(RecordError) as e:
        lg.append_as_leader(build_batch([Record(0, 0, None, b"v")], base_timestamp=T0), leader_epoch=0)
    assert e.value.error_code == ErrorCode.INVALID_RECORD


# ---------------------------------------------------------------- grouping, map limit, lag


def test_grouping_merges_small_cleaned_segments(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "c-0"), _cfg(**{"segment.bytes": 1000}), now_ms=Clock())
    for i in range(200):
        _put(lg, b"k%d" % (i % 4), b"v%d" % i)
    n_before = len(lg.segments)
    assert n_before > 10
    _clean(lg)
    # Groups are built from the old sizes, so the first pass cannot merge full segments...
    after_first = len(lg.segments)
    _put(lg, b"k0", b"new")
    lg.roll()
    _clean(lg, checkpoint=lg.segments[-2].base_offset)
    # ...but the next pass merges the now tiny ones, up to segment.bytes per group.
    assert len(lg.segments) < after_first <= n_before
    for seg in lg.segments:
        assert seg.size <= 1000
    latest = {}
    for off, k, v in _contents(lg):
        latest[k] = (off, v)
    assert latest[b"k0"][1] == b"new" and {k: v for k, (_, v) in latest.items() if k != b"k0"} == {
        b"k1": b"v197", b"k2": b"v198", b"k3": b"v199"}


def test_group_segments_limits() -> None:
    class S:
        def __init__(self, base: int, nxt: int, size: int) -> None:
            self.base_offset, self.next_base_offset, self.size = base, nxt, size

    segs = [S(0, 10, 300), S(10, 20, 300), S(20, 30, 300), S(30, 40, 50), S(40, 2**31 + 100, 10)]
    groups = group_segments(segs, 700, 10 * 1024 * 1024, 4096)  # type: ignore[arg-type]
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10], [20, 30], [40]]


def test_full_map_cleans_what_it_covers_and_continues(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "c-0"), _cfg(), now_ms=Clock())
    for i in range(40):
        _put(lg, b"k%d" % i, b"a")
    for i in range(40):
        _put(lg, b"k%d" % i, b"b")
    lg.roll()
    end1, stats = _clean(lg, capacity=25)
    assert stats.map_entries <= 25 and 0 < end1 < 80
    end2, _ = _clean(lg, checkpoint=end1, capacity=25)
    assert end2 > end1
    cp = end2
    while cp < 80:
        cp, _ = _clean(lg, checkpoint=cp, capacity=25)
    assert sorted(v for _, _, v in _contents(lg)) == [b"b"] * 40


def test_min_and_max_compaction_lag(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "c-0"), _cfg(**{"min.compaction.lag.ms": 10_000}), now_ms=Clock())
    for i in range(30):
        _put(lg, b"k", b"old%d" % i, ts=T0)
    old_end = lg.log_end_offset
    lg.roll()
    for i in range(30):
        _put(lg, b"k", b"new%d" % i, ts=T0 + 9_000)
    lg.roll()
    view = lg.cleaner_view()
    assert view is not None
    ltc = cleanable_section(view, None, T0 + 10_500)
    # Segments with records newer than the lag are not cleanable yet.
    assert ltc.first_uncleanable == old_end
    _, _ = Cleaner(100).clean(lg, view, ltc.first_dirty, ltc.first_uncleanable, T0 + 10_500)
    values = [v for _, _, v in _contents(lg)]
    assert values[0] == b"old29" and values.count(b"old29") == 1 and b"new0" in values
    # max.compaction.lag.ms: a log below its dirty ratio is still due once its oldest dirty
    # batch is older than the lag.
    lg.update_config(_cfg(**{"min.cleanable.dirty.ratio": 0.99, "max.compaction.lag.ms": 5000}))
    view = lg.cleaner_view()
    assert view is not None
    assert not cleanable_section(view, old_end, T0 + 9_000 + 4000).needs_compaction_now
    assert cleanable_section(view, old_end, T0 + 9_000 + 6000).needs_compaction_now


# ---------------------------------------------------------------- crash safety of the swap


def _log_with_garbage(d: str) -> tuple[Log, dict[bytes, bytes | None]]:
    lg = Log(d, _cfg(), now_ms=Clock())
    latest: dict[bytes, bytes | None] = {}
    for i in range(80):
        k, v = b"k%d" % (i % 7), b"v%d" % i
        _put(lg, k, v)
        latest[k] = v
    lg.roll()
    return lg, latest


def _latest(lg: Log) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    last = -1
    for off, k, v in _contents(lg):
        assert off > last  # no duplicate or out-of-order offsets
        last = off
        assert k is not None
        out[k] = v
    return out


def _run_until_swap(lg: Log, stop_at: str) -> None:
    """Clean, but 'crash' at a step of the first group's swap by raising from a patched rename."""
    calls = {"n": 0}
    real_rename = os.rename

    def rename(a: str, b: str) -> None:
        if stop_at == "cleaned" and a.endswith(".log" + CLEANED_SUFFIX):
            raise KeyboardInterrupt
        if stop_at == "some-swaps" and b.endswith(".log" + SWAP_SUFFIX):
            real_rename(a, b)
            raise KeyboardInterrupt
        if stop_at == "some-deleted" and b.endswith(DELETED_SUFFIX):
            calls["n"] += 1
            if calls["n"] == 3:
                raise KeyboardInterrupt
        if stop_at == "all-deleted" and a.endswith(".log" + SWAP_SUFFIX) is False and a.endswith(SWAP_SUFFIX):
            raise KeyboardInterrupt
        real_rename(a, b)

    os.rename = rename  # type: ignore[assignment]
    try:
        with pytest.raises(KeyboardInterrupt):
            _clean(lg)
    finally:
        os.rename = real_rename  # type: ignore[assignment]


@pytest.mark.parametrize("stop_at", ["before", "cleaned", "some-swaps", "some-deleted", "all-deleted"])
def test_crash_at_each_swap_step_then_reopen(tmp_path: Path, stop_at: str) -> None:
    d = str(tmp_path / "c-0")
    lg, latest = _log_with_garbage(d)
    leo = lg.log_end_offset
    if stop_at == "before":
        # Only .cleaned files written: simulate by copying a segment to a .cleaned name.
        first = lg.segments[0]
        shutil.copy(first.log_path, first.log_path + CLEANED_SUFFIX)
    else:
        _run_until_swap(lg, stop_at)
    names = os.listdir(d)
    assert any(n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)) for n in names)
    # Crash: drop the Log without closing it and reopen from the files alone.
    lg2 = Log(d, _cfg(), recovery_point=0, high_watermark=leo, now_ms=Clock())
    assert _latest(lg2) == latest
    assert lg2.log_end_offset == leo
    left = os.listdir(d)
    assert not any(n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)) for n in left)
    bases = [s.base_offset for s in lg2.segments]
    assert bases == sorted(set(bases))
    # And the log still cleans fine afterwards.
    _clean(lg2)
    assert _latest(lg2) == latest
    lg2.close()


def test_swap_aborts_when_segments_changed(tmp_path: Path) -> None:
    lg, latest = _log_with_garbage(str(tmp_path / "c-0"))
    view = lg.cleaner_view()
    assert view is not None
    lg.truncate_to(5)  # the segments the view named are gone
    with pytest.raises(CleaningAbortedError):
        Cleaner(1000).clean(lg, view, 0, view.active_base_offset, T0)
    assert not _files(lg, CLEANED_SUFFIX) and not _files(lg, SWAP_SUFFIX)
    assert [o for o, _, _ in _contents(lg)] == [0, 1, 2, 3, 4]


def test_fetch_region_of_replaced_segment_stays_readable(tmp_path: Path) -> None:
    lg, _ = _log_with_garbage(str(tmp_path / "c-0"))
    region = lg.read(0, 10_000).regions[0]
    before = region.read_bytes()
    _clean(lg)
    assert region.read_bytes() == before  # the old file stays open until the region is dropped
    assert lg.segments[0].shared_handle() is not region._handle


# ---------------------------------------------------------------- manager, checkpoint, thread


def test_log_manager_cleaner_thread_checkpoint_and_restart(tmp_path: Path) -> None:
    cfg = CleanerConfig(backoff_ms=20)
    props = {"cleanup.policy": "compact", "segment.bytes": 700, "min.cleanable.dirty.ratio": 0.1,
             "delete.retention.ms": 100, "file.delete.delay.ms": 0}

    async def run() -> tuple[int, int]:
        lm = LogManager([str(tmp_path)], props, cleaner_config=cfg)
        lm.startup()
        lg = lm.get_or_create_log("c", 0)
        plain = lm.get_or_create_log("p", 0, config={"cleanup.policy": "delete"})
        for i in range(300):
            _put(lg, b"k%d" % (i % 10), b"v%d" % i, ts=int(__import__("time").time() * 1000))
            _put(plain, b"k", b"v")
        size_before = lg.size_in_bytes
        plain_before = plain.size_in_bytes
        stop = asyncio.Event()
        task = asyncio.create_task(lm.run_background(stop))
        assert lm.cleaner is not None
        for _ in range(200):
            await asyncio.sleep(0.05)
            # Appends keep going on the loop while the thread cleans.
            _put(lg, b"k0", b"live")
            if lm.cleaner.passes >= 2 and lg.size_in_bytes < size_before / 3:
                break
        stop.set()
        await task
        assert plain.size_in_bytes == plain_before  # delete-policy logs are never compacted
        cp = lm.cleaner.checkpoints[("c", 0)]
        lm.shutdown()
        return cp, size_before

    cp, size_before = asyncio.run(run())
    assert cp > 0
    assert read_offset_checkpoint(os.path.join(tmp_path, CLEANER_OFFSET_CHECKPOINT))[("c", 0)] == cp
    # After a restart the cleaned section is not rescanned: the checkpoint is loaded.
    lm2 = LogManager([str(tmp_path)], props, cleaner_config=cfg)
    lm2.startup()
    assert lm2.cleaner is not None and lm2.cleaner.checkpoints[("c", 0)] == cp
    lg = lm2.get_log("c", 0)
    assert lg is not None and lg.size_in_bytes < size_before
    values = _latest(lg)
    assert set(values) == {b"k%d" % i for i in range(10)} and values[b"k0"] == b"live"
    lm2.shutdown()


def test_log_cleaner_picks_filthiest_and_respects_ratio(tmp_path: Path) -> None:
    logs: dict[tuple[str, int], Log] = {}
    for name, n_keys in (("a", 2), ("b", 50)):
        lg = Log(str(tmp_path / f"{name}-0"), _cfg(**{"min.cleanable.dirty.ratio": 0.5}), now_ms=Clock())
        for i in range(100):
            _put(lg, b"k%d" % (i % n_keys), b"v" * 10)
        lg.roll()
        logs[(name, 0)] = lg
    cleaner = LogCleaner(CleanerConfig(), [str(tmp_path)], lambda: logs, lambda tp: str(tmp_path),
                         now_ms=lambda: T0)
    c = Cleaner(10_000)
    assert cleaner.clean_filthiest_log(c)  # both are fully dirty (ratio 1.0): one is cleaned
    first = set(cleaner.checkpoints)
    assert cleaner.clean_filthiest_log(c)
    assert set(cleaner.checkpoints) == set(logs)
    # Nothing new: the ratio is 0 and nothing is due.
    assert not cleaner.clean_filthiest_log(c)
    assert len(first) == 1
    assert read_offset_checkpoint(os.path.join(tmp_path, CLEANER_OFFSET_CHECKPOINT)) == cleaner.checkpoints


# ---------------------------------------------------------------- worker process


def _big_log(d: str, n: int = 3000) -> tuple[Log, dict[bytes, bytes | None]]:
    lg = Log(d, _cfg(**{"segment.bytes": 16384}), now_ms=Clock())
    latest: dict[bytes, bytes | None] = {}
    for i in range(n):
        k, v = b"k%d" % (i % 50), b"v%06d" % i + b"x" * 40
        _put(lg, k, v)
        latest[k] = v
    lg.roll()
    return lg, latest


def test_worker_cleaner_matches_in_process_cleaner(tmp_path: Path) -> None:
    lg1, latest = _log_with_garbage(str(tmp_path / "a-0"))
    lg2, _ = _log_with_garbage(str(tmp_path / "b-0"))
    w = WorkerCleaner(10_000)
    try:
        view = lg2.cleaner_view()
        assert view is not None
        ltc = cleanable_section(view, None, T0)
        end2, stats2 = w.clean(lg2, view, ltc.first_dirty, ltc.first_uncleanable, T0)
        contents2, bases2 = _contents(lg2), [s.base_offset for s in lg2.segments]
        pid = w.pid
        # The worker is reused for the next pass.
        view = lg2.cleaner_view()
        assert view is not None
        w.clean(lg2, view, 0, view.active_base_offset, T0)
        assert w.pid == pid
    finally:
        w.close()
    end1, stats1 = _clean(lg1)
    assert (end2, stats2.records_kept, stats2.bytes_written, stats2.segments_after) == (
        end1, stats1.records_kept, stats1.bytes_written, stats1.segments_after)
    assert contents2 == _contents(lg1)
    assert bases2 == [s.base_offset for s in lg1.segments]
    assert _latest(lg2) == latest


def test_worker_killed_mid_pass_abandons_it_and_next_pass_works(tmp_path: Path) -> None:
    lg, latest = _big_log(str(tmp_path / "c-0"))
    before = [s.base_offset for s in lg.segments]
    w = WorkerCleaner(10_000, io_max_bytes_per_second=100_000)  # slow enough to be caught mid-pass

    def killer() -> None:
        for _ in range(500):
            if _files(lg, CLEANED_SUFFIX) and w.pid is not None:
                os.kill(w.pid, signal.SIGKILL)
                return
            time.sleep(0.01)

    t = threading.Thread(target=killer)
    t.start()
    try:
        view = lg.cleaner_view()
        assert view is not None
        with pytest.raises(CleaningAbortedError):
            w.clean(lg, view, 0, view.active_base_offset, T0)
        t.join()
        assert not _files(lg, CLEANED_SUFFIX) and not _files(lg, SWAP_SUFFIX)
        assert _latest(lg) == latest
        assert [s.base_offset for s in lg.segments][-1] == before[-1]
        # A new worker takes the next pass.
        w.io_max_bytes_per_second = float("inf")
        view = lg.cleaner_view()
        assert view is not None
        end, _ = w.clean(lg, view, 0, view.active_base_offset, T0)
        assert end == view.active_base_offset
    finally:
        w.close()
    assert _latest(lg) == latest
    assert len(_contents(lg)) == len(latest)
    assert not _files(lg, CLEANED_SUFFIX)


def test_worker_pass_stops_on_shutdown(tmp_path: Path) -> None:
    lg, latest = _big_log(str(tmp_path / "c-0"))
    stop = threading.Event()
    w = WorkerCleaner(10_000, io_max_bytes_per_second=50_000, stopping=stop.is_set)
    threading.Timer(0.5, stop.set).start()
    view = lg.cleaner_view()
    assert view is not None
    started = time.monotonic()
    with pytest.raises(CleaningAbortedError):
        w.clean(lg, view, 0, view.active_base_offset, T0)
    assert time.monotonic() - started < 5
    assert w.pid is None  # the busy worker was killed
    assert not _files(lg, CLEANED_SUFFIX)
    assert _latest(lg) == latest


def test_worker_error_is_raised_in_the_broker(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "c-0"), _cfg(), now_ms=Clock())
    lg.append_as_leader(build_batch([Record(0, 0, b"a", b"1"), Record(1, 0, b"b", b"2")], base_timestamp=T0),
                        leader_epoch=0, now_ms=T0)
    lg.update_high_watermark(lg.log_end_offset)
    lg.roll()
    w = WorkerCleaner(1)  # the map holds 1 key: too small for the 2-record batch
    try:
        view = lg.cleaner_view()
        assert view is not None
        with pytest.raises(RuntimeError, match="too small"):
            w.clean(lg, view, 0, view.active_base_offset, T0)
        pid = w.pid
        assert pid is not None  # the worker survives an error in a pass
    finally:
        w.close()
    assert not _files(lg, CLEANED_SUFFIX)


# ---------------------------------------------------------------- reconfiguration


def test_reconfiguration_rules_and_changes() -> None:
    two = CleanerConfig(threads=2)
    assert two.check_reconfiguration(CleanerConfig(threads=0)) == "Log cleaner threads should be at least 1"
    assert "reduced to less than half the current value 4" in (
        CleanerConfig(threads=4).check_reconfiguration(CleanerConfig(threads=1)) or "")
    assert "more than double the current value 2" in (two.check_reconfiguration(CleanerConfig(threads=5)) or "")
    assert two.check_reconfiguration(CleanerConfig(threads=4, io_max_bytes_per_second=1000)) is None
    assert CleanerConfig().changes(CleanerConfig(threads=2, io_max_bytes_per_second=1000)) == [
        "log.cleaner.threads 1 -> 2", "log.cleaner.io.max.bytes.per.second unlimited -> 1000 bytes/s"]


def test_reconfigure_restarts_the_threads_with_the_new_config(tmp_path: Path) -> None:
    logs: dict[tuple[str, int], Log] = {}
    cleaner = LogCleaner(CleanerConfig(backoff_ms=10), [str(tmp_path)], lambda: logs, lambda tp: str(tmp_path))
    cleaner.reconfigure(CleanerConfig(threads=2, backoff_ms=10))  # not started: only the config changes
    assert cleaner.config.threads == 2 and not cleaner.running
    cleaner.start(None)
    try:
        first = list(cleaner._threads)
        assert len(first) == 2
        cleaner.reconfigure(CleanerConfig(threads=3, io_max_bytes_per_second=5000, backoff_ms=10))
        assert not any(t.is_alive() for t in first)
        assert len(cleaner._threads) == 3 and cleaner.running
        assert cleaner.config.io_max_bytes_per_second == 5000
    finally:
        cleaner.stop()
    assert not cleaner.running
    cleaner.reconfigure(CleanerConfig(threads=2))  # stopped: stays stopped
    assert not cleaner.running


def test_no_cleaner_thread_with_zero_threads(tmp_path: Path) -> None:
    cleaner = LogCleaner(CleanerConfig(threads=0), [str(tmp_path)], dict, lambda tp: str(tmp_path))
    cleaner.start(None)
    assert not cleaner.running  # as Kafka: log.cleaner.threads=0 at start-up cleans nothing
    cleaner.stop()
