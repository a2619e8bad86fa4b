"""Moving a replica to another log directory of this broker (Kafka's ReplicaAlterLogDirsThread
and ReplicaAlterLogDirsManager, with the local leader end point).

``LogManager.create_future_log`` makes an empty ``-future`` log in the target directory;
``AlterLogDirsMover`` then copies the current log into it, in the broker's process (no socket):
batches are read from the current log's segment files (in the executor, as they may not be in
the page cache) and appended to the future log as a follower appends what its leader sent, with
the leader epochs they carry. It keeps following the current log's appends, its log start
offset and its high watermark, and when the current log is truncated (a new leader) the future
log is truncated to their common prefix by the leader epochs of both (Kafka's truncation of a
future replica through OffsetForLeaderEpoch on the current one).

What the current log has fsync'd (its recovery point) is fsync'd in the future log before the
swap, so flush.messages keeps its promise across a move. Once the future log has everything the
current one has, the two are swapped on the event loop
in one step, so no append comes in between (Kafka does it under the partition's lock):
``LogManager.replace_current_with_future_log`` renames the directories and the partition serves
from the new log. The last ``SYNC_TAIL_BYTES`` are read without leaving the loop, so a steady
stream of appends cannot keep the future log one batch behind for ever.

As in Kafka, one partition is copied at a time (topic order), and
``replica.alter.log.dirs.io.max.bytes.per.second`` bounds the copy: while the measured rate of
copied bytes is over it, nothing is read (a ``ReplicationQuota``, the same windowed rate as the
replication throttles); the check is repeated every ``THROTTLE_BACKOFF_S``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kaflet.log.errors import OffsetOutOfRangeError
from kaflet.log.log import Log
from kaflet.log.log_manager import LogManager
from kaflet.replication.partition import Partition
from kaflet.replication.quota import ReplicaQuota

log = logging.getLogger("kaflet.replica")

TopicPartition = tuple[str, int]
#: How long a move waits before looking at the throttle again while it is over its bound.
THROTTLE_BACKOFF_S = 0.05
#: A tail this small is read on the loop, so the swap follows it without an append between.
SYNC_TAIL_BYTES = 256 * 1024
#: Pause after an unexpected error of a move, before it is tried again.
ERROR_BACKOFF_S = 1.0


class AlterLogDirsMover:
    """Copies future logs from their current logs and swaps them in, one partition at a time."""

    def __init__(self, log_manager: LogManager, partitions: Callable[[str, int], Partition | None],
                 quota: ReplicaQuota, *, fetch_max_bytes: int = 1048576) -> None:
        self.log_manager = log_manager
        self._partition = partitions
        self.quota = quota
        self.fetch_max_bytes = fetch_max_bytes
        self._moving: set[TopicPartition] = set()
        self._flushed: set[TopicPartition] = set()  # moves whose future log was fsync'd near the end
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        #: Moves completed since start (for tests and metrics).
        self.completed = 0

    @property
    def moving(self) -> set[TopicPartition]:
        return set(self._moving)

    def add(self, topic: str, partition: int) -> None:
        """Copy this partition's future log (which must exist) until it replaces the current one."""
        self._moving.add((topic, partition))
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="ReplicaAlterLogDirsThread")

    def remove(self, topic: str, partition: int) -> None:
        """Stop copying the partition (its future log is left as it is)."""
        self._moving.discard((topic, partition))

    async def stop(self) -> None:
        task, self._task = self._task, None
        self._moving.clear()
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        current: TopicPartition | None = None
        truncations: dict[TopicPartition, int] = {}
        while True:
            if current not in self._moving:
                current = min(self._moving) if self._moving else None
                if current is None:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                truncations.pop(current, None)
                log.info("%s-%d: beginning/resuming its copy to %s (%d moves to do)", *current,
                         self.log_manager.future_log_dir_of(*current), len(self._moving))
            if self.quota.is_quota_exceeded():
                await asyncio.sleep(THROTTLE_BACKOFF_S)
                continue
            try:
                done = await self._step(current, truncations)
            except asyncio.CancelledError:
                raise
            except OSError as exc:
                # A disk error took a log dir offline (its failure channel says so); the move
                # ends with it, and a new AlterReplicaLogDirs starts over.
                log.warning("%s-%d: the move stopped: %s", *current, exc)
                done = True
            except Exception:
                log.exception("%s-%d: copy to the future log failed; retrying", *current)
                await asyncio.sleep(ERROR_BACKOFF_S)
                continue
            if done:
                self._moving.discard(current)
                self._flushed.discard(current)
                truncations.pop(current, None)
            await asyncio.sleep(0)  # let produce and fetch requests in between copy steps

    async def _step(self, tp: TopicPartition, truncations: dict[TopicPartition, int]) -> bool:
        """One copy step of ``tp``; True when its move is over (swapped, or gone)."""
        part = self._partition(*tp)
        future = self.log_manager.get_future_log(*tp)
        if part is None or future is None or part.log.offline or future.closed:
            return True
        cur = part.log
        if truncations.get(tp) != cur.truncations:
            truncate_future_log(cur, future)
            truncations[tp] = cur.truncations
        start = future.log_end_offset
        if start == cur.log_end_offset:
            self._swap(part)
            return True
        try:
            result = cur.read(start, self.fetch_max_bytes)
        except OffsetOutOfRangeError:
            # The current log's start passed the copy (retention, DeleteRecords).
            future.truncate_fully_and_start_at(cur.log_start_offset)
            return False
        if sum(r.size for r in result.regions) <= SYNC_TAIL_BYTES:
            if tp not in self._flushed and future.recovery_point < cur.recovery_point:
                # Nearly there: what the current log has on disk must be on disk in the new one
                # (flush.messages=1 acknowledged it as such). fsync'd off the loop now, once, so
                # that the swap has only the last few batches to fsync.
                self._flushed.add(tp)
                await future.flush_until(cur.recovery_point)
                return False
            # The tail: copied and swapped without leaving the loop, so a steady stream of
            # appends cannot keep the future log a batch behind for ever.
            progressed = self._append(cur, future, b"".join(r.read_bytes() for r in result.regions))
            if future.log_end_offset == cur.log_end_offset:
                self._swap(part)
                return True
            if not progressed:
                await asyncio.sleep(THROTTLE_BACKOFF_S)  # not expected: a hole in the current log
            return False
        data = await asyncio.get_running_loop().run_in_executor(
            None, lambda: b"".join(r.read_bytes() for r in result.regions))
        if part.log is not cur or future.closed or cur.truncations != truncations[tp] \
                or future.log_end_offset != start:
            return False  # changed while reading: the next step looks again
        self._append(cur, future, data)
        return False

    def _swap(self, part: Partition) -> None:
        """The future log has everything the current one has: it takes its place."""
        future = self.log_manager.get_future_log(part.topic, part.index)
        if future is not None and future.recovery_point < part.log.recovery_point:
            future.flush_sync()  # the few batches since the flush above; blocking, once a move
        part.log = self.log_manager.replace_current_with_future_log(part.topic, part.index)
        self.completed += 1
        # Waiting fetches read again, from the new log (the offsets are the same).
        part.wake_fetchers()

    def _append(self, cur: Log, future: Log, data: bytes) -> bool:
        """Append copied batches to the future log and follow the current log's offsets;
        whether anything was appended."""
        appended = future.append_as_follower(data)
        if appended is None:
            return False
        self.quota.record(appended.valid_bytes)
        hw = future.update_high_watermark(cur.high_watermark)
        if cur.log_start_offset > future.log_start_offset:
            future.maybe_increment_log_start_offset(min(cur.log_start_offset, hw))
        return True


def truncate_future_log(cur: Log, future: Log) -> None:
    """Cut the future log back to what it has in common with the current log, by their leader
    epochs (Kafka's getOffsetTruncationState, the current log in the leader's place)."""
    for _ in range(1000):  # each round that is not the last drops an epoch of the future log
        offset, last = _truncation_offset(cur, future)
        if offset is None:
            # The current log has nothing of the future log's epochs: start over from its start.
            future.truncate_fully_and_start_at(cur.log_start_offset)
            return
        future.truncate_to(min(offset, future.log_end_offset))
        if last:
            break
    if future.log_end_offset > cur.log_end_offset:
        future.truncate_to(cur.log_end_offset)


def _truncation_offset(cur: Log, future: Log) -> tuple[int | None, bool]:
    """Where one round cuts the future log (None: everything), and whether it is the last."""
    epoch = future.latest_epoch()
    if epoch < 0:
        return future.log_end_offset, True
    cur_epoch, cur_end = cur.end_offset_for_epoch(epoch)
    if cur_epoch == epoch:
        return cur_end, True
    fut_epoch, fut_end = future.end_offset_for_epoch(cur_epoch) if cur_epoch >= 0 else (-1, -1)
    if fut_epoch < 0:
        return None, True
    if fut_epoch == cur_epoch:
        return min(fut_end, cur_end), True
    return fut_end, False  # the future log does not know the epoch the current one ends with
