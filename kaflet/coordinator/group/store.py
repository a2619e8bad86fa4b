"""Reading and writing the __consumer_offsets partitions the coordinator owns.

Writes are one ``append_records`` call each, with the coordinator's origin and acks=all, answered
once the high watermark covers them (the delayed produce of ``kaflet.replication``), as Kafka
answers a commit only when it is replicated. Loading replays a
partition from its log start to its log end (see ``OffsetsTopicStore.load``): the last record per
key wins and a null value (tombstone) deletes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kaflet.coordinator.group import consumer_records, schemas
from kaflet.log.append_origin import AppendOrigin
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.primitives import DecodeError
from kaflet.protocol.records import Record, build_batch, decode_records, iter_batches
from kaflet.replication.append import AppendEntry, append_coordinator_records, append_records
from kaflet.replication.partition import Partition

log = logging.getLogger("kaflet.coordinator")

GROUP_METADATA_TOPIC = "__consumer_offsets"
_LOAD_CHUNK_BYTES = 4 * 1024 * 1024

KeyValue = tuple[bytes, bytes | None]
#: A replayed data record: (key, value, log offset, producer id of its transaction or -1).
ReplayRecord = Callable[[bytes | None, bytes | None, int, int], None]
#: The partition this broker hosts for (topic, index), or None (``ReplicaManager.get``).
PartitionLookup = Callable[[str, int], Partition | None]


@dataclass(slots=True)
class LoadedPartition:
    """The live state of one partition after replaying it.

    Offsets a transaction committed (TxnOffsetCommit) are held per producer id in
    ``pending_txn`` until the transaction's COMMIT marker applies them (an ABORT drops them);
    those still open at the end stay pending. ``positions`` is the log offset each offset was
    written at, so a later plain commit is not overwritten by an earlier transaction's."""

    groups: dict[str, schemas.GroupValue] = field(default_factory=dict)
    offsets: dict[str, dict[tuple[str, int], schemas.OffsetValue]] = field(default_factory=dict)
    positions: dict[tuple[str, str, int], int] = field(default_factory=dict)
    pending_txn: dict[int, dict[str, dict[tuple[str, int], tuple[schemas.OffsetValue, int]]]] = \
        field(default_factory=dict)
    #: KIP-848's consumer groups, as their records left them.
    consumer_groups: dict[str, consumer_records.ConsumerGroupRecords] = field(default_factory=dict)

    def complete_txn(self, producer_id: int, commit: bool) -> None:
        """A COMMIT or ABORT marker of `producer_id` in the partition."""
        for group, offsets in self.pending_txn.pop(producer_id, {}).items():
            if not commit:
                continue
            for tp, (value, position) in offsets.items():
                if self.positions.get((group, *tp), -1) < position:
                    self.offsets.setdefault(group, {})[tp] = value
                    self.positions[(group, *tp)] = position


class GroupStore(Protocol):
    """Where the coordinator persists groups and offsets (the topic, or memory in unit tests)."""

    async def append(self, partition: int, records: list[KeyValue], producer_id: int = -1,
                     producer_epoch: int = -1) -> ErrorCode: ...

    async def load(self, partition: int) -> LoadedPartition: ...


def replay(loaded: LoadedPartition, key_bytes: bytes | None, value: bytes | None, position: int = -1,
           txn_producer_id: int = -1) -> None:
    """Apply one record of the topic (at log offset `position`; from a transaction of
    `txn_producer_id`, else -1) to `loaded`."""
    if key_bytes is None:
        return
    try:
        if len(key_bytes) >= 2 and int.from_bytes(key_bytes[:2], "big") in consumer_records.KEY_VERSIONS:
            consumer_records.replay(loaded.consumer_groups, key_bytes, value)
            return
        key = schemas.decode_key(key_bytes)
        if isinstance(key, schemas.OffsetKey):
            tp = (key.topic, key.partition)
            if txn_producer_id >= 0:
                if value is not None:  # a transaction only writes offsets (Kafka's TxnOffsetCommit)
                    loaded.pending_txn.setdefault(txn_producer_id, {}).setdefault(key.group, {})[tp] = (
                        schemas.decode_offset_value(value), position)
                return
            loaded.positions[(key.group, *tp)] = position
            if value is None:
                loaded.offsets.get(key.group, {}).pop(tp, None)
            else:
                loaded.offsets.setdefault(key.group, {})[tp] = schemas.decode_offset_value(value)
        elif isinstance(key, schemas.GroupKey):
            if value is None:
                loaded.groups.pop(key.group, None)
            else:
                loaded.groups[key.group] = schemas.decode_group_value(value)
    except DecodeError as exc:
        # Kafka would stop loading the partition; one unreadable record should not cost every
        # group on it, so it is skipped and reported.
        log.warning("skipping an unreadable record in %s: %s", GROUP_METADATA_TOPIC, exc)


class OffsetsTopicStore:
    """GroupStore over the broker's __consumer_offsets partitions.

    ``partitions`` finds the local partition; a write waits up to ``commit_timeout_ms``
    (offsets.commit.timeout.ms) for the high watermark to cover it. ``topic`` lets the
    transaction coordinator use the same append and replay for __transaction_state.
    """

    def __init__(self, partitions: PartitionLookup, commit_timeout_ms: int,
                 topic: str = GROUP_METADATA_TOPIC) -> None:
        self._partition = partitions
        self.commit_timeout_ms = commit_timeout_ms
        self.topic = topic

    async def append(self, partition: int, records: list[KeyValue], producer_id: int = -1,
                     producer_epoch: int = -1) -> ErrorCode:
        """Append `records` as one batch; a producer id makes it a transactional batch (the
        offsets of TxnOffsetCommit, which the transaction's marker commits or aborts)."""
        recs = [Record(i, 0, k, v) for i, (k, v) in enumerate(records)]
        if producer_id >= 0:
            # Base sequence 0, as Kafka's GroupMetadataManager writes it: the batch is not part of
            # the producer's own sequence, and a coordinator's append is not checked against it.
            batch = build_batch(recs, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=0,
                                is_transactional=True)
            pending = append_records(self._partition, [AppendEntry(self.topic, partition, memoryview(batch))], -1,
                                     origin=AppendOrigin.COORDINATOR, internal_topics_allowed=True)
        else:
            pending = append_coordinator_records(self._partition, self.topic, partition, recs)
        if not pending.must_wait:
            # Already covered by the high watermark (a lone replica): no coroutine to run.
            return pending.results[0].error
        (result,) = await pending.wait(self.commit_timeout_ms)
        return result.error

    async def load(self, partition: int) -> LoadedPartition:
        """Replay the partition up to its log end offset, as Kafka's loader does: a broker that
        has just become leader holds every write the old leader acknowledged, but its high
        watermark may still lag behind (a follower learns it one fetch later), so a replay to
        the high watermark would bring back offsets older than the last ones committed."""
        loaded = LoadedPartition()
        await self.replay_partition(partition, lambda k, v, pos, pid: replay(loaded, k, v, pos, pid),
                                    loaded.complete_txn)
        return loaded

    async def replay_partition(self, partition: int, apply: ReplayRecord,
                               on_marker: Callable[[int, bool], None] | None = None) -> None:
        """Call ``apply(key, value, offset, producer id of its transaction or -1)`` for every
        data record from log start to log end, and ``on_marker(producer id, commit)`` for
        every COMMIT/ABORT control record."""
        part = self._partition(self.topic, partition)
        if part is None:
            return
        plog = part.log
        offset = plog.log_start_offset
        end = plog.log_end_offset
        while offset < end:
            data = b"".join(r.read_bytes() for r in plog.read(offset, _LOAD_CHUNK_BYTES, end).regions)
            if not data:
                break
            mv = memoryview(data)
            moved = False
            for pos, h in iter_batches(mv):
                if h.next_offset <= offset:
                    continue
                txn_pid = h.producer_id if h.is_transactional else -1
                for rec in decode_records(mv[pos : pos + h.size]):
                    at = h.base_offset + rec.offset_delta
                    if at < offset:
                        continue
                    if not h.is_control:
                        apply(rec.key, rec.value, at, txn_pid)
                    elif on_marker is not None and rec.key is not None and len(rec.key) >= 4:
                        # Control record key: int16 version, int16 type (0 ABORT, 1 COMMIT).
                        kind = int.from_bytes(rec.key[2:4], "big", signed=True)
                        if kind in (0, 1):
                            on_marker(h.producer_id, kind == 1)
                offset = h.next_offset
                moved = True
            if not moved:
                break
            await asyncio.sleep(0)  # a big partition must not hold up the loop
