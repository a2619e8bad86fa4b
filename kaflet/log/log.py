"""``Log``: the log of one partition, a directory ``<topic>-<partition>`` of segments.

Threading: every method except the executor part of ``flush_until`` runs on the event loop
thread.  Appends write to the page cache and never fsync.

Durability (``flush.messages`` / ``flush.ms``), how the caller uses it::

    result = log.append_as_leader(records, leader_epoch, now_ms)
    if result.flush_needed:                 # flush.messages reached (e.g. flush.messages=1)
        await log.flush_until(result.last_offset + 1)
    # ... only now answer the producer

``flush_until`` fsyncs in a thread-pool executor and group-commits: concurrent callers share one
fsync, and a caller whose offset was appended after a running fsync started waits for the next
one (which covers everything appended meanwhile).  ``flush.ms`` is honoured by
``LogManager.run_background`` (``Log.flush_due``).  Segment rolls also schedule a flush of the
rolled segment, as Kafka does, so the recovery point advances even with the defaults.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import struct
import time
from bisect import bisect_right
from collections.abc import Callable
from concurrent.futures import Executor
from typing import NamedTuple

from kaflet.log.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    format_partition_metadata,
    fsync_dir,
    read_partition_metadata,
    write_atomic,
)
from kaflet.log.config import LONG_MAX, LogConfig
from kaflet.log.dir_failure import LogDirFailureChannel
from kaflet.log.errors import (
    CorruptIndexError,
    KafkaStorageError,
    LogError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
)
from kaflet.log.leader_epoch import LeaderEpochCache
from kaflet.log.metadata_writer import MetadataWriter
from kaflet.log.producer_state import CONTROL_ABORT, CONTROL_COMMIT, CompletedTxn, ProducerStateManager
from kaflet.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    FileRegion,
    LogSegment,
    SharedFile,
    segment_file_name,
)
from kaflet.log.transaction_index import AbortedTxn
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.records import (
    BATCH_HEADER_SIZE,
    INT32_MAX,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    BatchInfo,
    Record,
    RecordError,
    RecordValidationError,
    build_batch,
    check_crc,
    decode_records,
    has_trusted_timestamps,
    parse_batch_header,
    parse_records,
    recompress_batch,
    scan_records,
    set_base_offset,
    set_log_append_time,
    set_max_timestamp,
    set_partition_leader_epoch,
    validate_produce_batches,
)

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3

_LOG_FILE = re.compile(r"^(\d{20})\.log$")


def parse_topic_partition(dir_name: str) -> tuple[str, int] | None:
    """``orders-3`` -> ("orders", 3); split at the last '-'.  None if not a partition dir."""
    topic, sep, part = dir_name.rpartition("-")
    if not sep or not topic or not part.isdigit() or "." in part:
        return None
    return topic, int(part)


class AppendResult(NamedTuple):
    """Outcome of ``append_as_leader``.

    ``flush_needed``: flush.messages is reached; await ``flush_until(last_offset + 1)`` before
    acknowledging.  For a duplicate, offsets are the original append's.
    """

    base_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    duplicate: bool
    flush_needed: bool = False


class FollowerAppendResult(NamedTuple):
    """Outcome of ``append_as_follower``: the offsets and bytes appended.

    ``last_epoch``: the partition leader epoch of the last batch (the follower's last fetched
    epoch). ``flush_needed`` as in ``AppendResult``.
    """

    first_offset: int
    last_offset: int
    valid_bytes: int
    last_epoch: int
    flush_needed: bool = False


class ReadResult(NamedTuple):
    """Outcome of ``read``: file regions to send, and the partition offsets for the response."""

    regions: list[FileRegion]
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class CleanableSegment(NamedTuple):
    """An inactive segment as the log cleaner sees it (see ``Log.cleaner_view``)."""

    segment: LogSegment
    base_offset: int
    next_base_offset: int  # base of the following segment: no offset of this one reaches it
    size: int
    largest_timestamp: int
    handle: SharedFile  # keeps the .log open for the cleaner's reads


class CleanerView(NamedTuple):
    """What the log cleaner needs of a log, taken on the owning thread in one go."""

    segments: list[CleanableSegment]
    active_base_offset: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    config: LogConfig
    producer_last_offsets: dict[int, int]  # producer id -> last offset of its last batch
    last_stable_offset: int
    aborted_txns: list[AbortedTxn]  # of the whole log, from its .txnindex files


class TimestampOffset(NamedTuple):
    """Result of ``offset_for_timestamp``."""

    offset: int
    timestamp: int


def _now_ms() -> int:
    return int(time.time() * 1000)



def _java_long(v: int) -> int:
    """``v`` as a signed 64-bit integer (Java's long arithmetic wraps around)."""
    return (v + 2**63) % 2**64 - 2**63

class Log:
    """One partition's log: segments, offsets, appends, reads, recovery and flushing."""

    def __init__(
        self,
        directory: str,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        high_watermark: int | None = None,
        topic_id: str | None = None,
        executor: Executor | None = None,
        metadata_writer: MetadataWriter | None = None,
        failure_channel: LogDirFailureChannel | None = None,
        now_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.dir = directory
        #: Where an I/O error of this log takes its log directory offline (None: nowhere).
        self._failure_channel = failure_channel
        #: Set when the log directory went offline: every use answers KafkaStorageError.
        self.offline = False
        name = parse_topic_partition(os.path.basename(directory.rstrip("/")))
        self.topic, self.partition = name if name else (os.path.basename(directory), 0)
        self.config = config
        self._executor = executor
        self._writer = metadata_writer
        self._time = now_ms
        # A directory created here is only durable in its parent once fsync'd: the first
        # flush does it, before any of the log's data counts as flushed.
        self._parent_synced = os.path.isdir(directory)
        os.makedirs(directory, exist_ok=True)
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._flush_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        # (unlink after ms, paths): segments renamed ``.deleted`` by retention/DeleteRecords.
        self._pending_file_deletes: list[tuple[int, list[str]]] = []
        self._closed = False
        self.leader_epoch_cache = LeaderEpochCache(
            os.path.join(directory, LEADER_EPOCH_CHECKPOINT),
            None if metadata_writer is None else lambda data: self._write_file(LEADER_EPOCH_CHECKPOINT, data))
        self.producer_state = ProducerStateManager(directory)
        self.topic_id = topic_id
        if topic_id is not None:
            if read_partition_metadata(os.path.join(directory, PARTITION_METADATA)) != topic_id:
                self._write_file(PARTITION_METADATA, format_partition_metadata(topic_id))
        else:
            try:
                self.topic_id = read_partition_metadata(os.path.join(directory, PARTITION_METADATA))
            except OSError:
                self.topic_id = None
        self._load(recovery_point, log_start_offset, had_clean_shutdown)
        # As in Kafka the log only keeps the high watermark: it starts at the checkpointed value
        # (or the log start offset) and the partition (replication/partition.py) moves it.
        self._high_watermark = max(self.log_start_offset, min(high_watermark or 0, self._leo))
        self.producer_state.on_high_watermark(self._high_watermark)
        self._last_flush_ms = self._time()

    def _write_file(self, name: str, data: bytes) -> None:
        """Replace one of the log's small files atomically; durable before the log's data."""
        if self._writer is not None:
            self._writer.write(self, self.dir, name, data)
        else:
            write_atomic(os.path.join(self.dir, name), data)

    # ------------------------------------------------------------------ loading

    def _new_segment(self, base_offset: int, *, new: bool = True) -> LogSegment:
        """A segment object for ``base_offset``; ``new``: the segment is being created, so its
        (empty) ``.txnindex`` is created too (see ``transaction_index``), unlike a loaded one."""
        jitter = 0
        if self.config.segment_jitter_ms > 0:
            jitter = random.randrange(min(self.config.segment_jitter_ms, self.config.segment_ms))
        seg = LogSegment(self.dir, base_offset, self.config, created_ms=self._time(), roll_jitter_ms=jitter)
        if new:
            try:
                seg.txn_index.ensure_file()
            except OSError:
                seg.close_handlers()
                raise
        return seg

    def _remove_temp_files(self) -> set[int]:
        """Kafka's rules for what a crash mid-rename leaves: ``.deleted`` and ``.cleaned`` files
        go; a ``.log.swap`` below every ``.cleaned`` file finished its copy and is installed in
        place of the segments it replaces (with its ``.txnindex.swap``); any other ``.swap``
        (one at or above a ``.cleaned`` file, a swap index without its ``.log.swap``: the
        ``.log`` becomes ``.swap`` last and final before it) belongs to an unfinished swap and
        goes.  Returns the base offsets of the installed segments (their indexes are rebuilt)."""
        installed: set[int] = set()
        names = os.listdir(self.dir)
        cleaned = [n for n in names if n.endswith(CLEANED_SUFFIX)]
        min_cleaned = min((int(n[:20]) for n in cleaned if n[:20].isdigit()), default=None)
        for n in names:
            if n.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
                _unlink(os.path.join(self.dir, n))
        log_swaps = {int(n[:20]) for n in names if n.endswith(LOG_SUFFIX + SWAP_SUFFIX) and n[:20].isdigit()
                     and (min_cleaned is None or int(n[:20]) < min_cleaned)}
        for n in names:
            if not n.endswith(SWAP_SUFFIX):
                continue
            path = os.path.join(self.dir, n)
            base = int(n[:20]) if n[:20].isdigit() else -1
            if base in log_swaps and n.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                self._install_swap(path, base)
                installed.add(base)
            elif not (base in log_swaps and n.endswith(TXN_INDEX_SUFFIX + SWAP_SUFFIX)):
                _unlink(path)  # unfinished swap, or a swap offset/time index (rebuilt)
        return installed

    def _install_swap(self, swap_path: str, base: int) -> None:
        # A finished cleaned segment: it replaces every old segment inside its offset range.
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
        for n in os.listdir(self.dir):
            m = _LOG_FILE.match(n)
            if m and base <= int(m.group(1)) < nxt:
                old = int(m.group(1))
                for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                    _unlink(os.path.join(self.dir, segment_file_name(old, suffix)))
        txn_swap = os.path.join(self.dir, segment_file_name(base, TXN_INDEX_SUFFIX + SWAP_SUFFIX))
        if os.path.exists(txn_swap):
            os.rename(txn_swap, os.path.join(self.dir, segment_file_name(base, TXN_INDEX_SUFFIX)))
        os.rename(swap_path, os.path.join(self.dir, segment_file_name(base, LOG_SUFFIX)))
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            _unlink(os.path.join(self.dir, segment_file_name(base, suffix)))

    def _load(self, recovery_point: int, log_start_offset: int, clean: bool) -> None:
        swapped = self._remove_temp_files()
        names = os.listdir(self.dir)
        bases = sorted(int(m.group(1)) for n in names if (m := _LOG_FILE.match(n)))
        base_set = set(bases)
        for n in names:
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                if (n.endswith(suffix) and n[:20].isdigit() and len(n) == 20 + len(suffix)
                        and int(n[:20]) not in base_set):
                    _unlink(os.path.join(self.dir, n))  # orphan index
        for b in bases:
            seg = self._new_segment(b, new=False)
            if b in swapped:
                seg.recover()  # an installed swap's indexes were dropped with the .swap suffix
            self._add_segment(seg)
        if not self._segments:
            self._add_segment(self._new_segment(max(0, log_start_offset)))

        # Recovery: segments from the one holding the recovery point on are rebuilt unless the
        # shutdown was clean; the others only get a cheap index check.
        first_unflushed = 0 if not clean else len(self._segments)
        if not clean:
            i = bisect_right(self._bases, recovery_point) - 1
            first_unflushed = max(0, i)
        for seg in self._segments[:first_unflushed]:
            seg.rebuild_indexes_if_needed(full=False)
        i = first_unflushed
        while i < len(self._segments):
            seg = self._segments[i]
            truncated = seg.recover(on_batch=self._assign_epoch_on_recovery)
            if truncated:
                log.warning("%s: truncated %d corrupt or torn bytes in segment %d", self.dir, truncated,
                            seg.base_offset)
                for later in self._segments[i + 1 :]:
                    later.delete()
                del self._segments[i + 1 :]
                del self._bases[i + 1 :]
                break
            i += 1
        active = self._segments[-1]
        if clean:
            active.rebuild_indexes_if_needed(full=True)
        # Markers lost with a torn tail take their aborted-transaction entries with them.
        active.txn_index.truncate_to(active.read_next_offset())
        active.resize_indexes(self.config.segment_index_bytes)
        self._leo = active.read_next_offset()
        # Empty trailing segments after a torn roll: the LEO is the base of the last segment.
        self._leo = max(self._leo, active.base_offset)
        self.log_start_offset = max(log_start_offset, self._segments[0].base_offset)
        if self.log_start_offset > self._leo:
            self.log_start_offset = self._leo
        # Recovered-but-not-fsync'd data stays above the recovery point (a power loss could still
        # lose it), so an unclean start only clamps the checkpointed value.
        self._recovery_point = self._leo if clean else min(max(recovery_point, 0), self._leo)
        self.leader_epoch_cache.truncate_from_end(self._leo)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        rebuild_from = self._check_txn_indexes()
        if not clean and first_unflushed < len(self._segments):
            # The .txnindex entries of markers above the recovery point may have been lost with
            # other unflushed writes (a power loss); replaying from there appends those missing
            # and keeps those present (Kafka rebuilds every recovered segment's txn index).
            base = self._segments[first_unflushed].base_offset
            rebuild_from = base if rebuild_from is None else min(rebuild_from, base)
        self._load_producer_state(rebuild_from)

    def _check_txn_indexes(self) -> int | None:
        """Find the segments whose ``.txnindex`` is corrupt, or missing while the segment holds
        an ABORT marker, and empty them; returns the first such segment's base offset (None:
        all sound), from which ``_load_producer_state`` replays the log to rebuild them.

        Kafka's LogLoader recovers a segment whose index fails its sanity check (LogSegment.recover
        rebuilds the txn index from producer state rebuilt up to the segment); it cannot tell a
        lost ``.txnindex`` from none, which kaflet can (every segment it creates has one). A
        segment without one (written by Kafka, or an older kaflet) has its batch headers read
        once: with no ABORT marker it gets an empty file and is not read again.
        """
        rebuild_from: int | None = None
        for i, seg in enumerate(self._segments):
            next_base = self._bases[i + 1] if i + 1 < len(self._bases) else None
            idx = seg.txn_index
            try:
                exists = idx.sanity_check(seg.base_offset, next_base)
            except CorruptIndexError as e:
                log.warning("%s: %s; rebuilding the transaction index from the log", self.dir, e)
            else:
                if exists:
                    continue
                if not _has_abort_marker(seg):
                    idx.ensure_file()
                    continue
                log.warning("%s: transaction index of segment %d is missing and the segment has aborted "
                            "transactions; rebuilding it from the log", self.dir, seg.base_offset)
            idx.reset()
            if rebuild_from is None:
                rebuild_from = seg.base_offset
        return rebuild_from

    def _assign_epoch_on_recovery(self, h: BatchHeader) -> None:
        if h.partition_leader_epoch >= 0:
            self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset, flush=False)

    def _load_producer_state(self, rebuild_txn_index_from: int | None = None) -> None:
        """Producer state at the LEO: the newest snapshot plus the batches after it (which also
        re-indexes aborted transactions a crash lost after it).

        With ``rebuild_txn_index_from``, a scratch producer state is first replayed from the
        newest snapshot at or below that offset, so the aborted transactions of the (emptied or
        short) ``.txnindex`` files from there on are indexed again with the first offsets and
        LSOs they had: Kafka's recoverSegment, which rebuilds producer state up to the segment in
        a ProducerStateManager of its own.  The log's own state still comes from the newest
        snapshot, so producers expired since the older one stay expired.
        """
        if rebuild_txn_index_from is not None:
            scratch = ProducerStateManager(self.dir)
            snap = scratch.load_latest_snapshot(min(rebuild_txn_index_from, self._leo), delete_newer=False)
            self._replay(scratch, snap if snap is not None else self.log_start_offset)
        ps = self.producer_state
        snap = ps.load_latest_snapshot(self._leo)
        replayed = self._replay(ps, snap if snap is not None else self.log_start_offset)
        ps.delete_snapshots_before(self._segments[0].base_offset)
        # An empty log needs no snapshot (Kafka writes none for a new log either).
        if replayed or (snap is None and self._leo > self.log_start_offset):
            ps.take_snapshot(self._leo)
        self.leader_epoch_cache.flush_if_dirty()

    def _replay(self, ps: ProducerStateManager, start: int) -> int:
        """Apply the batches from ``start`` to the LEO to ``ps``, indexing each aborted
        transaction in its marker's segment (entries already there are kept); how many."""
        ps.map_end_offset = start
        replayed = 0
        if start < self._leo:
            i = max(0, bisect_right(self._bases, start) - 1)
            for seg in self._segments[i:]:
                for pos, h in seg.batches():
                    if h.base_offset + h.last_offset_delta < start:
                        continue
                    if h.producer_id >= 0:
                        if h.is_control:
                            self._complete_txn(seg, ps.update(h, _control_of(seg.read_batch(pos, h))), ps)
                        else:
                            ps.update(h)
                    replayed += 1
        ps.map_end_offset = self._leo
        return replayed

    def _add_segment(self, seg: LogSegment) -> None:
        self._segments.append(seg)
        self._bases.append(seg.base_offset)

    # ------------------------------------------------------------------ properties

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record will get (LEO)."""
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        """Everything below this offset is fsync'd."""
        return self._recovery_point

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def unflushed_messages(self) -> int:
        return self._leo - self._recovery_point

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW, clamped to [log start, LEO]; returns the new HW.

        Only the partition calls this (the leader's ISR rule, a follower's fetch response).
        """
        self._high_watermark = max(self.log_start_offset, min(offset, self._leo))
        self.producer_state.on_high_watermark(self._high_watermark)
        return self._high_watermark

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest transaction not yet decided and replicated (None: none)."""
        first = self.producer_state.first_unstable_offset()
        return None if first is None else max(first, self.log_start_offset)

    @property
    def last_stable_offset(self) -> int:
        """The LSO: read_committed consumers read up to here (the high watermark if no
        transaction is open)."""
        first = self.first_unstable_offset
        return self._high_watermark if first is None else min(first, self._high_watermark)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound), from the .txnindex files of
        the segment holding ``fetch_offset`` on (Kafka's collectAbortedTransactions).

        The search goes on past ``upper_bound``: a transaction's ABORT marker, and so its entry,
        may be segments after its data; it stops at an entry whose LSO reached the bound.
        """
        out: list[AbortedTxn] = []
        for seg in self._segments[self._segment_index_for(fetch_offset):]:
            found, complete = seg.txn_index.collect(fetch_offset, upper_bound)
            out.extend(found)
            if complete:
                break
        return out

    def aborted_txns_for_read(self, fetch_offset: int, max_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch from ``fetch_offset`` needs: ``read``
        returns data of one segment, so up to the next segment's base (or ``max_offset``)."""
        i = self._segment_index_for(fetch_offset)
        upper = min(max_offset, self._bases[i + 1] if i + 1 < len(self._bases) else self._leo)
        return self.collect_aborted_txns(fetch_offset, upper)

    def _complete_txn(self, seg: LogSegment, completed: CompletedTxn | None,
                      ps: ProducerStateManager | None = None) -> None:
        # An aborted transaction gets its .txnindex entry in the segment holding its marker.
        if completed is not None and completed.aborted:
            ps = ps or self.producer_state
            seg.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                                            ps.last_stable_offset(completed)))

    def assign_topic_id(self, topic_id: str) -> None:
        """Give a log created without a topic id its id (written to ``partition.metadata``)."""
        self._write_file(PARTITION_METADATA, format_partition_metadata(topic_id))
        self.topic_id = topic_id

    def update_config(self, config: LogConfig) -> None:
        """Apply changed topic configs (takes effect for following appends/rolls)."""
        self.config = config
        self.active_segment.update_config(config)

    def latest_epoch(self) -> int:
        return self.leader_epoch_cache.latest_epoch

    def epoch_for_offset(self, offset: int) -> int:
        """Leader epoch under which ``offset`` was written (-1 if unknown)."""
        return self.leader_epoch_cache.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """For OffsetForLeaderEpoch: (epoch, end offset) as Kafka's LeaderEpochFileCache."""
        return self.leader_epoch_cache.end_offset_for(epoch, self._leo)

    def maybe_assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        """On becoming leader: record that ``epoch`` starts at ``start_offset`` (usually the LEO)."""
        self.leader_epoch_cache.assign(epoch, start_offset)

    # ------------------------------------------------------------------ append

    def append_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                          leader_epoch: int, now_ms: int | None = None) -> AppendResult:
        """Append a COMMIT or ABORT marker for a producer (the coordinator's WriteTxnMarkers).

        Raises ProducerStateError (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED) and
        writes nothing when the marker is stale.
        """
        if self._closed:
            self._raise_closed()
        now = self._time() if now_ms is None else now_ms
        self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        ctype = CONTROL_COMMIT if commit else CONTROL_ABORT
        record = Record(0, 0, struct.pack(">hh", 0, ctype), struct.pack(">hi", 0, coordinator_epoch))
        offset = self._leo
        buf = build_batch([record], base_offset=offset, producer_id=producer_id, producer_epoch=producer_epoch,
                          base_timestamp=now, is_transactional=True, is_control=True,
                          partition_leader_epoch=leader_epoch)
        try:
            seg = self._maybe_roll(len(buf), now, offset, offset, now)
            if leader_epoch >= 0 and leader_epoch > self.leader_epoch_cache.latest_epoch:
                self.leader_epoch_cache.assign(leader_epoch, offset)
            self._write(seg, offset, now, offset, buf, [parse_batch_header(buf)])
        except OSError as exc:
            raise self._io_failed("append of a transaction marker", exc) from exc
        flush_needed = self._leo - self._recovery_point >= self.config.flush_messages
        return AppendResult(offset, offset, -1, self.log_start_offset, 1, False, flush_needed)

    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int,
                         now_ms: int | None = None) -> AppendResult:
        """Validate a produce record set, assign offsets in place and append it.

        Raises RecordError (CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE,
        UNSUPPORTED_COMPRESSION_TYPE), RecordValidationError (INVALID_RECORD, INVALID_TIMESTAMP,
        with the offending records) or ProducerStateError (OUT_OF_ORDER_SEQUENCE_NUMBER,
        INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE); nothing is written then.

        A CreateTime batch's MaxTimestamp is stored as it came when its header is consistent
        (``has_trusted_timestamps``); otherwise it is recomputed from the records (-1 when no
        record has a timestamp), as Kafka's LogValidator does for every batch.
        """
        if self._closed:
            self._raise_closed()
        now = self._time() if now_ms is None else now_ms
        cfg = self.config
        mv = records if isinstance(records, memoryview) else memoryview(records)
        infos = validate_produce_batches(mv, cfg.max_message_bytes)
        headers = [i.header for i in infos]
        lat = cfg.log_append_time
        idempotent = False
        suspects: list[int] = []  # batches whose records must be read
        for i, h in enumerate(headers):  # one plain loop: this is the hot path
            if h.producer_id >= 0:
                idempotent = True
            # On a LogAppendTime topic MaxTimestamp becomes the append time: only a
            # producer-set LogAppendTime is wrong there.
            if (h.attributes & TIMESTAMP_TYPE_MASK) if lat else not has_trusted_timestamps(h):
                suspects.append(i)
        if idempotent:
            dup = self.producer_state.check_batches(headers)
            if dup is not None:
                return AppendResult(dup.first_offset, dup.last_offset, dup.timestamp if lat else -1,
                                    self.log_start_offset, dup.offset_delta + 1, True)
        check_all = cfg.compact or cfg.timestamp_before_max_ms < LONG_MAX or cfg.timestamp_after_max_ms < LONG_MAX
        # batch index -> the MaxTimestamp its records give (CreateTime batches to rewrite)
        max_timestamps = self._validate_records(mv, infos, now, check_all, suspects) if check_all or suspects else {}

        target = cfg.target_codec
        first = self._leo
        offset = first
        if target < 0 or all(h.compression == target for h in headers):
            buf = bytearray(mv)
            positions = []
            for i, info in enumerate(infos):
                pos = info.position
                set_base_offset(buf, pos, offset)
                set_partition_leader_epoch(buf, pos, leader_epoch)
                if lat:
                    set_log_append_time(buf, pos, now)
                elif max_timestamps and i in max_timestamps:
                    set_max_timestamp(buf, pos, TIMESTAMP_CREATE_TIME, max_timestamps[i])
                positions.append(pos)
                offset += info.header.records_count
        else:
            chunks: list[bytes | bytearray] = []
            positions = []
            pos = 0
            for i, info in enumerate(infos):
                b = bytearray(mv[info.position : info.position + info.size])
                if info.header.compression != target:
                    b = bytearray(recompress_batch(b, target, level=cfg.target_level))
                    if len(b) > cfg.max_message_bytes:
                        raise RecordError(ErrorCode.MESSAGE_TOO_LARGE,
                                          f"recompressed batch of {len(b)} bytes exceeds max.message.bytes")
                set_base_offset(b, 0, offset)
                set_partition_leader_epoch(b, 0, leader_epoch)
                if lat:
                    set_log_append_time(b, 0, now)
                elif i in max_timestamps:
                    set_max_timestamp(b, 0, TIMESTAMP_CREATE_TIME, max_timestamps[i])
                chunks.append(b)
                positions.append(pos)
                pos += len(b)
                offset += info.header.records_count
            buf = bytearray(b"".join(chunks))
        last = offset - 1

        final = [parse_batch_header(buf, p) for p in positions]
        max_ts, shallow = -1, -1
        for h in final:
            ts = h.max_timestamp
            if ts > max_ts:
                max_ts, shallow = ts, h.base_offset + h.last_offset_delta
        if lat:
            shallow = last

        try:
            seg = self._maybe_roll(len(buf), max_ts, last, first, now)
            if leader_epoch >= 0 and leader_epoch > self.leader_epoch_cache.latest_epoch:
                # Rare (once per leader epoch); Kafka writes this checkpoint synchronously too.
                self.leader_epoch_cache.assign(leader_epoch, first)
            self._write(seg, last, max_ts, shallow, buf, final)
        except OSError as exc:
            raise self._io_failed("append", exc) from exc
        flush_needed = self._leo - self._recovery_point >= cfg.flush_messages
        return AppendResult(first, last, now if lat else -1, self.log_start_offset, last - first + 1, False,
                            flush_needed)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> FollowerAppendResult | None:
        """Append record batches fetched from the leader, keeping the leader's offsets (Kafka's
        ``appendAsFollower``); None when ``records`` holds no whole batch.

        A fetch response may end with part of a batch; only whole batches are appended. Each
        batch's CRC is checked and its offsets must move forward; keys, timestamps, sizes and
        sequences were the leader's to check and are not validated again. The partition leader
        epochs stamped by the leader go into the leader-epoch cache, and producer state follows
        the batches. Offsets may leave gaps (a compacted leader), never go back: a first offset
        below the log end offset raises UnexpectedAppendOffsetError. Corrupt or malformed
        batches raise RecordError (CORRUPT_MESSAGE) and out-of-order offsets LogError; nothing
        is written then.
        """
        if self._closed:
            self._raise_closed()
        mv = records if isinstance(records, memoryview) else memoryview(records)
        headers: list[BatchHeader] = []
        n = len(mv)
        pos = 0
        prev_last = -1
        while n - pos >= BATCH_HEADER_SIZE:
            h = parse_batch_header(mv, pos)
            if h.length < MIN_BATCH_LENGTH:
                raise RecordError(ErrorCode.CORRUPT_MESSAGE,
                                  f"batch length {h.length} at position {pos} is below the minimum {MIN_BATCH_LENGTH}")
            if pos + h.size > n:
                break  # the partial batch a size limit cut off
            if h.magic != MAGIC_V2:
                raise RecordError(ErrorCode.CORRUPT_MESSAGE, f"batch with magic {h.magic} at offset {h.base_offset}: "
                                  "kaflet stores only magic 2 batches")
            if not check_crc(mv, pos, h):
                raise RecordError(ErrorCode.CORRUPT_MESSAGE,
                                  f"Record batch at offset {h.base_offset} is corrupt (stored crc = {h.crc}) in "
                                  f"{self.topic}-{self.partition}")
            if h.last_offset_delta < 0 or h.base_offset <= prev_last:
                raise LogError(ErrorCode.UNKNOWN_SERVER_ERROR,
                               f"Out of order offsets found in append to {self.topic}-{self.partition}: batch "
                               f"{h.base_offset}..{h.last_offset} after offset {prev_last}")
            prev_last = h.last_offset
            headers.append(h)
            pos += h.size
        if not headers:
            return None
        first = headers[0].base_offset
        if first < self._leo:
            raise UnexpectedAppendOffsetError(
                f"Unexpected offset in append to {self.topic}-{self.partition}. First offset {first} is less than "
                f"the next offset {self._leo}. Last offset in append: {prev_last}. Log start offset = "
                f"{self.log_start_offset}", first, prev_last)
        try:
            if prev_last - first > INT32_MAX or pos > self.config.segment_bytes:
                # Wider (offset gaps of a compacted leader) or larger than one segment can hold:
                # one batch at a time, so each may roll the segment.
                start = 0
                for h in headers:
                    self._append_fetched(mv[start : start + h.size], [h])
                    start += h.size
            else:
                self._append_fetched(mv[:pos], headers)
        except OSError as exc:
            raise self._io_failed("append of fetched records", exc) from exc
        return FollowerAppendResult(first, prev_last, pos, headers[-1].partition_leader_epoch,
                                    self._leo - self._recovery_point >= self.config.flush_messages)

    def _append_fetched(self, data: memoryview, headers: list[BatchHeader]) -> None:
        max_ts, shallow = -1, -1
        for h in headers:
            if h.max_timestamp > max_ts:
                max_ts, shallow = h.max_timestamp, h.last_offset
        first, last = headers[0].base_offset, headers[-1].last_offset
        seg = self._maybe_roll(len(data), max_ts, last, first, self._time())
        cache = self.leader_epoch_cache
        latest = cache.latest_epoch
        for h in headers:
            # The epoch cache only grows at a new epoch (rare): its checkpoint is written then.
            if h.partition_leader_epoch != latest and h.partition_leader_epoch >= 0:
                cache.assign(h.partition_leader_epoch, h.base_offset)
                latest = cache.latest_epoch
        self._write(seg, last, max_ts, shallow, data, headers)

    def _write(self, seg: LogSegment, last: int, max_ts: int, shallow: int, data: bytes | bytearray | memoryview,
               headers: list[BatchHeader]) -> None:
        """Append batches whose offsets are final to the active segment; producer state follows."""
        seg.append(last, max_ts, shallow, data)
        self._leo = last + 1
        ps = self.producer_state
        pos = 0
        for h in headers:
            if h.producer_id >= 0:
                if h.is_control:
                    self._complete_txn(seg, ps.update(h, _control_of(data[pos : pos + h.size])))
                else:
                    ps.update(h)
            pos += h.size
        ps.map_end_offset = self._leo

    def _validate_records(self, mv: memoryview, infos: list[BatchInfo], now: int, check_all: bool,
                          suspects: list[int]) -> dict[int, int]:
        """Kafka's record checks, on every batch (``check_all``) or only on ``suspects``.

        Every record of a batch is checked, so the error lists each offending one (KIP-467):
        a compacted topic's record without a key (INVALID_RECORD); on a CreateTime topic a
        timestamp more than message.timestamp.before.max.ms behind now or after.max.ms ahead of
        it (each falling back to message.timestamp.difference.max.ms, KIP-937), records without
        a timestamp (-1) being exempt (INVALID_TIMESTAMP); a producer-set LogAppendTime on a
        LogAppendTime topic or without any timestamp (INVALID_TIMESTAMP).  Raises
        RecordValidationError for the first batch with errors.  On a CreateTime topic, returns
        the largest record timestamp (-1 if none) of each suspect batch, by batch index.
        """
        cfg = self.config
        compact = cfg.compact
        before, after = cfg.timestamp_before_max_ms, cfg.timestamp_after_max_ms
        lat_topic = cfg.log_append_time
        tp = f"{self.topic}-{self.partition}"
        out: dict[int, int] = {}
        for i, info in enumerate(infos):
            if not check_all and i not in suspects:
                continue
            h = info.header
            lat_batch = h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
            errors: list[tuple[int, str | None]] = []
            timestamp_error = False
            batch_max = NO_TIMESTAMP
            records = scan_records(mv[info.position : info.position + info.size])
            for index, (offset_delta, ts_delta, key_len, value_len) in enumerate(records):
                # A LogAppendTime batch's records all carry its MaxTimestamp.
                ts = h.max_timestamp if lat_batch else h.base_timestamp + ts_delta
                if ts > batch_max:
                    batch_max = ts
                if compact and key_len < 0:
                    errors.append((index, f"Compacted topic cannot accept message without key in topic partition {tp}"))
                elif not lat_topic and ts != NO_TIMESTAMP:
                    if now - ts > before or ts - now > after:
                        timestamp_error = True
                        # The bounds as Kafka prints them: Java longs, so now + Long.MAX_VALUE wraps.
                        errors.append((index, f"Timestamp {ts} of message with offset {h.base_offset + offset_delta} "
                                              f"is out of range. The timestamp should be within "
                                              f"[{_java_long(now - before)}, {_java_long(now + after)}]"))
                elif lat_batch:
                    timestamp_error = True
                    errors.append((index, f"Invalid timestamp type in message DefaultRecord(offset="
                                          f"{h.base_offset + offset_delta}, timestamp={ts}, key={max(key_len, 0)} "
                                          f"bytes, value={max(value_len, 0)} bytes). Producer should not set "
                                          "timestamp type to LogAppendTime."))
            if errors:
                raise _record_validation_error(errors, timestamp_error)
            if not lat_topic and not has_trusted_timestamps(h):
                out[i] = batch_max
        return out

    def _maybe_roll(self, size: int, max_ts: int, max_offset: int, first_offset: int, now: int) -> LogSegment:
        seg = self._segments[-1]
        if seg.should_roll(self.config, size, max_ts, max_offset, now):
            return self.roll(first_offset)
        return seg

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, LEO)."""
        new_base = max(expected_next_offset or 0, self._leo)
        active = self._segments[-1]
        if active.base_offset == new_base and active.size == 0:
            return active
        if new_base <= active.base_offset:
            raise ValueError(f"cannot roll to {new_base}: active segment starts at {active.base_offset}")
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            _unlink(os.path.join(self.dir, segment_file_name(new_base, suffix)))  # stale leftovers
        # The new segment's files first: when they cannot be made (no descriptor or space left)
        # the active segment stays active, its indexes untrimmed.
        seg = self._new_segment(new_base)
        active.on_become_inactive()
        self._add_segment(seg)
        self.producer_state.map_end_offset = self._leo
        self.producer_state.take_snapshot(new_base)
        self._schedule_flush(new_base)
        return seg

    def _schedule_flush(self, offset: int) -> None:
        # Kafka flushes a rolled segment asynchronously; do the same when a loop is running.
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(self._flush_quietly(offset))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _flush_quietly(self, offset: int) -> None:
        try:
            await self.flush_until(offset)
        except OSError:
            pass  # the failure channel logged it; the next flush retries (or the dir is offline)
        except Exception:  # logged; the next flush retries
            log.exception("%s: background flush failed", self.dir)

    # ------------------------------------------------------------------ read

    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect_right(self._bases, offset) - 1)

    def read(self, fetch_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = True) -> ReadResult:
        """File regions from ``fetch_offset`` (at most ``max_bytes``, below ``max_offset``).

        Raises OffsetOutOfRangeError when fetch_offset < log start or > LEO.  Usually one region
        (Kafka reads one segment per partition per fetch); empty at the LEO / ``max_offset``.
        """
        if self.offline:
            self._raise_closed()
        leo = self._leo
        if fetch_offset < self.log_start_offset or fetch_offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} is out of range [{self.log_start_offset}, {leo}] for {self.dir}"
            )
        hw, lso = self._high_watermark, self.log_start_offset
        if fetch_offset == leo or (max_offset is not None and fetch_offset >= max_offset):
            return ReadResult([], hw, lso, leo)
        i = self._segment_index_for(fetch_offset)
        try:
            while i < len(self._segments):
                seg = self._segments[i]
                max_position = None
                if max_offset is not None and max_offset < leo:
                    nxt = self._bases[i + 1] if i + 1 < len(self._bases) else leo
                    if max_offset <= seg.base_offset:
                        break
                    if max_offset < nxt:
                        found = seg.translate_offset(max_offset)
                        max_position = found[0] if found is not None else seg.size
                region = seg.read(fetch_offset, max_bytes, max_position, min_one_message)
                if region is not None:
                    return ReadResult([region] if region.size else [], hw, lso, leo)
                i += 1
        except OSError as exc:
            raise self._io_failed("read", exc) from exc
        return ReadResult([], hw, lso, leo)

    def read_batches(self, fetch_offset: int, max_bytes: int = 1 << 30) -> bytes:
        """Convenience for tools and tests: the bytes ``read`` would send."""
        return b"".join(r.read_bytes() for r in self.read(fetch_offset, max_bytes).regions)

    # ------------------------------------------------------------------ list offsets

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """ListOffsets: -2 earliest, -1 latest (LEO), -3 max timestamp, else the first record with
        timestamp >= ``timestamp`` (None if there is none)."""
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampOffset(self.log_start_offset, -1)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(self._leo, -1)
        if timestamp == MAX_TIMESTAMP:
            return self._max_timestamp_offset()
        if timestamp < 0:
            raise ValueError(f"unsupported special timestamp {timestamp}")
        for seg in self._segments:
            if seg.max_timestamp_so_far < timestamp:
                continue
            _, ts_off = seg.time_index_lookup(timestamp)
            start = max(ts_off, self.log_start_offset, seg.base_offset)
            found = seg.translate_offset(start)
            if found is None:
                continue
            for pos, h in seg.batches(found[0]):
                if h.max_timestamp < timestamp or h.base_offset + h.last_offset_delta < self.log_start_offset:
                    continue
                hit = self._record_at_or_after(seg, pos, h, timestamp)
                if hit is not None:
                    return hit
        return None

    def _record_at_or_after(self, seg: LogSegment, pos: int, h: BatchHeader, timestamp: int) -> TimestampOffset | None:
        if h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
            off = max(h.base_offset, self.log_start_offset)
            return TimestampOffset(off, h.max_timestamp)
        for r in decode_records(seg.read_batch(pos, h)):
            ts = h.base_timestamp + r.timestamp_delta
            off = h.base_offset + r.offset_delta
            if ts >= timestamp and off >= self.log_start_offset:
                return TimestampOffset(off, ts)
        return None

    def _max_timestamp_offset(self) -> TimestampOffset:
        best: LogSegment | None = None
        for seg in self._segments:
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

    def _unflushed_segments(self) -> list[LogSegment]:
        if self._recovery_point >= self._leo:
            return []
        return self._segments[self._segment_index_for(self._recovery_point):]

    def _dirs_to_sync(self, segments: list[LogSegment]) -> list[str]:
        """Directories whose entries a flush of ``segments`` must make durable (Kafka's
        LocalLog.flush fsyncs the log's directory when it flushes a new segment; the first
        flush of a new log also its parent, which holds the log's directory)."""
        if not segments:
            return []
        dirs = []
        if not self._parent_synced:
            dirs.append(os.path.dirname(self.dir.rstrip("/")) or ".")
        if not self._parent_synced or any(s.base_offset >= self._recovery_point for s in segments):
            dirs.append(self.dir)
        return dirs

    @staticmethod
    def _fsync_segments(segments: list[LogSegment], dirs: list[str]) -> None:
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

    async def _flush_once(self) -> None:
        try:
            end = self._leo
            try:
                if self._writer is not None:
                    # partition.metadata and the epoch entries of every offset below ``end`` are
                    # durable before the recovery point moves past them.
                    await self._writer.wait(self)
                segs = self._unflushed_segments()
                dirs = self._dirs_to_sync(segs)
                await asyncio.get_running_loop().run_in_executor(self._executor, self._fsync_segments, segs, dirs)
            except OSError as exc:
                # After a failed fsync the kernel may have dropped the dirty pages: nothing
                # written since the recovery point can be trusted to be on disk.
                raise self._io_failed("flush", exc) from exc
            self._parent_synced = self._parent_synced or bool(segs)
            self._recovery_point = min(max(self._recovery_point, end), self._leo)
            self._last_flush_ms = self._time()
        finally:
            self._flush_task = None

    async def flush_until(self, offset: int | None = None) -> None:
        """Wait until every offset below ``offset`` (default: the LEO) is fsync'd (group commit)."""
        target = self._leo if offset is None else min(offset, self._leo)
        while self._recovery_point < target:
            if self._closed:
                if self.offline:
                    self._raise_closed()  # what is not flushed now never will be
                break
            task = self._flush_task
            if task is None:
                task = self._flush_task = asyncio.get_running_loop().create_task(self._flush_once())
            await asyncio.shield(task)
            target = min(target, self._leo)  # a truncation may have lowered the LEO

    async def flush(self) -> None:
        """fsync everything appended so far."""
        await self.flush_until(None)

    def flush_sync(self, sync_parent: bool = True) -> None:
        """Blocking flush of everything (startup, shutdown, tests). ``sync_parent=False``: the
        caller fsyncs the log dir holding this log's directory itself (once for all logs)."""
        if self._writer is not None:
            self._writer.write_now(self)
        end = self._leo
        segs = self._unflushed_segments()
        dirs = self._dirs_to_sync(segs)
        if dirs and not sync_parent and not self._parent_synced:
            dirs = dirs[1:]
        try:
            self._fsync_segments(segs, dirs)
        except OSError as exc:
            raise self._io_failed("flush", exc) from exc
        self._parent_synced = self._parent_synced or bool(segs) or not sync_parent
        self._recovery_point = max(self._recovery_point, end)
        self._last_flush_ms = self._time()

    def flush_due(self, now_ms: int | None = None) -> bool:
        """True if unflushed data is older than flush.ms."""
        now = self._time() if now_ms is None else now_ms
        return self._leo > self._recovery_point and now - self._last_flush_ms >= self.config.flush_ms

    def remove_expired_producers(self, expiration_ms: int, now_ms: int | None = None) -> int:
        """producer.id.expiration.ms: drop idle producers' state (``ProducerStateManager``)."""
        if self._closed:
            return 0
        return self.producer_state.remove_expired_producers(self._time() if now_ms is None else now_ms,
                                                            expiration_ms)

    # ------------------------------------------------------------------ retention / log start offset

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """Move the log start offset forward to ``new_start`` (DeleteRecords); True if it moved.

        Raises OffsetOutOfRangeError past the high watermark, as Kafka does; a lower value
        than the current start is ignored.  Whole segments below the new start are deleted
        by ``delete_old_segments`` (which the broker runs right after).
        """
        if new_start > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"Cannot increment the log start offset to {new_start} of partition {self.topic}-{self.partition} "
                f"since it is larger than the high watermark {self._high_watermark}"
            )
        return self._advance_log_start_offset(new_start)

    def _advance_log_start_offset(self, new_start: int) -> bool:
        if new_start <= self.log_start_offset:
            return False
        self.log_start_offset = new_start
        # The epoch file is not fsync'd here: start-up trims it to the log start offset anyway.
        self.leader_epoch_cache.truncate_from_start(new_start, flush=False)
        # Nothing below the log start offset is ever recovered, so it counts as flushed.
        self._recovery_point = max(self._recovery_point, min(new_start, self._leo))
        return True

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Kafka's retention pass; returns the number of segments deleted.

        With ``delete`` in cleanup.policy: segments whose largest timestamp is older than
        retention.ms, then the oldest segments while the log stays >= retention.bytes without
        them.  Whatever the policy: segments wholly below the log start offset.  A segment is
        only deleted when everything in it is below the high watermark; when every segment
        qualifies, the active one is rolled first so the log keeps an (empty) active segment.
        """
        now = self._time() if now_ms is None else now_ms
        deleted = 0
        if self.config.delete:
            deleted += self._delete_retention_ms_breached(now)
            deleted += self._delete_retention_size_breached(now)
        deleted += self.delete_log_start_offset_breached(now)
        return deleted

    def _delete_retention_ms_breached(self, now: int) -> int:
        retention_ms = self.config.retention_ms
        if retention_ms < 0:
            return 0
        return self._delete_segments(
            self._deletable_segments(lambda seg, _nxt: now - seg.largest_timestamp > retention_ms), now,
            f"retention time {retention_ms}ms breach",
        )

    def _delete_retention_size_breached(self, now: int) -> int:
        retention_bytes = self.config.retention_bytes
        size = self.size_in_bytes
        if retention_bytes < 0 or size < retention_bytes:
            return 0
        excess = size - retention_bytes

        def over_size(seg: LogSegment, _nxt: LogSegment | None) -> bool:
            nonlocal excess
            if excess - seg.size >= 0:
                excess -= seg.size
                return True
            return False

        return self._delete_segments(self._deletable_segments(over_size), now,
                                     f"retention size in bytes {retention_bytes} breach")

    def delete_log_start_offset_breached(self, now_ms: int | None = None) -> int:
        """Delete the segments that lie wholly below the log start offset."""
        now = self._time() if now_ms is None else now_ms
        start = self.log_start_offset
        return self._delete_segments(
            self._deletable_segments(lambda _seg, nxt: nxt is not None and nxt.base_offset <= start), now,
            f"log start offset {start} breach",
        )

    def _deletable_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool]) -> list[LogSegment]:
        # Oldest first, stopping at the first segment that must stay.
        out: list[LogSegment] = []
        segs = self._segments
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else self._leo
            # Never past the HW (the log start offset must not exceed it), and an empty
            # active segment is never deleted (it would only be created again).
            if self._high_watermark < upper or not predicate(seg, nxt) or (nxt is None and seg.size == 0):
                break
            out.append(seg)
        return out

    def _delete_segments(self, segs: list[LogSegment], now: int, reason: str) -> int:
        if not segs:
            return 0
        if len(segs) == len(self._segments):
            self.roll()  # a log always keeps one segment: start an empty one at the LEO
        n = len(segs)
        del self._segments[:n]
        del self._bases[:n]
        paths: list[str] = []
        for seg in segs:
            paths.extend(seg.rename_to_deleted())
        self._pending_file_deletes.append((now + self.config.file_delete_delay_ms, paths))
        first = self._segments[0].base_offset
        self._advance_log_start_offset(first)
        self.producer_state.delete_snapshots_before(first)
        log.info("%s: deleting segments %s due to %s; log start offset is now %d", self.dir,
                 [s.base_offset for s in segs], reason, self.log_start_offset)
        return n

    def take_due_file_deletes(self, now_ms: int | None = None, everything: bool = False) -> list[str]:
        """Paths of ``.deleted`` files whose file.delete.delay.ms has passed (now forgotten).

        The caller unlinks them (``unlink_files``), typically in an executor.
        """
        now = self._time() if now_ms is None else now_ms
        due = [p for t, paths in self._pending_file_deletes if everything or t <= now for p in paths]
        self._pending_file_deletes = [(t, ps) for t, ps in self._pending_file_deletes
                                      if not (everything or t <= now)]
        return due

    @property
    def next_file_delete_ms(self) -> int | None:
        """When the next pending ``.deleted`` file is due, if any."""
        return min((t for t, _ in self._pending_file_deletes), default=None)

    # ------------------------------------------------------------------ log cleaner support
    # The cleaner runs on its own thread; these two methods are what it calls on the thread that
    # owns the Log (the event loop), so the segment list is only ever read and changed there.

    def cleaner_view(self) -> CleanerView | None:
        """A snapshot of what the log cleaner may work on (call on the owning thread).

        Only inactive segments are listed, each with its own reference to the open file so the
        cleaner can keep reading it even if retention or truncation drops the segment meanwhile.
        None if the log is closed.
        """
        if self._closed:
            return None
        segs: list[CleanableSegment] = []
        for i, seg in enumerate(self._segments[:-1]):
            handle = seg.shared_handle()
            if handle is None:
                break
            segs.append(CleanableSegment(seg, seg.base_offset, self._bases[i + 1], seg.size,
                                         seg.largest_timestamp, handle))
        producers = {pid: e.last_offset for pid, e in self.producer_state.producers.items()}
        return CleanerView(segs, self.active_segment.base_offset, self._high_watermark, self.log_start_offset,
                           self._leo, self.config, producers, self.last_stable_offset,
                           self.collect_aborted_txns(self.log_start_offset, self._leo))

    def replace_with_cleaned(self, old: list[LogSegment], base: int, cleaned: dict[str, str]) -> bool:
        """Swap a run of inactive segments for the cleaned segment written at ``base``.

        ``cleaned`` maps each final suffix (``.log``, ``.index``, ``.timeindex``, and
        ``.txnindex`` when the old segments had aborted transactions) to its ``.cleaned`` file.  Runs on the owning thread, so readers, appends and retention never
        see a half-swapped list.  The file steps follow Kafka's crash-safe order: every
        ``.cleaned`` becomes ``.swap`` (the ``.log`` last), the old segments are renamed
        ``.deleted`` oldest first, then each ``.swap`` gets its final name; start-up finishes or
        undoes whatever a crash interrupted.  Returns False (nothing changed) when the log was
        closed or ``old`` is no longer a run of its inactive segments.
        """
        if self._closed or not old:
            return False
        try:
            i = next(k for k, seg in enumerate(self._segments) if seg is old[0])
        except StopIteration:
            return False
        n = len(old)
        if i + n >= len(self._segments) or any(a is not b for a, b in zip(self._segments[i : i + n], old, strict=True)):
            return False
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
        seg = self._new_segment(base, new=False)
        seg.txn_index.ensure_file()  # the cleaner's swap brings it; a no-op then
        seg.on_become_inactive()  # trims an index the cleaner left empty (it was re-created full size)
        self._segments[i : i + n] = [seg]
        self._bases[i : i + n] = [base]
        self._pending_file_deletes.append((self._time() + self.config.file_delete_delay_ms, paths))
        return True

    # ------------------------------------------------------------------ truncation / lifecycle

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and above ``offset`` (at batch granularity, as Kafka)."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._leo:
            return
        if self._closed:
            self._raise_closed()
        try:
            self._truncate_to(offset)
        except OSError as exc:
            raise self._io_failed("truncation", exc) from exc

    def _truncate_to(self, offset: int) -> None:
        if offset < self.log_start_offset or offset <= self._segments[0].base_offset:
            self._truncate_fully_and_start_at(offset if offset >= self.log_start_offset else self.log_start_offset)
            return
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
            self._segments.pop().delete()
            self._bases.pop()
        active = self._segments[-1]
        active.truncate_to(offset)
        active.resize_indexes(self.config.segment_index_bytes)
        self._leo = active.read_next_offset()
        self._after_truncation()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete all segments and start empty at ``offset``."""
        if self._closed:
            self._raise_closed()
        try:
            self._truncate_fully_and_start_at(offset)
        except OSError as exc:
            raise self._io_failed("truncation", exc) from exc

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        for seg in self._segments:
            seg.delete()
        self._segments.clear()
        self._bases.clear()
        for off in self.producer_state.snapshot_offsets():
            _unlink(self.producer_state.snapshot_path(off))
        self._add_segment(self._new_segment(offset))
        self._leo = offset
        self.log_start_offset = offset
        self.leader_epoch_cache.clear()
        self._after_truncation()

    def _after_truncation(self) -> None:
        self._recovery_point = min(self._recovery_point, self._leo)
        self._high_watermark = max(self.log_start_offset, min(self._high_watermark, self._leo))
        self.leader_epoch_cache.truncate_from_end(self._leo)
        ps = self.producer_state
        ps.delete_snapshots_after(self._leo)
        self._load_producer_state()
        ps.on_high_watermark(self._high_watermark)

    # ------------------------------------------------------------------ failures

    def _raise_closed(self) -> None:
        if self.offline:
            raise KafkaStorageError(f"the log directory of {self.topic}-{self.partition} is offline")
        raise ValueError(f"log {self.dir} is closed")

    def _io_failed(self, what: str, exc: OSError) -> OSError:
        """Report an I/O error of this log to the failure channel (which takes the log directory
        offline unless the process only ran out of a resource); returns what to raise."""
        if isinstance(exc, KafkaStorageError):
            return exc
        if self._failure_channel is not None:
            self._failure_channel.maybe_add_offline_log_dir(os.path.dirname(self.dir), f"{what} of {self.topic}-"
                                                            f"{self.partition}", exc)
        return exc

    def go_offline(self) -> None:
        """The log directory failed: stop serving and release the files, writing nothing more
        (Kafka closes an offline directory's logs without a flush or a snapshot)."""
        if self.offline:
            return
        self.offline = True
        self._closed = True
        if self._writer is not None:
            self._writer.discard(self)
        for seg in self._segments:
            try:
                seg.close_handlers()
            except OSError:
                pass  # the descriptors are released anyway

    def close(self, sync: bool = False, *, deleting: bool = False) -> None:
        """Snapshot producer state at the LEO, trim indexes, release files.

        ``sync`` fsyncs the snapshot and indexes (clean shutdown; call ``flush_sync`` first).
        ``deleting``: the log is about to be deleted, so its files are only released (Kafka's
        asyncDelete takes no snapshot either), and its metadata writes not yet started are
        dropped.
        """
        if self._closed:
            return
        self._closed = True
        if deleting:
            if self._writer is not None:
                self._writer.discard(self)
            for seg in self._segments:
                seg.close_handlers()
            return
        ps = self.producer_state
        ps.map_end_offset = self._leo
        try:
            # As Kafka's takeSnapshot: only when the map moved past the newest snapshot (or the
            # log start offset, without one), so an idle or empty log costs no write.
            offsets = ps.snapshot_offsets()
            if self._leo > (offsets[-1] if offsets else self.log_start_offset):
                ps.take_snapshot(self._leo, fsync=sync)
            self.leader_epoch_cache.flush_if_dirty()
        finally:
            for seg in self._segments:
                seg.close(sync=sync)

    @property
    def closed(self) -> bool:
        return self._closed

    def rename_dir(self, new_dir: str) -> None:
        """Move the closed log's directory (e.g. to ``...-delete``)."""
        os.rename(self.dir, new_dir)
        self.dir = new_dir


def _record_validation_error(errors: list[tuple[int, str | None]], timestamp_error: bool) -> RecordValidationError:
    # Kafka's choice of partition error and its summary message (LogValidator.processRecordErrors).
    if timestamp_error:
        return RecordValidationError(ErrorCode.INVALID_TIMESTAMP,
                                     "One or more records have been rejected due to invalid timestamp", errors)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return RecordValidationError(
        ErrorCode.INVALID_RECORD,
        f"One or more records have been rejected due to {len(errors)} record errors in total, and only "
        f"showing the first three errors at most: [{shown}]",
        errors,
    )


def _control_of(batch: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of an end-transaction marker batch; None if it is none."""
    try:
        rec = parse_records(memoryview(batch)[BATCH_HEADER_SIZE:], 1)[0]
    except (RecordError, ValueError, IndexError):
        return None
    if rec.key is None or len(rec.key) < 4 or rec.value is None or len(rec.value) < 6:
        return None
    ctype = struct.unpack_from(">h", rec.key, 2)[0]
    if ctype not in (CONTROL_ABORT, CONTROL_COMMIT):
        return None
    return ctype, struct.unpack_from(">i", rec.value, 2)[0]


def _has_abort_marker(seg: LogSegment) -> bool:
    """Whether the segment holds a transaction's ABORT marker (reads its batch headers and
    its control batches)."""
    for pos, h in seg.batches():
        if h.is_control and h.producer_id >= 0:
            control = _control_of(seg.read_batch(pos, h))
            if control is not None and control[0] == CONTROL_ABORT:
                return True
    return False


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


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
