"""Compaction of one log: Kafka's log cleaner pass (``cleanup.policy`` with ``compact``).

A pass over a log, in a cleaner worker process (``cleaner_worker.py``; never on the event loop):

1. **Offset map.**  Read the dirty section ``[first_dirty, first_uncleanable)`` and record
   key -> latest offset (``OffsetMap``, bounded by ``log.cleaner.dedupe.buffer.size``).  If the
   map fills up, the pass covers only up to the last batch that fitted (``end``); the rest stays
   dirty for the next pass.
2. **Rewrite.**  Every inactive segment from the start of the log up to ``end`` is rewritten,
   consecutive segments grouped so a group stays within segment.bytes (and the index size).
   A record survives if it is at or past ``end``, or it is its key's latest record
   and it is not a tombstone whose delete horizon has passed.  Batches whose records all survive
   are copied byte for byte; the others are rebuilt with the same compression codec, producer
   id/epoch/base sequence, timestamp type, leader epoch and *last offset* (so a producer's last
   sequence does not move).  A batch that loses every record is dropped, except the last batch
   of a producer that still has state: it stays as an empty batch so the producer's sequence
   state survives a reload (Kafka's RETAIN_EMPTY).
3. **Tombstones** (null values) are kept for ``delete.retention.ms`` after the pass that first
   sees them: that pass stamps their batch with the delete-horizon bit and BaseTimestamp =
   now + delete.retention.ms (KIP-534's format, Kafka 3.x); a pass after the horizon drops them.
4. **Swap.**  Each group is written as ``<base>.log.cleaned`` (+ ``.index.cleaned``,
   ``.timeindex.cleaned``), fsync'd, and then swapped in by ``Log.replace_with_cleaned`` *on the
   thread that owns the Log* (the event loop), which follows Kafka's crash-safe rename order.

Transactions (Kafka's CleanedTransactionMetadata): a pass stops at the last stable offset
(``cleaner_manager``), so undecided transactions are never compacted.  The aborted transactions
of the log's ``.txnindex`` files come with the job: their batches are left out of the offset
map (an aborted value never shadows a committed one) and removed (an empty batch stays if it
is its producer's last).  An ABORT marker stays, with its ``.txnindex`` entry written for the
cleaned segment, while the pass still met batches of its transaction; a COMMIT marker stays
while its transaction has data in the log.  A marker without data left gets a delete horizon
and is dropped once that has passed.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kaflet.log.checkpoints import fsync_dir
from kaflet.log.offset_index import OffsetIndex
from kaflet.log.offset_map import OffsetMap
from kaflet.log.producer_state import CONTROL_ABORT, CONTROL_COMMIT
from kaflet.log.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_file_name,
)
from kaflet.log.time_index import TimeIndex
from kaflet.log.transaction_index import AbortedTxn, TransactionIndex
from kaflet.protocol.records import (
    BATCH_HEADER_SIZE,
    INT32_MAX,
    MIN_BATCH_LENGTH,
    TIMESTAMP_LOG_APPEND_TIME,
    BatchHeader,
    Record,
    build_batch,
    build_empty_batch,
    decode_records,
    iter_batches,
    parse_batch_header,
)

if TYPE_CHECKING:
    from kaflet.log.log import CleanerView, Log

log = logging.getLogger(__name__)

_CLEANED_FILES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
# Bytes of cleaner work after which the thread gives up the GIL for a moment, so the event loop
# (produce and fetch) is never starved for longer than that takes.
_YIELD_EVERY_BYTES = 256 * 1024


class CleaningAbortedError(Exception):
    """The pass was abandoned (shutdown, log deleted or changed under it); nothing was swapped
    for the group in progress."""


#: The broker configs a running cleaner takes at run time (Kafka's LogCleaner.ReconfigurableConfigs,
#: less message.max.bytes, which bounds Kafka's read buffer; kaflet's grows to the largest batch).
RECONFIGURABLE_CONFIGS = (
    "log.cleaner.threads",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size",
    "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms",
)


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """Broker-level ``log.cleaner.*`` settings (Kafka's names with '.' -> '_')."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 134217728
    io_buffer_size: int = 524288
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = float("inf")
    backoff_ms: int = 15000

    @classmethod
    def from_broker(cls, values: Mapping[str, Any]) -> CleanerConfig:
        """From a broker config's parsed values."""
        return cls(
            enable=bool(values["log.cleaner.enable"]),
            threads=int(values["log.cleaner.threads"]),
            dedupe_buffer_size=int(values["log.cleaner.dedupe.buffer.size"]),
            io_buffer_size=int(values["log.cleaner.io.buffer.size"]),
            io_buffer_load_factor=float(values["log.cleaner.io.buffer.load.factor"]),
            io_max_bytes_per_second=float(values["log.cleaner.io.max.bytes.per.second"]),
            backoff_ms=int(values["log.cleaner.backoff.ms"]),
        )

    def _rate(self) -> str:
        return ("unlimited" if self.io_max_bytes_per_second >= 1.7976931348623157e308
                else f"{self.io_max_bytes_per_second:g} bytes/s")

    def describe(self) -> str:
        """The settings, as the cleaner's start-up line prints them."""
        rate = self._rate()
        return (f"{self.threads} thread(s), dedupe buffer {self.dedupe_buffer_size} bytes (load factor "
                f"{self.io_buffer_load_factor:g}), io buffer {self.io_buffer_size} bytes, io max {rate}, "
                f"backoff {self.backoff_ms} ms")

    def changes(self, new: CleanerConfig) -> list[str]:
        """``<broker config> <old> -> <new>`` for each setting ``new`` changes."""
        pairs = [("log.cleaner.threads", self.threads, new.threads),
                 ("log.cleaner.dedupe.buffer.size", self.dedupe_buffer_size, new.dedupe_buffer_size),
                 ("log.cleaner.io.buffer.load.factor", self.io_buffer_load_factor, new.io_buffer_load_factor),
                 ("log.cleaner.io.buffer.size", self.io_buffer_size, new.io_buffer_size),
                 ("log.cleaner.io.max.bytes.per.second", self._rate(), new._rate()),
                 ("log.cleaner.backoff.ms", self.backoff_ms, new.backoff_ms)]
        return [f"{name} {old} -> {value}" for name, old, value in pairs if old != value]

    def check_reconfiguration(self, new: CleanerConfig) -> str | None:
        """Why ``new`` may not replace this config at run time (Kafka's
        LogCleaner.validateReconfiguration), or None."""
        if new.threads < 1:
            return "Log cleaner threads should be at least 1"
        if new.threads < self.threads // 2:
            return f"Log cleaner threads cannot be reduced to less than half the current value {self.threads}"
        if new.threads > self.threads * 2:
            return f"Log cleaner threads cannot be increased to more than double the current value {self.threads}"
        return None


class Throttler:
    """Keeps the cleaner's read+write rate under ``log.cleaner.io.max.bytes.per.second``."""

    def __init__(self, bytes_per_second: float, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = bytes_per_second
        self._sleep = sleep
        self._clock = clock
        self._start = clock()
        self._bytes = 0

    def maybe_throttle(self, n: int) -> None:
        if self.rate <= 0 or self.rate == float("inf"):
            return
        self._bytes += n
        elapsed = self._clock() - self._start
        wanted = self._bytes / self.rate
        if wanted > elapsed:
            self._sleep(wanted - elapsed)
        if elapsed > 1.0:  # a fresh window, so an idle spell does not earn a burst
            self._start = self._clock()
            self._bytes = 0


@dataclass(slots=True)
class CleanerStats:
    """What one pass did (logged, and returned to tests)."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_removed: int = 0
    segments_before: int = 0
    segments_after: int = 0
    map_entries: int = 0
    #: Earliest delete horizon still stamped on a kept tombstone or marker batch: when it passes,
    #: another pass can remove them even if the log is otherwise clean.
    next_horizon_ms: int | None = None
    elapsed_s: float = 0.0


@dataclass(slots=True)
class _GroupState:
    """Per-pass mutable state the batch filter shares across groups."""

    omap: OffsetMap
    end: int
    now: int
    new_horizon: int
    producers: dict[int, int]
    txns: _TxnTracker


class _TxnTracker:
    """Which batches belong to aborted transactions, and which markers may go, as the pass
    reads the log in order (Kafka's CleanedTransactionMetadata)."""

    def __init__(self, aborted: Sequence[tuple[int, int, int, int]]) -> None:
        self._pending = sorted(aborted, key=lambda t: t[1])  # by first offset
        self._next = 0
        self._ongoing_aborted: dict[int, list[Any]] = {}  # pid -> [entry, batch seen]
        self._ongoing_committed: set[int] = set()
        self.cleaned_index: TransactionIndex | None = None

    def _consume_up_to(self, offset: int) -> None:
        pending = self._pending
        while self._next < len(pending) and pending[self._next][1] <= offset:
            entry = pending[self._next]
            self._ongoing_aborted.setdefault(entry[0], [entry, False])
            self._next += 1

    def on_batch(self, h: BatchHeader) -> bool:
        """A data batch: True if it belongs to an aborted transaction (to be removed)."""
        self._consume_up_to(h.last_offset)
        if not h.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(h.producer_id)
        if ongoing is not None:
            ongoing[1] = True
            return True
        self._ongoing_committed.add(h.producer_id)
        return False

    def on_marker(self, h: BatchHeader, records: list[Record]) -> bool:
        """A control batch: True if the pass met no batch of its transaction (it may go)."""
        self._consume_up_to(h.last_offset)
        if not records or records[0].key is None or len(records[0].key) < 4:
            return True  # already emptied by an earlier pass
        ctype = int.from_bytes(records[0].key[2:4], "big", signed=True)
        if ctype == CONTROL_ABORT:
            ongoing = self._ongoing_aborted.pop(h.producer_id, None)
            if ongoing is not None and ongoing[1]:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(AbortedTxn(*ongoing[0]))
                return False
            return True
        if ctype == CONTROL_COMMIT:
            if h.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(h.producer_id)
                return False
            return True
        return False


class _SegmentLike(Protocol):
    @property
    def base_offset(self) -> int: ...
    @property
    def next_base_offset(self) -> int: ...
    @property
    def size(self) -> int: ...


_S = TypeVar("_S", bound=_SegmentLike)


def group_segments(segments: Sequence[_S], max_size: int, max_index_size: int,
                   index_interval_bytes: int) -> list[list[_S]]:
    """Split consecutive segments into groups that each fit one cleaned segment.

    As Kafka: a group's total size stays <= segment.bytes, its offsets fit a 32-bit relative
    offset, and its index stays within segment.index.bytes (estimated from the bytes, one entry
    per index.interval.bytes, 12 bytes for the larger time-index entry).
    """
    groups: list[list[_S]] = []
    i = 0
    interval = max(1, index_interval_bytes)
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        j = i + 1
        while j < len(segments):
            nxt = segments[j]
            if size + nxt.size > max_size:
                break
            if nxt.next_base_offset - 1 - group[0].base_offset > INT32_MAX:
                break
            if ((size + nxt.size) // interval + 2) * 12 > max_index_size:
                break
            group.append(nxt)
            size += nxt.size
            j += 1
        groups.append(group)
        i = j
    return groups


def read_batches(fd: int, size: int, buffer_size: int,
                 on_read: Callable[[int], None] | None = None) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    """(position, header, bytes) of every whole batch of a segment file, read in large chunks."""
    pos = 0
    chunk_size = max(buffer_size, BATCH_HEADER_SIZE)
    while size - pos >= BATCH_HEADER_SIZE:
        chunk = os.pread(fd, min(chunk_size, size - pos), pos)
        if len(chunk) < BATCH_HEADER_SIZE:
            return
        mv = memoryview(chunk)
        consumed = 0
        for p, h in iter_batches(mv):
            yield pos + p, h, mv[p : p + h.size]
            consumed = p + h.size
        if consumed == 0:  # a batch larger than the buffer: read it on its own
            h = parse_batch_header(chunk)
            if h.length < MIN_BATCH_LENGTH or pos + h.size > size:
                return
            data = os.pread(fd, h.size, pos)
            if len(data) < h.size:
                return
            yield pos, h, memoryview(data)
            consumed = h.size
        if on_read is not None:
            on_read(consumed)
        pos += consumed


def first_batch_timestamp(fd: int) -> int:
    """Max timestamp of a segment's first batch (-1 if none): Kafka's reference for
    max.compaction.lag.ms."""
    hdr = os.pread(fd, BATCH_HEADER_SIZE, 0)
    if len(hdr) < BATCH_HEADER_SIZE:
        return -1
    return parse_batch_header(hdr).max_timestamp


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One segment of a pass, as plain data (what crosses to a worker process)."""

    base_offset: int
    next_base_offset: int
    size: int


@dataclass(frozen=True, slots=True)
class CleanJob:
    """Everything a pass needs, as plain data: the segments are read through file descriptors
    given alongside (``segments[i]`` is read from ``fds[i]``), never reopened by name."""

    dir: str
    segments: tuple[SegmentInfo, ...]
    first_dirty: int
    first_uncleanable: int
    now_ms: int
    segment_bytes: int
    segment_index_bytes: int
    index_interval_bytes: int
    delete_retention_ms: int
    producer_last_offsets: dict[int, int]
    map_capacity: int
    io_buffer_size: int
    io_max_bytes_per_second: float = float("inf")
    # (producer id, first offset, last offset, last stable offset) of the log's aborted transactions
    aborted_txns: tuple[tuple[int, int, int, int], ...] = ()

    @classmethod
    def of(cls, lg_dir: str, view: CleanerView, first_dirty: int, first_uncleanable: int, now_ms: int,
           map_capacity: int, io_buffer_size: int, io_max_bytes_per_second: float = float("inf")) -> CleanJob:
        cfg = view.config
        return cls(lg_dir, tuple(SegmentInfo(s.base_offset, s.next_base_offset, s.size) for s in view.segments),
                   first_dirty, first_uncleanable, now_ms, cfg.segment_bytes, cfg.segment_index_bytes,
                   cfg.index_interval_bytes, cfg.delete_retention_ms, dict(view.producer_last_offsets),
                   map_capacity, io_buffer_size, io_max_bytes_per_second, tuple(view.aborted_txns))


@dataclass(frozen=True, slots=True)
class CleanedGroup:
    """A group written as ``.cleaned`` files, waiting to be swapped in for the segments at
    ``segment_bases`` (``paths``: final suffix -> ``.cleaned`` file)."""

    base_offset: int
    segment_bases: tuple[int, ...]
    paths: dict[str, str]


#: A pass as a generator: it yields each written group and is sent back whether the group was
#: swapped in; it returns (new first dirty offset, stats).
PassGenerator = Generator[CleanedGroup, bool, tuple[int, CleanerStats]]


def run_pass(job: CleanJob, fds: Sequence[int], throttler: Throttler | None = None,
             stopping: Callable[[], bool] = lambda: False,
             pause: Callable[[], None] | None = None) -> PassGenerator:
    """The CPU- and I/O-heavy part of one pass (offset map, rewriting every group, indexes,
    fsync), on plain data: it runs in a cleaner worker process, or in-process (``Cleaner``).

    Each group is yielded once its ``.cleaned`` files are complete; whoever drives the generator
    swaps them in on the Log's owner and sends back True, or sends False (or closes the
    generator) to abandon the pass: the group's ``.cleaned`` files are then removed and
    ``CleaningAbortedError`` raised.  ``pause`` is called every ``_YIELD_EVERY_BYTES``.
    """
    return _Pass(job, fds, throttler or Throttler(job.io_max_bytes_per_second), stopping, pause).run()


def drive_pass(gen: PassGenerator, swap: Callable[[CleanedGroup], bool]) -> tuple[int, CleanerStats]:
    """Run ``gen`` to its end, swapping each group with ``swap``."""
    try:
        group = next(gen)
        while True:
            try:
                ok = swap(group)
            except BaseException:
                gen.close()  # removes the group's .cleaned files
                raise
            group = gen.send(bool(ok))
    except StopIteration as stop:
        result: tuple[int, CleanerStats] = stop.value
        return result


def swap_group(lg: Log, view: CleanerView, group: CleanedGroup) -> bool:
    """``Log.replace_with_cleaned`` for a group of ``view``'s segments (on the Log's owner)."""
    by_base = {cs.base_offset: cs.segment for cs in view.segments}
    return lg.replace_with_cleaned([by_base[b] for b in group.segment_bases], group.base_offset, group.paths)


class Cleaner:
    """Cleans one log at a time in the calling thread (unit tests, tools); the broker runs the
    same pass in a worker process (``cleaner_worker.WorkerCleaner``).  Not thread-safe."""

    def __init__(self, map_capacity: int, io_buffer_size: int = 524288,
                 throttler: Throttler | None = None,
                 run_on_owner: Callable[[Callable[[], Any]], Any] | None = None,
                 stopping: Callable[[], bool] = lambda: False) -> None:
        self.map_capacity = map_capacity
        self.io_buffer_size = io_buffer_size
        self.throttler = throttler or Throttler(float("inf"))
        # Without an owner (unit tests, tools), the Log is changed from the calling thread.
        self._run_on_owner: Callable[[Callable[[], Any]], Any] = run_on_owner or (lambda fn: fn())
        self._stopping = stopping

    def clean(self, lg: Log, view: CleanerView, first_dirty: int, first_uncleanable: int,
              now_ms: int) -> tuple[int, CleanerStats]:
        """One pass over ``lg``; returns (new first dirty offset, stats).

        ``view`` is ``lg.cleaner_view()`` taken on the owning thread; ``first_uncleanable`` is
        a segment boundary at or below the active segment's base and the high watermark.
        """
        job = CleanJob.of(lg.dir, view, first_dirty, first_uncleanable, now_ms, self.map_capacity,
                          self.io_buffer_size)
        fds = [cs.handle.fileno() for cs in view.segments]
        gen = run_pass(job, fds, self.throttler, self._stopping, lambda: time.sleep(0))
        return drive_pass(gen, lambda g: bool(self._run_on_owner(lambda: swap_group(lg, view, g))))


class _Pass:
    def __init__(self, job: CleanJob, fds: Sequence[int], throttler: Throttler, stopping: Callable[[], bool],
                 pause: Callable[[], None] | None) -> None:
        self.job = job
        self.fds = list(fds)
        self.throttler = throttler
        self._stopping = stopping
        self._pause = pause
        self._since_yield = 0

    # ------------------------------------------------------------------ helpers

    def _account(self, n: int) -> None:
        self.throttler.maybe_throttle(n)
        self._since_yield += n
        if self._since_yield >= _YIELD_EVERY_BYTES:
            self._since_yield = 0
            if self._pause is not None:
                self._pause()
            self._check_stop()

    def _check_stop(self) -> None:
        if self._stopping():
            raise CleaningAbortedError("cleaner is shutting down")

    # ------------------------------------------------------------------ the pass

    def run(self) -> PassGenerator:
        job = self.job
        started = time.monotonic()
        stats = CleanerStats()
        omap = OffsetMap(job.map_capacity)
        segs = list(zip(job.segments, self.fds, strict=True))
        dirty = [(s, fd) for s, fd in segs
                 if s.next_base_offset > job.first_dirty and s.next_base_offset <= job.first_uncleanable]
        end = self._build_offset_map(dirty, job.first_dirty, omap)
        stats.map_entries = len(omap)
        to_clean = [(s, fd) for s, fd in segs if s.base_offset < end]
        fd_of = {s.base_offset: fd for s, fd in to_clean}
        stats.segments_before = len(to_clean)
        state = _GroupState(omap, end, job.now_ms, job.now_ms + job.delete_retention_ms,
                            dict(job.producer_last_offsets), _TxnTracker(job.aborted_txns))
        for group in group_segments([s for s, _ in to_clean], job.segment_bytes, job.segment_index_bytes,
                                    job.index_interval_bytes):
            self._check_stop()
            yield from self._clean_group([(s, fd_of[s.base_offset]) for s in group], state, stats)
            stats.segments_after += 1
        stats.elapsed_s = time.monotonic() - started
        return end, stats

    def _build_offset_map(self, dirty: list[tuple[SegmentInfo, int]], first_dirty: int, omap: OffsetMap) -> int:
        """Fill ``omap`` from the dirty segments; returns the offset the map covers up to."""
        end = first_dirty
        txns = _TxnTracker(self.job.aborted_txns)
        for cs, fd in dirty:
            for _, h, data in read_batches(fd, cs.size, self.job.io_buffer_size, self._account):
                # Every batch goes through the tracker, so an ABORT marker ends its transaction.
                if h.is_control:
                    txns.on_marker(h, decode_records(data))
                    aborted = False
                else:
                    aborted = txns.on_batch(h)
                if h.next_offset <= first_dirty:
                    continue
                # A batch is mapped whole or not at all, so ``end`` stays on a batch boundary.
                if h.records_count > omap.room():
                    if end == first_dirty:
                        raise RuntimeError(
                            f"log.cleaner.dedupe.buffer.size holds {omap.capacity} keys: too small for one batch "
                            f"of {h.records_count} records at offset {h.base_offset}")
                    return end
                if not h.is_control and not aborted:
                    for r in decode_records(data):
                        off = h.base_offset + r.offset_delta
                        if r.key is not None and off >= first_dirty:
                            omap.put(r.key, off)
                end = h.next_offset
            self._check_stop()
            end = max(end, cs.next_base_offset)  # the whole segment is covered, gaps included
        return end

    def _clean_group(self, group: list[tuple[SegmentInfo, int]], state: _GroupState,
                     stats: CleanerStats) -> Generator[CleanedGroup, bool, None]:
        job = self.job
        base = group[0][0].base_offset
        paths = {sfx: os.path.join(job.dir, segment_file_name(base, sfx + CLEANED_SUFFIX)) for sfx in _CLEANED_FILES}
        for p in paths.values():
            _unlink(p)  # leftovers of an abandoned pass
        fd = os.open(paths[LOG_SUFFIX], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        oi = OffsetIndex(paths[INDEX_SUFFIX], base, job.segment_index_bytes)
        ti = TimeIndex(paths[TIME_INDEX_SUFFIX], base, job.segment_index_bytes)
        swapped = False
        try:
            position = 0
            since_index = 0
            max_ts, shallow = -1, -1
            out = bytearray()
            state.txns.cleaned_index = TransactionIndex(paths[TXN_INDEX_SUFFIX])
            state.txns.cleaned_index.ensure_file()  # swapped in with the segment, empty or not
            for cs, in_fd in group:
                for _, h, data in read_batches(in_fd, cs.size, job.io_buffer_size, self._account):
                    self._check_stop()
                    stats.bytes_read += h.size
                    kept = self._filter_batch(h, data, state, stats)
                    if kept is None:
                        continue
                    kh = parse_batch_header(kept) if kept is not data else h
                    if kh.max_timestamp > max_ts:
                        max_ts, shallow = kh.max_timestamp, kh.last_offset
                    # Kafka's index.interval.bytes rule, as an append of this one batch.
                    if since_index > job.index_interval_bytes and not oi.is_full() and not ti.is_full():
                        oi.append(kh.last_offset, position)
                        ti.maybe_append(max_ts, shallow)
                        since_index = 0
                    since_index += len(kept)
                    position += len(kept)
                    out += kept
                    if len(out) >= job.io_buffer_size:
                        _write_all(fd, out)
                        self._account(len(out))
                        out.clear()
            _write_all(fd, out)
            self._account(len(out))
            stats.bytes_written += position
            if max_ts >= 0:
                ti.maybe_append(max_ts, shallow, skip_full_check=True)
            oi.trim()
            ti.trim()
            oi.flush()
            ti.flush()
            state.txns.cleaned_index.flush()
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            oi.close()
            ti.close()
            for p in paths.values():
                _unlink(p)
            raise
        os.close(fd)
        oi.close()
        ti.close()
        # Like Kafka, the cleaned segment takes the newest modification time of the segments it
        # replaces, so time-based retention of timestamp-less segments does not restart.
        mtime = max(os.fstat(in_fd).st_mtime for _, in_fd in group)
        os.utime(paths[LOG_SUFFIX], (mtime, mtime))
        try:
            swapped = yield CleanedGroup(base, tuple(cs.base_offset for cs, _ in group), paths)
        finally:
            if not swapped:
                for p in paths.values():
                    _unlink(p)
        if not swapped:
            raise CleaningAbortedError(f"{job.dir}: segments {[cs.base_offset for cs, _ in group]} "
                                       "changed during cleaning")
        fsync_dir(job.dir)

    def _filter_batch(self, h: BatchHeader, data: memoryview, st: _GroupState,
                      stats: CleanerStats) -> memoryview | bytes | None:
        """The batch as it must be written to the cleaned segment (``data`` itself when it is
        unchanged), or None to drop it."""
        horizon = h.delete_horizon_ms
        last_of_producer = h.producer_id >= 0 and st.producers.get(h.producer_id) == h.last_offset
        if h.is_control:
            records = decode_records(data)
            if not st.txns.on_marker(h, records):
                return data  # its transaction's data is still in the log
            if horizon is None:
                stats.next_horizon_ms = _min(stats.next_horizon_ms, st.new_horizon)
                return self._rebuild(h, records, st.new_horizon)
            if st.now < horizon:
                stats.next_horizon_ms = _min(stats.next_horizon_ms, horizon)
                return data
            return build_empty_batch(h) if last_of_producer else None
        if st.txns.on_batch(h):
            stats.records_read += h.records_count
            return build_empty_batch(h) if last_of_producer else None  # an aborted transaction's
        records = decode_records(data)
        stats.records_read += len(records)
        kept: list[Record] = []
        tombstones = False
        for r in records:
            off = h.base_offset + r.offset_delta
            if off < st.end:
                if r.key is None:
                    continue  # compacted logs hold keyed records only; Kafka drops these too
                if off < st.omap.get(r.key):
                    continue  # a later record of this key exists
                if r.value is None and horizon is not None and st.now >= horizon:
                    stats.tombstones_removed += 1
                    continue
            kept.append(r)
            tombstones = tombstones or r.value is None
        stats.records_kept += len(kept)
        if not kept:
            return build_empty_batch(h) if last_of_producer else None
        new_horizon = horizon if horizon is not None else (st.new_horizon if tombstones else None)
        if tombstones and new_horizon is not None:
            stats.next_horizon_ms = _min(stats.next_horizon_ms, new_horizon)
        if len(kept) == len(records) and new_horizon == horizon:
            return data
        return self._rebuild(h, kept, new_horizon)

    @staticmethod
    def _rebuild(h: BatchHeader, kept: list[Record], horizon: int | None) -> bytes:
        # Record timestamps stay what they were: the deltas are re-based on the new
        # BaseTimestamp (the delete horizon when there is one, else the first record's time).
        stamps = [h.base_timestamp + r.timestamp_delta for r in kept]
        new_base = horizon if horizon is not None else stamps[0]
        recs = [Record(r.offset_delta, t - new_base, r.key, r.value, r.headers) for r, t in zip(kept, stamps, strict=True)]
        lat = h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
        return build_batch(
            recs,
            base_offset=h.base_offset,
            compression=h.compression,
            producer_id=h.producer_id,
            producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence,
            timestamp_type=h.timestamp_type,
            base_timestamp=new_base,
            is_transactional=h.is_transactional,
            partition_leader_epoch=h.partition_leader_epoch,
            is_control=h.is_control,
            max_timestamp=h.max_timestamp if lat else max(stamps),
            delete_horizon_ms=horizon,
            last_offset_delta=h.last_offset_delta,
        )


def _min(a: int | None, b: int) -> int:
    return b if a is None else min(a, b)


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass

