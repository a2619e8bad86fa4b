"""Descriptors of segments: indexes hold none, ``.log`` files go through a bounded LRU cache."""

from __future__ import annotations

import os
import shutil

import pytest

from kaflet.log.config import LogConfig
from kaflet.log.log import Log
from kaflet.log.offset_index import OffsetIndex
from kaflet.log.segment_files import SegmentFileCache
from kaflet.protocol.records import Record, build_batch, parse_batch_header
from tests.support.open_files import open_paths


def _cfg() -> LogConfig:
    return LogConfig.from_props({"segment.bytes": 2000, "index.interval.bytes": 100})


def _batch(ts: int = 1000) -> bytes:
    return build_batch([Record(i, i, b"k", b"v" * 60) for i in range(3)], base_timestamp=ts)


def test_index_holds_no_descriptor_and_writes_on_flush(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = str(tmp_path / "00000000000000000000.index")
    idx = OffsetIndex(p, 0, 800)
    assert open_paths(str(tmp_path)) == []
    idx.append(5, 100)
    idx.append(9, 300)
    with open(p, "rb") as f:
        assert f.read(16) == bytes(16)  # not written yet: still the preallocated zeros
    idx.write_pending()
    idx.flush()
    with open(p, "rb") as f:
        assert f.read(16) == bytes.fromhex("00000005000000640000000900000" "12c")
    idx.truncate_to(9)  # into the written part: the file is cut and zero-filled again
    idx.append(12, 400)
    idx.trim()
    assert os.path.getsize(p) == 16 and OffsetIndex(p, 0, 800).lookup(20) == (12, 400)
    assert open_paths(str(tmp_path)) == []


def test_log_keeps_one_descriptor_per_open_segment(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg())
    for i in range(40):
        lg.append_as_leader(_batch(1000 + i), leader_epoch=0, now_ms=1)
    assert len(lg.segments) > 5
    # Without a cache every segment keeps its .log open, and nothing else.
    assert sorted(open_paths(str(tmp_path))) == sorted(s.log_path for s in lg.segments)
    lg.close()
    assert open_paths(str(tmp_path)) == []


def test_cache_bounds_open_segments_and_reopens_on_use(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cache = SegmentFileCache(3)
    logs = [Log(str(tmp_path / f"t-{p}"), _cfg(), segment_files=cache) for p in range(6)]
    for i in range(30):
        for lg in logs:
            lg.append_as_leader(_batch(1000 + i), leader_epoch=0, now_ms=1)
            assert len(open_paths(str(tmp_path))) <= 3
    assert len(cache) == 3 and cache.evictions > 0
    # Every record reads back, from every segment, through files opened again on demand.
    for lg in logs:
        offset = 0
        while offset < lg.log_end_offset:
            data = lg.read_batches(offset, 1 << 20)
            offset = parse_batch_header(data).base_offset + parse_batch_header(data).last_offset_delta + 1
        assert offset == 90
        assert lg.offset_for_timestamp(1015).offset == 41
        assert len(open_paths(str(tmp_path))) <= 3
    for lg in logs:
        lg.flush_sync()
        lg.close()
    assert len(cache) == 0 and open_paths(str(tmp_path)) == []
    again = Log(str(tmp_path / "t-0"), _cfg(), had_clean_shutdown=True, segment_files=cache)
    assert again.log_end_offset == 90 and len(open_paths(str(tmp_path))) <= 3
    again.close()


def test_region_outlives_eviction(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cache = SegmentFileCache(1)
    a = Log(str(tmp_path / "a-0"), _cfg(), segment_files=cache)
    b = Log(str(tmp_path / "b-0"), _cfg(), segment_files=cache)
    a.append_as_leader(_batch(), leader_epoch=0, now_ms=1)
    region = a.segments[0].read(0, 1 << 20)
    assert region is not None
    b.append_as_leader(_batch(), leader_epoch=0, now_ms=1)  # closes a's file in the cache
    assert a.segments[0].shared_handle() is not None  # reopened on demand: b's is closed now
    b.append_as_leader(_batch(), leader_epoch=0, now_ms=1)
    assert parse_batch_header(region.read_bytes()).base_offset == 0  # the region kept its file
    a.close()
    b.close()


def test_unclean_restart_rebuilds_entries_never_written(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = str(tmp_path / "src" / "t-0")
    lg = Log(src, LogConfig.from_props({"segment.bytes": 100_000, "index.interval.bytes": 100}))
    for i in range(20):
        lg.append_as_leader(_batch(1000 + i), leader_epoch=0, now_ms=1)
    expected = [lg.active_segment.offset_index.entry(i) for i in range(lg.active_segment.offset_index.entries)]
    assert expected
    dst = str(tmp_path / "crash" / "t-0")
    shutil.copytree(src, dst)  # a crash: the entries were never written, the file is all zeros
    rec = Log(dst, LogConfig.from_props({"segment.bytes": 100_000, "index.interval.bytes": 100}),
              had_clean_shutdown=False)
    idx = rec.active_segment.offset_index
    assert [idx.entry(i) for i in range(idx.entries)] == expected
    assert rec.offset_for_timestamp(1010).offset == 26
    rec.close()
    lg.close()


def test_cache_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        SegmentFileCache(0)
