"""``LogCleaner``: the cleaner threads, which log to clean next, and ``cleaner-offset-checkpoint``.

Threading.  Each of ``log.cleaner.threads`` threads loops: pick the filthiest compacted log,
clean it, record its new first dirty offset, else sleep ``log.cleaner.backoff.ms``.
The event loop owns every ``Log``; a cleaner thread touches one only through ``_OwnerCall``,
which runs a function on the loop (``call_soon_threadsafe`` + a future) and waits for it: the
snapshot of a log's segments before a pass, and each swap of cleaned segments.  Everything slow
(reading, decoding, rewriting, fsync) happens in the thread's worker process
(``cleaner_worker.WorkerCleaner``), so the thread itself mostly waits and the event loop keeps
the GIL.  While it waits, a thread watches the stop flag, so shutdown never deadlocks on a loop
that is itself waiting for the thread; a swap that has not started by then is cancelled, and a
busy worker is killed (the pass's ``.cleaned`` files are removed).

Choosing a log (Kafka's LogCleanerManager rules):

* first dirty offset = the checkpointed one, or the log start offset when there is none, it is
  below the log start, or it is past the log end (the log was truncated);
* first uncleanable offset = the active segment's base, the last stable offset, and with
  min.compaction.lag.ms the base of the first segment holding a record newer than the lag;
  only whole segments below it are cleanable;
* dirty ratio = cleanable bytes / (clean bytes + cleanable bytes); a log is cleaned when the
  ratio is >= min.cleanable.dirty.ratio, or when its oldest dirty batch is older than
  max.compaction.lag.ms, or when a delete horizon stamped by an earlier pass has passed (so
  expired tombstones go even if nothing new was written); the highest ratio goes first.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from kaflet.log.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    CheckpointError,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from kaflet.log.cleaner import (
    CleanerConfig,
    CleanerStats,
    CleaningAbortedError,
    first_batch_timestamp,
)
from kaflet.log.cleaner_worker import WorkerCleaner
from kaflet.log.offset_map import map_capacity

if TYPE_CHECKING:
    from kaflet.log.log import CleanerView, Log

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class PassRunner(Protocol):
    """What runs one pass: ``cleaner.Cleaner`` (in the calling thread) or
    ``cleaner_worker.WorkerCleaner`` (in a worker process, what the threads use)."""

    def clean(self, lg: Log, view: CleanerView, first_dirty: int, first_uncleanable: int,
              now_ms: int) -> tuple[int, CleanerStats]: ...


def _now_ms() -> int:
    return int(time.time() * 1000)


class LogToClean(NamedTuple):
    """The cleanable section of one log and how dirty it is."""

    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool  # max.compaction.lag.ms exceeded

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


def cleanable_section(view: CleanerView, checkpoint: int | None, now_ms: int) -> LogToClean:
    """Where a pass over this log would start and stop, with Kafka's rules (module docstring)."""
    first_dirty = checkpoint if checkpoint is not None else view.log_start_offset
    if first_dirty < view.log_start_offset or first_dirty > view.log_end_offset:
        first_dirty = view.log_start_offset
    cfg = view.config
    # Kafka's first uncleanable offset also stops at the first unstable offset: the data of an
    # undecided transaction is not compacted. min(HW, first unstable) is the last stable offset.
    upper = min(view.active_base_offset, view.last_stable_offset)
    dirty = [s for s in view.segments if s.next_base_offset > first_dirty and s.next_base_offset <= upper]
    needs_now = False
    if dirty and cfg.max_compaction_lag_ms < 2**63 - 1:
        ts = first_batch_timestamp(dirty[0].handle.fileno())
        needs_now = ts >= 0 and now_ms - ts > cfg.max_compaction_lag_ms
    if cfg.min_compaction_lag_ms > 0:
        for k, s in enumerate(dirty):
            if s.largest_timestamp > now_ms - cfg.min_compaction_lag_ms:
                dirty = dirty[:k]
                break
    first_uncleanable = dirty[-1].next_base_offset if dirty else first_dirty
    clean_bytes = sum(s.size for s in view.segments if s.next_base_offset <= first_dirty)
    return LogToClean(first_dirty, first_uncleanable, clean_bytes, sum(s.size for s in dirty), needs_now)


class _OwnerCall:
    """Runs functions on the event loop that owns the logs, from a cleaner thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None, stopping: Callable[[], bool]) -> None:
        self.loop = loop
        self._stopping = stopping

    def __call__(self, fn: Callable[[], Any]) -> Any:
        loop = self.loop
        if loop is None:
            return fn()
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            if not fut.set_running_or_notify_cancel():
                return  # the cleaner gave up waiting (shutdown): do nothing
            try:
                fut.set_result(fn())
            except BaseException as exc:  # handed to the waiting thread
                fut.set_exception(exc)

        try:
            loop.call_soon_threadsafe(run)
        except RuntimeError as exc:  # the loop is closed
            raise CleaningAbortedError("event loop is closed") from exc
        while True:
            try:
                return fut.result(timeout=0.1)
            except TimeoutError:
                if self._stopping() and fut.cancel():
                    raise CleaningAbortedError("cleaner is shutting down") from None


class LogCleaner:
    """The background cleaner of one LogManager's compacted logs."""

    def __init__(
        self,
        config: CleanerConfig,
        log_dirs: list[str],
        logs: Callable[[], Mapping[TopicPartition, Log]],
        dir_of: Callable[[TopicPartition], str | None],
        *,
        now_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.config = config
        self.log_dirs = list(log_dirs)
        self._logs = logs
        self._dir_of = dir_of
        self._time = now_ms
        self._stop = threading.Event()
        self._lifecycle = threading.Lock()  # start, stop and reconfigure one at a time
        self._lock = threading.Lock()  # guards the dicts below and the checkpoint files
        self._threads: list[threading.Thread] = []
        self._running = False  # started and not stopped (with no threads when threads=0)
        self._workers: list[WorkerCleaner] = []
        self._in_progress: set[TopicPartition] = set()
        self._next_horizon: dict[TopicPartition, int] = {}
        self._owner = _OwnerCall(None, self._stop.is_set)
        self.checkpoints: dict[TopicPartition, int] = {}
        self.last_stats: dict[TopicPartition, CleanerStats] = {}
        self.passes = 0
        self._load_checkpoints()

    # ------------------------------------------------------------------ checkpoints

    def _load_checkpoints(self) -> None:
        for d in self.log_dirs:
            try:
                self.checkpoints.update(read_offset_checkpoint(os.path.join(d, CLEANER_OFFSET_CHECKPOINT)))
            except CheckpointError:
                # Only costs a full re-clean: every log then starts dirty from its beginning.
                log.exception("ignoring a bad %s in %s", CLEANER_OFFSET_CHECKPOINT, d)

    def _write_checkpoint(self, d: str) -> None:
        # Called with self._lock held: two threads never write the same .tmp file at once.
        entries = {tp: off for tp, off in self.checkpoints.items() if self._dir_of(tp) == d}
        write_offset_checkpoint(os.path.join(d, CLEANER_OFFSET_CHECKPOINT), entries)

    def forget(self, tp: TopicPartition) -> None:
        """A deleted partition: a new log of the same name must start dirty."""
        with self._lock:
            self.checkpoints.pop(tp, None)
            self._next_horizon.pop(tp, None)

    # ------------------------------------------------------------------ threads

    def start(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Start the threads; ``loop`` owns the logs (None: the threads touch logs directly)."""
        with self._lifecycle:
            self._start(loop)

    def _start(self, loop: asyncio.AbstractEventLoop | None) -> None:
        if self._threads or not self.config.enable:
            return
        self._stop.clear()
        self._owner = _OwnerCall(loop, self._stop.is_set)
        # log.cleaner.threads=0 (a start-up value; at run time it must stay >= 1): no thread,
        # as in Kafka, so compacted logs are not cleaned.
        for i in range(self.config.threads):
            t = threading.Thread(target=self._run, name=f"kafka-log-cleaner-thread-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        self._running = True
        log.info("log cleaner started with %s", self.config.describe())

    def reconfigure(self, config: CleanerConfig) -> None:
        """Kafka's LogCleaner.reconfigure: stop the threads (a pass in progress is abandoned, as
        Kafka's checkDone aborts it at shutdown; the next pass does it again) and start them
        with ``config``. Not running (yet, or any more): only the config changes. Blocking."""
        with self._lifecycle:
            old, self.config = self.config, config
            if not self._running:
                return
            log.info("reconfiguring the log cleaner: %s", ", ".join(old.changes(config)))
            self._stop_threads(30.0)
            self._start(self._owner.loop)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop and join the threads (an unfinished pass is abandoned safely).  Blocking."""
        with self._lifecycle:
            self._stop_threads(timeout)

    def _stop_threads(self, timeout: float) -> None:
        self._running = False
        self._stop.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads.clear()
        with self._lock:
            workers, self._workers = self._workers, []
        for w in workers:  # normally closed by their threads already
            w.close(timeout=max(0.1, min(5.0, deadline - time.monotonic())))

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def _run(self) -> None:
        # The pass itself runs in a worker process (cleaner_worker.py): on this thread it would
        # hold the GIL for most of the pass and the event loop's latency would suffer.
        cleaner = WorkerCleaner(
            map_capacity(self.config.dedupe_buffer_size, self.config.io_buffer_load_factor, self.config.threads),
            self.config.io_buffer_size,
            self.config.io_max_bytes_per_second,
            run_on_owner=self._owner,
            stopping=self._stop.is_set,
            backoff_ms=self.config.backoff_ms,
        )
        with self._lock:
            self._workers.append(cleaner)
        try:
            while not self._stop.is_set():
                try:
                    cleaned = self.clean_filthiest_log(cleaner)
                except CleaningAbortedError:
                    cleaned = False
                except Exception:
                    log.exception("log cleaner pass failed")
                    cleaned = False
                if not cleaned:
                    self._stop.wait(self.config.backoff_ms / 1000)
        finally:
            cleaner.close()

    # ------------------------------------------------------------------ one pass

    def _views(self) -> dict[TopicPartition, CleanerView]:
        # Runs on the owning thread: one consistent snapshot of every compacted log.
        out: dict[TopicPartition, CleanerView] = {}
        for tp, lg in self._logs().items():
            if lg.closed or not lg.config.compact:
                continue
            view = lg.cleaner_view()
            if view is not None:
                out[tp] = view
        return out

    def _pick(self, views: dict[TopicPartition, CleanerView], now: int) -> tuple[TopicPartition, LogToClean] | None:
        best: tuple[TopicPartition, LogToClean] | None = None
        best_key = (-1, -1.0)
        with self._lock:
            for tp, view in views.items():
                if tp in self._in_progress:
                    continue
                ltc = cleanable_section(view, self.checkpoints.get(tp), now)
                horizon = self._next_horizon.get(tp)
                horizon_due = horizon is not None and now >= horizon and ltc.first_uncleanable > view.log_start_offset
                wanted = ltc.cleanable_bytes > 0 and (
                    ltc.dirty_ratio >= view.config.min_cleanable_dirty_ratio or ltc.needs_compaction_now)
                if not (wanted or horizon_due):
                    continue
                key = (1 if ltc.needs_compaction_now else 0, ltc.dirty_ratio)
                if key > best_key:
                    best, best_key = (tp, ltc), key
            if best is not None:
                self._in_progress.add(best[0])
        return best

    def clean_filthiest_log(self, cleaner: PassRunner) -> bool:
        """Clean the log that needs it most; False when no log does."""
        now = self._time()
        views: dict[TopicPartition, CleanerView] = self._owner(self._views)
        picked = self._pick(views, now)
        if picked is None:
            return False
        tp, ltc = picked
        try:
            lg = self._logs().get(tp)
            if lg is None:
                return False
            # As Kafka does: with the summary line after the pass, this brackets the pass in the log.
            log.info("beginning cleaning of log %s-%d (offsets %d to %d)", tp[0], tp[1], ltc.first_dirty,
                     ltc.first_uncleanable)
            end, stats = cleaner.clean(lg, views[tp], ltc.first_dirty, ltc.first_uncleanable, now)
            with self._lock:
                if tp in self._logs():
                    self.checkpoints[tp] = end
                    if stats.next_horizon_ms is None:
                        self._next_horizon.pop(tp, None)
                    else:
                        self._next_horizon[tp] = stats.next_horizon_ms
                    self.last_stats[tp] = stats
                    self.passes += 1
                    d = self._dir_of(tp)
                    if d is not None:
                        self._write_checkpoint(d)
            log.info(
                "cleaned %s-%d up to offset %d in %.2fs: %d -> %d segments, %d -> %d bytes, %d of %d records "
                "kept, %d tombstones removed, dirty ratio was %.2f",
                tp[0], tp[1], end, stats.elapsed_s, stats.segments_before, stats.segments_after,
                sum(s.size for s in views[tp].segments if s.base_offset < end), stats.bytes_written,
                stats.records_kept, stats.records_read, stats.tombstones_removed, ltc.dirty_ratio,
            )
            return True
        finally:
            with self._lock:
                self._in_progress.discard(tp)
