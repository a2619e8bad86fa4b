"""The pure parts of log/: retention's predicates (retention.py) and the loader's decisions that
need only file names (log_loader.py), checked without a directory or a Log."""

from __future__ import annotations

from dataclasses import dataclass

from kaflet.log.log_loader import first_unflushed_segment, orphan_indexes, plan_temp_files
from kaflet.log.retention import (
    PendingFileDeletes,
    below_log_start_offset,
    deletable_segments,
    retention_ms_breached,
    retention_size_breached,
)


@dataclass
class Seg:
    """What the predicates read of a LogSegment (they are typed for it, and read only these)."""

    base_offset: int
    size: int
    largest_timestamp: int = 0


def _name(base: int, suffix: str) -> str:
    return f"{base:020d}{suffix}"


SEGS = [Seg(0, 100, 1_000), Seg(10, 100, 2_000), Seg(20, 100, 3_000), Seg(30, 50, 4_000)]


def test_retention_ms_takes_the_old_segments_oldest_first() -> None:
    out = deletable_segments(SEGS, 35, 35, retention_ms_breached(now=4_500, retention_ms=2_000))
    assert [s.base_offset for s in out] == [0, 10]


def test_nothing_goes_past_the_high_watermark() -> None:
    out = deletable_segments(SEGS, 35, 15, retention_ms_breached(now=10**9, retention_ms=0))
    assert [s.base_offset for s in out] == [0]


def test_retention_bytes_keeps_the_log_at_or_above_the_limit() -> None:
    # 350 bytes over a limit of 180: the first segment fits in the 170 of excess, the second
    # would take the log below the limit.
    out = deletable_segments(SEGS, 35, 35, retention_size_breached(350, 180))
    assert [s.base_offset for s in out] == [0]
    out = deletable_segments(SEGS, 35, 35, retention_size_breached(350, 150))
    assert [s.base_offset for s in out] == [0, 10]


def test_log_start_offset_takes_the_segments_wholly_below_it() -> None:
    out = deletable_segments(SEGS, 35, 35, below_log_start_offset(20))
    assert [s.base_offset for s in out] == [0, 10]
    # The active segment is never below it (no segment after it), even when every offset is.
    out = deletable_segments(SEGS, 35, 35, below_log_start_offset(35))
    assert [s.base_offset for s in out] == [0, 10, 20]


def test_an_empty_active_segment_stays() -> None:
    segs = [Seg(0, 100, 1_000), Seg(10, 0, -1)]
    out = deletable_segments(segs, 10, 10, retention_ms_breached(now=10**9, retention_ms=0))
    assert [s.base_offset for s in out] == [0]


def test_pending_file_deletes_are_due_in_time() -> None:
    pending = PendingFileDeletes()
    pending.add(100, ["a.deleted"])
    pending.add(50, ["b.deleted", "c.deleted"])
    assert pending.next_due_ms == 50
    assert pending.take_due(60) == ["b.deleted", "c.deleted"]
    assert pending.take_due(60) == []
    assert pending.take_due(0, everything=True) == ["a.deleted"]
    assert pending.next_due_ms is None


def test_temp_files_of_an_interrupted_swap() -> None:
    names = [
        _name(0, ".log"), _name(0, ".log.deleted"), _name(0, ".index.deleted"),
        _name(0, ".log.swap"), _name(0, ".txnindex.swap"), _name(0, ".index.swap"),  # finished swap at 0
        _name(40, ".log.cleaned"), _name(50, ".log.swap"),  # unfinished: at or above a .cleaned file
        _name(60, ".txnindex.swap"),  # a swap index without its .log.swap
        "leader-epoch-checkpoint.tmp",
    ]
    plan = plan_temp_files(names)
    assert plan.install == [(_name(0, ".log.swap"), 0)]
    assert sorted(plan.delete) == sorted([
        _name(0, ".log.deleted"), _name(0, ".index.deleted"), _name(40, ".log.cleaned"), "leader-epoch-checkpoint.tmp",
        _name(0, ".index.swap"), _name(50, ".log.swap"), _name(60, ".txnindex.swap"),
    ])


def test_orphan_indexes_and_where_recovery_starts() -> None:
    names = [_name(0, ".log"), _name(0, ".index"), _name(5, ".timeindex"), _name(7, ".txnindex"), "x.index"]
    assert sorted(orphan_indexes(names, {0})) == [_name(5, ".timeindex"), _name(7, ".txnindex")]
    assert first_unflushed_segment([0, 10, 20], 15, clean=False) == 1
    assert first_unflushed_segment([0, 10, 20], 0, clean=False) == 0
    assert first_unflushed_segment([0, 10, 20], 15, clean=True) == 3
