"""``LocalLog``: one partition's segment files on this broker's disk (Kafka's LocalLog).

It owns the directory, the ordered list of ``LogSegment``s, the log end offset and the recovery
point, and does what only touches those: create and roll segments, find the segment of an
offset or of a timestamp, read a file region, fsync, truncate, drop the oldest segments and
swap in cleaned ones. Producer state, leader epochs, the high watermark and the log start
offset are the ``Log``'s (log/log.py), which decides when each of these steps runs and reports
their I/O errors to the log dir failure channel, so every OSError raised here reaches it as is.

Threading: the event loop owns it; only ``fsync_segments`` runs in an executor.
"""

from __future__ import annotations

import os
import random
import re
from bisect import bisect_right
from collections.abc import Callable
from typing import NamedTuple

from kaflet.log.checkpoints import fsync_dir
from kaflet.log.config import LogConfig
from kaflet.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    FileRegion,
    LogSegment,
    segment_file_name,
)
from kaflet.log.segment_files import SegmentFileCache
from kaflet.log.transaction_index import AbortedTxn
from kaflet.protocol.records import TIMESTAMP_LOG_APPEND_TIME, BatchHeader, decode_records


class TimestampOffset(NamedTuple):
    """Result of ``offset_for_timestamp``."""

    offset: int
    timestamp: int


def parse_topic_partition(dir_name: str) -> tuple[str, int] | None:
    """``orders-3`` -> ("orders", 3); split at the last '-'.  None if not a partition dir."""
    topic, sep, part = dir_name.rpartition("-")
    if not sep or not topic or not part.isdigit() or "." in part:
        return None
    return topic, int(part)


#: ``<topic>-<p>.<32 hex>-future`` (a replica being moved here), ``-delete`` and ``-stray``:
#: Kafka's names of a partition directory that is not the partition's current log.
_MARKED_DIR = re.compile(r"^(?P<name>.+)\.[0-9a-f]{32}-(?P<kind>future|delete|stray)$")


def parse_marked_dir(dir_name: str) -> tuple[str, int, str] | None:
    """``orders-3.<uuid hex>-future`` -> ("orders", 3, "future"); None for any other name."""
    m = _MARKED_DIR.match(dir_name)
    if m is None:
        return None
    tp = parse_topic_partition(m.group("name"))
    return None if tp is None else (tp[0], tp[1], m.group("kind"))


class LocalLog:
    """The segments of one partition directory, oldest first; the last one is active."""

    def __init__(self, directory: str, config: LogConfig, now_ms: Callable[[], int],
                 files: SegmentFileCache | None = None, *, found: bool = False) -> None:
        """``found``: start-up listed ``directory`` as a directory, so it is not made here."""
        self.dir = directory
        self.config = config
        self._time = now_ms
        self._files = files
        #: Loaded by start-up: its segments' files are opened on first use (see ``new_segment``).
        self.found = found
        # A directory created here is only durable in its parent once fsync'd: the first
        # flush does it, before any of the log's data counts as flushed.
        # One mkdir for a log's directory, not a stat and a failed makedirs's two calls.
        try:
            if found:
                self.parent_synced = True  # as for any directory that exists (below)
            else:
                os.mkdir(directory)
                self.parent_synced = False
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
            self.parent_synced = True
        except FileNotFoundError:
            os.makedirs(directory)
            self.parent_synced = False
        #: Oldest first, never empty once loaded; changed only through this class's methods.
        self.segments: list[LogSegment] = []
        #: ``segments``' base offsets, for bisecting.
        self.bases: list[int] = []
        #: The offset the next appended record gets (LEO).
        self.log_end_offset = 0
        #: Everything below it is fsync'd.
        self.recovery_point = 0

    # ------------------------------------------------------------------ segments

    def new_segment(self, base_offset: int, *, new: bool = True) -> LogSegment:
        """A segment object for ``base_offset``; ``new``: the segment is being created, so its
        (empty) ``.txnindex`` is created too (see ``transaction_index``), unlike a loaded one.
        A segment start-up found opens its ``.log`` on first use; any other opens it here, so a
        log made at run time fails for want of a descriptor when it is made, not later."""
        jitter = 0
        if self.config.segment_jitter_ms > 0:
            jitter = random.randrange(min(self.config.segment_jitter_ms, self.config.segment_ms))
        seg = LogSegment(self.dir, base_offset, self.config, created_ms=self._time(), roll_jitter_ms=jitter,
                         files=self._files, exists=not new and self.found)
        if new:
            try:
                seg.txn_index.ensure_file()
            except OSError:
                seg.close_handlers()
                raise
        return seg

    def add_segment(self, seg: LogSegment) -> None:
        self.segments.append(seg)
        self.bases.append(seg.base_offset)

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def segment_index_for(self, offset: int) -> int:
        """Index in ``segments`` of the segment holding ``offset`` (the first one below it)."""
        return max(0, bisect_right(self.bases, offset) - 1)

    def end_of_segment(self, i: int) -> int:
        """The offset no record of segment ``i`` reaches: the next segment's base, or the LEO."""
        return self.bases[i + 1] if i + 1 < len(self.bases) else self.log_end_offset

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        self.active_segment.update_config(config)

    # ------------------------------------------------------------------ append and roll

    def append(self, seg: LogSegment, last: int, max_ts: int, shallow: int,
               data: bytes | bytearray | memoryview) -> None:
        """Write batches whose offsets are final to the active segment ``seg``; on an OSError the
        segment is as it was (``LogSegment.append``) and the LEO has not moved."""
        seg.append(last, max_ts, shallow, data)
        self.log_end_offset = last + 1

    def roll(self, new_base: int) -> LogSegment:
        """Make a new active segment at ``new_base`` (above the active one's base)."""
        active = self.segments[-1]
        if new_base <= active.base_offset:
            raise ValueError(f"cannot roll to {new_base}: active segment starts at {active.base_offset}")
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            unlink_quietly(os.path.join(self.dir, segment_file_name(new_base, suffix)))  # stale leftovers
        # The new segment's files first: when they cannot be made (no descriptor or space left)
        # the active segment stays active, its indexes untrimmed.
        seg = self.new_segment(new_base)
        active.on_become_inactive()
        self.add_segment(seg)
        return seg

    # ------------------------------------------------------------------ read

    def read(self, fetch_offset: int, max_bytes: int, max_offset: int | None,
             min_one_message: bool, hard_max_bytes_limit: bool = True) -> FileRegion | None:
        """The region of one segment from ``fetch_offset`` (at most ``max_bytes``, below
        ``max_offset``; see Segment.read); None when there is nothing below ``max_offset``.  The
        caller checks that ``fetch_offset`` is inside the log and below the LEO."""
        leo = self.log_end_offset
        i = self.segment_index_for(fetch_offset)
        while i < len(self.segments):
            seg = self.segments[i]
            max_position = None
            if max_offset is not None and max_offset < leo:
                if max_offset <= seg.base_offset:
                    break
                if max_offset < self.end_of_segment(i):
                    found = seg.translate_offset(max_offset)
                    max_position = found[0] if found is not None else seg.size
            region = seg.read(fetch_offset, max_bytes, max_position, min_one_message, hard_max_bytes_limit)
            if region is not None:
                return region
            i += 1
        return None

    def peek(self, fetch_offset: int, max_bytes: int) -> FileRegion:
        """Segment.peek of the segment holding ``fetch_offset``."""
        return self.segments[self.segment_index_for(fetch_offset)].peek(fetch_offset, max_bytes)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound), from the .txnindex files of
        the segment holding ``fetch_offset`` on (Kafka's collectAbortedTransactions).

        The search goes on past ``upper_bound``: a transaction's ABORT marker, and so its entry,
        may be segments after its data; it stops at an entry whose LSO reached the bound.
        """
        out: list[AbortedTxn] = []
        for seg in self.segments[self.segment_index_for(fetch_offset):]:
            found, complete = seg.txn_index.collect(fetch_offset, upper_bound)
            out.extend(found)
            if complete:
                break
        return out

    # ------------------------------------------------------------------ list offsets

    def find_offset_by_timestamp(self, timestamp: int, log_start_offset: int) -> TimestampOffset | None:
        """The first record at or above ``log_start_offset`` with a timestamp >= ``timestamp``
        (None if there is none): the time index narrows the search, the batches decide."""
        for seg in self.segments:
            if seg.max_timestamp_so_far < timestamp:
                continue
            _, ts_off = seg.time_index_lookup(timestamp)
            start = max(ts_off, log_start_offset, seg.base_offset)
            found = seg.translate_offset(start)
            if found is None:
                continue
            for pos, h in seg.batches(found[0]):
                if h.max_timestamp < timestamp or h.base_offset + h.last_offset_delta < log_start_offset:
                    continue
                hit = _record_at_or_after(seg, pos, h, timestamp, log_start_offset)
                if hit is not None:
                    return hit
        return None

    def max_timestamp_offset(self) -> TimestampOffset:
        """The record with the log's largest timestamp ((-1, -1) when no record has one)."""
        best: LogSegment | None = None
        for seg in self.segments:
            if best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far:
                best = seg
        if best is None or best.max_timestamp_so_far < 0:
            return TimestampOffset(-1, -1)
        ts = best.max_timestamp_so_far
        found = best.translate_offset(best.shallow_offset_of_max_timestamp)
        if found is not None:
            pos, h = found
            if h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
                return TimestampOffset(h.base_offset, h.max_timestamp)
            for r in decode_records(best.read_batch(pos, h)):
                if h.base_timestamp + r.timestamp_delta == ts:
                    return TimestampOffset(h.base_offset + r.offset_delta, ts)
        return TimestampOffset(best.shallow_offset_of_max_timestamp, ts)

    # ------------------------------------------------------------------ flush

    def to_flush(self) -> tuple[list[LogSegment], list[str]]:
        """The segments holding data above the recovery point, and the directories whose entries
        a flush of them must make durable (Kafka's LocalLog.flush fsyncs the log's directory when
        it flushes a new segment; the first flush of a new log also its parent, which holds the
        log's directory). Their new index entries are written to the files here, on the
        owning thread, so the fsync step only has to fsync."""
        if self.recovery_point >= self.log_end_offset:
            return [], []
        segments = self.segments[self.segment_index_for(self.recovery_point):]
        for seg in segments:
            seg.write_index_entries()
        dirs = []
        if not self.parent_synced:
            dirs.append(os.path.dirname(self.dir.rstrip("/")) or ".")
        if not self.parent_synced or any(s.base_offset >= self.recovery_point for s in segments):
            dirs.append(self.dir)
        return segments, dirs

    def mark_flushed(self, end: int, segments: list[LogSegment], parent_synced: bool = False) -> None:
        """Everything below ``end`` is on disk: ``segments`` (from ``to_flush``) were fsync'd with
        their directories; ``parent_synced``: the caller fsyncs the parent itself."""
        self.parent_synced = self.parent_synced or bool(segments) or parent_synced
        self.recovery_point = min(max(self.recovery_point, end), self.log_end_offset)

    @staticmethod
    def fsync_segments(segments: list[LogSegment], dirs: list[str]) -> None:
        """fsync ``segments`` and then ``dirs`` (blocking: the ``Log`` runs it in an executor)."""
        for seg in segments:
            try:
                seg.flush()
            except OSError:
                if not seg.closed:  # a segment deleted meanwhile (truncation) needs no fsync
                    raise
        for d in dirs:
            try:
                fsync_dir(d)
            except FileNotFoundError:
                pass  # renamed for deletion meanwhile

    # ------------------------------------------------------------------ removing segments

    def truncate_to(self, offset: int) -> None:
        """Drop every record at and above ``offset`` (at batch granularity), keeping the first
        segment: the caller truncates fully when ``offset`` is at or below its base."""
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().delete()
            self.bases.pop()
        active = self.segments[-1]
        active.truncate_to(offset)
        active.resize_indexes(self.config.segment_index_bytes)
        self.log_end_offset = active.read_next_offset()
        self.recovery_point = min(self.recovery_point, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset``."""
        for seg in self.segments:
            seg.delete()
        self.segments.clear()
        self.bases.clear()
        self.add_segment(self.new_segment(offset))
        self.log_end_offset = offset
        self.recovery_point = min(self.recovery_point, offset)

    def remove_oldest(self, n: int) -> list[str]:
        """Take the ``n`` oldest (inactive) segments out of the log and rename their files
        ``.deleted``; returns the renamed paths, which the caller unlinks later."""
        segs = self.segments[:n]
        del self.segments[:n]
        del self.bases[:n]
        paths: list[str] = []
        for seg in segs:
            paths.extend(seg.rename_to_deleted())
        return paths

    def replace_segments(self, old: list[LogSegment], base: int, cleaned: dict[str, str]) -> list[str] | None:
        """Swap the run of inactive segments ``old`` for the cleaned segment at ``base``, in
        Kafka's crash-safe order (see ``Log.replace_with_cleaned``); returns the paths renamed
        ``.deleted``, or None (nothing changed) when ``old`` is no longer such a run."""
        try:
            i = next(k for k, seg in enumerate(self.segments) if seg is old[0])
        except StopIteration:
            return None
        n = len(old)
        if i + n >= len(self.segments) or any(a is not b for a, b in zip(self.segments[i : i + n], old, strict=True)):
            return None
        suffixes = [sfx for sfx in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX)
                    if sfx in cleaned and (sfx != TXN_INDEX_SUFFIX or os.path.exists(cleaned[sfx]))]
        for sfx in suffixes:
            os.rename(cleaned[sfx], os.path.join(self.dir, segment_file_name(base, sfx + SWAP_SUFFIX)))
        paths: list[str] = []
        for seg in old:
            paths.extend(seg.rename_to_deleted())
        for sfx in suffixes:
            final = os.path.join(self.dir, segment_file_name(base, sfx))
            os.rename(final + SWAP_SUFFIX, final)
        seg = self.new_segment(base, new=False)
        seg.txn_index.ensure_file()  # the cleaner's swap brings it; a no-op then
        seg.on_become_inactive()  # trims an index the cleaner left empty (it was re-created full size)
        self.segments[i : i + n] = [seg]
        self.bases[i : i + n] = [base]
        return paths

    # ------------------------------------------------------------------ lifecycle

    def close(self, sync: bool) -> None:
        for seg in self.segments:
            seg.close(sync=sync)

    def close_handlers(self, *, ignore_errors: bool = False) -> None:
        """Release the files without writing anything (an offline or deleted log)."""
        for seg in self.segments:
            try:
                seg.close_handlers()
            except OSError:
                if not ignore_errors:
                    raise

    def rename_dir(self, new_dir: str) -> None:
        """Rename the directory; an open log keeps serving from there (its files stay open)."""
        os.rename(self.dir, new_dir)
        self.dir = new_dir
        for seg in self.segments:
            seg.moved_to(new_dir)


def _record_at_or_after(seg: LogSegment, pos: int, h: BatchHeader, timestamp: int,
                        log_start_offset: int) -> TimestampOffset | None:
    if h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
        off = max(h.base_offset, log_start_offset)
        return TimestampOffset(off, h.max_timestamp)
    for r in decode_records(seg.read_batch(pos, h)):
        ts = h.base_timestamp + r.timestamp_delta
        off = h.base_offset + r.offset_delta
        if ts >= timestamp and off >= log_start_offset:
            return TimestampOffset(off, ts)
    return None


def unlink_quietly(path: str) -> None:
    """Remove a file that may already be gone."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
