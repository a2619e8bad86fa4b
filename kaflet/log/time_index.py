"""The time index (``.timeindex``): 12-byte entries ``timestamp int64 | relative_offset int32``.

An entry (t, o) means: every record after offset o has a timestamp > t.  Entries are appended only
with a timestamp strictly above the previous one (an empty index behaves as if it held
(-1, base offset)) and never with a smaller offset.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right

from kaflet.log.errors import CorruptIndexError
from kaflet.log.index_file import IndexFile

_ENTRY = struct.Struct(">qi")


class TimeIndex(IndexFile):
    """Maps timestamps to offsets for ListOffsets by time."""

    ENTRY_SIZE = 12

    def _init_empty(self) -> None:
        self._ts = array("q")
        self._rel = array("i")

    def _parse(self, data: bytes) -> None:
        self._init_empty()
        for ts, rel in _ENTRY.iter_unpack(data):
            self._ts.append(ts)
            self._rel.append(rel)

    def _truncate_arrays(self, n: int) -> None:
        del self._ts[n:]
        del self._rel[n:]

    def _check_entries(self) -> None:
        ts, rel = self._ts, self._rel
        if self._n and rel[0] < 0:
            raise CorruptIndexError(f"{self.path}: entry before the base offset")
        for i in range(1, self._n):
            if ts[i] <= ts[i - 1] or rel[i] < rel[i - 1]:
                raise CorruptIndexError(f"{self.path}: entries out of order at {i}")

    def _check_last(self, entry: bytes, log_size: int) -> None:
        ts, rel = _ENTRY.unpack(entry)
        if rel < 0:
            raise CorruptIndexError(f"{self.path}: last entry is before the base offset")
        if ts < 0:  # entries are only added for a timestamp above the previous one, from -1 up
            raise CorruptIndexError(f"{self.path}: last entry has a negative timestamp")

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base offset) when empty."""
        self._ensure_loaded()
        if not self._n:
            return -1, self.base_offset
        return self._ts[-1], self.base_offset + self._rel[-1]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append (timestamp, offset) if the timestamp is above the last entry's; returns True if added."""
        self._ensure_loaded()
        if not skip_full_check and self.is_full():
            raise ValueError(f"time index {self.path} is full")
        last_ts, last_off = self.last_entry()
        if self._n and offset < last_off:
            raise ValueError(f"time index offset {offset} is below the last entry's {last_off}")
        if timestamp <= last_ts:
            return False
        rel = offset - self.base_offset
        self._write_entry(_ENTRY.pack(timestamp, rel))
        self._ts.append(timestamp)
        self._rel.append(rel)
        return True

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= target, else (-1, base offset)."""
        self._ensure_loaded()
        i = bisect_right(self._ts, target_timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._ts[i], self.base_offset + self._rel[i]

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        self._ensure_loaded()
        rel = offset - self.base_offset
        n = self._n
        while n and self._rel[n - 1] >= rel:
            n -= 1
        self.truncate_entries(n)
