"""``Log``: the log of one partition, a directory ``<topic>-<partition>`` of segments (Kafka's
UnifiedLog), and the one class the rest of kaflet uses for it.

It keeps what spans the segments (log start offset, high watermark, producer state, leader
epochs, topic id) and puts the parts together: ``log_loader.LogLoader`` loads and recovers the
directory, ``log_validator`` checks and stamps produced batches, ``local_log.LocalLog`` holds the
segments (roll, read, fsync, truncation, swaps) and ``retention`` says which segments may go.
Every I/O error of those parts comes back here and is reported once (``_io_failed``), so a
failing disk takes its log dir offline whatever step found it.

Why a little over 800 lines: it keeps every public method and attribute the rest of kaflet and
the tests use (about fifty, most with the docstring that is their contract); the work behind
them is in the modules above.

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
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import NamedTuple

from kaflet.log import retention
from kaflet.log.append_origin import AppendOrigin
from kaflet.log.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    format_partition_metadata,
    read_partition_metadata,
    write_atomic,
)
from kaflet.log.config import LONG_MAX, LogConfig
from kaflet.log.dir_failure import LogDirFailureChannel
from kaflet.log.errors import KafkaStorageError, OffsetOutOfRangeError, UnexpectedAppendOffsetError
from kaflet.log.leader_epoch import LeaderEpochCache
from kaflet.log.local_log import (
    LocalLog,
    TimestampOffset,
    parse_marked_dir,
    parse_topic_partition,
    unlink_quietly,
)
from kaflet.log.log_loader import LogLoader, rebuild_producer_state
from kaflet.log.log_validator import validate_and_assign, validate_fetched
from kaflet.log.metadata_writer import MetadataWriter
from kaflet.log.pending_work import PendingWork
from kaflet.log.producer_state import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    BatchMetadata,
    ProducerStateManager,
    control_marker,
    end_txn_marker_batch,
    index_aborted_txn,
)
from kaflet.log.retention import unlink_files as unlink_files  # re-exported: tests import it from here
from kaflet.log.segment import FileRegion, LogSegment, SharedFile
from kaflet.log.segment_files import SegmentFileCache
from kaflet.log.transaction_index import AbortedTxn
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.records import (
    COMPRESSION_NONE,
    INT32_MAX,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    BatchHeader,
    Record,
    RecordError,
    build_batch,
    parse_batch_header,
)

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


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


def _now_ms() -> int:
    return int(time.time() * 1000)


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
        segment_files: SegmentFileCache | None = None,
        pending_work: PendingWork[Log] | None = None,
        now_ms: Callable[[], int] = _now_ms,
        found: bool = False,
    ) -> None:
        """``found``: ``directory`` is an existing directory start-up found (not created here)."""
        # Where this log registers for the log manager's periodic flush and file deletion.
        self._pending_work = pending_work
        #: Where an I/O error of this log takes its log directory offline (None: nowhere).
        self._failure_channel = failure_channel
        #: Set when the log directory went offline: every use answers KafkaStorageError.
        self.offline = False
        base = os.path.basename(directory.rstrip("/"))
        name = parse_topic_partition(base) or (marked[:2] if (marked := parse_marked_dir(base)) else None)
        self.topic, self.partition = name if name else (base, 0)
        #: Counts truncations, so a reader that let go of the loop sees that what it read from
        #: the log may no longer be in it (the alter-log-dirs copy).
        self.truncations = 0
        # For error messages, made once rather than on each append.
        self._tp = f"{self.topic}-{self.partition}"
        self._executor = executor
        self._writer = metadata_writer
        self._time = now_ms
        # Also the LocalLog's (``update_config`` changes both): a plain attribute, as the produce
        # and fetch paths read it on every request.
        self.config = config
        self._local = LocalLog(directory, config, now_ms, segment_files, found=found)
        self._flush_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        # Segments renamed ``.deleted`` by retention, DeleteRecords and cleaner swaps.
        self._pending_file_deletes = retention.PendingFileDeletes()
        self._closed = False
        self.leader_epoch_cache = LeaderEpochCache(
            os.path.join(directory, LEADER_EPOCH_CHECKPOINT),
            None if metadata_writer is None else
            lambda data, start: self._write_file(LEADER_EPOCH_CHECKPOINT, data, start=start),
            None if metadata_writer is None else lambda: metadata_writer.withdraw(self, LEADER_EPOCH_CHECKPOINT))
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
        loaded = LogLoader(self._local, self.leader_epoch_cache, self.producer_state).load(
            recovery_point, log_start_offset, had_clean_shutdown)
        self.log_start_offset = loaded.log_start_offset
        # As in Kafka the log only keeps the high watermark: it starts at the checkpointed value
        # (or the log start offset) and the partition (replication/partition.py) moves it.
        self._high_watermark = max(self.log_start_offset, min(high_watermark or 0, loaded.log_end_offset))
        self.producer_state.on_high_watermark(self._high_watermark)
        self._last_flush_ms = self._time()
        self._note_unflushed()  # data recovered but not fsync'd after an unclean shutdown

    def _write_file(self, name: str, data: bytes, *, start: bool = True) -> None:
        """Replace one of the log's small files atomically; durable before the log's data
        (``start``: see ``MetadataWriter.write``)."""
        if self._writer is not None:
            self._writer.write(self, self.dir, name, data, start=start)
        else:
            write_atomic(os.path.join(self.dir, name), data)

    # ------------------------------------------------------------------ properties

    @property
    def dir(self) -> str:
        """The partition directory (``rename_dir`` moves it)."""
        return self._local.dir

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record will get (LEO)."""
        return self._local.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        """Everything below this offset is fsync'd."""
        return self._local.recovery_point

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._local.segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._local.active_segment

    @property
    def size_in_bytes(self) -> int:
        return self._local.size_in_bytes

    @property
    def unflushed_messages(self) -> int:
        return self._local.log_end_offset - self._local.recovery_point

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW, clamped to [log start, LEO]; returns the new HW.

        Only the partition calls this (the leader's ISR rule, a follower's fetch response).
        """
        self._high_watermark = max(self.log_start_offset, min(offset, self._local.log_end_offset))
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
        """Aborted transactions overlapping [fetch_offset, upper_bound) (``LocalLog``'s)."""
        return self._local.collect_aborted_txns(fetch_offset, upper_bound)

    def aborted_txns_for_read(self, fetch_offset: int, max_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch from ``fetch_offset`` needs: ``read``
        returns data of one segment, so up to the next segment's base (or ``max_offset``)."""
        local = self._local
        upper = min(max_offset, local.end_of_segment(local.segment_index_for(fetch_offset)))
        return local.collect_aborted_txns(fetch_offset, upper)

    def assign_topic_id(self, topic_id: str) -> None:
        """Give a log created without a topic id its id (written to ``partition.metadata``)."""
        self._write_file(PARTITION_METADATA, format_partition_metadata(topic_id))
        self.topic_id = topic_id

    def update_config(self, config: LogConfig) -> None:
        """Apply changed topic configs (takes effect for following appends/rolls)."""
        self.config = config
        self._local.update_config(config)
        self._note_unflushed()

    def _note_unflushed(self) -> None:
        """Register for the periodic flush when flush.ms is finite and data awaits its fsync."""
        if self._pending_work is not None and self.config.flush_ms < LONG_MAX and self.unflushed_messages > 0:
            self._pending_work.timed_flush.add(self)

    def latest_epoch(self) -> int:
        return self.leader_epoch_cache.latest_epoch

    def epoch_for_offset(self, offset: int) -> int:
        """Leader epoch under which ``offset`` was written (-1 if unknown)."""
        return self.leader_epoch_cache.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """For OffsetForLeaderEpoch: (epoch, end offset) as Kafka's LeaderEpochFileCache."""
        return self.leader_epoch_cache.end_offset_for(epoch, self._local.log_end_offset)

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
        offset = self._local.log_end_offset
        buf = end_txn_marker_batch(offset, producer_id, producer_epoch, coordinator_epoch, commit, leader_epoch, now)
        try:
            seg = self._maybe_roll(len(buf), now, offset, offset, now)
            if leader_epoch >= 0 and leader_epoch > self.leader_epoch_cache.latest_epoch:
                self.leader_epoch_cache.assign(leader_epoch, offset)
            # The marker is known: _write need not parse it back out of the batch just built.
            self._write(seg, offset, now, offset, buf, [parse_batch_header(buf)],
                        (CONTROL_COMMIT if commit else CONTROL_ABORT, coordinator_epoch))
        except OSError as exc:
            raise self._io_failed("append of a transaction marker", exc) from exc
        flush_needed = self.unflushed_messages >= self.config.flush_messages
        return AppendResult(offset, offset, -1, self.log_start_offset, 1, False, flush_needed)

    def append_coordinator_records(self, records: list[Record], leader_epoch: int,
                                   now_ms: int | None = None) -> AppendResult:
        """Append a coordinator's own records (offset deltas 0..n-1, no producer id) as one
        batch built here at the log end offset, stamped with ``leader_epoch`` and now.

        ``append_as_leader`` would decode, check and copy such a batch again after it was
        encoded; built here it already holds what those checks ask for but three, which are
        made: max.message.bytes (before and after the topic's compression.type, as there;
        RecordError MESSAGE_TOO_LARGE), at least one record and a key on every record of a
        compacted topic (RecordError INVALID_RECORD)."""
        if self._closed:
            self._raise_closed()
        now = self._time() if now_ms is None else now_ms
        local = self._local
        cfg = local.config
        if not records:  # what the validated path answers for a batch of none
            raise RecordError(ErrorCode.INVALID_RECORD, "a coordinator's batch holds no record")
        if cfg.compact and any(r.key is None for r in records):
            raise RecordError(ErrorCode.INVALID_RECORD, f"Compacted topic cannot accept message without key in "
                                                        f"topic partition {self._tp}")
        first = local.log_end_offset
        last = first + len(records) - 1
        lat = cfg.log_append_time
        ts_type = TIMESTAMP_LOG_APPEND_TIME if lat else TIMESTAMP_CREATE_TIME
        buf = build_batch(records, base_offset=first, timestamp_type=ts_type, base_timestamp=now,
                          partition_leader_epoch=leader_epoch)
        target = cfg.target_codec
        for attempt in range(2):
            if len(buf) > cfg.max_message_bytes:
                raise RecordError(ErrorCode.MESSAGE_TOO_LARGE,
                                  f"batch of {len(buf)} bytes exceeds max.message.bytes {cfg.max_message_bytes}")
            if attempt or target in (-1, COMPRESSION_NONE):
                break
            buf = build_batch(records, base_offset=first, compression=target, timestamp_type=ts_type,
                              base_timestamp=now, partition_leader_epoch=leader_epoch,
                              compression_level=cfg.target_level)
        try:
            seg = self._maybe_roll(len(buf), now, last, first, now)
            if leader_epoch >= 0 and leader_epoch > self.leader_epoch_cache.latest_epoch:
                self.leader_epoch_cache.assign(leader_epoch, first)
            self._write(seg, last, now, last, buf, [])  # no producer id: no producer state to follow
        except OSError as exc:
            raise self._io_failed("append", exc) from exc
        flush_needed = local.log_end_offset - local.recovery_point >= cfg.flush_messages
        return AppendResult(first, last, now if lat else -1, self.log_start_offset, len(records), False,
                            flush_needed)

    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int,
                         now_ms: int | None = None, origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendResult:
        """Validate a record set from a client or a coordinator (``origin``), assign offsets and
        append it (``validate_and_assign``, whose errors it raises: RecordError,
        RecordValidationError, ProducerStateError; nothing is written then)."""
        if self._closed:
            self._raise_closed()
        now = self._time() if now_ms is None else now_ms
        local = self._local
        cfg = local.config
        mv = records if isinstance(records, memoryview) else memoryview(records)
        v = validate_and_assign(mv, cfg, leader_epoch, now, local.log_end_offset, self._tp,
                                self.producer_state.check_batches, origin)
        if isinstance(v, BatchMetadata):
            return AppendResult(v.first_offset, v.last_offset, v.timestamp if cfg.log_append_time else -1,
                                self.log_start_offset, v.offset_delta + 1, True)
        first, last = v.first_offset, v.last_offset
        try:
            seg = self._maybe_roll(len(v.buffer), v.max_timestamp, last, first, now)
            if leader_epoch >= 0 and leader_epoch > self.leader_epoch_cache.latest_epoch:
                # Rare (once per leader epoch); Kafka writes this checkpoint synchronously too.
                self.leader_epoch_cache.assign(leader_epoch, first)
            self._write(seg, last, v.max_timestamp, v.shallow_offset_of_max_timestamp, v.buffer, v.headers)
        except OSError as exc:
            raise self._io_failed("append", exc) from exc
        flush_needed = local.log_end_offset - local.recovery_point >= cfg.flush_messages
        return AppendResult(first, last, v.log_append_time, self.log_start_offset, last - first + 1, False,
                            flush_needed)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> FollowerAppendResult | None:
        """Append record batches fetched from the leader, keeping the leader's offsets (Kafka's
        ``appendAsFollower``); None when ``records`` holds no whole batch.

        The batches are checked by ``validate_fetched`` (whose errors it raises: RecordError,
        LogError; nothing is written then). The partition leader epochs stamped by the leader go
        into the leader-epoch cache, and producer state follows the batches. Offsets may leave
        gaps (a compacted leader), never go back: a first offset below the log end offset raises
        UnexpectedAppendOffsetError.
        """
        if self._closed:
            self._raise_closed()
        mv = records if isinstance(records, memoryview) else memoryview(records)
        headers, size = validate_fetched(mv, self._tp)
        if not headers:
            return None
        first, last = headers[0].base_offset, headers[-1].last_offset
        leo = self._local.log_end_offset
        if first < leo:
            raise UnexpectedAppendOffsetError(
                f"Unexpected offset in append to {self._tp}. First offset {first} is less than "
                f"the next offset {leo}. Last offset in append: {last}. Log start offset = "
                f"{self.log_start_offset}", first, last)
        try:
            if last - first > INT32_MAX or size > self.config.segment_bytes:
                # Wider (offset gaps of a compacted leader) or larger than one segment can hold:
                # one batch at a time, so each may roll the segment.
                start = 0
                for h in headers:
                    self._append_fetched(mv[start : start + h.size], [h])
                    start += h.size
            else:
                self._append_fetched(mv[:size], headers)
        except OSError as exc:
            raise self._io_failed("append of fetched records", exc) from exc
        return FollowerAppendResult(first, last, size, headers[-1].partition_leader_epoch,
                                    self.unflushed_messages >= self.config.flush_messages)

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
               headers: list[BatchHeader], marker: tuple[int, int] | None = None) -> None:
        """Append batches whose offsets are final to the active segment; producer state follows.
        ``marker``: (control type, coordinator epoch) of ``data`` when it is one marker batch."""
        self._local.append(seg, last, max_ts, shallow, data)
        self._note_unflushed()
        ps = self.producer_state
        pos = 0
        for h in headers:
            if h.producer_id >= 0:
                if h.is_control:
                    control = marker if marker is not None else control_marker(data[pos : pos + h.size])
                    index_aborted_txn(ps.update(h, control), ps, seg.txn_index)
                else:
                    ps.update(h)
            pos += h.size
        ps.map_end_offset = last + 1

    def _maybe_roll(self, size: int, max_ts: int, max_offset: int, first_offset: int, now: int) -> LogSegment:
        # The active segment asked directly: this runs on every append.
        local = self._local
        seg = local.segments[-1]
        if seg.should_roll(local.config, size, max_ts, max_offset, now):
            return self.roll(first_offset)
        return seg

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, LEO)."""
        local = self._local
        new_base = max(expected_next_offset or 0, local.log_end_offset)
        active = local.active_segment
        if active.base_offset == new_base and active.size == 0:
            return active
        seg = local.roll(new_base)
        self.producer_state.map_end_offset = local.log_end_offset
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

    def read(self, fetch_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = True, hard_max_bytes_limit: bool = True) -> ReadResult:
        """File regions from ``fetch_offset`` (at most ``max_bytes``, below ``max_offset``).

        Raises OffsetOutOfRangeError when fetch_offset < log start or > LEO.  Usually one region
        (Kafka reads one segment per partition per fetch); empty at the LEO / ``max_offset``, and
        without ``hard_max_bytes_limit`` when the first batch is larger than ``max_bytes`` and
        ``min_one_message`` is not given (Fetch v3+: Kafka answers such a partition with nothing
        rather than with a piece of a batch; a v0-2 client is told by the piece that its limit is
        too small).
        """
        if self.offline:
            self._raise_closed()
        leo = self._local.log_end_offset
        if fetch_offset < self.log_start_offset or fetch_offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} is out of range [{self.log_start_offset}, {leo}] for {self.dir}"
            )
        hw, lso = self._high_watermark, self.log_start_offset
        if fetch_offset == leo or (max_offset is not None and fetch_offset >= max_offset):
            return ReadResult([], hw, lso, leo)
        try:
            region = self._local.read(fetch_offset, max_bytes, max_offset, min_one_message, hard_max_bytes_limit)
        except OSError as exc:
            raise self._io_failed("read", exc) from exc
        return ReadResult([region] if region is not None and region.size else [], hw, lso, leo)

    def peek(self, fetch_offset: int, max_bytes: int) -> FileRegion | None:
        """Where a read from ``fetch_offset`` would start, from the index only (see Segment.peek);
        None when the read would return nothing or raise (``read`` says why)."""
        if self.offline or not self.log_start_offset <= fetch_offset < self._local.log_end_offset:
            return None
        try:
            return self._local.peek(fetch_offset, max_bytes)
        except OSError as exc:
            raise self._io_failed("read", exc) from exc

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
            return TimestampOffset(self._local.log_end_offset, -1)
        if timestamp == MAX_TIMESTAMP:
            return self._local.max_timestamp_offset()
        if timestamp < 0:
            raise ValueError(f"unsupported special timestamp {timestamp}")
        return self._local.find_offset_by_timestamp(timestamp, self.log_start_offset)

    # ------------------------------------------------------------------ flush

    #: The blocking fsync step, looked up on the instance so a test can count the fsyncs.
    _fsync_segments = staticmethod(LocalLog.fsync_segments)

    async def _flush_once(self) -> None:
        local = self._local
        try:
            end = local.log_end_offset
            try:
                if self._writer is not None:
                    # partition.metadata and the epoch entries of every offset below ``end`` are
                    # durable before the recovery point moves past them.
                    await self._writer.wait(self)
                segs, dirs = local.to_flush()
                await asyncio.get_running_loop().run_in_executor(self._executor, self._fsync_segments, segs, dirs)
            except OSError as exc:
                # After a failed fsync the kernel may have dropped the dirty pages: nothing
                # written since the recovery point can be trusted to be on disk.
                raise self._io_failed("flush", exc) from exc
            local.mark_flushed(end, segs)
            self._last_flush_ms = self._time()
        finally:
            self._flush_task = None

    async def flush_until(self, offset: int | None = None) -> None:
        """Wait until every offset below ``offset`` (default: the LEO) is fsync'd (group commit)."""
        local = self._local
        target = local.log_end_offset if offset is None else min(offset, local.log_end_offset)
        while local.recovery_point < target:
            if self._closed:
                if self.offline:
                    self._raise_closed()  # what is not flushed now never will be
                break
            task = self._flush_task
            if task is None:
                task = self._flush_task = asyncio.get_running_loop().create_task(self._flush_once())
            await asyncio.shield(task)
            target = min(target, local.log_end_offset)  # a truncation may have lowered the LEO

    async def flush(self) -> None:
        """fsync everything appended so far."""
        await self.flush_until(None)

    def flush_sync(self, sync_parent: bool = True) -> None:
        """Blocking flush of everything (startup, shutdown, tests). ``sync_parent=False``: the
        caller fsyncs the log dir holding this log's directory itself (once for all logs)."""
        if self._writer is not None:
            self._writer.write_now(self)
        local = self._local
        end = local.log_end_offset
        segs, dirs = local.to_flush()
        if dirs and not sync_parent and not local.parent_synced:
            dirs = dirs[1:]
        try:
            self._fsync_segments(segs, dirs)
        except OSError as exc:
            raise self._io_failed("flush", exc) from exc
        local.mark_flushed(end, segs, parent_synced=not sync_parent)
        self._last_flush_ms = self._time()

    def flush_due(self, now_ms: int | None = None) -> bool:
        """True if unflushed data is older than flush.ms."""
        now = self._time() if now_ms is None else now_ms
        return self.unflushed_messages > 0 and now - self._last_flush_ms >= self.config.flush_ms

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
                f"Cannot increment the log start offset to {new_start} of partition {self._tp} "
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
        local = self._local
        local.recovery_point = max(local.recovery_point, min(new_start, local.log_end_offset))
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
        cfg = self.config
        if cfg.delete:
            if cfg.retention_ms >= 0:
                deleted += self._delete_segments(retention.retention_ms_breached(now, cfg.retention_ms), now,
                                                 f"retention time {cfg.retention_ms}ms breach")
            size = self.size_in_bytes
            if cfg.retention_bytes >= 0 and size >= cfg.retention_bytes:
                deleted += self._delete_segments(retention.retention_size_breached(size, cfg.retention_bytes), now,
                                                 f"retention size in bytes {cfg.retention_bytes} breach")
        deleted += self.delete_log_start_offset_breached(now)
        return deleted

    def delete_log_start_offset_breached(self, now_ms: int | None = None) -> int:
        """Delete the segments that lie wholly below the log start offset."""
        now = self._time() if now_ms is None else now_ms
        start = self.log_start_offset
        return self._delete_segments(retention.below_log_start_offset(start), now, f"log start offset {start} breach")

    def _delete_segments(self, predicate: retention.SegmentPredicate, now: int, reason: str) -> int:
        local = self._local
        segs = retention.deletable_segments(local.segments, local.log_end_offset, self._high_watermark, predicate)
        if not segs:
            return 0
        if len(segs) == len(local.segments):
            self.roll()  # a log always keeps one segment: start an empty one at the LEO
        self._defer_file_deletes(now + self.config.file_delete_delay_ms, local.remove_oldest(len(segs)))
        first = local.segments[0].base_offset
        self._advance_log_start_offset(first)
        self.producer_state.delete_snapshots_before(first)
        log.info("%s: deleting segments %s due to %s; log start offset is now %d", self.dir,
                 [s.base_offset for s in segs], reason, self.log_start_offset)
        return len(segs)

    def _defer_file_deletes(self, due_ms: int, paths: list[str]) -> None:
        self._pending_file_deletes.add(due_ms, paths)
        if self._pending_work is not None:
            self._pending_work.file_deletes.add(self)

    def take_due_file_deletes(self, now_ms: int | None = None, everything: bool = False) -> list[str]:
        """Paths of ``.deleted`` files whose file.delete.delay.ms has passed (now forgotten).

        The caller unlinks them (``unlink_files``), typically in an executor.
        """
        return self._pending_file_deletes.take_due(self._time() if now_ms is None else now_ms, everything)

    @property
    def next_file_delete_ms(self) -> int | None:
        """When the next pending ``.deleted`` file is due, if any."""
        return self._pending_file_deletes.next_due_ms

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
        local = self._local
        segs: list[CleanableSegment] = []
        for i, seg in enumerate(local.segments[:-1]):
            handle = seg.shared_handle()
            if handle is None:
                break
            segs.append(CleanableSegment(seg, seg.base_offset, local.bases[i + 1], seg.size,
                                         seg.largest_timestamp, handle))
        producers = {pid: e.last_offset for pid, e in self.producer_state.producers.items()}
        leo = local.log_end_offset
        return CleanerView(segs, local.active_segment.base_offset, self._high_watermark, self.log_start_offset,
                           leo, self.config, producers, self.last_stable_offset,
                           local.collect_aborted_txns(self.log_start_offset, leo))

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
        paths = self._local.replace_segments(old, base, cleaned)
        if paths is None:
            return False
        self._defer_file_deletes(self._time() + self.config.file_delete_delay_ms, paths)
        return True

    # ------------------------------------------------------------------ truncation / lifecycle

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and above ``offset`` (at batch granularity, as Kafka)."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._local.log_end_offset:
            return
        if self._closed:
            self._raise_closed()
        try:
            if offset < self.log_start_offset or offset <= self._local.segments[0].base_offset:
                self._truncate_fully_and_start_at(max(offset, self.log_start_offset))
            else:
                self._local.truncate_to(offset)
                self._after_truncation()
        except OSError as exc:
            raise self._io_failed("truncation", exc) from exc

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete all segments and start empty at ``offset``."""
        if self._closed:
            self._raise_closed()
        try:
            self._truncate_fully_and_start_at(offset)
        except OSError as exc:
            raise self._io_failed("truncation", exc) from exc

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        self._local.truncate_fully_and_start_at(offset)
        for off in self.producer_state.snapshot_offsets():
            unlink_quietly(self.producer_state.snapshot_path(off))
        self.log_start_offset = offset
        self.leader_epoch_cache.clear()
        self._after_truncation()

    def _after_truncation(self) -> None:
        self.truncations += 1
        leo = self._local.log_end_offset
        self._high_watermark = max(self.log_start_offset, min(self._high_watermark, leo))
        self.leader_epoch_cache.truncate_from_end(leo)
        ps = self.producer_state
        ps.delete_snapshots_after(leo)
        rebuild_producer_state(ps, self._local, self.log_start_offset, self.leader_epoch_cache)
        ps.on_high_watermark(self._high_watermark)

    # ------------------------------------------------------------------ failures

    def _raise_closed(self) -> None:
        if self.offline:
            raise KafkaStorageError(f"the log directory of {self._tp} is offline")
        raise ValueError(f"log {self.dir} is closed")

    def _io_failed(self, what: str, exc: OSError) -> OSError:
        """Report an I/O error of this log to the failure channel (which takes the log directory
        offline unless the process only ran out of a resource); returns what to raise."""
        if isinstance(exc, KafkaStorageError):
            return exc
        if self._failure_channel is not None:
            self._failure_channel.maybe_add_offline_log_dir(os.path.dirname(self.dir), f"{what} of {self._tp}",
                                                            exc)
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
        self._local.close_handlers(ignore_errors=True)  # the descriptors are released anyway

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
            self._local.close_handlers()
            return
        ps = self.producer_state
        leo = self._local.log_end_offset
        ps.map_end_offset = leo
        try:
            # As Kafka's takeSnapshot: only when the map moved past the newest snapshot (or the
            # log start offset, without one), so an idle or empty log costs no write.
            # An empty log (LEO 0) never needs one, and listing its directory to learn that was
            # most of closing an idle log (a second of a 10,000-partition shutdown).
            offsets = ps.snapshot_offsets() if leo > 0 else []
            if leo > (offsets[-1] if offsets else self.log_start_offset):
                ps.take_snapshot(leo, fsync=sync)
            self.leader_epoch_cache.flush_if_dirty()
        finally:
            self._local.close(sync=sync)

    @property
    def closed(self) -> bool:
        return self._closed

    def rename_dir(self, new_dir: str) -> None:
        """Move the log's directory (e.g. to ``...-delete``, or a future log to its plain name).

        An open log keeps serving from the new place: its small files not yet written are
        written first (blocking), as the writer's queue names the old directory."""
        if self._writer is not None and not self._closed:
            self._writer.write_now(self)
        self._local.rename_dir(new_dir)
        self.producer_state.dir = new_dir
        self.leader_epoch_cache.path = os.path.join(new_dir, LEADER_EPOCH_CHECKPOINT)
