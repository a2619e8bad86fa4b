"""Reading and writing the __consumer_offsets partitions the coordinator owns.

Writes go through the partition's ordinary leader append path (producer id -1, acks=all
semantics) and are answered once the high watermark covers them (the delayed produce of
``kaflet.replication``), as Kafka answers a commit only when it is replicated. Loading replays a
partition from its log start to its log end (see ``OffsetsTopicStore.load``): the last record per
key wins and a null value (tombstone) deletes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kaflet.coordinator.group import schemas
from kaflet.protocol.errors import ErrorCode, KafkaError
from kaflet.protocol.primitives import DecodeError
from kaflet.protocol.records import Record, build_batch, decode_records, iter_batches
from kaflet.replication.delayed_produce import wait_for_acks
from kaflet.replication.partition import Partition

log = logging.getLogger("kaflet.coordinator")

GROUP_METADATA_TOPIC = "__consumer_offsets"
_LOAD_CHUNK_BYTES = 4 * 1024 * 1024

KeyValue = tuple[bytes, bytes | None]
#: The partition this broker hosts for (topic, index), or None (``ReplicaManager.get``).
PartitionLookup = Callable[[str, int], Partition | None]


@dataclass(slots=True)
class LoadedPartition:
    """The live state of one partition after replaying it."""

    groups: dict[str, schemas.GroupValue] = field(default_factory=dict)
    offsets: dict[str, dict[tuple[str, int], schemas.OffsetValue]] = field(default_factory=dict)


class GroupStore(Protocol):
    """Where the coordinator persists groups and offsets (the topic, or memory in unit tests)."""

    async def append(self, partition: int, records: list[KeyValue]) -> ErrorCode: ...

    async def load(self, partition: int) -> LoadedPartition: ...


def replay(loaded: LoadedPartition, key_bytes: bytes | None, value: bytes | None) -> None:
    """Apply one record of the topic to `loaded`."""
    if key_bytes is None:
        return
    try:
        key = schemas.decode_key(key_bytes)
        if isinstance(key, schemas.OffsetKey):
            tp = (key.topic, key.partition)
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

    async def append(self, partition: int, records: list[KeyValue]) -> ErrorCode:
        part = self._partition(self.topic, partition)
        if part is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        batch = build_batch([Record(i, 0, k, v) for i, (k, v) in enumerate(records)])
        try:
            result = part.append(memoryview(batch), -1)
        except KafkaError as exc:
            return exc.code
        except ValueError:  # the log was closed under us (shutdown, deletion)
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        except OSError:
            log.exception("append to %s-%d failed", self.topic, partition)
            return ErrorCode.KAFKA_STORAGE_ERROR
        if result.flush_needed:
            try:
                await part.log.flush_until(result.last_offset + 1)
            except OSError:
                log.exception("fsync of %s-%d failed", self.topic, partition)
                return ErrorCode.KAFKA_STORAGE_ERROR
        (error,) = await wait_for_acks([(part, result.last_offset + 1)], self.commit_timeout_ms)
        return error

    async def load(self, partition: int) -> LoadedPartition:
        """Replay the partition up to its log end offset, as Kafka's loader does: a broker that
        has just become leader holds every write the old leader acknowledged, but its high
        watermark may still lag behind (a follower learns it one fetch later), so a replay to
        the high watermark would bring back offsets older than the last ones committed."""
        loaded = LoadedPartition()
        await self.replay_partition(partition, lambda k, v: replay(loaded, k, v))
        return loaded

    async def replay_partition(self, partition: int, apply: Callable[[bytes | None, bytes | None], None]) -> None:
        """Call ``apply(key, value)`` for every data record from log start to log end."""
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
                if not h.is_control:
                    for rec in decode_records(mv[pos : pos + h.size]):
                        if h.base_offset + rec.offset_delta >= offset:
                            apply(rec.key, rec.value)
                offset = h.next_offset
                moved = True
            if not moved:
                break
            await asyncio.sleep(0)  # a big partition must not hold up the loop
