"""The group coordinator's cache of groups and everything it reads from and writes to
__consumer_offsets: loading a partition's groups, storing group metadata and offsets,
transactional offsets until their marker, tombstones and offset expiry.

Kafka splits its group coordinator the same way: GroupMetadataManager owns the cache and the
topic, GroupCoordinator (``coordinator.py``) the membership protocol and the request checks. This
module starts no timers and completes no member's request; the coordinator does both.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kaflet.coordinator.group import schemas
from kaflet.coordinator.group.consumer_records import ConsumerGroupRecords
from kaflet.coordinator.group.group import Group, GroupState
from kaflet.coordinator.group.hashing import partition_for
from kaflet.coordinator.group.member import Member
from kaflet.coordinator.group.store import GroupStore, KeyValue
from kaflet.protocol.errors import ErrorCode

log = logging.getLogger("kaflet.coordinator")

E = ErrorCode
S = GroupState
TopicPartition = tuple[str, int]


@dataclass(slots=True)
class GroupConfig:
    """The broker configs the coordinator honours (Kafka's names in from_broker)."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = 2**31 - 1
    num_partitions: int = 50
    metadata_max_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_check_interval_ms: int = 600_000

    @classmethod
    def from_broker(cls, cfg: Mapping[str, Any]) -> GroupConfig:
        return cls(
            min_session_timeout_ms=cfg["group.min.session.timeout.ms"],
            max_session_timeout_ms=cfg["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=cfg["group.initial.rebalance.delay.ms"],
            max_size=cfg["group.max.size"],
            num_partitions=cfg["offsets.topic.num.partitions"],
            metadata_max_bytes=cfg["offset.metadata.max.bytes"],
            retention_ms=cfg["offsets.retention.minutes"] * 60_000,
            retention_check_interval_ms=cfg["offsets.retention.check.interval.ms"],
        )


def _group_store_error(code: ErrorCode) -> ErrorCode:
    """How a failed group metadata write is reported (Kafka's storeGroup mapping)."""
    if code in (E.UNKNOWN_TOPIC_OR_PARTITION, E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                E.REQUEST_TIMED_OUT):
        return E.COORDINATOR_NOT_AVAILABLE
    if code in (E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR):
        return E.NOT_COORDINATOR
    return E.UNKNOWN_SERVER_ERROR


def _commit_store_error(code: ErrorCode) -> ErrorCode:
    """How a failed offset commit write is reported (Kafka's storeOffsets mapping)."""
    if code in (E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE, E.INVALID_FETCH_SIZE):
        return E.INVALID_COMMIT_OFFSET_SIZE
    return _group_store_error(code)


class GroupMetadataManager:
    """The groups of the __consumer_offsets partitions this broker leads, and their storage."""

    def __init__(self, config: GroupConfig, store: GroupStore, now_ms: Callable[[], int]) -> None:
        self.config = config
        self.store = store
        self.num_partitions = config.num_partitions
        self.groups: dict[str, Group] = {}
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self._now = now_ms
        # Orders offset writes (log offsets on load, this counter's values after, both rising).
        self._write_order = 1 << 62
        self._txn_completions: dict[int, list[tuple[int, bool]]] = {}  # markers met while loading
        #: Takes the consumer groups (KIP-848) a load found, before the partition is owned.
        self.on_consumer_groups: Callable[[dict[str, ConsumerGroupRecords]], None] = lambda _: None

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def is_coordinator_for(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.owned

    def is_live(self, group: Group) -> bool:
        """The group is still the one the cache holds (not deleted or unloaded meanwhile)."""
        return self.groups.get(group.group_id) is group

    def get_or_create(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, self._now())
        return group

    # ---- partition ownership -------------------------------------------------------------

    def begin_load(self, partition: int) -> bool:
        """Mark `partition` as loading; False when it is owned or loading already."""
        if partition in self.owned or partition in self.loading:
            return False
        self.loading.add(partition)
        return True

    async def load(self, partition: int) -> list[Group]:
        """Replay `partition` into the cache and own it; the groups restored with members (whose
        heartbeats the coordinator schedules). Nothing when it was given up meanwhile."""
        start = time.monotonic()
        try:
            loaded = await self.store.load(partition)
        except Exception:
            self.loading.discard(partition)
            log.exception("loading __consumer_offsets-%d failed; its groups stay unavailable", partition)
            return []
        if partition not in self.loading:
            return []  # resigned meanwhile
        now = self._now()
        names = set(loaded.groups) | {g for g, offs in loaded.offsets.items() if offs}
        names |= {g for by_group in loaded.pending_txn.values() for g in by_group}
        with_members = []
        for name in names:
            if name in self.groups:
                continue
            group = _restore_group(name, loaded.groups.get(name), loaded.offsets.get(name, {}), now)
            group.offset_order = {(t, p): pos for (g, t, p), pos in loaded.positions.items() if g == name}
            for pid, by_group in loaded.pending_txn.items():
                if name in by_group:
                    group.pending_txn_offsets[pid] = dict(by_group[name])
            self.groups[name] = group
            if group.members:
                with_members.append(group)
        for name in loaded.consumer_groups:
            self.get_or_create(name)  # the holder of a consumer group's offsets
        self.on_consumer_groups(loaded.consumer_groups)
        self.loading.discard(partition)
        self.owned.add(partition)
        for producer_id, commit in self._txn_completions.pop(partition, []):
            self.complete_txn(partition, producer_id, commit)
        if names:
            log.info("loaded %d groups from __consumer_offsets-%d in %.0f ms", len(names), partition,
                     (time.monotonic() - start) * 1000)
        return with_members

    def remove_partition(self, partition: int) -> list[Group]:
        """Give up `partition`: its groups leave the cache and are returned (to be unloaded)."""
        self._txn_completions.pop(partition, None)
        self.owned.discard(partition)
        self.loading.discard(partition)
        gone = [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]
        for group in gone:
            del self.groups[group.group_id]
        return gone

    # ---- writes --------------------------------------------------------------------------

    async def store_group(self, group: Group, assignments: dict[str, bytes]) -> ErrorCode:
        """Write the group's metadata record (Kafka's storeGroup)."""
        proto = group.protocol_name
        value = schemas.GroupValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=proto,
            leader=group.leader_id,
            current_state_timestamp=group.current_state_timestamp if group.current_state_timestamp is not None else -1,
            members=[
                schemas.MemberValue(m.member_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                    m.session_timeout_ms, m.metadata(proto) if proto else b"",
                                    assignments.get(m.member_id, b""), m.group_instance_id)
                for m in group.members.values()
            ],
        )
        record = (schemas.encode_group_key(group.group_id), schemas.encode_group_value(value))
        err = await self.store.append(self.partition_for(group.group_id), [record])
        return E.NONE if err == E.NONE else _group_store_error(err)

    async def append(self, group_id: str, records: list[KeyValue]) -> ErrorCode:
        """Write a group's records (a consumer group's, KIP-848) to its partition."""
        err = await self.store.append(self.partition_for(group_id), records)
        return E.NONE if err == E.NONE else _group_store_error(err)

    async def store_offsets(self, group: Group, offsets: dict[TopicPartition, schemas.OffsetValue],
                            producer_id: int = -1, producer_epoch: int = -1) -> dict[TopicPartition, ErrorCode]:
        """Write offsets (Kafka's storeOffsets); with a producer id they wait for its marker."""
        result: dict[TopicPartition, ErrorCode] = {}
        records: list[KeyValue] = []
        valid: dict[TopicPartition, schemas.OffsetValue] = {}
        for tp, value in offsets.items():
            if len(value.metadata.encode()) > self.config.metadata_max_bytes:
                result[tp] = E.OFFSET_METADATA_TOO_LARGE
                continue
            valid[tp] = value
            records.append((schemas.encode_offset_key(group.group_id, tp[0], tp[1]), schemas.encode_offset_value(value)))
        if records:
            self._write_order += 1
            order = self._write_order  # taken before the append, which happens before its first await
            err = await self.store.append(self.partition_for(group.group_id), records, producer_id, producer_epoch)
            code = E.NONE if err == E.NONE else _commit_store_error(err)
            if code == E.NONE and not group.is_(S.DEAD):
                if producer_id >= 0:
                    pending = group.pending_txn_offsets.setdefault(producer_id, {})
                    pending.update({tp: (v, order) for tp, v in valid.items()})
                else:
                    group.offsets.update(valid)
                    group.offset_order.update({tp: order for tp in valid})
            for tp in valid:
                result[tp] = code
        return result

    async def remove_offsets(self, group: Group, partitions: Iterable[TopicPartition],
                             remove_group: bool = False) -> ErrorCode:
        """Write tombstones for offsets (and the group itself), then forget them."""
        parts = list(partitions)
        records: list[KeyValue] = [(schemas.encode_offset_key(group.group_id, t, p), None) for t, p in parts]
        if remove_group:
            records.append((schemas.encode_group_key(group.group_id), None))
        for tp in parts:
            group.offsets.pop(tp, None)
        if not records:
            return E.NONE
        err = await self.store.append(self.partition_for(group.group_id), records)
        return E.NONE if err == E.NONE else _group_store_error(err)

    # ---- transactional offsets -----------------------------------------------------------

    def complete_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT/ABORT marker of `producer_id` was written to __consumer_offsets-`partition`
        (Kafka's scheduleHandleTxnCompletion): its pending offsets are committed or dropped."""
        if partition in self.loading:
            # The load may have read the log before this marker: applied once it is done.
            self._txn_completions.setdefault(partition, []).append((producer_id, commit))
            return
        for group in self.groups.values():
            if self.partition_for(group.group_id) != partition:
                continue
            pending = group.pending_txn_offsets.pop(producer_id, None)
            if not pending or not commit or group.is_(S.DEAD):
                continue
            for tp, (value, order) in pending.items():
                if group.offset_order.get(tp, -1) < order:
                    group.offsets[tp] = value
                    group.offset_order[tp] = order

    def has_pending_txn_offsets(self, group_id: str, tp: TopicPartition) -> bool:
        """Offsets of an open transaction wait for `tp` (OffsetFetch's UNSTABLE_OFFSET_COMMIT)."""
        group = self.groups.get(group_id)
        return group is not None and any(tp in p for p in group.pending_txn_offsets.values())

    # ---- expiration ----------------------------------------------------------------------

    async def expire_offsets(self, skip: Callable[[str], bool] = lambda _: False) -> int:
        """Drop offsets past offsets.retention.minutes, and empty groups with no offsets left
        (Kafka's cleanupGroupMetadata); groups `skip` names are left alone (consumer groups
        with members keep their offsets holder)."""
        now = self._now()
        removed = 0
        for group in list(self.groups.values()):
            if not self.is_live(group) or not self.is_coordinator_for(group.group_id) or skip(group.group_id):
                continue
            expired = group.expired_offsets(now, self.config.retention_ms)
            drop_group = group.is_(S.EMPTY) and not group.pending_members and len(expired) == len(group.offsets)
            if not expired and not drop_group:
                continue
            if drop_group:
                group.transition_to(S.DEAD, now)
                del self.groups[group.group_id]
            await self.remove_offsets(group, expired, remove_group=drop_group)
            removed += len(expired)
            if expired:
                log.info("removed %d expired offsets of group %s", len(expired), group.group_id)
        return removed


def _restore_group(name: str, value: schemas.GroupValue | None, offsets: dict[TopicPartition, schemas.OffsetValue],
                   now: int) -> Group:
    """A group as its last metadata record and its offsets left it (members without timers)."""
    group = Group(name, now)
    group.offsets = dict(offsets)
    if value is None:
        return group  # offsets only: a simple (typeless) group
    group.generation_id = value.generation
    group.protocol_type = value.protocol_type or None
    group.protocol_name = value.protocol
    group.current_state_timestamp = value.current_state_timestamp if value.current_state_timestamp >= 0 else None
    for mv in value.members:
        member = Member(mv.member_id, mv.group_instance_id, mv.client_id, mv.client_host, mv.rebalance_timeout,
                        mv.session_timeout, value.protocol_type, [(value.protocol or "", mv.subscription)],
                        assignment=mv.assignment)
        group.add(member, None)
        if mv.group_instance_id is not None:
            group.static_members[mv.group_instance_id] = mv.member_id
    if group.members:
        group.leader_id = value.leader if value.leader in group.members else next(iter(group.members))
        group.state = S.STABLE
        group.subscribed_topics = group._compute_subscribed_topics()
    return group
