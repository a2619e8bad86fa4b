"""Shared machinery of the offset and time indexes.

Storage choice: plain file I/O (``os.pwrite`` per new entry) plus an in-memory copy of the entries
in compact ``array`` objects, instead of mmap.  Reasons: Python's mmap cannot be closed while a
memoryview of it is alive (BufferError) and raises SIGBUS if the file shrinks under it; lookups
are a ``bisect`` over an array, faster in Python than unpacking from an mmap; and the indexes are
sparse (one entry per ``index.interval.bytes``), so the memory cost is small.  Entries of an
existing index are loaded lazily on first use, so opening thousands of old segments stays cheap.

The file format is Kafka's: big-endian fixed-size entries, preallocated (zero-filled) to
``segment.index.bytes`` rounded down to a whole number of entries while the segment is active,
trimmed to the valid entries on roll and close; a reopened file's length defines its entries.
"""

from __future__ import annotations

import os
import sys
from array import array

from kaflet.log.errors import CorruptIndexError


class IndexFile:
    """Base of OffsetIndex and TimeIndex: file handling, preallocation, trim, lazy load."""

    ENTRY_SIZE = 8

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._max_entries = max(1, max_index_size // self.ENTRY_SIZE)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        self.created_new = size == 0
        if size == 0:
            os.ftruncate(self._fd, self._max_entries * self.ENTRY_SIZE)
            self._file_size = self._max_entries * self.ENTRY_SIZE
            self._n = 0
            self._init_empty()
            self._loaded = True
        else:
            # A reopened file's length is its valid entries (Kafka's rule; hence the trim on close).
            self._file_size = size
            self._n = size // self.ENTRY_SIZE
            self._size_misaligned = size % self.ENTRY_SIZE != 0
            self._loaded = False

    # subclasses hold their entries in arrays
    def _init_empty(self) -> None:
        raise NotImplementedError

    def _parse(self, data: bytes) -> None:
        raise NotImplementedError

    def _truncate_arrays(self, n: int) -> None:
        raise NotImplementedError

    def _check_entries(self) -> None:
        raise NotImplementedError

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        data = os.pread(self._fd, self._n * self.ENTRY_SIZE, 0)
        n = len(data) // self.ENTRY_SIZE
        self._parse(data[: n * self.ENTRY_SIZE])
        saved = self._n
        self._n = n
        try:
            self._check_entries()
        except CorruptIndexError:
            self._n = saved
            self._init_empty()
            raise
        self._loaded = True

    def quick_check(self, log_size: int) -> None:
        """Cheap load-time check (file size and last entry only); CorruptIndexError if bad."""
        if getattr(self, "_size_misaligned", False):
            raise CorruptIndexError(f"{self.path}: size is not a multiple of {self.ENTRY_SIZE}")
        if self.created_new and log_size > 0:
            raise CorruptIndexError(f"{self.path}: index file was missing")
        if not self._loaded and self._n:
            last = os.pread(self._fd, self.ENTRY_SIZE, (self._n - 1) * self.ENTRY_SIZE)
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
        if getattr(self, "_size_misaligned", False):
            raise CorruptIndexError(f"{self.path}: size is not a multiple of {self.ENTRY_SIZE}")
        self._ensure_loaded()

    def _write_entry(self, data: bytes) -> None:
        os.pwrite(self._fd, data, self._n * self.ENTRY_SIZE)
        self._n += 1
        end = self._n * self.ENTRY_SIZE
        if end > self._file_size:
            self._file_size = end

    def truncate_entries(self, n: int) -> None:
        """Keep only the first ``n`` entries (zeroing the rest of the preallocated file)."""
        self._ensure_loaded()
        if n >= self._n:
            return
        self._truncate_arrays(n)
        self._n = n
        size = self._file_size
        os.ftruncate(self._fd, n * self.ENTRY_SIZE)
        os.ftruncate(self._fd, size)  # back to the preallocated size, zero-filled

    def reset(self) -> None:
        """Drop all entries (before a rebuild); the file keeps its preallocated size."""
        self._init_empty()
        self._n = 0
        self._loaded = True
        self._size_misaligned = False
        os.ftruncate(self._fd, 0)
        self._file_size = self._max_entries * self.ENTRY_SIZE
        os.ftruncate(self._fd, self._file_size)

    def trim(self) -> None:
        """Shrink the file to exactly its valid entries (on roll, close, and after recovery)."""
        self._ensure_loaded()
        size = self._n * self.ENTRY_SIZE
        if size != self._file_size:
            os.ftruncate(self._fd, size)
            self._file_size = size

    def resize(self, max_index_size: int) -> None:
        """Preallocate again to ``max_index_size`` (the active segment after startup)."""
        self._ensure_loaded()
        self._max_entries = max(1, max_index_size // self.ENTRY_SIZE)
        size = max(self._max_entries, self._n) * self.ENTRY_SIZE
        if size != self._file_size:
            os.ftruncate(self._fd, size)
            self._file_size = size

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def rename(self, new_path: str) -> None:
        os.rename(self.path, new_path)
        self.path = new_path

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

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
