"""Indexes and segments: lookups, the index.interval.bytes rule, trimming, reads, recovery."""

from __future__ import annotations

import os
import struct

import pytest

from kaflet.log.config import LogConfig
from kaflet.log.errors import CorruptIndexError
from kaflet.log.offset_index import OffsetIndex
from kaflet.log.segment import LogSegment, segment_file_name
from kaflet.log.time_index import TimeIndex
from kaflet.protocol.records import Record, build_batch, parse_batch_header


def _batch(base: int, n: int = 3, ts: int = 1000, size: int = 50) -> bytes:
    return build_batch([Record(i, i, None, b"x" * size) for i in range(n)], base_offset=base, base_timestamp=ts)


def test_offset_index_lookup_and_trim(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = str(tmp_path / "00000000000000000100.index")
    idx = OffsetIndex(p, 100, 1000)
    assert os.path.getsize(p) == 1000  # preallocated, rounded down to 8
    for i in range(10):
        idx.append(100 + i * 10, i * 1000)
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(100) == (100, 0)
    assert idx.lookup(135) == (130, 3000)
    assert idx.lookup(10_000) == (190, 9000)
    with pytest.raises(ValueError):
        idx.append(190, 10_000)
    idx.truncate_to(150)
    assert idx.entries == 5 and idx.lookup(10_000) == (140, 4000)
    idx.trim()
    assert os.path.getsize(p) == 40
    with open(p, "rb") as f:
        assert f.read(8) == struct.pack(">ii", 0, 0)
    idx.close()
    again = OffsetIndex(p, 100, 1000)
    assert again.entries == 5 and again.lookup(147) == (140, 4000)
    again.sanity_check()


def test_offset_index_full(tmp_path) -> None:  # type: ignore[no-untyped-def]
    idx = OffsetIndex(str(tmp_path / "x.index"), 0, 20)  # room for 2 entries
    idx.append(1, 0)
    idx.append(2, 10)
    assert idx.is_full()
    with pytest.raises(ValueError):
        idx.append(3, 20)


def test_time_index_rules(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = str(tmp_path / "00000000000000000000.timeindex")
    ti = TimeIndex(p, 0, 10485760)
    assert os.path.getsize(p) == 10485756
    assert ti.maybe_append(-1, 0) is False  # not above the implicit (-1, base)
    assert ti.maybe_append(100, 5)
    assert ti.maybe_append(100, 7) is False  # timestamps must strictly grow
    assert ti.maybe_append(200, 9)
    with pytest.raises(ValueError):
        ti.maybe_append(300, 8)  # offsets never go backwards
    assert ti.lookup(50) == (-1, 0)
    assert ti.lookup(150) == (100, 5)
    assert ti.lookup(999) == (200, 9)
    ti.trim()
    assert os.path.getsize(p) == 24
    with open(p, "rb") as f:
        assert f.read() == struct.pack(">qi", 100, 5) + struct.pack(">qi", 200, 9)


def test_garbage_index_detected(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "00000000000000000000.index"
    p.write_bytes(struct.pack(">ii", 5, 100) + struct.pack(">ii", 3, 50))
    idx = OffsetIndex(str(p), 0, 1000)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()


def _segment(tmp_path, base: int = 0, **props) -> LogSegment:  # type: ignore[no-untyped-def]
    cfg = LogConfig.from_props({"index.interval.bytes": 200, **props})
    return LogSegment(str(tmp_path), base, cfg)


def test_segment_append_read_and_index_rule(tmp_path) -> None:  # type: ignore[no-untyped-def]
    seg = _segment(tmp_path)
    positions = []
    off = 0
    for i in range(20):
        b = _batch(off, ts=1000 + i)
        positions.append(seg.size)
        seg.append(off + 2, 1000 + i + 2, off + 2, b)
        off += 3
    assert os.path.basename(seg.log_path) == "00000000000000000000.log"
    # First append never indexes; afterwards an entry appears once > 200 bytes passed.
    entries = [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
    assert entries and all(pos in positions for _, pos in entries)
    assert entries[0][1] > 200
    for target in (0, 1, 2, 3, 31, 59):
        pos, h = seg.translate_offset(target)
        assert h.base_offset <= target <= h.base_offset + h.last_offset_delta
        assert pos == positions[target // 3]
    assert seg.translate_offset(60) is None
    region = seg.read(31, 10)
    assert region.position == positions[10] and region.size == 10
    region = seg.read(31, 10, min_one_message=True)
    first = parse_batch_header(region.read_bytes())
    assert region.size == first.size and first.base_offset == 30
    # Fetch v3+ (KIP-74): a first batch that does not fit is no records, never a piece of it;
    # a batch that fits may still be followed by a piece of the next one.
    region = seg.read(31, first.size - 1, hard_max_bytes_limit=False)
    assert region.position == positions[10] and region.size == 0
    assert seg.read(31, first.size, hard_max_bytes_limit=False).size == first.size
    assert seg.read(31, first.size + 7, hard_max_bytes_limit=False).size == first.size + 7
    assert seg.read(31, 10, min_one_message=True, hard_max_bytes_limit=False).size == first.size
    assert seg.read(60, 100) is None
    assert seg.read_next_offset() == 60
    assert seg.max_timestamp_so_far == 1021 and seg.shallow_offset_of_max_timestamp == 59


def test_region_survives_close_and_delete(tmp_path) -> None:  # type: ignore[no-untyped-def]
    seg = _segment(tmp_path)
    b = _batch(0)
    seg.append(2, 1002, 2, b)
    region = seg.read(0, 1 << 20)
    seg.delete()
    assert not os.path.exists(seg.log_path)
    assert region.read_bytes() == b
    assert os.fstat(region.fileno()).st_size == len(b)


def test_roll_trim_and_final_time_entry(tmp_path) -> None:  # type: ignore[no-untyped-def]
    seg = _segment(tmp_path)
    for i in range(5):
        seg.append(i * 3 + 2, 1000 + i, i * 3 + 2, _batch(i * 3, ts=1000 + i))
    seg.on_become_inactive()
    assert os.path.getsize(seg.offset_index.path) == seg.offset_index.entries * 8
    assert seg.time_index.last_entry() == (1004, 14)
    seg.close()
    again = _segment(tmp_path)
    assert again.max_timestamp_so_far == 1004 and again.read_next_offset() == 15


def test_recover_truncates_torn_tail_and_rebuilds(tmp_path) -> None:  # type: ignore[no-untyped-def]
    seg = _segment(tmp_path)
    sizes = []
    for i in range(10):
        b = _batch(i * 3, ts=1000 + i)
        seg.append(i * 3 + 2, 1002 + i, i * 3 + 2, b)
        sizes.append(seg.size)
    seg.close()
    with open(os.path.join(tmp_path, segment_file_name(0, ".log")), "r+b") as f:
        f.truncate(sizes[6] + 30)
    seg = _segment(tmp_path)
    assert seg.recover() == 30
    assert seg.size == sizes[6] and seg.read_next_offset() == 21
    assert seg.max_timestamp_so_far == 1008


def test_segment_truncate_to(tmp_path) -> None:  # type: ignore[no-untyped-def]
    seg = _segment(tmp_path)
    for i in range(10):
        seg.append(i * 3 + 2, 1000 + i, i * 3 + 2, _batch(i * 3, ts=1000 + i))
    removed = seg.truncate_to(16)  # inside batch 15..17: that whole batch goes
    assert removed > 0 and seg.read_next_offset() == 15
    assert seg.truncate_to(100) == 0
