"""Idempotent/transactional producer state of one partition, with Kafka's ``.snapshot`` files.

Checks follow Kafka's ProducerAppendInfo for client-origin appends (``AppendOrigin.CLIENT``):

* epoch below the known one -> INVALID_PRODUCER_EPOCH (47);
* a new epoch must start at sequence 0, unless the producer is unknown -> OUT_OF_ORDER (45);
* same epoch: first sequence must be last + 1 (wrapping Int.MAX -> 0), unless the producer is
  unknown: since Kafka 2.5 (KIP-360) an unknown producer (e.g. its state was removed by
  retention) is accepted at any sequence instead of answering UNKNOWN_PRODUCER_ID;
* a batch equal (epoch, first and last sequence) to one of the last 5 appended is a duplicate:
  the append is skipped and the original offsets are returned, with no error;
* a non-transactional batch while a transaction is open -> INVALID_TXN_STATE (48).

A coordinator's append (the offsets of TxnOffsetCommit) is checked for its epoch and transaction
state only: Kafka's coordinator writes such a batch at sequence 0 every time, so neither the
sequence nor the duplicate check applies. A replicated append refuses nothing for its epoch.

Transaction markers (control batches the coordinator writes through WriteTxnMarkers) follow
Kafka's appendEndTxnMarker: an epoch below the producer's -> INVALID_PRODUCER_EPOCH, a
coordinator epoch below the last marker's -> TRANSACTION_COORDINATOR_FENCED (52).  A marker
ending a transaction that wrote data completes it (``CompletedTxn``); the first offsets of the
open transactions and of completed ones not yet below the high watermark give the first
unstable offset, from which the log computes its last stable offset.
"""

from __future__ import annotations

import os
import re
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import crc32c

from kaflet.log.append_origin import AppendOrigin
from kaflet.log.checkpoints import write_atomic
from kaflet.log.transaction_index import AbortedTxn, TransactionIndex
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.records import (
    BATCH_HEADER_SIZE,
    INT32_MAX,
    BatchHeader,
    Record,
    RecordError,
    build_batch,
    parse_records,
)

from .errors import ProducerStateError

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

_SNAP_HEADER = struct.Struct(">hIi")
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")  # 46 bytes
_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")


CONTROL_ABORT = 0
CONTROL_COMMIT = 1


class CompletedTxn(NamedTuple):
    """A transaction ended by a marker: its data from first_offset, its marker at last_offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


def _decrement_sequence(seq: int, dec: int) -> int:
    if seq < dec:
        return INT32_MAX - (dec - seq) + 1
    return seq - dec


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(slots=True)
class BatchMetadata:
    """What is remembered of one appended batch."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return _decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerEntry:
    """State of one producer id: epoch, recent batches, open transaction."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp


class ProducerStateManager:
    """Producer entries of one partition plus its ``<offset>.snapshot`` files."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.producers: dict[int, ProducerEntry] = {}
        self.map_end_offset = 0  # state covers every batch below this offset
        self.ongoing_txns: dict[int, int] = {}  # producer id -> first offset of its open transaction
        # Completed transactions whose marker is not yet below the high watermark, by marker offset.
        self.unreplicated_txns: list[CompletedTxn] = []

    # ---- validation (no mutation) ----

    def check_batches(self, headers: Iterable[BatchHeader], origin: AppendOrigin = AppendOrigin.CLIENT
                      ) -> BatchMetadata | None:
        """Validate the producer-id batches of one append from ``origin``, in order, without
        changing state.

        Returns the cached metadata if a client's batch is a duplicate (the caller answers with
        its original offsets and writes nothing); raises ProducerStateError for invalid input.
        """
        client = origin is AppendOrigin.CLIENT
        pending: dict[int, tuple[int, int, int]] = {}  # pid -> (epoch, last_seq, txn_first)
        for h in headers:
            pid = h.producer_id
            if pid < 0:
                continue
            entry = self.producers.get(pid)
            last_seq = h.last_sequence
            if client and pid not in pending and entry is not None:
                dup = entry.find_duplicate(h.producer_epoch, h.base_sequence, last_seq)
                if dup is not None:
                    return dup
            known_epoch = entry.producer_epoch if entry is not None else NO_PRODUCER_EPOCH
            if pid in pending:
                cur_epoch, cur_last, txn_first = pending[pid]
            else:
                cur_epoch = known_epoch
                cur_last = entry.last_seq if entry is not None else NO_SEQUENCE
                txn_first = entry.current_txn_first_offset if entry is not None else -1
            if h.producer_epoch < cur_epoch and origin is not AppendOrigin.REPLICATION:
                raise ProducerStateError(
                    ErrorCode.INVALID_PRODUCER_EPOCH,
                    f"epoch {h.producer_epoch} of producer {pid} is below the current epoch {cur_epoch}",
                )
            # Only a client's batches carry the producer's own sequence (Kafka's checkSequence).
            if client and h.producer_epoch != cur_epoch:
                if h.base_sequence != 0 and cur_epoch != NO_PRODUCER_EPOCH:
                    raise ProducerStateError(
                        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        f"new epoch {h.producer_epoch} of producer {pid} must start at sequence 0, "
                        f"got {h.base_sequence}",
                    )
            elif client and known_epoch != NO_PRODUCER_EPOCH and not _in_sequence(cur_last, h.base_sequence):
                raise ProducerStateError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"out of order sequence for producer {pid}: {h.base_sequence} after {cur_last}",
                )
            if txn_first >= 0 and not h.is_transactional:
                raise ProducerStateError(
                    ErrorCode.INVALID_TXN_STATE,
                    f"non-transactional batch from producer {pid} during an open transaction",
                )
            pending[pid] = (h.producer_epoch, last_seq, 0 if h.is_transactional else txn_first)
        return None

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Validate a transaction marker the coordinator is about to write (no state change)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise ProducerStateError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"marker epoch {producer_epoch} of producer {producer_id} is below the current epoch "
                f"{entry.producer_epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise ProducerStateError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"marker coordinator epoch {coordinator_epoch} for producer {producer_id} is below the last "
                f"seen {entry.coordinator_epoch}",
            )

    # ---- updates ----

    def update(self, h: BatchHeader, control: tuple[int, int] | None = None) -> CompletedTxn | None:
        """Apply one appended batch (with its final offsets) to the state.

        ``control``: (control type, coordinator epoch) of a marker batch.  Returns the
        transaction a marker completed, if it had written data.
        """
        last_offset = h.base_offset + h.last_offset_delta
        completed = None
        if h.producer_id >= 0 and not h.is_control:
            entry = self.producers.get(h.producer_id)
            if entry is None:
                entry = self.producers[h.producer_id] = ProducerEntry(h.producer_id)
            entry.add_batch(h.producer_epoch, h.last_sequence, last_offset, h.last_offset_delta, h.max_timestamp)
            if h.is_transactional and entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = h.base_offset
                self.ongoing_txns[h.producer_id] = h.base_offset
        elif h.producer_id >= 0 and h.is_control:
            # End-transaction marker: the transaction is over; the epoch may have been bumped.
            entry = self.producers.get(h.producer_id)
            if entry is None:
                entry = self.producers[h.producer_id] = ProducerEntry(h.producer_id)
            if h.producer_epoch != entry.producer_epoch:
                entry.batches.clear()
                entry.producer_epoch = h.producer_epoch
            if entry.current_txn_first_offset >= 0 and control is not None:
                completed = CompletedTxn(h.producer_id, entry.current_txn_first_offset, h.base_offset,
                                         control[0] == CONTROL_ABORT)
                self.unreplicated_txns.append(completed)
            self.ongoing_txns.pop(h.producer_id, None)
            entry.current_txn_first_offset = -1
            if control is not None:
                entry.coordinator_epoch = control[1]
            entry.last_timestamp = h.max_timestamp
        self.map_end_offset = max(self.map_end_offset, last_offset + 1)
        return completed

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget the producers with no open transaction whose last write (its timestamp) is
        ``expiration_ms`` or more before ``now_ms`` (Kafka's removeExpiredProducers, which
        producer.id.expiration.ms drives); how many. Their next batch is then taken as from an
        unknown producer (KIP-360), and the next snapshot leaves them out."""
        expired = [pid for pid, e in self.producers.items()
                   if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO right after ``completed`` ends (for its .txnindex entry), as Kafka computes it:
        the first offset of the earliest other open transaction, else past the marker."""
        others = [first for pid, first in self.ongoing_txns.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest transaction not yet decided and replicated, if any."""
        first = min(self.ongoing_txns.values(), default=None)
        for txn in self.unreplicated_txns:
            if first is None or txn.first_offset < first:
                first = txn.first_offset
        return first

    def on_high_watermark(self, hw: int) -> None:
        """Completed transactions whose marker is below the high watermark are stable."""
        if self.unreplicated_txns and self.unreplicated_txns[0].last_offset < hw:
            self.unreplicated_txns = [t for t in self.unreplicated_txns if t.last_offset >= hw]

    def truncate(self) -> None:
        """Forget all state (before reloading from an earlier snapshot)."""
        self.producers.clear()
        self.ongoing_txns.clear()
        self.unreplicated_txns.clear()
        self.map_end_offset = 0

    # ---- snapshots ----

    def snapshot_path(self, offset: int) -> str:
        return os.path.join(self.dir, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def snapshot_offsets(self, names: Iterable[str] | None = None) -> list[int]:
        """Offsets of the snapshot files present, ascending (``names``: the directory's listing
        if the caller has one)."""
        out = []
        if names is None:
            try:
                names = os.listdir(self.dir)
            except FileNotFoundError:
                return []
        for name in names:
            m = _SNAPSHOT_NAME.match(name)
            if m:
                out.append(int(m.group(1)))
        return sorted(out)

    def encode_snapshot(self) -> bytes:
        """Kafka's snapshot format, version 1 (see kafka-facts 2.10)."""
        body = bytearray(_SNAP_HEADER.size)
        count = 0
        for e in self.producers.values():
            last = e.batches[-1] if e.batches else None
            body += _SNAP_ENTRY.pack(
                e.producer_id,
                e.producer_epoch,
                last.last_seq if last else NO_SEQUENCE,
                last.last_offset if last else -1,
                last.offset_delta if last else 0,
                e.last_timestamp,
                e.coordinator_epoch,
                e.current_txn_first_offset,
            )
            count += 1
        struct.pack_into(">i", body, 6, count)
        crc = crc32c.crc32c(memoryview(body)[6:])
        struct.pack_into(">hI", body, 0, SNAPSHOT_VERSION, crc)
        return bytes(body)

    @staticmethod
    def decode_snapshot(data: bytes) -> dict[int, ProducerEntry]:
        """Parse a snapshot; raises ValueError if it is corrupt."""
        if len(data) < _SNAP_HEADER.size:
            raise ValueError("snapshot too short")
        version, crc, count = _SNAP_HEADER.unpack_from(data, 0)
        if version != SNAPSHOT_VERSION:
            raise ValueError(f"unknown snapshot version {version}")
        if crc32c.crc32c(memoryview(data)[6:]) != crc:
            raise ValueError("snapshot CRC mismatch")
        if count < 0 or len(data) != _SNAP_HEADER.size + count * _SNAP_ENTRY.size:
            raise ValueError("snapshot size does not match its entry count")
        out: dict[int, ProducerEntry] = {}
        for pid, epoch, last_seq, last_off, delta, ts, coord, txn_first in _SNAP_ENTRY.iter_unpack(
            data[_SNAP_HEADER.size :]
        ):
            e = ProducerEntry(pid, epoch, coordinator_epoch=coord, current_txn_first_offset=txn_first,
                              last_timestamp=ts)
            if last_off >= 0:
                e.batches.append(BatchMetadata(last_seq, last_off, delta, ts))
            out[pid] = e
        return out

    def take_snapshot(self, offset: int | None = None, fsync: bool = False) -> str:
        """Write ``<offset>.snapshot`` (default: the map end offset); tmp + rename."""
        off = self.map_end_offset if offset is None else offset
        path = self.snapshot_path(off)
        write_atomic(path, self.encode_snapshot(), fsync=fsync)
        return path

    def load_latest_snapshot(self, max_offset: int, delete_newer: bool = True,
                             offsets: list[int] | None = None) -> int | None:
        """Load the newest valid snapshot at or below ``max_offset``; returns its offset.

        Corrupt snapshots are deleted, and those above ``max_offset`` too unless ``delete_newer``
        is False (a replay from an earlier point that ends at the LEO keeps them valid).
        ``offsets``: ``snapshot_offsets()`` if the caller has it (a file gone since is skipped).
        """
        self.truncate()
        for off in reversed(self.snapshot_offsets() if offsets is None else offsets):
            path = self.snapshot_path(off)
            if off > max_offset:
                if delete_newer:
                    _unlink(path)
                continue
            try:
                with open(path, "rb") as f:
                    self.producers = self.decode_snapshot(f.read())
            except (OSError, ValueError):
                _unlink(path)
                continue
            self.ongoing_txns = {pid: e.current_txn_first_offset for pid, e in self.producers.items()
                                 if e.current_txn_first_offset >= 0}
            self.map_end_offset = off
            return off
        return None

    def delete_snapshots_after(self, offset: int) -> None:
        """Remove snapshots above ``offset`` (after a truncation)."""
        for off in self.snapshot_offsets():
            if off > offset:
                _unlink(self.snapshot_path(off))

    def delete_snapshots_before(self, offset: int, offsets: list[int] | None = None) -> None:
        """Remove snapshots below ``offset`` (log start moved past them); ``offsets`` as
        ``load_latest_snapshot`` takes it."""
        for off in self.snapshot_offsets() if offsets is None else offsets:
            if off < offset:
                _unlink(self.snapshot_path(off))


def control_marker(batch: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of an end-transaction marker batch, as ``update`` takes
    it; None if the control batch is no such marker."""
    try:
        rec = parse_records(memoryview(batch)[BATCH_HEADER_SIZE:], 1)[0]
    except (RecordError, ValueError, IndexError):
        return None
    if rec.key is None or len(rec.key) < 4 or rec.value is None or len(rec.value) < 6:
        return None
    ctype = struct.unpack_from(">h", rec.key, 2)[0]
    if ctype not in (CONTROL_ABORT, CONTROL_COMMIT):
        return None
    return ctype, struct.unpack_from(">i", rec.value, 2)[0]


def end_txn_marker_batch(base_offset: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                         commit: bool, leader_epoch: int, now: int) -> bytes:
    """The batch of a COMMIT or ABORT marker (one control record), as ``control_marker`` reads it."""
    record = Record(0, 0, struct.pack(">hh", 0, CONTROL_COMMIT if commit else CONTROL_ABORT),
                    struct.pack(">hi", 0, coordinator_epoch))
    return build_batch([record], base_offset=base_offset, producer_id=producer_id, producer_epoch=producer_epoch,
                       base_timestamp=now, is_transactional=True, is_control=True,
                       partition_leader_epoch=leader_epoch)


def index_aborted_txn(completed: CompletedTxn | None, state: ProducerStateManager, txn_index: TransactionIndex) -> None:
    """Give an aborted transaction its entry in ``txn_index``, the one of the segment holding its
    marker (Kafka's LogSegment.updateTxnIndex), with its LSO in ``state``; a commit gets none."""
    if completed is not None and completed.aborted:
        txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                                    state.last_stable_offset(completed)))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
