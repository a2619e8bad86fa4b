"""``LogLoader``: turns a partition directory into a loaded log at start-up (Kafka's LogLoader).

It finishes or undoes what a crash left in the middle of a cleaner swap or a retention rename,
drops orphan index files, opens the segments, recovers those a crash may have torn (every
segment from the recovery point on after an unclean shutdown, truncating a torn tail), checks
the derived files of the others, and rebuilds producer state and lost ``.txnindex`` entries.
The decisions that need only the file names are pure functions (``plan_temp_files``,
``orphan_indexes``, ``first_unflushed_segment``), so each crash state can be checked without a
directory; ``LogLoader`` does the I/O.

``rebuild_producer_state`` is also how a ``Log`` gets its producer state back after a
truncation, as Kafka's ``rebuildProducerState`` serves both.
"""

from __future__ import annotations

import logging
import os
import re
from bisect import bisect_right
from collections.abc import Iterable
from typing import NamedTuple

from kaflet.log.errors import CorruptIndexError
from kaflet.log.leader_epoch import LeaderEpochCache
from kaflet.log.local_log import LocalLog, unlink_quietly
from kaflet.log.producer_state import CONTROL_ABORT, ProducerStateManager, control_marker, index_aborted_txn
from kaflet.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)
from kaflet.protocol.records import LOG_OVERHEAD, BatchHeader, parse_batch_header

log = logging.getLogger(__name__)

LOG_FILE = re.compile(r"^(\d{20})\.log$")


class LoadedLogOffsets(NamedTuple):
    """Where a loaded log stands (Kafka's LoadedLogOffsets)."""

    log_start_offset: int
    recovery_point: int
    log_end_offset: int


#: What a crash mid-rename can leave (see ``plan_temp_files``).
_TEMP_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp", SWAP_SUFFIX)
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


class TempFilePlan(NamedTuple):
    """What start-up does with the files a crash left mid-rename (see ``plan_temp_files``)."""

    delete: list[str]  # names to unlink
    install: list[tuple[str, int]]  # (``.log.swap`` name, base offset) of finished swaps


def plan_temp_files(names: Iterable[str]) -> TempFilePlan:
    """Kafka's rules for what a crash mid-rename leaves: ``.deleted`` and ``.cleaned`` files
    go; a ``.log.swap`` below every ``.cleaned`` file finished its copy and is installed in
    place of the segments it replaces (with its ``.txnindex.swap``); any other ``.swap``
    (one at or above a ``.cleaned`` file, a swap index without its ``.log.swap``: the
    ``.log`` becomes ``.swap`` last and final before it) belongs to an unfinished swap and
    goes, as does a swap offset or time index (rebuilt with the installed segment)."""
    names = list(names)
    if not any(n.endswith(_TEMP_SUFFIXES) for n in names):
        return TempFilePlan([], [])  # every directory after a clean start, at one test a name
    cleaned = [n for n in names if n.endswith(CLEANED_SUFFIX)]
    min_cleaned = min((int(n[:20]) for n in cleaned if n[:20].isdigit()), default=None)
    delete = [n for n in names if n.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp"))]
    log_swaps = {int(n[:20]) for n in names if n.endswith(LOG_SUFFIX + SWAP_SUFFIX) and n[:20].isdigit()
                 and (min_cleaned is None or int(n[:20]) < min_cleaned)}
    install: list[tuple[str, int]] = []
    for n in names:
        if not n.endswith(SWAP_SUFFIX):
            continue
        base = int(n[:20]) if n[:20].isdigit() else -1
        if base in log_swaps and n.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            install.append((n, base))
        elif not (base in log_swaps and n.endswith(TXN_INDEX_SUFFIX + SWAP_SUFFIX)):
            delete.append(n)
    return TempFilePlan(delete, install)


def orphan_indexes(names: Iterable[str], bases: set[int]) -> list[str]:
    """The index files of ``names`` whose segment (``.log``) is not among ``bases``."""
    out = []
    for n in names:
        # Most names are neither an index nor an orphan: one test each at start-up.
        if n.endswith(_INDEX_SUFFIXES) and n[:20].isdigit() and n[20:] in _INDEX_SUFFIXES and int(n[:20]) not in bases:
            out.append(n)
    return out


def first_unflushed_segment(bases: list[int], recovery_point: int, clean: bool) -> int:
    """Index of the first segment to recover: the one holding the recovery point after an
    unclean shutdown, none (the segment count) after a clean one."""
    if clean:
        return len(bases)
    return max(0, bisect_right(bases, recovery_point) - 1)


class LogLoader:
    """Loads one partition directory into an empty ``LocalLog`` (once, from ``Log.__init__``)."""

    def __init__(self, local: LocalLog, leader_epoch_cache: LeaderEpochCache,
                 producer_state: ProducerStateManager) -> None:
        self._local = local
        self._epochs = leader_epoch_cache
        self._producers = producer_state

    def load(self, recovery_point: int, log_start_offset: int, clean: bool) -> LoadedLogOffsets:
        local = self._local
        swapped, names = self._remove_temp_files()
        bases = sorted(int(m.group(1)) for n in names if (m := LOG_FILE.match(n)))
        for n in orphan_indexes(names, set(bases)):
            unlink_quietly(os.path.join(local.dir, n))
        for b in bases:
            seg = local.new_segment(b, new=False)
            if b in swapped:
                seg.recover()  # an installed swap's indexes were dropped with the .swap suffix
            local.add_segment(seg)
        if not local.segments:
            local.add_segment(local.new_segment(max(0, log_start_offset)))

        # Recovery: segments from the one holding the recovery point on are rebuilt unless the
        # shutdown was clean; the others only get a cheap index check.
        segments = local.segments
        first_unflushed = first_unflushed_segment(local.bases, recovery_point, clean)
        for seg in segments[:first_unflushed]:
            seg.rebuild_indexes_if_needed(full=False)
        i = first_unflushed
        while i < len(segments):
            seg = segments[i]
            truncated = seg.recover(on_batch=self._assign_epoch_on_recovery)
            if truncated:
                log.warning("%s: truncated %d corrupt or torn bytes in segment %d", local.dir, truncated,
                            seg.base_offset)
                for later in segments[i + 1 :]:
                    later.delete()
                del segments[i + 1 :]
                del local.bases[i + 1 :]
                break
            i += 1
        active = local.active_segment
        if clean:
            active.rebuild_indexes_if_needed(full=True)
        # Checked first so that a sound .txnindex is read once (an empty one only stat'd), not
        # again by the truncation below.
        rebuild_from = self._check_txn_indexes()
        # Markers lost with a torn tail take their aborted-transaction entries with them.
        active.txn_index.truncate_to(active.read_next_offset())
        active.resize_indexes(local.config.segment_index_bytes)
        # Empty trailing segments after a torn roll: the LEO is the base of the last segment.
        leo = max(active.read_next_offset(), active.base_offset)
        start = max(log_start_offset, segments[0].base_offset)
        if start > leo:
            start = leo
        local.log_end_offset = leo
        # Recovered-but-not-fsync'd data stays above the recovery point (a power loss could still
        # lose it), so an unclean start only clamps the checkpointed value.
        local.recovery_point = leo if clean else min(max(recovery_point, 0), leo)
        self._epochs.truncate_from_end(leo, flush=False)
        self._epochs.truncate_from_start(start, flush=False)
        if not clean and first_unflushed < len(segments):
            # The .txnindex entries of markers above the recovery point may have been lost with
            # other unflushed writes (a power loss); replaying from there appends those missing
            # and keeps those present (Kafka rebuilds every recovered segment's txn index).
            base = segments[first_unflushed].base_offset
            rebuild_from = base if rebuild_from is None else min(rebuild_from, base)
        rebuild_producer_state(self._producers, local, start, self._epochs, rebuild_from, defer_epoch_write=True,
                               names=names)
        return LoadedLogOffsets(start, local.recovery_point, leo)

    def _remove_temp_files(self) -> tuple[set[int], list[str]]:
        """Carry out ``plan_temp_files``; returns the base offsets of the installed segments
        (their indexes are rebuilt) and the directory's file names after that."""
        d = self._local.dir
        names = os.listdir(d)
        plan = plan_temp_files(names)
        for n in plan.delete:
            unlink_quietly(os.path.join(d, n))
        for n, base in plan.install:
            self._install_swap(os.path.join(d, n), base)
        if plan.delete or plan.install:
            names = os.listdir(d)  # listed again only when something changed (a crash mid-rename)
        return {base for _, base in plan.install}, names

    def _install_swap(self, swap_path: str, base: int) -> None:
        # A finished cleaned segment: it replaces every old segment inside its offset range.
        d = self._local.dir
        fd = os.open(swap_path, os.O_RDONLY)
        try:
            nxt = base
            pos = 0
            size = os.fstat(fd).st_size
            while size - pos >= 61:
                h = parse_batch_header(os.pread(fd, 61, pos))
                if h.length < 49 or pos + h.length + LOG_OVERHEAD > size:
                    break
                nxt = h.base_offset + h.last_offset_delta + 1
                pos += h.length + LOG_OVERHEAD
        finally:
            os.close(fd)
        for n in os.listdir(d):
            m = LOG_FILE.match(n)
            if m and base <= int(m.group(1)) < nxt:
                old = int(m.group(1))
                for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                    unlink_quietly(os.path.join(d, segment_file_name(old, suffix)))
        txn_swap = os.path.join(d, segment_file_name(base, TXN_INDEX_SUFFIX + SWAP_SUFFIX))
        if os.path.exists(txn_swap):
            os.rename(txn_swap, os.path.join(d, segment_file_name(base, TXN_INDEX_SUFFIX)))
        os.rename(swap_path, os.path.join(d, segment_file_name(base, LOG_SUFFIX)))
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            unlink_quietly(os.path.join(d, segment_file_name(base, suffix)))

    def _check_txn_indexes(self) -> int | None:
        """Find the segments whose ``.txnindex`` is corrupt, or missing while the segment holds
        an ABORT marker, and empty them; returns the first such segment's base offset (None:
        all sound), from which ``rebuild_producer_state`` replays the log to rebuild them.

        Kafka's LogLoader recovers a segment whose index fails its sanity check (LogSegment.recover
        rebuilds the txn index from producer state rebuilt up to the segment); it cannot tell a
        lost ``.txnindex`` from none, which kaflet can (every segment it creates has one). A
        segment without one (written by Kafka, or an older kaflet) has its batch headers read
        once: with no ABORT marker it gets an empty file and is not read again.
        """
        local = self._local
        rebuild_from: int | None = None
        for i, seg in enumerate(local.segments):
            next_base = local.bases[i + 1] if i + 1 < len(local.bases) else None
            idx = seg.txn_index
            try:
                exists = idx.sanity_check(seg.base_offset, next_base)
            except CorruptIndexError as e:
                log.warning("%s: %s; rebuilding the transaction index from the log", local.dir, e)
            else:
                if exists:
                    continue
                if not _has_abort_marker(seg):
                    idx.ensure_file()
                    continue
                log.warning("%s: transaction index of segment %d is missing and the segment has aborted "
                            "transactions; rebuilding it from the log", local.dir, seg.base_offset)
            idx.reset()
            if rebuild_from is None:
                rebuild_from = seg.base_offset
        return rebuild_from

    def _assign_epoch_on_recovery(self, h: BatchHeader) -> None:
        if h.partition_leader_epoch >= 0:
            self._epochs.assign(h.partition_leader_epoch, h.base_offset, flush=False)


def rebuild_producer_state(ps: ProducerStateManager, local: LocalLog, log_start_offset: int,
                           leader_epoch_cache: LeaderEpochCache, rebuild_txn_index_from: int | None = None,
                           defer_epoch_write: bool = False, names: list[str] | None = None) -> None:
    """Producer state at the LEO: the newest snapshot plus the batches after it (which also
    re-indexes aborted transactions a crash lost after it).

    With ``rebuild_txn_index_from``, a scratch producer state is first replayed from the
    newest snapshot at or below that offset, so the aborted transactions of the (emptied or
    short) ``.txnindex`` files from there on are indexed again with the first offsets and
    LSOs they had: Kafka's recoverSegment, which rebuilds producer state up to the segment in
    a ProducerStateManager of its own.  The log's own state still comes from the newest
    snapshot, so producers expired since the older one stay expired.

    ``names``: the directory's listing, when the caller (the load) has one: it spares two
    more ``listdir`` of each partition.
    """
    offsets = None if names is None else ps.snapshot_offsets(names)
    leo = local.log_end_offset
    # A log without a batch has no transaction to index again (nor any snapshot to read for it).
    if rebuild_txn_index_from is not None and leo > local.segments[0].base_offset:
        scratch = ProducerStateManager(local.dir)
        snap = scratch.load_latest_snapshot(min(rebuild_txn_index_from, leo), delete_newer=False)
        _replay(scratch, local, snap if snap is not None else log_start_offset)
    snap = ps.load_latest_snapshot(leo, offsets=offsets)
    replayed = _replay(ps, local, snap if snap is not None else log_start_offset)
    ps.delete_snapshots_before(local.segments[0].base_offset, offsets)
    # An empty log needs no snapshot (Kafka writes none for a new log either).
    if replayed or (snap is None and leo > log_start_offset):
        ps.take_snapshot(leo)
    # The load's rewrite may wait for the next batch: until then the epochs of the log's durable
    # data are on disk already, and only the unflushed tail's differ, which a crash re-derives.
    leader_epoch_cache.flush_if_dirty(defer=defer_epoch_write)


def _replay(ps: ProducerStateManager, local: LocalLog, start: int) -> int:
    """Apply the batches from ``start`` to the LEO to ``ps``, indexing each aborted
    transaction in its marker's segment (entries already there are kept); how many."""
    leo = local.log_end_offset
    ps.map_end_offset = start
    replayed = 0
    if start < leo:
        for seg in local.segments[local.segment_index_for(start):]:
            for pos, h in seg.batches():
                if h.base_offset + h.last_offset_delta < start:
                    continue
                if h.producer_id >= 0:
                    if h.is_control:
                        index_aborted_txn(ps.update(h, control_marker(seg.read_batch(pos, h))), ps, seg.txn_index)
                    else:
                        ps.update(h)
                replayed += 1
    ps.map_end_offset = leo
    return replayed


def _has_abort_marker(seg: LogSegment) -> bool:
    """Whether the segment holds a transaction's ABORT marker (reads its batch headers and
    its control batches)."""
    for pos, h in seg.batches():
        if h.is_control and h.producer_id >= 0:
            control = control_marker(seg.read_batch(pos, h))
            if control is not None and control[0] == CONTROL_ABORT:
                return True
    return False
