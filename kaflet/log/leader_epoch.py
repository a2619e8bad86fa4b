"""The leader-epoch cache of one partition, persisted as ``leader-epoch-checkpoint``."""

from __future__ import annotations

import os
from collections.abc import Callable

from kaflet.log.checkpoints import (
    CheckpointError,
    format_leader_epoch_checkpoint,
    parse_leader_epoch_checkpoint,
    read_small_file,
    write_atomic,
)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """Ascending (epoch, start offset) pairs: the first offset written in each leader epoch.

    ``write`` takes the checkpoint's new content when it changes (the log's MetadataWriter,
    which makes it durable before the log's data), and whether a batch may wait for some other
    write to start it (``flush(defer=True)``); ``withdraw`` takes back such a write not yet
    started. Without them the file is written and fsync'd at once.
    """

    def __init__(self, path: str, write: Callable[[bytes, bool], None] | None = None,
                 withdraw: Callable[[], bool] | None = None) -> None:
        self.path = path
        self._write = write
        self._withdraw = withdraw
        # What the file holds while none of this cache's writes has started (None: unknown, or
        # no file), and what it holds once every write handed over so far is done.
        self._on_disk: bytes | None = None
        self._last_written: bytes | None = None
        try:
            data = read_small_file(path)
            self._entries: list[tuple[int, int]] = parse_leader_epoch_checkpoint(data, path)
            self._on_disk = self._last_written = data
        except FileNotFoundError:
            self._entries = []
        except CheckpointError:
            # Derived data: the log's batches carry their epochs, and recovery re-assigns them.
            self._entries = []
        self._dirty = False

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, flush: bool = True) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns True if the cache changed.

        Like Kafka, entries with an epoch >= ``epoch`` or a start offset >= ``start_offset``
        are dropped first, so the cache stays strictly ascending in both.
        """
        if epoch < 0:
            return False
        if self._entries:
            last_epoch, last_start = self._entries[-1]
            if last_epoch == epoch and start_offset >= last_start:
                return False
            if last_epoch > epoch and start_offset >= last_start:
                # An older epoch after a newer one: ignore, as Kafka does for such late batches.
                return False
        while self._entries and (self._entries[-1][0] >= epoch or self._entries[-1][1] >= start_offset):
            self._entries.pop()
        self._entries.append((epoch, start_offset))
        self._dirty = True
        if flush:
            self.flush()
        return True

    def flush(self, defer: bool = False) -> None:
        """Write the checkpoint file (tmp + fsync + rename), or hand it to ``write``; nothing
        when the file holds (or will hold) this content already.

        ``defer``: the load's rewrite. It rides with the writer's next batch, and a later flush
        back to the content the load read takes it back: a restart that elects the partition at
        the epoch it had (a dropped entry of an empty log comes back) writes nothing, instead of
        a rewrite at the load and another at the election."""
        data = format_leader_epoch_checkpoint(self._entries)
        self._dirty = False
        if data == self._last_written:
            return
        if data == self._on_disk and self._withdraw is not None and self._withdraw():
            self._last_written = data
            return
        # Only a first deferred write can be taken back to the loaded content: an earlier one
        # may already be in a batch.
        keep = defer and self._write is not None and self._on_disk is not None and self._last_written == self._on_disk
        if self._write is not None:
            self._write(data, not defer)
        else:
            write_atomic(self.path, data)
        self._last_written = data
        if not keep:
            self._on_disk = None

    def flush_if_dirty(self, defer: bool = False) -> None:
        if self._dirty:
            self.flush(defer)

    def epoch_for_offset(self, offset: int) -> int:
        """The leader epoch under which ``offset`` was written, or -1 if unknown."""
        i = self._floor_by_offset(offset)
        return self._entries[i][0] if i >= 0 else UNDEFINED_EPOCH

    def _floor_by_offset(self, offset: int) -> int:
        lo, hi = 0, len(self._entries)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._entries[mid][1] <= offset:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= requested, end offset of that epoch)."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        higher = next((e for e in self._entries if e[0] > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        lower = [e for e in self._entries if e[0] <= requested_epoch]
        if not lower:
            return requested_epoch, higher[1]
        return lower[-1][0], higher[1]

    def truncate_from_end(self, end_offset: int, flush: bool = True) -> None:
        """Drop entries starting at or after ``end_offset`` (log truncated to it)."""
        before = len(self._entries)
        self._entries = [e for e in self._entries if e[1] < end_offset]
        if len(self._entries) != before:
            self._dirty = True
            if flush:
                self.flush()

    def truncate_from_start(self, start_offset: int, flush: bool = True) -> None:
        """Forget epochs wholly below ``start_offset``; the one covering it now starts there."""
        i = self._floor_by_offset(start_offset)
        if i < 0:
            return
        kept = [(self._entries[i][0], max(self._entries[i][1], start_offset))] + self._entries[i + 1 :]
        if kept != self._entries:
            self._entries = kept
            self._dirty = True
            if flush:
                self.flush()

    def clear(self, flush: bool = True) -> None:
        self._entries = []
        self._dirty = True
        if flush:
            self.flush()

    def delete_file(self) -> None:
        self._on_disk = self._last_written = None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
