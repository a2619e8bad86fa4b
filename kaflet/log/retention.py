"""Retention: which of a log's oldest segments may go, and when their renamed files are unlinked
(the predicates of Kafka's ``deleteOldSegments``).

The predicates only look at segments' sizes, timestamps and base offsets and at the numbers the
caller passes, and change nothing; ``Log.delete_old_segments`` applies them in Kafka's order and
removes what they chose. ``PendingFileDeletes`` holds the ``.deleted`` files until
file.delete.delay.ms has passed; ``unlink_files`` removes them (in an executor).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from kaflet.log.segment import LogSegment

#: Whether a segment (with the segment after it, None for the active one) may be deleted;
#: asked oldest first, and the first False stops the pass.
SegmentPredicate = Callable[[LogSegment, LogSegment | None], bool]


def deletable_segments(segments: list[LogSegment], log_end_offset: int, high_watermark: int,
                       predicate: SegmentPredicate) -> list[LogSegment]:
    """The oldest segments ``predicate`` accepts, stopping at the first that must stay."""
    out: list[LogSegment] = []
    for i, seg in enumerate(segments):
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        upper = nxt.base_offset if nxt is not None else log_end_offset
        # Never past the HW (the log start offset must not exceed it), and an empty
        # active segment is never deleted (it would only be created again).
        if high_watermark < upper or not predicate(seg, nxt) or (nxt is None and seg.size == 0):
            break
        out.append(seg)
    return out


def retention_ms_breached(now: int, retention_ms: int) -> SegmentPredicate:
    """retention.ms: the segment's largest timestamp is older than ``retention_ms``."""
    return lambda seg, _nxt: now - seg.largest_timestamp > retention_ms


def retention_size_breached(size: int, retention_bytes: int) -> SegmentPredicate:
    """retention.bytes: the log of ``size`` bytes stays at or above ``retention_bytes`` without the
    segment and those before it (so it is asked oldest first, once per segment)."""
    excess = size - retention_bytes

    def over_size(seg: LogSegment, _nxt: LogSegment | None) -> bool:
        nonlocal excess
        if excess - seg.size >= 0:
            excess -= seg.size
            return True
        return False

    return over_size


def below_log_start_offset(log_start_offset: int) -> SegmentPredicate:
    """The segment lies wholly below the log start offset (the next one starts at or below it)."""
    return lambda _seg, nxt: nxt is not None and nxt.base_offset <= log_start_offset


class PendingFileDeletes:
    """Files renamed ``.deleted`` (retention, DeleteRecords, cleaner swaps), each batch with the
    time after which it may be unlinked: fetches holding a region of them finish first."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, list[str]]] = []

    def add(self, due_ms: int, paths: list[str]) -> None:
        self._pending.append((due_ms, paths))

    def take_due(self, now: int, everything: bool = False) -> list[str]:
        """The paths due at ``now`` (all with ``everything``), forgotten from here on."""
        due = [p for t, paths in self._pending if everything or t <= now for p in paths]
        self._pending = [(t, ps) for t, ps in self._pending if not (everything or t <= now)]
        return due

    @property
    def next_due_ms(self) -> int | None:
        return min((t for t, _ in self._pending), default=None)


def unlink_files(paths: list[str]) -> int:
    """Remove files that may already be gone (blocking; run it in an executor); returns count."""
    removed = 0
    for p in paths:
        try:
            os.unlink(p)
            removed += 1
        except FileNotFoundError:
            pass
    return removed
