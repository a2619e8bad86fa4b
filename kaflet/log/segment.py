"""One log segment: ``<base>.log`` plus its ``.index``, ``.timeindex`` and ``.txnindex``.

The ``.log`` is opened in append mode when first used and stays open while the broker's
``SegmentFileCache`` (``log/segment_files.py``) keeps it; appends are ``os.write`` to the page
cache (no fsync, see ``flush``), reads are ``os.pread`` or zero-copy ``FileRegion``s.  Only batch
headers are ever parsed here.  The indexes hold no descriptor (``log/index_file.py``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator

import crc32c

from kaflet.log.config import LogConfig
from kaflet.log.errors import CorruptIndexError
from kaflet.log.offset_index import OffsetIndex
from kaflet.log.segment_files import SegmentFileCache
from kaflet.log.time_index import TimeIndex
from kaflet.log.transaction_index import TransactionIndex
from kaflet.protocol.records import (
    _HEADER,
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    BatchHeader,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

INT32_MAX = 2**31 - 1
# How much to read at once when scanning headers or recovering (a batch bigger than this is
# read on its own).
_SCAN_CHUNK = 64 * 1024
_RECOVER_CHUNK = 4 * 1024 * 1024


def segment_file_name(base_offset: int, suffix: str) -> str:
    """20-digit zero-padded base offset plus suffix, e.g. ``00000000000000000000.log``."""
    return f"{base_offset:020d}{suffix}"


class SharedFile:
    """Owns a segment's open ``.log`` file; it closes when no segment or region refers to it.

    CPython's reference counting makes the close deterministic: the segment drops its reference
    on close/delete, and every FileRegion handed to the network layer holds one until sent.
    """

    __slots__ = ("file",)

    def __init__(self, file: object) -> None:
        self.file = file

    def fileno(self) -> int:
        return self.file.fileno()  # type: ignore[attr-defined, no-any-return]

    def __del__(self) -> None:
        try:
            self.file.close()  # type: ignore[attr-defined]
        except Exception:
            pass


class FileRegion:
    """A byte range of a segment file, for ``os.sendfile``/``loop.sendfile`` or ``read_bytes``.

    It stays valid after the segment is closed or deleted, because it keeps the open file alive.
    Keep the region object itself referenced until the bytes are sent.  If the log is truncated
    meanwhile, fewer bytes than ``size`` may remain: senders must stop at end of file.
    """

    __slots__ = ("_handle", "position", "size")

    def __init__(self, handle: SharedFile, position: int, size: int) -> None:
        self._handle = handle
        self.position = position
        self.size = size

    @property
    def file(self) -> object:
        """The open binary file object (what ``loop.sendfile`` takes)."""
        return self._handle.file

    def fileno(self) -> int:
        return self._handle.file.fileno()  # type: ignore[attr-defined, no-any-return]

    def __len__(self) -> int:
        return self.size

    def read_bytes(self) -> bytes:
        """The region's bytes (for TLS and tests); shorter only if the file was truncated."""
        fd = self.fileno()
        parts: list[bytes] = []
        pos, left = self.position, self.size
        while left > 0:
            chunk = os.pread(fd, left, pos)
            if not chunk:
                break
            parts.append(chunk)
            pos += len(chunk)
            left -= len(chunk)
        return b"".join(parts)

    def __repr__(self) -> str:
        return f"FileRegion(position={self.position}, size={self.size})"


class LogSegment:
    """A segment of a partition's log starting at ``base_offset``."""

    def __init__(
        self,
        directory: str,
        base_offset: int,
        config: LogConfig,
        *,
        created_ms: int = 0,
        roll_jitter_ms: int = 0,
        files: SegmentFileCache | None = None,
        exists: bool = False,
    ) -> None:
        """``exists``: the segment's ``.log`` is on disk (start-up, a cleaner's swap), so it is
        opened on first use, not here: a start-up finds tens of thousands of them."""
        self.dir = directory
        self.base_offset = base_offset
        self.log_path = os.path.join(directory, segment_file_name(base_offset, LOG_SUFFIX))
        #: The broker's bound on open segment files; None keeps this one open until closed.
        self._files = files
        self._handle: SharedFile | None = None
        self._closed = False
        handle = None if exists else self._file()
        try:
            self.size = os.stat(self.log_path).st_size if handle is None else os.fstat(handle.fileno()).st_size
            self.offset_index = OffsetIndex(
                os.path.join(directory, segment_file_name(base_offset, INDEX_SUFFIX)), base_offset,
                config.segment_index_bytes,
            )
            self.time_index = TimeIndex(
                os.path.join(directory, segment_file_name(base_offset, TIME_INDEX_SUFFIX)), base_offset,
                config.segment_index_bytes,
            )
        except OSError:
            # Out of descriptors or space: release the file now, not at garbage collection.
            if handle is not None:
                self.release_file()
                handle.file.close()  # type: ignore[attr-defined]
            raise
        self.txn_index = TransactionIndex(os.path.join(directory, segment_file_name(base_offset, TXN_INDEX_SUFFIX)))
        self.index_interval_bytes = config.index_interval_bytes
        self.created_ms = created_ms
        self.roll_jitter_ms = roll_jitter_ms
        self._bytes_since_last_index_entry = 0
        self._max_ts: int | None = None  # loaded lazily from the time index
        self._shallow_offset_of_max_ts = -1
        self._rolling_based_timestamp: int | None = None

    # ---- the open file ----

    def _file(self) -> SharedFile:
        """The open ``.log``, opened again if the file cache closed it; callers keep the
        returned handle for the whole operation, so an eviction meanwhile cannot close it."""
        handle = self._handle
        if handle is None:
            if self._closed:
                raise OSError(errno.EBADF, "segment is closed", self.log_path)
            handle = self._handle = SharedFile(open(self.log_path, "a+b", buffering=0))  # noqa: SIM115
            if self._files is not None:
                self._files.opened(self)
        elif self._files is not None:
            self._files.touch(self)
        return handle

    def release_file(self) -> None:
        """Drop this segment's reference to its open file (the file cache makes room); regions
        and the cleaner holding it keep it open until they are done."""
        self._handle = None
        if self._files is not None:
            self._files.discard(self)

    # ---- state ----

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"

    def _load_max_ts(self) -> None:
        try:
            ts, off = self.time_index.last_entry()
        except CorruptIndexError:
            self.recover()  # sets the max timestamp while it rebuilds the indexes
            return
        self._max_ts, self._shallow_offset_of_max_ts = ts, off

    @property
    def max_timestamp_so_far(self) -> int:
        """Largest batch max-timestamp appended (-1 if unknown)."""
        if self._max_ts is None:
            self._load_max_ts()
        return self._max_ts  # type: ignore[return-value]

    @property
    def shallow_offset_of_max_timestamp(self) -> int:
        """Last offset of the batch holding ``max_timestamp_so_far``."""
        if self._max_ts is None:
            self._load_max_ts()
        return self._shallow_offset_of_max_ts

    @property
    def largest_timestamp(self) -> int:
        """Max timestamp of the segment, or the file's mtime (ms) if it has none (as Kafka)."""
        ts = self.max_timestamp_so_far
        if ts >= 0:
            return ts
        return int(os.stat(self.log_path).st_mtime * 1000)

    @property
    def rolling_based_timestamp(self) -> int | None:
        """Max timestamp of the first batch: the reference for segment.ms rolling."""
        if self._rolling_based_timestamp is None and self.size > 0:
            hdr = os.pread(self._file().fileno(), BATCH_HEADER_SIZE, 0)
            if len(hdr) == BATCH_HEADER_SIZE:
                self._rolling_based_timestamp = BatchHeader._make(_HEADER.unpack_from(hdr, 0)).max_timestamp
        return self._rolling_based_timestamp

    def shared_handle(self) -> SharedFile | None:
        """The open ``.log`` file (None once closed), opened if needed; holding it keeps the
        file readable through ``fileno()`` even after the segment is closed, renamed or deleted."""
        return None if self._closed else self._file()

    def update_config(self, config: LogConfig) -> None:
        self.index_interval_bytes = config.index_interval_bytes

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def should_roll(self, config: LogConfig, messages_size: int, max_timestamp: int, max_offset: int,
                    now_ms: int) -> bool:
        """Kafka's roll rule: size, segment.ms (by record time), full index, offset overflow."""
        if self.size > config.segment_bytes - messages_size:
            return True
        if self.size > 0:
            first_ts = self.rolling_based_timestamp
            waited = max_timestamp - first_ts if first_ts is not None and first_ts >= 0 else now_ms - self.created_ms
            if waited > config.segment_ms - self.roll_jitter_ms:
                return True
        return (
            self.offset_index.is_full()
            or self.time_index.is_full()
            or not self.can_convert_to_relative_offset(max_offset)
        )

    # ---- writes ----

    def append(self, largest_offset: int, largest_timestamp: int, shallow_offset_of_max_ts: int,
               data: bytes | bytearray | memoryview) -> None:
        """Append whole batches; index entries follow the ``index.interval.bytes`` rule."""
        if not self.can_convert_to_relative_offset(largest_offset):
            raise ValueError(f"offset {largest_offset} does not fit segment {self.base_offset}")
        position = self.size
        prev_max = self.max_timestamp_so_far, self._shallow_offset_of_max_ts
        index_entries = self.offset_index.entries, self.time_index.entries
        view = memoryview(data)
        n = len(view)
        handle = self._file()
        fd = handle.fileno()
        try:
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if largest_timestamp > prev_max[0]:
                self._max_ts = largest_timestamp
                self._shallow_offset_of_max_ts = shallow_offset_of_max_ts
            if self._bytes_since_last_index_entry > self.index_interval_bytes:
                self.offset_index.append(largest_offset, position)
                self.time_index.maybe_append(self._max_ts, self._shallow_offset_of_max_ts)  # type: ignore[arg-type]
                self._bytes_since_last_index_entry = 0
        except OSError:
            # A write cut short (ENOSPC, EIO) must leave the segment as it was: bytes of a half
            # batch past ``size`` would be read back after a restart as the start of the next
            # append, and a clean restart does not scan for them.
            self._max_ts, self._shallow_offset_of_max_ts = prev_max
            self._undo_append(fd, position, *index_entries)
            raise
        if position == 0:
            self._rolling_based_timestamp = largest_timestamp
        self.size += n
        self._bytes_since_last_index_entry += n

    def _undo_append(self, fd: int, position: int, offset_entries: int, time_entries: int) -> None:
        """Cut the files back to what they held before a failed append; an error here is
        raised too (the caller then takes the whole directory offline)."""
        os.ftruncate(fd, position)
        self.offset_index.truncate_entries(offset_entries)
        self.time_index.truncate_entries(time_entries)

    def write_index_entries(self) -> None:
        """Put the index entries added since the last write into their files (on the event
        loop, before ``flush`` runs in the executor)."""
        self.offset_index.write_pending()
        self.time_index.write_pending()

    def flush(self) -> None:
        """fsync the log and both indexes (call from an executor: it blocks; the loop called
        ``write_index_entries`` first)."""
        if self._closed:
            return
        handle = self._handle  # read once: the loop's file cache may drop it meanwhile
        if handle is not None:
            os.fsync(handle.fileno())
        else:
            # Closed by the file cache: an fsync through a new descriptor flushes the same
            # file's dirty pages. Not registered in the cache, which only the loop touches.
            fd = os.open(self.log_path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def on_become_inactive(self) -> None:
        """At roll: final time-index entry for the max timestamp, then trim both indexes."""
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self._max_ts, self._shallow_offset_of_max_ts, skip_full_check=True)  # type: ignore[arg-type]
        self.offset_index.trim()
        self.time_index.trim()

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position = found[0]
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = self.size - position
        os.ftruncate(self._file().fileno(), position)
        self.size = position
        self._load_max_ts()
        if self.size == 0:
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        return removed

    # ---- reads ----

    def _scan(self, start: int, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from ``start``; stops at a partial or bad header."""
        stop = self.size if end is None else min(end, self.size)
        if stop - start < BATCH_HEADER_SIZE:
            return
        handle = self._file()  # held while the caller iterates
        fd = handle.fileno()
        pos = start
        buf = b""
        buf_start = start
        unpack = _HEADER.unpack_from
        while stop - pos >= BATCH_HEADER_SIZE:
            off = pos - buf_start
            if off + BATCH_HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(_SCAN_CHUNK, stop - pos), pos)
                buf_start = pos
                off = 0
                if len(buf) < BATCH_HEADER_SIZE:
                    return
            h = BatchHeader._make(unpack(buf, off))
            if h.length < MIN_BATCH_LENGTH or pos + h.length + LOG_OVERHEAD > stop:
                return
            yield pos, h
            pos += h.length + LOG_OVERHEAD

    def batches(self, start_position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """Headers of all whole batches from ``start_position`` on."""
        return self._scan(start_position)

    def read_batch(self, position: int, header: BatchHeader) -> bytes:
        """The bytes of one batch."""
        return os.pread(self._file().fileno(), header.length + LOG_OVERHEAD, position)

    def _index_lookup(self, offset: int) -> tuple[int, int]:
        try:
            return self.offset_index.lookup(offset)
        except CorruptIndexError:
            self.recover()  # indexes are derived data: rebuild from the log
            return self.offset_index.lookup(offset)

    def time_index_lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last time-index entry <= ``timestamp``."""
        try:
            return self.time_index.lookup(timestamp)
        except CorruptIndexError:
            self.recover()
            return self.time_index.lookup(timestamp)

    def translate_offset(self, offset: int, starting_position: int = 0) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        _, pos = self._index_lookup(offset)
        for p, h in self._scan(max(pos, starting_position)):
            if h.base_offset + h.last_offset_delta >= offset:
                return p, h
        return None

    def peek(self, start_offset: int, max_size: int) -> FileRegion:
        """The bytes a read from ``start_offset`` would start near, found from the offset index
        alone: nothing of the log file is read, so the page cache is as it was (the disk load
        protector asks whether a read would go to the disk before the read's own header scan,
        and the kernel's read-ahead after it, can fill the cache)."""
        _, position = self._index_lookup(start_offset)
        position = min(position, self.size)
        return FileRegion(self._file(), position, max(0, min(self.size - position, max_size)))

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = False, hard_max_bytes_limit: bool = True) -> FileRegion | None:
        """A region starting at the batch holding ``start_offset``, at most ``max_size`` bytes
        (or the whole first batch if ``min_one_message``) and not beyond ``max_position``.

        Returns None if no batch in this segment reaches ``start_offset``.  Like Kafka, the
        region may end in the middle of a batch; clients discard a partial trailing batch.
        Without ``hard_max_bytes_limit`` a first batch that does not fit gives an empty region,
        as Kafka's ReplicaManager answers Fetch v3+ (it holds no record a client could read).
        """
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size}")
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        position, header = found
        limit = self.size if max_position is None else min(max_position, self.size)
        if self._closed:
            raise ValueError("segment is closed")
        handle = self._file()
        if max_size == 0 and not min_one_message:
            return FileRegion(handle, position, 0)
        first = header.length + LOG_OVERHEAD
        adjusted = max(max_size, first) if min_one_message else max_size
        if adjusted < first and not hard_max_bytes_limit:
            return FileRegion(handle, position, 0)
        size = max(0, min(limit - position, adjusted))
        return FileRegion(handle, position, size)

    def read_next_offset(self) -> int:
        """Offset after the last batch (the base offset if the segment is empty)."""
        _, pos = self._index_lookup(2**63 - 1)
        if pos > self.size:
            pos = 0
        nxt = self.base_offset
        for _, h in self._scan(pos):
            nxt = h.base_offset + h.last_offset_delta + 1
        return nxt

    # ---- recovery ----

    def sanity_check(self, full: bool = True) -> None:
        """Raise CorruptIndexError if either index cannot belong to this segment's log.

        ``full=False`` only checks file sizes and last entries (cheap, for startup).
        """
        self.offset_index.quick_check(self.size)
        self.time_index.quick_check(self.size)
        if full:
            self.offset_index.sanity_check()
            self.offset_index.check_positions(self.size)
            self.time_index.sanity_check()

    def recover(self, max_message_size: int | None = None,
                on_batch: Callable[[BatchHeader], None] | None = None) -> int:
        """Rebuild the indexes from the log, checking every batch's CRC; cut the log at the
        first torn or corrupt batch.  Returns the number of bytes truncated.

        ``max_message_size`` (optional) also treats larger batches as corrupt.  ``on_batch``
        is called with each valid header (leader-epoch cache and producer state use it).
        """
        self.offset_index.reset()
        self.time_index.reset()
        self._bytes_since_last_index_entry = 0
        max_ts, shallow = -1, -1
        valid = 0
        pos = 0
        size = self.size
        buf = b""
        buf_start = 0
        unpack = _HEADER.unpack_from
        # An empty segment (every partition without data, after a crash) is not opened.
        handle = self._file() if size else None
        fd = -1 if handle is None else handle.fileno()
        while size - pos >= BATCH_HEADER_SIZE:
            off = pos - buf_start
            if off + BATCH_HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(_RECOVER_CHUNK, size - pos), pos)
                buf_start, off = pos, 0
            h = BatchHeader._make(unpack(buf, off))
            bsize = h.length + LOG_OVERHEAD
            if h.magic != MAGIC_V2 or h.length < MIN_BATCH_LENGTH or pos + bsize > size:
                break
            if max_message_size is not None and bsize > max_message_size:
                break
            if off + bsize > len(buf):
                buf = os.pread(fd, max(bsize, min(_RECOVER_CHUNK, size - pos)), pos)
                buf_start, off = pos, 0
                if len(buf) < bsize:
                    break
            if crc32c.crc32c(memoryview(buf)[off + ATTRIBUTES_OFFSET : off + bsize]) != h.crc:
                break
            last = h.base_offset + h.last_offset_delta
            if h.base_offset < self.base_offset or not self.can_convert_to_relative_offset(last):
                break
            if h.max_timestamp > max_ts:
                max_ts, shallow = h.max_timestamp, last
            if self._bytes_since_last_index_entry > self.index_interval_bytes:
                self.offset_index.append(last, pos)
                self.time_index.maybe_append(max_ts, shallow)
                self._bytes_since_last_index_entry = 0
            self._bytes_since_last_index_entry += bsize
            if on_batch is not None:
                on_batch(h)
            pos += bsize
            valid = pos
        truncated = size - valid
        if truncated:
            os.ftruncate(fd, valid)
            self.size = valid
        self._max_ts, self._shallow_offset_of_max_ts = max_ts, shallow
        self._rolling_based_timestamp = None
        self.offset_index.trim()
        # As a closed segment has (and Kafka's recover adds): the entry of the largest timestamp,
        # so a rebuilt time index is the one the segment had and its max timestamp survives.
        if max_ts >= 0:
            self.time_index.maybe_append(max_ts, shallow, skip_full_check=True)
        self.time_index.trim()
        return truncated

    def rebuild_indexes_if_needed(self, full: bool = True) -> bool:
        """Sanity-check the indexes; rebuild (via ``recover``) if they are bad.  True if rebuilt."""
        try:
            self.sanity_check(full)
            return False
        except CorruptIndexError:
            self.recover()
            return True

    # ---- lifecycle ----

    def resize_indexes(self, max_index_size: int) -> None:
        self.offset_index.resize(max_index_size)
        self.time_index.resize(max_index_size)

    def close(self, sync: bool = False) -> None:
        """Final time-index entry, trim indexes, release the file (regions keep it open).

        ``sync`` also fsyncs the trimmed indexes (clean shutdown).
        """
        if self._closed:
            return
        try:
            try:
                if self._max_ts is not None and self._max_ts >= 0:
                    self.time_index.maybe_append(self._max_ts, self._shallow_offset_of_max_ts, skip_full_check=True)
                self.offset_index.trim()
                self.time_index.trim()
            except CorruptIndexError:
                pass  # left as is: the next start's sanity check rebuilds it
            if sync:
                self.offset_index.flush()
                self.time_index.flush()
        finally:
            self.offset_index.close()
            self.time_index.close()
            self.release_file()
            self._closed = True

    def close_handlers(self) -> None:
        """Close without touching the files (before deleting them)."""
        self.offset_index.close()
        self.time_index.close()
        self.release_file()
        self._closed = True

    def moved_to(self, directory: str) -> None:
        """The partition directory was renamed to ``directory``: the files keep their names."""
        self.dir = directory
        self.log_path = os.path.join(directory, os.path.basename(self.log_path))
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.path = os.path.join(directory, os.path.basename(index.path))

    def rename_to_deleted(self) -> list[str]:
        """Close the segment and rename its files to ``<name>.deleted``; returns the new paths.

        Retention and DeleteRecords use this instead of ``delete``: the rename is instant and
        atomic, while the files themselves are unlinked later (after file.delete.delay.ms), so
        fetches that already hold a region of the file are not cut short.  A crash in between
        is harmless: start-up removes every ``.deleted`` file.
        """
        self.close_handlers()
        renamed: list[str] = []
        for path in (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path):
            try:
                os.rename(path, path + DELETED_SUFFIX)
            except FileNotFoundError:
                continue
            renamed.append(path + DELETED_SUFFIX)
        return renamed

    def delete(self) -> None:
        """Close and remove the segment's files (open regions still read the old data)."""
        self.close_handlers()
        for path in (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    @property
    def closed(self) -> bool:
        return self._closed
