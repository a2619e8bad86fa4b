"""Shared machinery of the offset and time indexes.

Storage choice: the entries live in memory, in compact ``array`` objects, and the file holds no
descriptor.  New entries are kept as encoded bytes and written to the file (opened for that
write only) when Kafka would have them on disk: a flush before its fsync, the roll and close
trims, a truncation.  So a segment costs no descriptor for its indexes (Kafka maps
them and closes the files), which lets a broker hold tens of thousands of partitions within its
descriptor limit.  Not mmap: Python's mmap cannot be closed while a memoryview of it is alive
(BufferError) and raises SIGBUS if the file shrinks under it; lookups are a ``bisect`` over an
array, faster in Python than unpacking from an mmap; and the indexes are sparse (one entry per
``index.interval.bytes``), so the memory cost is small.  Entries of an existing index are loaded
lazily on first use, so opening thousands of old segments stays cheap.

Entries not yet written are lost with the process, which recovery covers: after an unclean
shutdown every segment from the one holding the recovery point on is recovered (its indexes
rebuilt), and a segment below the recovery point was written by its roll and fsync'd by the
flush that moved the recovery point past it.

The file format is Kafka's: big-endian fixed-size entries, preallocated (zero-filled) to
``segment.index.bytes`` rounded down to a whole number of entries while the segment is active,
trimmed to the valid entries on roll and close; a reopened file's length defines its entries.
A reopened active segment's index is preallocated again by its first write, not at start-up.
"""

from __future__ import annotations

import os
import sys
from array import array

from kaflet.log.errors import CorruptIndexError


class IndexFile:
    """Base of OffsetIndex and TimeIndex: preallocation, trim, lazy load, deferred writes."""

    ENTRY_SIZE = 8

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._max_entries = max(1, max_index_size // self.ENTRY_SIZE)
        #: Entries encoded but not yet in the file; the file holds the ``_written`` before them.
        self._pending = bytearray()
        #: Written since the last fsync (read by the flush's executor thread, which clears it).
        self._unsynced = False
        self._size_misaligned = False
        # ``reset`` dropped every entry; the file is cut by the next write rather than at once,
        # so a rebuild (reset, then the trim) opens it once instead of twice.
        self._cut_pending = False
        #: A size the file takes at its next write (``resize``, and an empty index found at
        #: start-up): preallocating lazily spares a start-up two opens per partition.
        self._resize_to: int | None = None
        try:
            # A stat, not an open: tens of thousands of indexes are found at start-up.
            size = os.stat(path).st_size
            existed = True
        except FileNotFoundError:
            size, existed = 0, False
        #: Empty or missing when opened: a segment with data then has its indexes rebuilt.
        self.created_new = size == 0
        if size == 0:
            full = self._max_entries * self.ENTRY_SIZE
            if existed:
                self._file_size = 0
                self._resize_to = full
            else:
                # A new segment's index is created preallocated, as Kafka's.
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    os.ftruncate(fd, full)
                finally:
                    os.close(fd)
                self._file_size = full
            self._n = 0
            self._init_empty()
            self._loaded = True
        else:
            # A reopened file's length is its valid entries (Kafka's rule; hence the trim on close).
            self._file_size = size
            self._n = size // self.ENTRY_SIZE
            self._size_misaligned = size % self.ENTRY_SIZE != 0
            self._loaded = False
        self._written = self._n

    # subclasses hold their entries in arrays
    def _init_empty(self) -> None:
        raise NotImplementedError

    def _parse(self, data: bytes) -> None:
        raise NotImplementedError

    def _truncate_arrays(self, n: int) -> None:
        raise NotImplementedError

    def _check_entries(self) -> None:
        raise NotImplementedError

    def _read(self, size: int, position: int) -> bytes:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return os.pread(fd, size, position)
        finally:
            os.close(fd)

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        data = self._read(self._n * self.ENTRY_SIZE, 0)
        n = len(data) // self.ENTRY_SIZE
        self._parse(data[: n * self.ENTRY_SIZE])
        saved = self._n
        self._n = self._written = n
        try:
            self._check_entries()
        except CorruptIndexError:
            self._n = self._written = saved
            self._init_empty()
            raise
        self._loaded = True

    def quick_check(self, log_size: int) -> None:
        """Cheap load-time check (file size and last entry only); CorruptIndexError if bad."""
        if self._size_misaligned:
            raise CorruptIndexError(f"{self.path}: size is not a multiple of {self.ENTRY_SIZE}")
        if self.created_new and log_size > 0:
            raise CorruptIndexError(f"{self.path}: index file was missing")
        if not self._loaded and self._n:
            last = self._read(self.ENTRY_SIZE, (self._n - 1) * self.ENTRY_SIZE)
            self._check_last(last, log_size)

    def _check_last(self, entry: bytes, log_size: int) -> None:
        raise NotImplementedError

    @property
    def entries(self) -> int:
        """Number of valid entries."""
        return self._n

    @property
    def max_entries(self) -> int:
        return self._max_entries

    def is_full(self) -> bool:
        return self._n >= self._max_entries

    def sanity_check(self) -> None:
        """Raise CorruptIndexError if the file cannot be a valid index of this segment."""
        if self._size_misaligned:
            raise CorruptIndexError(f"{self.path}: size is not a multiple of {self.ENTRY_SIZE}")
        self._ensure_loaded()

    def _write_entry(self, data: bytes) -> None:
        self._pending += data
        self._n += 1

    def _update_file(self, truncate_to: int | None = None, size: int | None = None) -> None:
        """Write the pending entries; then optionally cut the file to ``truncate_to`` bytes and
        set it to ``size`` bytes (zero-filled), all through one short-lived descriptor."""
        cut = self._cut_pending
        if size is not None:
            self._resize_to = None  # an explicit size (a trim's) replaces a deferred one
        if not cut and not self._pending and truncate_to is None and (size is None or size == self._file_size):
            return
        if size is None:
            size = self._resize_to
        if cut and size is None and truncate_to is None:
            size = max(self._max_entries, self._n) * self.ENTRY_SIZE  # preallocated, as reset left it
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if cut:
                os.ftruncate(fd, 0)
                self._file_size = 0
            if self._pending:
                os.pwrite(fd, self._pending, self._written * self.ENTRY_SIZE)
                self._file_size = max(self._file_size, self._n * self.ENTRY_SIZE)
            if truncate_to is not None:
                os.ftruncate(fd, truncate_to)
                self._file_size = truncate_to
            if size is not None and size != self._file_size:
                os.ftruncate(fd, size)
                self._file_size = size
        finally:
            os.close(fd)
        self._pending.clear()
        self._written = self._n
        self._unsynced = True
        self._cut_pending = False
        self._resize_to = None

    def write_pending(self) -> None:
        """Put the entries added since the last write into the file (before an fsync)."""
        self._update_file()

    def truncate_entries(self, n: int) -> None:
        """Keep only the first ``n`` entries (zeroing the rest of the preallocated file)."""
        self._ensure_loaded()
        if n >= self._n:
            return
        self._truncate_arrays(n)
        if n >= self._written:
            del self._pending[(n - self._written) * self.ENTRY_SIZE :]
            self._n = n
            return
        self._pending.clear()
        self._n = self._written = n
        size = self._file_size if self._resize_to is None else self._resize_to
        self._update_file(truncate_to=n * self.ENTRY_SIZE, size=size)

    def reset(self) -> None:
        """Drop all entries (before a rebuild).  The file is emptied by the next write (the
        rebuild's trim, or the flush's ``write_pending``), which also sets its size: preallocated
        unless that write says otherwise."""
        self._init_empty()
        self._n = self._written = 0
        self._pending.clear()
        self._loaded = True
        self._size_misaligned = False
        if self._file_size:
            self._cut_pending = True
        else:
            # Nothing to cut (an empty index of an empty segment, recovered after a crash): the
            # rebuild's trim finds the file as it wants it and does not open it.
            self._resize_to = self._max_entries * self.ENTRY_SIZE

    def trim(self) -> None:
        """Shrink the file to exactly its valid entries (on roll, close, and after recovery)."""
        self._ensure_loaded()
        self._update_file(size=self._n * self.ENTRY_SIZE)

    def resize(self, max_index_size: int) -> None:
        """Preallocate again to ``max_index_size`` (the active segment after startup and after a
        truncation), in the file's next write: until then its length is its entries, which is
        also what a restart reads from it."""
        self._ensure_loaded()
        self._max_entries = max(1, max_index_size // self.ENTRY_SIZE)
        self._resize_to = max(self._max_entries, self._n) * self.ENTRY_SIZE

    def flush(self) -> None:
        """fsync what ``write_pending`` and the trims wrote (blocking: runs in an executor)."""
        if not self._unsynced:
            return
        self._unsynced = False  # before the fsync: a write after it sets it again
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename(self, new_path: str) -> None:
        os.rename(self.path, new_path)
        self.path = new_path

    def close(self) -> None:
        """Forget entries not yet written (the caller trims first when they must stay)."""
        self._pending.clear()
        self._written = self._n

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _be_int32_array(data: bytes) -> array:
    a = array("i")
    a.frombytes(data)
    if a.itemsize != 4:  # pragma: no cover - 'i' is 4 bytes on every platform we run on
        raise RuntimeError("int32 array expected")
    if sys.byteorder == "little":
        a.byteswap()
    return a
