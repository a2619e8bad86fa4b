"""The write path of the partitions led here: ``ReplicaManager.append_records`` and
``append_txn_markers`` append at once (synchronous writes into the page cache) and hand back a
``PendingAppends`` whose ``wait`` makes the request's guarantee hold before it is answered:
the fsync that flush.messages asks for, then, for acks=all, the high watermark covering every
appended batch (``delayed_produce.wait_for_acks``, Kafka's DelayedProduce).

Splitting the append from the wait lets a Produce handler answer later (a deferred response)
while the next request on the same connection appends already, and lets the transaction
coordinator's WriteTxnMarkers make the group coordinator's offsets visible as soon as the
marker is in the log, as Kafka does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from kaflet.log.append_origin import AppendOrigin
from kaflet.log.errors import KafkaStorageError
from kaflet.metadata.topic_names import is_internal
from kaflet.protocol.errors import ErrorCode, KafkaError
from kaflet.protocol.legacy_records import decode_message_set, record_set_magic, to_record_batch
from kaflet.protocol.records import MAGIC_V2, Record, RecordValidationError
from kaflet.replication.delayed_produce import wait_for_acks

if TYPE_CHECKING:
    from kaflet.log.log import AppendResult
    from kaflet.replication.partition import Partition

log = logging.getLogger("kaflet.replica")

VALID_ACKS = (-1, 0, 1)
#: The client id whose Produce may write Kafka's internal topics (AdminUtils.AdminClientId).
ADMIN_CLIENT_ID = "__admin_client"


class AppendEntry(NamedTuple):
    """One partition's records: a v2 batch, or with ``legacy`` a magic v0/v1 message set
    (Produce v0-2) that is converted to one v2 batch first."""

    topic: str
    partition: int
    records: memoryview
    legacy: bool = False


@dataclass(slots=True)
class PartitionAppendResult:
    """One partition's answer: an error, or where the records went."""

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    #: KIP-467: (index in the batch, message) of each offending record.
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    record_count: int = 0
    #: Records of a message set converted to a v2 batch (Produce v0-2).
    converted: int = 0


class PendingAppends:
    """What one request appended, still to be made durable and replicated (see ``wait``)."""

    __slots__ = ("results", "_flushes", "_replicated", "_started")

    def __init__(self, results: list[PartitionAppendResult], started: float) -> None:
        self.results = results
        # (result, partition, offset the log must be flushed to / the high watermark must reach)
        self._flushes: list[tuple[PartitionAppendResult, Partition, int]] = []
        self._replicated: list[tuple[PartitionAppendResult, Partition, int]] = []
        self._started = started

    @property
    def must_wait(self) -> bool:
        """Whether ``wait`` has anything to wait for (else the results are final now)."""
        return bool(self._flushes) or any(part.log.high_watermark < offset for _, part, offset in self._replicated)

    async def wait(self, timeout_ms: int) -> list[PartitionAppendResult]:
        """Wait for the fsyncs (flush.messages) and, for acks=all, until the high watermarks
        cover the appends or ``timeout_ms`` (counted from the request's arrival) passes."""
        for res, part, offset in self._flushes:
            try:
                await part.log.flush_until(offset)
            except OSError as exc:
                # The batch is in the page cache but not on disk: the guarantee asked for does
                # not hold, so it must not be acknowledged.
                log.debug("fsync of %s-%d failed: %s", part.topic, part.index, exc)
                res.error = ErrorCode.KAFKA_STORAGE_ERROR
                res.message = "Disk error while flushing the log"
        replicated = [r for r in self._replicated if r[0].error == ErrorCode.NONE]
        if replicated:
            remaining_ms = timeout_ms - int((time.monotonic() - self._started) * 1000)
            errors = await wait_for_acks([(part, offset) for _, part, offset in replicated], remaining_ms)
            for (res, _, _), error in zip(replicated, errors, strict=True):
                if error != ErrorCode.NONE:
                    res.error = error
        return self.results

    def _appended(self, res: PartitionAppendResult, part: Partition, appended: AppendResult,
                  required_acks: int) -> None:
        """Fill ``res`` from a successful append, and note what it waits for."""
        res.base_offset = appended.base_offset
        res.log_append_time = appended.log_append_time
        res.log_start_offset = appended.log_start_offset
        res.record_count = appended.record_count
        next_offset = appended.last_offset + 1
        if required_acks != 0 and appended.flush_needed:
            self._flushes.append((res, part, next_offset))
        if required_acks == -1:
            self._replicated.append((res, part, next_offset))


#: The partition led here, or None (``ReplicaManager.get``).
PartitionLookup = Callable[[str, int], "Partition | None"]


def append_records(partitions: PartitionLookup, entries: Sequence[AppendEntry], required_acks: int, *,
                   origin: AppendOrigin = AppendOrigin.CLIENT, internal_topics_allowed: bool = False,
                   started: float | None = None) -> PendingAppends:
    """Append each entry's records to its partition (Kafka's ReplicaManager.appendRecords): the
    way clients' records go into a log, and coordinators' transactional offset commits (their
    other writes are built in place, ``append_coordinator_records``). The results are final for every
    partition that failed; ``PendingAppends.wait`` completes the others once they are flushed
    (flush.messages) and, with ``required_acks`` -1, replicated. ``started``: the request's
    arrival (``time.monotonic()``), from which its timeout counts. ``origin`` is CLIENT or
    COORDINATOR (whose batches are not checked for the producer's sequence); a follower's
    appends (REPLICATION) go through ``Log.append_as_follower`` instead.

    Only the coordinators (and Kafka's admin client id) may write the internal topics: other
    appends to them answer INVALID_TOPIC_EXCEPTION, as Kafka's appendToLocalLog does.
    """
    pending = PendingAppends([], time.monotonic() if started is None else started)
    results = pending.results
    if required_acks not in VALID_ACKS:
        results.extend(PartitionAppendResult(ErrorCode.INVALID_REQUIRED_ACKS) for _ in entries)
        return pending
    for entry in entries:
        part = partitions(entry.topic, entry.partition)
        if part is None:
            results.append(PartitionAppendResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        elif not internal_topics_allowed and is_internal(entry.topic):
            results.append(PartitionAppendResult(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                                 f"Cannot append to internal topic {entry.topic}"))
        else:
            results.append(append_to(part, entry, required_acks, pending, origin))
    return pending


def fail(res: PartitionAppendResult, exc: Exception, part: Partition | None) -> None:
    """Fill ``res`` with what an append that raised ``exc`` answers (Kafka's error mapping)."""
    if isinstance(exc, KafkaError):
        res.error = exc.code
        res.message = exc.message
        if isinstance(exc, RecordValidationError):
            res.record_errors = exc.record_errors
    elif isinstance(exc, OSError):
        # The failure channel has said it once for the log dir (or the resource).
        res.error = ErrorCode.KAFKA_STORAGE_ERROR
        where = f" to {part.topic}-{part.index}" if part is not None else ""
        res.message = str(exc) if isinstance(exc, KafkaStorageError) else f"Disk error when appending{where}"
    else:  # ValueError: the log was closed under us (partition removed, broker stopping)
        res.error = ErrorCode.NOT_LEADER_OR_FOLLOWER
    if part is not None:
        res.log_start_offset = part.log.log_start_offset


def append_to(part: Partition, entry: AppendEntry, required_acks: int, pending: PendingAppends,
              origin: AppendOrigin) -> PartitionAppendResult:
    """Append one entry to a partition led here (see ``ReplicaManager.append_records``)."""
    res = PartitionAppendResult()
    try:
        records = entry.records
        if entry.legacy and record_set_magic(records) != MAGIC_V2:
            # Kafka's LogValidator up-converts message sets of magic v0/v1 on append.
            ms = decode_message_set(records, part.log.config.max_message_bytes)
            records = memoryview(to_record_batch(ms))
            res.converted = len(ms.records)
        appended = part.append(records, required_acks, origin)
    except (KafkaError, OSError, ValueError) as exc:
        fail(res, exc, part)
        return res
    pending._appended(res, part, appended, required_acks)
    return res


def append_coordinator_records(partitions: PartitionLookup, topic: str, partition: int,
                               records: list[Record]) -> PendingAppends:
    """Append a coordinator's own records (no producer id) to a partition led here with
    acks=all, built at the log end rather than validated (``Log.append_coordinator_records``):
    the state writes of every transaction and offset commit."""
    pending = PendingAppends([], time.monotonic())
    res = PartitionAppendResult()
    pending.results.append(res)
    part = partitions(topic, partition)
    if part is None:
        res.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return pending
    try:
        appended = part.append_coordinator_records(records)
    except (KafkaError, OSError, ValueError) as exc:
        fail(res, exc, part)
        return pending
    pending._appended(res, part, appended, -1)
    return pending


#: One marker to write: producer id, producer epoch, coordinator epoch, commit?, its partitions.
MarkerSpec = tuple[int, int, int, bool, Sequence[tuple[str, int]]]


def append_marker_to(part: Partition | None, spec: MarkerSpec, pending: PendingAppends) -> PartitionAppendResult:
    """Append one COMMIT/ABORT marker to a partition led here (acks=all, as Kafka writes them)."""
    res = PartitionAppendResult()
    if part is None:
        res.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return res
    producer_id, producer_epoch, coordinator_epoch, commit, _ = spec
    try:
        appended = part.append_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit)
    except (KafkaError, OSError, ValueError) as exc:
        fail(res, exc, part)
        return res
    pending._appended(res, part, appended, -1)
    return res
