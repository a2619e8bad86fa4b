"""The offset index (``.index``): sparse 8-byte entries ``relative_offset int32 | position int32``."""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right

from kaflet.log.errors import CorruptIndexError
from kaflet.log.index_file import IndexFile, _be_int32_array

_ENTRY = struct.Struct(">ii")


class OffsetIndex(IndexFile):
    """Maps offsets to byte positions in the segment's ``.log``; lookups are a binary search."""

    ENTRY_SIZE = 8

    def _init_empty(self) -> None:
        self._rel = array("i")
        self._pos = array("i")

    def _parse(self, data: bytes) -> None:
        a = _be_int32_array(data)
        self._rel = a[0::2]
        self._pos = a[1::2]

    def _truncate_arrays(self, n: int) -> None:
        del self._rel[n:]
        del self._pos[n:]

    def _check_entries(self) -> None:
        rel, pos = self._rel, self._pos
        if self._n and (rel[-1] < 0 or rel[0] < 0 or pos[0] < 0):
            raise CorruptIndexError(f"{self.path}: entry before the base offset")
        for i in range(1, self._n):
            if rel[i] <= rel[i - 1] or pos[i] < pos[i - 1]:
                raise CorruptIndexError(f"{self.path}: entries out of order at {i}")

    def _check_last(self, entry: bytes, log_size: int) -> None:
        rel, pos = _ENTRY.unpack(entry)
        if rel < 0 or pos < 0 or pos >= max(log_size, 1):
            raise CorruptIndexError(f"{self.path}: last entry ({rel}, {pos}) is out of range")

    def check_positions(self, log_size: int) -> None:
        """Raise CorruptIndexError if an entry points past the end of the log."""
        self._ensure_loaded()
        if self._n and self._pos[-1] >= max(log_size, 1):
            raise CorruptIndexError(f"{self.path}: entry points past the end of the log")

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when empty."""
        self._ensure_loaded()
        return self.base_offset + self._rel[-1] if self._n else self.base_offset

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets must strictly increase and the index must not be full."""
        self._ensure_loaded()
        rel = offset - self.base_offset
        if self._n and rel <= self._rel[-1]:
            raise ValueError(f"index offset {offset} is not above the last entry {self.last_offset}")
        if self.is_full():
            raise ValueError(f"offset index {self.path} is full")
        self._write_entry(_ENTRY.pack(rel, position))
        self._rel.append(rel)
        self._pos.append(position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry <= target, else (base offset, 0)."""
        self._ensure_loaded()
        i = bisect_right(self._rel, target_offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i], self._pos[i]

    def entry(self, i: int) -> tuple[int, int]:
        self._ensure_loaded()
        return self.base_offset + self._rel[i], self._pos[i]

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        self._ensure_loaded()
        self.truncate_entries(bisect_right(self._rel, offset - self.base_offset - 1))
