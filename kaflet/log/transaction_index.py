"""A segment's aborted-transaction index, Kafka's ``.txnindex``.

One 34-byte entry per transaction whose ABORT marker landed in the segment: version int16 (0),
producer id, first offset, last offset (the marker's) and the last stable offset when the
marker was written.  Kafka creates the file lazily on the first entry and keeps the last
offsets strictly increasing.  kaflet departs from the lazy creation: every segment it creates gets
its ``.txnindex`` at once (empty until an abort), so a missing file after a crash or an operator's
mistake means "lost" and start-up rebuilds it (``LogLoader._check_txn_indexes``); Kafka reads an empty
file as no entries.  Entries are also held in memory (aborts are rare and small), so a
read_committed fetch costs no file access.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

from kaflet.log.errors import CorruptIndexError

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
        # Entries only ever go from the end, so cutting the file is enough; an emptied index
        # keeps its (empty) file, which says "no aborted transactions" rather than "lost".
        with open(self.path, "r+b") as f:
            f.truncate(len(entries) * ENTRY_SIZE)

    def ensure_file(self) -> None:
        """Create the (empty) file if it is missing."""
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644))

    def reset(self) -> None:
        """Drop every entry and leave an empty file (before rebuilding it from the log)."""
        with open(self.path, "wb"):
            pass
        self._entries = []

    def sanity_check(self, base_offset: int, next_base_offset: int | None) -> bool:
        """Raise CorruptIndexError unless the file is whole entries that can belong to the
        segment at ``base_offset`` (markers in [base, next base), last offsets increasing; Kafka
        checks only last offset >= base).  Returns whether the file exists (a missing file is
        not corrupt: the loader decides what it means)."""
        try:
            if os.stat(self.path).st_size == 0:  # the common case: one stat per segment
                self._entries = []
                return True
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return False
        if len(data) % ENTRY_SIZE:
            raise CorruptIndexError(f"{self.path}: size {len(data)} is not a multiple of {ENTRY_SIZE}")
        last = base_offset - 1
        entries: list[AbortedTxn] = []
        for version, pid, first, last_off, lso in _ENTRY.iter_unpack(data):
            if version != VERSION or pid < 0 or not 0 <= first <= last_off or last_off <= last \
                    or (next_base_offset is not None and last_off >= next_base_offset) \
                    or not 0 <= lso <= last_off + 1:
                raise CorruptIndexError(
                    f"{self.path}: entry (version {version}, producer {pid}, first {first}, last {last_off}, "
                    f"lso {lso}) cannot belong to the segment at {base_offset}")
            last = last_off
            entries.append(AbortedTxn(pid, first, last_off, lso))
        self._entries = entries  # read once: fetches use these
        return True

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
