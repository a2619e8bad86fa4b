"""A segment's aborted-transaction index, Kafka's ``.txnindex``.

One 34-byte entry per transaction whose ABORT marker landed in the segment: version int16 (0),
producer id, first offset, last offset (the marker's) and the last stable offset when the
marker was written.  Kafka creates the file lazily on the first entry and keeps the last
offsets strictly increasing; so does this class.  Entries are also held in memory (aborts are
rare and small), so a read_committed fetch costs no file access.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    """One aborted transaction: the producer's data from first_offset, its marker at last_offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """The ``.txnindex`` file of one segment, loaded on first use."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        out: list[AbortedTxn] = []
        last = -1
        # A torn last entry (crash mid-append) or anything not increasing ends the index.
        for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
            version, pid, first, last_off, lso = _ENTRY.unpack_from(data, pos)
            if version != VERSION or last_off <= last:
                break
            out.append(AbortedTxn(pid, first, last_off, lso))
            last = last_off
        if len(out) * ENTRY_SIZE != len(data):
            self._rewrite(out)
        return out

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        if not entries:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            return
        with open(self.path, "r+b") as f:
            f.truncate(len(entries) * ENTRY_SIZE)

    def append(self, txn: AbortedTxn) -> bool:
        """Add an entry; one whose last offset is not above the last entry's is already there
        (a replay after restart) and is skipped.  Returns whether it was written."""
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            return False
        with open(self.path, "ab") as f:
            f.write(_ENTRY.pack(VERSION, *txn))
        entries.append(txn)
        return True

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above ``offset`` (the log was truncated there)."""
        entries = self.entries
        keep = [e for e in entries if e.last_offset < offset]
        if len(keep) != len(entries):
            self._entries = keep
            self._rewrite(keep)

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound); True when a later segment cannot add
        any (an entry's last stable offset reached the upper bound), as Kafka's collectAbortedTxns."""
        out = []
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                out.append(e)
            if e.last_stable_offset >= upper_bound:
                return out, True
        return out, False

    def flush(self) -> None:
        """fsync the file if it exists (with the segment's flush)."""
        if not self.entries:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
