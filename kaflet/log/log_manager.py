"""``LogManager``: all partition logs of a broker across its ``log.dirs``.

Startup (``startup()``, blocking; run it before serving): lock every dir (``.lock``), load every
``<topic>-<partition>`` dir, recovering unflushed segments unless ``.kafka_cleanshutdown`` says
the last shutdown was clean (the marker is then deleted), queue ``-delete`` dirs for removal.

High watermarks: each log starts at the value in its dir's ``replication-offset-checkpoint``
(the log start offset when it has none, as in Kafka); the partition moves it from there.

Running: the broker awaits ``run_background(stop_event)`` as a task; it flushes logs whose
``flush.ms`` elapsed, writes ``recovery-point-offset-checkpoint`` and
``log-start-offset-checkpoint`` every 60 s and ``replication-offset-checkpoint`` every
``replica.high.watermark.checkpoint.interval.ms`` (5 s; in an executor; a dir's file is
rewritten only when its offsets changed since the last write), and removes deleted
partition dirs after ``file.delete.delay.ms``.  Every ``log.retention.check.interval.ms`` it runs retention
(``cleanup_logs``: retention.ms, retention.bytes, log start offset) on every log; the segments
it drops are renamed ``.deleted`` at once and unlinked in the executor after
``file.delete.delay.ms``.  The flushes and unlinks visit only the logs registered in
``pending_work`` (pending_work.py), so an idle partition costs the loop nothing.  When a log start offset moves, the checkpoint is written right away
rather than at the next 60 s tick, so a restart never resurrects deleted records.

Compaction: ``LogCleaner`` (cleaner_manager.py) runs ``log.cleaner.threads`` threads from
``run_background`` until it ends; they compact logs whose cleanup.policy includes ``compact``.

Shutdown (``shutdown()``, blocking): stop the cleaner, flush every log, close it (producer snapshots, trimmed
indexes), write the checkpoints (high watermarks included), write an empty ``.kafka_cleanshutdown`` per dir, unlock.
The logs are flushed and closed on several threads at once, so their fsyncs are committed together.

Moves between log dirs (AlterReplicaLogDirs): a partition may also have a future log in another
dir (``create_future_log``), which ``replace_current_with_future_log`` swaps in and start-up
resumes or finishes (``_settle_future_logs``); the copy itself is replication/alter_log_dirs.py's.

Why a little over 800 lines: the log dirs' whole lifecycle (loading, placement, moves, deletion,
checkpoints, failures, shutdown) shares the maps of logs by dir kept here.

Nothing here fsyncs on the event loop, except the log dir of a swap's first rename: a log's small files (``partition.metadata``,
``leader-epoch-checkpoint``) and the log dir after a deletion's rename go through the
``MetadataWriter`` (batched, on its threads, durable before the data they describe), data
through ``Log.flush_until`` (in the executor).
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from kaflet.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointError,
    fsync_dir,
    has_syncfs,
    read_offset_checkpoint,
    syncfs,
    write_offset_checkpoint,
)
from kaflet.log.cleaner import CleanerConfig
from kaflet.log.cleaner_manager import LogCleaner
from kaflet.log.config import LONG_MAX, LogConfig
from kaflet.log.dir_failure import LogDirFailureChannel, is_resource_exhaustion
from kaflet.log.errors import KafkaStorageError, LogError, PartitionLimitError
from kaflet.log.local_log import parse_marked_dir, parse_topic_partition
from kaflet.log.log import Log
from kaflet.log.metadata_writer import MetadataWriter
from kaflet.log.pending_work import PendingWork
from kaflet.log.retention import unlink_files
from kaflet.log.segment_files import SegmentFileCache
from kaflet.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
#: Threads that create logs off the loop.
CREATE_THREADS = 2
#: Threads that flush and close the logs at shutdown (their fsyncs are committed together).
SHUTDOWN_THREADS = 8
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"

TopicPartition = tuple[str, int]


def _now_ms() -> int:
    return int(time.time() * 1000)


class LogDirLockedError(RuntimeError):
    """Another process holds the log dir's ``.lock``."""


class LogDirNotFoundError(LogError):
    """A directory that is not one of ``log.dirs`` (Kafka's LogDirNotFoundException)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.LOG_DIR_NOT_FOUND, message)


def future_dir_name(topic: str, partition: int) -> str:
    """Kafka's logFutureDirName: ``<topic>-<p>.<uuid hex>-future`` (the name is not shortened)."""
    return f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


def delete_dir_name(topic: str, partition: int) -> str:
    """Kafka's logDeleteDirName: ``<topic>-<p>.<uuid hex>-delete``, the topic cut so the name
    stays within 255 characters."""
    suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return topic[: 255 - len(suffix)] + suffix


class LogManager:
    """Owns the Log objects of one broker.

    ``default_topic_config``: broker-level defaults as Kafka *topic* config names -> values.
    ``topic_config``: optional callable topic -> per-topic overrides (names -> values).
    """

    def __init__(
        self,
        log_dirs: list[str],
        default_topic_config: Mapping[str, Any] | LogConfig | None = None,
        *,
        topic_config: Callable[[str], Mapping[str, Any]] | None = None,
        recovery_point_checkpoint_interval_ms: int = 60000,
        log_start_offset_checkpoint_interval_ms: int = 60000,
        high_watermark_checkpoint_interval_ms: int = 5000,
        high_watermark_checkpoints: bool = True,
        flush_check_interval_ms: int = 1000,
        retention_check_interval_ms: int = 300000,
        producer_id_expiration_ms: Callable[[], int] | None = None,
        producer_id_expiration_check_interval_ms: int = 600000,
        cleaner_config: CleanerConfig | None = None,
        executor: Executor | None = None,
        failure_channel: LogDirFailureChannel | None = None,
        segment_files: SegmentFileCache | None = None,
        now_ms: Callable[[], int] = _now_ms,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        #: Where I/O errors take a log dir offline (``handle_log_dir_failure`` then acts on it).
        self.failure_channel = failure_channel if failure_channel is not None else LogDirFailureChannel()
        if isinstance(default_topic_config, LogConfig):
            self.default_config = default_topic_config
        else:
            self.default_config = LogConfig.from_props(default_topic_config or {})
        self._topic_config = topic_config
        #: The bound on open segment files shared by every log (None: each segment keeps its own).
        self.segment_files = segment_files
        #: Most logs this broker hosts (None: no limit); new logs beyond it are refused with
        #: ``PartitionLimitError``, whose message ends with ``partition_limit_reason``.
        self.max_partitions: int | None = None
        self.partition_limit_reason = "max.broker.partitions"
        self.recovery_point_checkpoint_interval_ms = recovery_point_checkpoint_interval_ms
        self.log_start_offset_checkpoint_interval_ms = log_start_offset_checkpoint_interval_ms
        self.high_watermark_checkpoint_interval_ms = high_watermark_checkpoint_interval_ms
        #: Whether the periodic high watermark checkpoint runs (Kafka starts it with the first
        #: LeaderAndIsr: ``start_high_watermark_checkpoints``); shutdown writes it regardless.
        self.high_watermark_checkpoints = high_watermark_checkpoints
        self.flush_check_interval_ms = flush_check_interval_ms
        self.retention_check_interval_ms = retention_check_interval_ms
        # producer.id.expiration.ms, read at each check so a dynamic change applies (None: never).
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producer_id_expiration_check_interval_ms = producer_id_expiration_check_interval_ms
        # Two checkpoint writes must not interleave: both go through the same ``.tmp`` file.
        self._checkpoint_lock = asyncio.Lock()
        self._executor = executor
        self._time = now_ms
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, str] = {}
        # Replicas being moved to another log dir of this broker (Kafka's futureLogs), where
        # they are, and where replicas not yet here are to be created (preferredLogDirs).
        self._future_logs: dict[TopicPartition, Log] = {}
        self._future_dir_of: dict[TopicPartition, str] = {}
        self._preferred_dirs: dict[TopicPartition, str] = {}
        self._found_futures: list[tuple[TopicPartition, str, Log]] = []
        self._locks: dict[str, int] = {}
        self._pending_deletes: list[tuple[str, int]] = []  # (path, delete after ms)
        self._started = False
        self._shut_down = False
        self._creating: set[TopicPartition] = set()  # logs being created on a thread
        self._io_pool: ThreadPoolExecutor | None = None
        #: Writes the logs' small files and directory fsyncs off the event loop.
        self.metadata_writer = MetadataWriter()
        #: The logs the background loop has a flush or a file deletion to do for.
        self.pending_work: PendingWork[Log] = PendingWork()
        # What each (checkpoint file, dir) holds, so a periodic write of unchanged offsets is
        # skipped: an idle broker with many partitions rewrites (and fsyncs) nothing.
        self._checkpointed: dict[tuple[str, str], dict[TopicPartition, int]] = {}
        self.cleaner_config = cleaner_config if cleaner_config is not None else CleanerConfig()
        #: The log cleaner (compaction); created at startup when log.cleaner.enable is true.
        self.cleaner: LogCleaner | None = None

    # ------------------------------------------------------------------ configs

    def config_for(self, topic: str, overrides: Mapping[str, Any] | None = None) -> LogConfig:
        """Defaults + the topic's overrides (+ explicit ``overrides``)."""
        cfg = self.default_config
        if self._topic_config is not None:
            props = self._topic_config(topic)
            if props:
                cfg = LogConfig.from_props(props, cfg)
        if overrides:
            cfg = LogConfig.from_props(overrides, cfg)
        return cfg

    # ------------------------------------------------------------------ startup

    def _lock(self, d: str) -> None:
        fd = os.open(os.path.join(d, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise LogDirLockedError(f"log dir {d} is in use by another process") from exc
        self._locks[d] = fd

    def startup(self) -> None:
        """Lock the dirs and load (and if needed recover) every log.  Blocking.

        A dir whose disk fails while it is loaded starts offline (Kafka's rule), the others
        serve; with every dir failed this raises the first dir's error."""
        errors: list[OSError] = []
        for d in self.log_dirs:
            try:
                os.makedirs(d, exist_ok=True)
                self._lock(d)
                self._load_dir(d)
            except OSError as exc:
                if is_resource_exhaustion(exc):
                    raise
                errors.append(exc)
                self.failure_channel.maybe_add_offline_log_dir(d, "loading the logs", exc)
                self._drop_dir(d)
        if len(errors) == len(self.log_dirs):
            raise errors[0]
        self._settle_future_logs(any_failed=bool(errors))
        if self.cleaner_config.enable:
            # Its threads start with run_background, once there is an event loop to own the logs.
            # Only the dirs that loaded: a failed one's cleaner checkpoint cannot be read.
            self.cleaner = LogCleaner(self.cleaner_config, self.live_log_dirs, lambda: self._logs, self._dir_of.get,
                                      now_ms=self._time)
        self._started = True

    def _load_dir(self, d: str) -> None:
        clean_file = os.path.join(d, CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(clean_file)
        try:
            recovery_points = read_offset_checkpoint(os.path.join(d, RECOVERY_POINT_CHECKPOINT))
            start_offsets = read_offset_checkpoint(os.path.join(d, LOG_START_OFFSET_CHECKPOINT))
        except CheckpointError:
            log.exception("bad checkpoint in %s: recovering every log in it", d)
            recovery_points, start_offsets, clean = {}, {}, False
        try:
            high_watermarks = read_offset_checkpoint(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT))
        except CheckpointError:
            # Only the committed position is lost: each log starts at its log start offset and
            # its leader moves the high watermark up again.
            log.exception("bad %s in %s: high watermarks start at the log start offsets",
                          REPLICATION_OFFSET_CHECKPOINT, d)
            high_watermarks = {}
        now = self._time()
        # scandir: the directory entries' types come with the listing, not a stat each.
        with os.scandir(d) as listing:
            subdirs = sorted((e.name, e.path) for e in listing if e.is_dir())
        for name, path in subdirs:
            if name.endswith(DELETE_DIR_SUFFIX):
                self._pending_deletes.append((path, now))
                continue
            marked = parse_marked_dir(name)
            if marked is not None and marked[2] == "stray":
                log.warning("ignoring %s (stray logs are KRaft's)", path)
                continue
            tp = parse_topic_partition(name) if marked is None else marked[:2]
            if tp is None:
                continue
            if marked is None and tp in self._logs:
                raise RuntimeError(f"duplicate log directories for {tp}: {self._dir_of[tp]} and {d}")
            lg = Log(
                path,
                self.config_for(tp[0]),
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=start_offsets.get(tp, 0),
                had_clean_shutdown=clean,
                high_watermark=high_watermarks.get(tp),
                executor=self._executor,
                metadata_writer=self.metadata_writer,
                failure_channel=self.failure_channel,
                segment_files=self.segment_files,
                pending_work=self.pending_work,
                now_ms=self._time,
                found=True,
            )
            if marked is not None:
                self._found_futures.append((tp, d, lg))  # settled once every dir is loaded
                continue
            self._logs[tp] = lg
            self._dir_of[tp] = d
        if clean:
            os.unlink(clean_file)
            # Must be durable before anything is appended, or a crash would pass for a clean
            # shutdown and skip recovery. One fsync per log dir at start-up, before serving.
            fsync_dir(d)

    def _settle_future_logs(self, any_failed: bool) -> None:
        """The ``-future`` logs found at start-up. With its current log, a future log is a move
        a crash or shutdown interrupted: it is loaded and the move resumes (Kafka). Without
        one, the crash came between the swap's two renames (the current log already renamed
        ``-delete``, see ``replace_current_with_future_log``): the future log was complete, and
        it becomes the current log now. Unless a log dir failed to load: the current log may be
        there, so the future log is left alone on disk."""
        found, self._found_futures = self._found_futures, []
        for tp, d, lg in found:
            if tp in self._future_logs:
                raise RuntimeError(f"duplicate future log directories for {tp}: {self._future_logs[tp].dir} and "
                                   f"{lg.dir}")
            if tp in self._logs:
                log.info("%s-%d: resuming its move from %s to %s", *tp, self._dir_of[tp], d)
                self._future_logs[tp] = lg
                self._future_dir_of[tp] = d
            elif any_failed:
                log.warning("%s-%d: leaving %s alone: it has no current log, which may be in a failed log "
                            "directory", *tp, lg.dir)
                lg.close()
            else:
                log.warning("%s-%d: finishing the swap a crash interrupted: %s becomes its log", *tp, lg.dir)
                lg.rename_dir(os.path.join(d, f"{tp[0]}-{tp[1]}"))
                fsync_dir(d)
                self._logs[tp] = lg
                self._dir_of[tp] = d

    # ------------------------------------------------------------------ access

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> dict[TopicPartition, Log]:
        return dict(self._logs)

    def log_dir_of(self, topic: str, partition: int) -> str | None:
        return self._dir_of.get((topic, partition))

    @property
    def live_log_dirs(self) -> list[str]:
        """The log dirs that are not offline."""
        channel = self.failure_channel
        return [d for d in self.log_dirs if not channel.is_offline(d)]

    def _live_dirs_or_raise(self) -> list[str]:
        live = self.live_log_dirs
        if not live:
            raise KafkaStorageError("every log directory is offline")
        return live

    def _choose_dir(self, tp: TopicPartition) -> str:
        live = self._live_dirs_or_raise()
        preferred = self._preferred_dirs.pop(tp, None)
        if preferred is not None and preferred in live:
            return preferred
        counts = {d: 0 for d in live}
        for d in self._dir_of.values():
            if d in counts:
                counts[d] += 1
        return min(live, key=lambda d: counts[d])

    # ------------------------------------------------------------------ moves between log dirs

    def check_log_dir(self, d: str) -> bool:
        """Whether ``d`` (an absolute path, as configured) is online; LogDirNotFoundError when
        it is not one of ``log.dirs`` (Kafka's isLogDirOnline)."""
        if d not in self.log_dirs:
            raise LogDirNotFoundError(f"Log dir {d} is not found in the config.")
        return not self.failure_channel.is_offline(d)

    def maybe_update_preferred_log_dir(self, topic: str, partition: int, d: str) -> None:
        """Create the replica in ``d`` when it comes here (unless its current or future log is
        already there): Kafka's maybeUpdatePreferredLogDir."""
        tp = (topic, partition)
        if self._dir_of.get(tp) != d and self._future_dir_of.get(tp) != d:
            self._preferred_dirs[tp] = d

    def get_future_log(self, topic: str, partition: int) -> Log | None:
        return self._future_logs.get((topic, partition))

    def future_log_dir_of(self, topic: str, partition: int) -> str | None:
        return self._future_dir_of.get((topic, partition))

    def all_future_logs(self) -> dict[TopicPartition, Log]:
        return dict(self._future_logs)

    def create_future_log(self, topic: str, partition: int, d: str) -> Log:
        """The partition's future log in ``d`` (``<topic>-<p>.<uuid>-future``), made empty unless
        it exists; raises ValueError when ``d`` holds the current log."""
        tp = (topic, partition)
        current = self._logs.get(tp)
        if current is None:
            raise ValueError(f"{topic}-{partition} has no log here")
        if self._dir_of[tp] == d:
            raise ValueError(f"{topic}-{partition} already has its log in {d}")
        lg = self._future_logs.get(tp)
        if lg is not None:
            return lg
        self._preferred_dirs.pop(tp, None)
        lg = Log(os.path.join(d, future_dir_name(topic, partition)), current.config, had_clean_shutdown=True,
                 topic_id=current.topic_id, executor=self._executor, metadata_writer=self.metadata_writer,
                 failure_channel=self.failure_channel, segment_files=self.segment_files,
                 pending_work=self.pending_work, now_ms=self._time)
        self.metadata_writer.sync_dir(d)
        self._future_logs[tp] = lg
        self._future_dir_of[tp] = d
        log.info("%s-%d: created its future log %s", topic, partition, lg.dir)
        return lg

    def abandon_future_log(self, topic: str, partition: int) -> None:
        """Delete the partition's future log (a move given up or sent elsewhere)."""
        tp = (topic, partition)
        lg = self._future_logs.pop(tp, None)
        d = self._future_dir_of.pop(tp, None)
        if lg is not None and d is not None:
            self._delete_closed_log(lg, d, tp)

    def replace_current_with_future_log(self, topic: str, partition: int) -> Log:
        """The future log, caught up with the current one, takes its place (Kafka's
        replaceCurrentWithFutureLog); returns it. Call on the loop, with nothing appended in
        between the caller's check and this call.

        The renames are ordered so that a crash at any point leaves one complete log: first the
        current log's directory becomes ``-delete`` (its log dir fsync'd), then the future log's
        directory gets the plain name. A crash between the two leaves a ``-future`` log without
        a current one, which start-up makes the current log (``_settle_future_logs``); Kafka's
        opposite order leaves two plain directories and refuses to start."""
        tp = (topic, partition)
        current, future = self._logs[tp], self._future_logs[tp]
        d_cur, d_fut = self._dir_of[tp], self._future_dir_of[tp]
        future.update_config(current.config)  # a topic config changed during the copy
        future.update_high_watermark(current.high_watermark)
        # An epoch the current log started without appending to it yet (a new leader's).
        latest = future.latest_epoch()
        for epoch, start in current.leader_epoch_cache.entries:
            if epoch > latest and start <= future.log_end_offset:
                future.maybe_assign_epoch_start_offset(epoch, start)
        current.close(deleting=True)
        delete_path = os.path.join(d_cur, delete_dir_name(topic, partition))
        try:
            current.rename_dir(delete_path)
            fsync_dir(d_cur)
        except OSError as exc:
            self.failure_channel.maybe_add_offline_log_dir(d_cur, f"moving {topic}-{partition} away", exc)
            raise KafkaStorageError(f"the log directory {d_cur} failed: {exc}") from exc
        del self._future_logs[tp], self._future_dir_of[tp]
        self._logs[tp], self._dir_of[tp] = future, d_fut
        self._pending_deletes.append((delete_path, self._time() + current.config.file_delete_delay_ms))
        try:
            future.rename_dir(os.path.join(d_fut, f"{topic}-{partition}"))
        except OSError as exc:
            self.failure_channel.maybe_add_offline_log_dir(d_fut, f"moving {topic}-{partition} here", exc)
            raise KafkaStorageError(f"the log directory {d_fut} failed: {exc}") from exc
        self.metadata_writer.sync_dir(d_fut)
        if self.cleaner is not None:
            self.cleaner.forget(tp)  # its cleaner checkpoint stays in the old dir: cleaned again
        log.info("%s-%d: the log in %s replaced the one in %s", topic, partition, d_fut, d_cur)
        return future
    def partition_room(self) -> int | None:
        """How many more logs fit under ``max_partitions`` (None: no limit)."""
        if self.max_partitions is None:
            return None
        return self.max_partitions - len(self._logs) - len(self._creating)

    def partition_limit_message(self, wanted: int) -> str:
        """Why ``wanted`` more partitions are refused, naming the limit."""
        return (f"this broker hosts {len(self._logs)} partitions and may host at most {self.max_partitions} "
                f"({self.partition_limit_reason}); {wanted} more do not fit")

    def get_or_create_log(self, topic: str, partition: int, topic_id: str | None = None,
                          config: Mapping[str, Any] | LogConfig | None = None) -> Log:
        """The partition's log, creating it in the dir with the fewest partitions if needed."""
        tp = (topic, partition)
        lg = self._logs.get(tp)
        if lg is not None:
            if topic_id is not None and lg.topic_id is None:
                lg.assign_topic_id(topic_id)  # e.g. made by create_logs
            if config is not None:
                lg.update_config(config if isinstance(config, LogConfig) else self.config_for(topic, config))
            return lg
        room = self.partition_room()
        if room is not None and room <= 0:
            raise PartitionLimitError(self.partition_limit_message(1))
        cfg = config if isinstance(config, LogConfig) else self.config_for(topic, config)
        d = self._choose_dir(tp)
        lg = self._new_log(d, topic, partition, topic_id, cfg)
        self._logs[tp] = lg
        self._dir_of[tp] = d
        return lg

    def _new_log(self, d: str, topic: str, partition: int, topic_id: str | None, cfg: LogConfig) -> Log:
        return Log(os.path.join(d, f"{topic}-{partition}"), cfg, had_clean_shutdown=True, topic_id=topic_id,
                   executor=self._executor, metadata_writer=self.metadata_writer,
                   failure_channel=self.failure_channel, segment_files=self.segment_files,
                   pending_work=self.pending_work, now_ms=self._time)

    async def create_logs(self, wanted: Iterable[TopicPartition]) -> None:
        """Create the logs among ``wanted`` that do not exist yet, their directories and files
        on threads, as Kafka creates logs on its request threads (on the one event loop, a
        LeaderAndIsr for 1,000 new partitions stalled every client for seconds of file
        creation); ``get_or_create_log`` then finds them and gives them their topic id, so
        ``partition.metadata`` goes to the MetadataWriter in the same batch as the log's
        first epoch entry. A log that cannot be created here is left to ``get_or_create_log``
        to try again and report."""
        live = self.live_log_dirs
        if not live:
            return  # get_or_create_log reports it
        counts = Counter({d: 0 for d in live})
        counts.update(d for d in self._dir_of.values() if d in counts)
        plans: list[tuple[TopicPartition, str, LogConfig]] = []
        room = self.partition_room()
        for tp in wanted:
            if tp in self._logs or tp in self._creating:
                continue
            if room is not None and len(plans) >= room:
                break  # get_or_create_log refuses the rest, each with its error
            preferred = self._preferred_dirs.pop(tp, None)
            d = preferred if preferred is not None and preferred in counts else min(live, key=lambda x: counts[x])
            counts[d] += 1
            plans.append((tp, d, self.config_for(tp[0])))
        if not plans:
            return
        loop = asyncio.get_running_loop()
        if self._io_pool is None:
            self._io_pool = ThreadPoolExecutor(CREATE_THREADS, thread_name_prefix="kaflet-log-create")
        self._creating.update(tp for tp, _, _ in plans)
        futures = []
        # A few jobs, not one per log: each completion wakes the loop, and the work is mostly
        # waiting for the file system (more threads would only contend for the GIL).
        for i in range(min(CREATE_THREADS, len(plans))):
            fut = loop.run_in_executor(self._io_pool, self._new_logs, plans[i::CREATE_THREADS])
            # Registered by a callback, so a cancelled caller leaves no log unregistered.
            fut.add_done_callback(self._created)
            futures.append(fut)
        await asyncio.shield(asyncio.gather(*futures, return_exceptions=True))

    def _new_logs(self, plans: list[tuple[TopicPartition, str, LogConfig]]
                  ) -> list[tuple[TopicPartition, str, Log | OSError]]:
        # On a thread: a new empty log writes no file through the MetadataWriter (no topic id
        # yet, no epoch entry, no producer snapshot), which only the loop may use.
        out: list[tuple[TopicPartition, str, Log | OSError]] = []
        for tp, d, cfg in plans:
            try:
                out.append((tp, d, self._new_log(d, tp[0], tp[1], None, cfg)))
            except OSError as exc:
                out.append((tp, d, exc))
        return out

    def _created(self, fut: asyncio.Future[list[tuple[TopicPartition, str, Log | OSError]]]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            self._creating.clear()  # not expected: the job catches OSError; let the loop retry
            return
        for tp, d, lg in fut.result():
            self._creating.discard(tp)
            if isinstance(lg, OSError):
                log.debug("creating the log of %s-%d on a thread failed: %s", *tp, lg)
            elif tp in self._logs or self._shut_down or self.failure_channel.is_offline(d):
                lg.close(deleting=True)  # made meanwhile on the loop (same files), or too late
            else:
                self._logs[tp] = lg
                self._dir_of[tp] = d

    def update_topic_config(self, topic: str, overrides: Mapping[str, Any] | None = None) -> None:
        """Re-read a topic's config into all its logs (after a config change)."""
        cfg = self.config_for(topic, overrides)
        for (t, _), lg in (*self._logs.items(), *self._future_logs.items()):
            if t == topic:
                lg.update_config(cfg)

    def delete_log(self, topic: str, partition: int) -> str | None:
        """Close the log and rename its dir to ``<topic>-<p>.<uuidhex>-delete`` for later removal."""
        tp = (topic, partition)
        # The future log goes first: a future log without a current one is taken for an
        # interrupted swap at the next start.
        self.abandon_future_log(topic, partition)
        lg = self._logs.pop(tp, None)
        d = self._dir_of.pop(tp, None)
        if lg is None or d is None:
            return None
        if self.cleaner is not None:
            self.cleaner.forget(tp)  # a pass in progress notices the closed log and gives up
        return self._delete_closed_log(lg, d, tp)

    def _delete_closed_log(self, lg: Log, d: str, tp: TopicPartition) -> str:
        lg.close(deleting=True)
        new_dir = os.path.join(d, delete_dir_name(*tp))
        lg.rename_dir(new_dir)
        # The rename is made durable by the next batch, one fsync of the dir for every deletion
        # meanwhile (Kafka does not fsync it at all); until then a crash brings the log back,
        # whole, and the controller deletes it again.
        self.metadata_writer.sync_dir(d)
        delay = lg.config.file_delete_delay_ms
        self._pending_deletes.append((new_dir, self._time() + delay))
        return new_dir

    def remove_deleted_dirs(self, now_ms: int | None = None) -> int:
        """Physically remove ``-delete`` dirs whose delay has passed (blocking).  Returns count."""
        now = self._time() if now_ms is None else now_ms
        due = [p for p, t in self._pending_deletes if t <= now]
        self._pending_deletes = [(p, t) for p, t in self._pending_deletes if t > now]
        for p in due:
            shutil.rmtree(p, ignore_errors=True)
        return len(due)

    # ------------------------------------------------------------------ checkpoints

    def _offsets_by_dir(self, attr: str) -> dict[str, dict[TopicPartition, int]]:
        """The live dirs' offsets named ``attr``, by dir."""
        out: dict[str, dict[TopicPartition, int]] = {d: {} for d in self.live_log_dirs}
        # A future log is in another dir than its current log, so the files' keys stay unique.
        for logs, dirs in ((self._logs, self._dir_of), (self._future_logs, self._future_dir_of)):
            for tp, lg in logs.items():
                # Kafka writes only partitions whose start moved past their first segment.
                if attr == "log_start_offset" and lg.log_start_offset <= lg.segments[0].base_offset:
                    continue
                offsets = out.get(dirs[tp])
                if offsets is not None:
                    offsets[tp] = getattr(lg, attr)
        return out

    def _write_checkpoints(self, name: str, snapshot: dict[str, dict[TopicPartition, int]]) -> None:
        """Write one checkpoint file per dir; a dir whose write fails goes offline, the others
        are written all the same (blocking)."""
        for d, offsets in snapshot.items():
            if self.failure_channel.is_offline(d):
                continue
            try:
                write_offset_checkpoint(os.path.join(d, name), offsets)
            except OSError as exc:
                self._checkpointed.pop((name, d), None)
                self.failure_channel.maybe_add_offline_log_dir(d, f"writing {name}", exc)
            else:
                self._checkpointed[(name, d)] = offsets

    def checkpoint_recovery_points(self) -> None:
        """Write every live dir's recovery-point-offset-checkpoint (blocking)."""
        self._write_checkpoints(RECOVERY_POINT_CHECKPOINT, self._offsets_by_dir("recovery_point"))

    def checkpoint_log_start_offsets(self) -> None:
        """Write every live dir's log-start-offset-checkpoint (blocking)."""
        self._write_checkpoints(LOG_START_OFFSET_CHECKPOINT, self._offsets_by_dir("log_start_offset"))

    def start_high_watermark_checkpoints(self) -> None:
        """Start the periodic high watermark checkpoint (if not running yet)."""
        self.high_watermark_checkpoints = True

    def checkpoint_high_watermarks(self) -> None:
        """Write every live dir's replication-offset-checkpoint (blocking)."""
        self._write_checkpoints(REPLICATION_OFFSET_CHECKPOINT, self._offsets_by_dir("high_watermark"))

    async def _in_executor(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def _write_checkpoint_async(self, name: str, attr: str) -> None:
        async with self._checkpoint_lock:
            # Values are gathered on the loop thread; only the file writing runs in the executor.
            snapshot = {d: offsets for d, offsets in self._offsets_by_dir(attr).items()
                        if self._checkpointed.get((name, d)) != offsets}
            if snapshot:
                await self._in_executor(self._write_checkpoints, name, snapshot)

    # ------------------------------------------------------------------ retention

    def cleanup_logs(self, now_ms: int | None = None) -> tuple[int, bool]:
        """One retention pass over every log (renames only; nothing is unlinked here).

        Returns (segments deleted, whether any log start offset moved).
        """
        now = self._time() if now_ms is None else now_ms
        deleted = 0
        moved = False
        for tp, lg in list(self._logs.items()):
            if lg.closed:
                continue
            before = lg.log_start_offset
            try:
                deleted += lg.delete_old_segments(now)
            except OSError as exc:
                self.failure_channel.maybe_add_offline_log_dir(self._dir_of[tp], f"retention of {lg.dir}", exc)
            except Exception:  # one bad log must not stop retention for the others
                log.exception("%s: retention failed", lg.dir)
            moved = moved or lg.log_start_offset != before
        return deleted, moved

    async def log_start_offset_moved(self, lg: Log) -> None:
        """After DeleteRecords: drop the segments now below the start, then checkpoint it."""
        lg.delete_log_start_offset_breached()
        await self._write_checkpoint_async(LOG_START_OFFSET_CHECKPOINT, "log_start_offset")

    async def remove_due_segment_files(self, now_ms: int | None = None) -> int:
        """Unlink the ``.deleted`` segment files whose delay has passed (in the executor)."""
        now = self._time() if now_ms is None else now_ms
        paths: list[str] = []
        waiting = self.pending_work.file_deletes
        for lg in list(waiting):
            # A closed log's files go with its directory (deleted) or its failed disk (offline).
            if not lg.closed:
                paths += lg.take_due_file_deletes(now)
            if lg.closed or lg.next_file_delete_ms is None:
                waiting.discard(lg)
        if not paths:
            return 0
        return int(await self._in_executor(unlink_files, paths))

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Kafka's PeriodicProducerExpirationCheck over every log: the producers idle for
        producer.id.expiration.ms with no open transaction are forgotten; how many."""
        if self.producer_id_expiration_ms is None:
            return 0
        expiration_ms = self.producer_id_expiration_ms()
        now = self._time() if now_ms is None else now_ms
        removed = sum(lg.remove_expired_producers(expiration_ms, now) for lg in list(self._logs.values()))
        if removed:
            log.info("removed %d producer ids idle for %d ms or more (producer.id.expiration.ms)", removed,
                     expiration_ms)
        return removed

    def _next_wake_ms(self, now: int, last_retention: int, last_hw: int, last_pid: int) -> int:
        wake = min(self.flush_check_interval_ms, max(0, last_retention + self.retention_check_interval_ms - now),
                   max(0, last_hw + self.high_watermark_checkpoint_interval_ms - now))
        if self.producer_id_expiration_ms is not None:
            wake = min(wake, max(0, last_pid + self.producer_id_expiration_check_interval_ms - now))
        for lg in self.pending_work.file_deletes:
            due = lg.next_file_delete_ms
            if due is not None:
                wake = min(wake, max(0, due - now))
        return max(wake, 10)

    async def run_background(self, stop_event: asyncio.Event) -> None:
        """Periodic jobs until ``stop_event`` is set: flush.ms flushes, checkpoints, dir removal.

        The log cleaner's threads run alongside for as long as this does.
        """
        loop = asyncio.get_running_loop()
        if self.cleaner is not None:
            self.cleaner.start(loop)
        try:
            await self._background_loop(stop_event)
        finally:
            if self.cleaner is not None:
                # Joined off the loop: a cleaner thread may be waiting for a swap on the loop.
                await loop.run_in_executor(None, self.cleaner.stop)

    async def _background_loop(self, stop_event: asyncio.Event) -> None:
        last_rp = last_ls = last_hw = last_retention = last_pid = self._time()
        while not stop_event.is_set():
            now = self._time()
            # Each job on its own: one that fails (a log dir's disk, mostly: that dir goes
            # offline through the failure channel) must not hold back the others.
            due = self._timed_flushes_due(now)
            if due:
                for lg, result in zip(due, await asyncio.gather(*(lg.flush_until() for lg in due),
                                                                 return_exceptions=True), strict=True):
                    if isinstance(result, BaseException) and not isinstance(result, OSError):
                        log.error("%s: flush failed", lg.dir, exc_info=result)
            if now - last_rp >= self.recovery_point_checkpoint_interval_ms:
                last_rp = now
                await self._background_job("recovery point checkpoint", self._write_checkpoint_async(
                    RECOVERY_POINT_CHECKPOINT, "recovery_point"))
            if now - last_ls >= self.log_start_offset_checkpoint_interval_ms:
                last_ls = now
                await self._background_job("log start offset checkpoint", self._write_checkpoint_async(
                    LOG_START_OFFSET_CHECKPOINT, "log_start_offset"))
            if self.high_watermark_checkpoints and now - last_hw >= self.high_watermark_checkpoint_interval_ms:
                last_hw = now
                await self._background_job("high watermark checkpoint", self._write_checkpoint_async(
                    REPLICATION_OFFSET_CHECKPOINT, "high_watermark"))
            if any(t <= now for _, t in self._pending_deletes):
                await self._background_job("removal of deleted logs", self._in_executor(self.remove_deleted_dirs, now))
            # Kafka waits 30 s before the first retention check; here the first check comes
            # one interval after start-up, so a short interval takes effect at once.
            if now - last_retention >= self.retention_check_interval_ms:
                last_retention = now
                _, moved = self.cleanup_logs(now)
                if moved:
                    await self._background_job("log start offset checkpoint", self._write_checkpoint_async(
                        LOG_START_OFFSET_CHECKPOINT, "log_start_offset"))
            if now - last_pid >= self.producer_id_expiration_check_interval_ms:
                last_pid = now
                try:
                    self.remove_expired_producers(now)
                except Exception:
                    log.exception("producer id expiration failed")
            await self._background_job("removal of deleted segments", self.remove_due_segment_files(now))
            try:
                timeout = self._next_wake_ms(self._time(), last_retention, last_hw, last_pid) / 1000
                await asyncio.wait_for(stop_event.wait(), timeout=timeout)
            except TimeoutError:
                pass

    def _timed_flushes_due(self, now: int) -> list[Log]:
        """The logs whose flush.ms has elapsed; forgets those with nothing to flush on a timer."""
        due = []
        waiting = self.pending_work.timed_flush
        for lg in list(waiting):
            if lg.closed or lg.unflushed_messages == 0 or lg.config.flush_ms >= LONG_MAX:
                waiting.discard(lg)
            elif lg.flush_due(now):
                due.append(lg)
        return due

    @staticmethod
    async def _background_job(what: str, job: Coroutine[Any, Any, Any]) -> None:
        try:
            await job
        except Exception:
            log.exception("%s failed", what)

    # ------------------------------------------------------------------ failed dirs

    def _drop_dir(self, d: str) -> list[TopicPartition]:
        """Forget the logs of an offline dir, releasing their files; which they were."""
        gone = [tp for tp, dd in self._dir_of.items() if dd == d]
        # A future log goes with its dir, and with its current log's (Kafka keeps it on disk).
        for tp in [tp for tp, dd in self._future_dir_of.items() if dd == d or tp in gone]:
            del self._future_dir_of[tp]
            self._future_logs.pop(tp).go_offline()
        for tp in gone:
            lg = self._logs.pop(tp)
            del self._dir_of[tp]
            if self.cleaner is not None:
                self.cleaner.forget(tp)
            lg.go_offline()
        self._pending_deletes = [(p, t) for p, t in self._pending_deletes if os.path.dirname(p) != d]
        return gone

    def handle_log_dir_failure(self, d: str) -> list[TopicPartition]:
        """Kafka's LogManager.handleLogDirFailure: the dir is offline (the failure channel says
        so); its logs stop serving and are forgotten until a restart. Returns their partitions."""
        if not self.failure_channel.is_offline(d):
            raise ValueError(f"{d} is not offline")
        gone = self._drop_dir(d)
        log.warning("stopped serving %d partitions in the offline log directory %s", len(gone), d)
        return gone

    # ------------------------------------------------------------------ shutdown

    def shutdown(self) -> None:
        """Flush and close every log, write checkpoints and the clean-shutdown marker.  Blocking."""
        if self.cleaner is not None:
            self.cleaner.stop()  # normally already stopped with run_background
        self._shut_down = True
        if self._io_pool is not None:
            self._io_pool.shutdown(wait=True)  # logs being created: they are not registered
            self._io_pool = None
        # From here on the logs' small files are written and fsync'd where they change.
        self.metadata_writer.close()

        # Closing trims every active segment's indexes; Kafka leaves those to the page cache,
        # kaflet makes them durable before the clean-shutdown marker. One syncfs per log dir
        # does it where an fsync per index file took seconds at 10,000 partitions.
        whole_fs = has_syncfs()

        def close(chunk: list[Log]) -> list[tuple[Log, OSError]]:
            failed: list[tuple[Log, OSError]] = []
            error: BaseException | None = None
            for lg in chunk:
                try:
                    lg.flush_sync(sync_parent=False)  # the log dirs are fsync'd once, below
                    lg.close(sync=not whole_fs)
                except OSError as exc:
                    failed.append((lg, exc))
                except Exception as exc:  # noqa: BLE001 - raised below, once the others are closed
                    error = error or exc
            if error is not None:
                raise error  # any other failure aborts: no clean-shutdown marker
            return failed

        logs = [lg for lg in (*self._logs.values(), *self._future_logs.values()) if not lg.closed]
        # A few dozen slices rather than a task per log: at 10,000 logs, submitting and waiting
        # for 10,000 futures took the calling thread about a second, contending for the GIL
        # with the workers it fed.
        step = max(1, -(-len(logs) // (SHUTDOWN_THREADS * 4)))
        with ThreadPoolExecutor(SHUTDOWN_THREADS, thread_name_prefix="kaflet-log-close") as pool:
            # Nothing else touches the logs now: the loop is blocked in this call.
            futures = [pool.submit(close, logs[i:i + step]) for i in range(0, len(logs), step)]
            for future in futures:
                for lg, exc in future.result():
                    # Only that dir is left without its marker, so its logs are recovered.
                    self.failure_channel.maybe_add_offline_log_dir(os.path.dirname(lg.dir), f"closing {lg.dir}", exc)
        if whole_fs:
            for d in self.live_log_dirs:
                try:
                    syncfs(d)
                except OSError as exc:
                    self.failure_channel.maybe_add_offline_log_dir(d, f"syncing {d}", exc)
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()
        # An offline dir gets no marker: its logs were not closed cleanly, and the next start
        # must recover them.
        for d in self.live_log_dirs:
            path = os.path.join(d, CLEAN_SHUTDOWN_FILE)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(d)
        for fd in self._locks.values():
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        self._locks.clear()
        self._logs.clear()
        self._dir_of.clear()
        self._future_logs.clear()
        self._future_dir_of.clear()
