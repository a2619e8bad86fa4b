"""KIP-848's consumer groups in the group coordinator: ConsumerGroupHeartbeat's rules (joining,
fencing, static members, leaving), the session and rebalance timers, the group epoch bumps from
subscriptions and topic metadata, the member-epoch checks of OffsetCommit and OffsetFetch, and
the groups' records in __consumer_offsets (written before a heartbeat is answered, loaded when
this broker becomes a partition's coordinator; formats in ``consumer_records.py``).

The group state and reconciliation are ``consumer_group.py``'s; ``GroupCoordinator``
(``coordinator.py``) hands ConsumerGroupHeartbeat and the offset checks of consumer groups to
this class and keeps the classic protocol to itself. A group id names either a classic group or
a consumer group. A consumer group's committed offsets live in a classic ``Group`` without
members (the offsets holder), so offsets are stored, loaded and expired by one code path.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from kaflet.coordinator.group.assignors import ASSIGNORS, Assignment, TopicId, assignor_names
from kaflet.coordinator.group.consumer_group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    MemberState,
    PartitionOwnershipError,
    assignment_from_wire,
    reconcile,
)
from kaflet.coordinator.group.consumer_records import ConsumerGroupRecords, changes, encode_group, restore
from kaflet.coordinator.group.group import GroupState
from kaflet.coordinator.group.metadata_manager import GroupMetadataManager
from kaflet.metadata.metadata_cache import TopicInfo
from kaflet.protocol.errors import ErrorCode

log = logging.getLogger("kaflet.coordinator")

E = ErrorCode
#: The first ConsumerGroupHeartbeat version whose member id the client chooses (KIP-1082).
CLIENT_MEMBER_ID_VERSION = 1
#: The first OffsetCommit version a consumer-protocol member must use (member epochs).
MEMBER_EPOCH_COMMIT_VERSION = 9
MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """Kafka's group.consumer.* broker configs (names and bounds checked in ``from_broker``)."""

    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 45_000
    max_session_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = 5_000
    min_heartbeat_interval_ms: int = 5_000
    max_heartbeat_interval_ms: int = 15_000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")

    @classmethod
    def from_broker(cls, cfg: Mapping[str, object]) -> ConsumerGroupConfig:
        """The configs as Kafka's GroupCoordinatorConfig checks them; ValueError names the first
        one out of bounds."""
        def num(key: str) -> int:
            value = cfg[key]
            if not isinstance(value, int):
                raise ValueError(f"{key} must be an integer")
            return value

        raw = cfg["group.consumer.assignors"]
        names = [str(x) for x in raw] if isinstance(raw, list) else []

        c = cls(
            session_timeout_ms=num("group.consumer.session.timeout.ms"),
            min_session_timeout_ms=num("group.consumer.min.session.timeout.ms"),
            max_session_timeout_ms=num("group.consumer.max.session.timeout.ms"),
            heartbeat_interval_ms=num("group.consumer.heartbeat.interval.ms"),
            min_heartbeat_interval_ms=num("group.consumer.min.heartbeat.interval.ms"),
            max_heartbeat_interval_ms=num("group.consumer.max.heartbeat.interval.ms"),
            max_size=num("group.consumer.max.size"),
            assignors=tuple(assignor_names(names)),
        )
        if c.min_session_timeout_ms > c.max_session_timeout_ms:
            raise ValueError("group.consumer.min.session.timeout.ms must be at most group.consumer.max.session.timeout.ms")
        if not c.min_session_timeout_ms <= c.session_timeout_ms <= c.max_session_timeout_ms:
            raise ValueError("group.consumer.session.timeout.ms must be within group.consumer.min.session.timeout.ms "
                             "and group.consumer.max.session.timeout.ms")
        if c.min_heartbeat_interval_ms > c.max_heartbeat_interval_ms:
            raise ValueError("group.consumer.min.heartbeat.interval.ms must be at most "
                             "group.consumer.max.heartbeat.interval.ms")
        if not c.min_heartbeat_interval_ms <= c.heartbeat_interval_ms <= c.max_heartbeat_interval_ms:
            raise ValueError("group.consumer.heartbeat.interval.ms must be within group.consumer.min.heartbeat.interval.ms "
                             "and group.consumer.max.heartbeat.interval.ms")
        if c.heartbeat_interval_ms >= c.session_timeout_ms:
            raise ValueError("group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms")
        policy = cfg["group.consumer.migration.policy"]
        if policy != "disabled":
            raise ValueError(f"group.consumer.migration.policy={policy}: kaflet does not migrate groups between the "
                             "classic and the consumer protocol; only 'disabled' is served")
        return c


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A decoded ConsumerGroupHeartbeat (null fields: unchanged since the last heartbeat)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: dict[TopicId, list[int]] | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass(slots=True)
class HeartbeatResult:
    """What a ConsumerGroupHeartbeat answers (assignment None: not sent)."""

    error: ErrorCode = E.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """One member as ConsumerGroupDescribe shows it (topic names resolved)."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    assignment: dict[str, list[int]]
    target_assignment: dict[str, list[int]]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A consumer group as ConsumerGroupDescribe shows it; error set when it is not one."""

    group_id: str
    error: ErrorCode = E.NONE
    message: str | None = None
    state: str = ConsumerGroupState.DEAD.value
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ""
    members: list[MemberDescription] = field(default_factory=list)


@lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _fail(error: ErrorCode, message: str | None = None, member_id: str | None = None, epoch: int = 0) -> HeartbeatResult:
    return HeartbeatResult(error, message, member_id, epoch)


class ConsumerGroupCoordinator:
    """The consumer groups of the __consumer_offsets partitions this broker leads."""

    def __init__(self, config: ConsumerGroupConfig, metadata: GroupMetadataManager,
                 status: Callable[[str], ErrorCode | None], topics: Callable[[], Mapping[str, TopicInfo]],
                 spawn: Callable[[Awaitable[object], str], None]) -> None:
        self.config = config
        self.metadata = metadata
        self._status = status
        self._topics = topics
        self._spawn = spawn
        self.groups: dict[str, ConsumerGroup] = {}
        self._write_locks: dict[str, asyncio.Lock] = {}
        metadata.on_consumer_groups = self._restore

    # ---- storage ------------------------------------------------------------------------

    async def _persist(self, group: ConsumerGroup) -> ErrorCode:
        """Write what changed in the group since its last write (tombstones once it is dead).

        One write at a time per group, each computed when its turn comes, so the log holds the
        changes in the order they happened whoever started the write (a heartbeat, a timer)."""
        lock = self._write_locks.setdefault(group.group_id, asyncio.Lock())
        async with lock:
            before = group.persisted
            after = {} if group.dead else encode_group(group)
            records = changes(before, after)
            if not records:
                return E.NONE
            group.persisted = after
            err = await self.metadata.append(group.group_id, records)
            if err != E.NONE:
                group.persisted = before  # written again with the next change
            return err

    async def _persist_logged(self, group: ConsumerGroup) -> None:
        err = await self._persist(group)
        if err != E.NONE:
            log.warning("failed to write consumer group %s epoch %d: %s", group.group_id, group.group_epoch, err.name)

    def _restore(self, loaded: dict[str, ConsumerGroupRecords]) -> None:
        """The consumer groups a load of __consumer_offsets found: back with their members, whose
        sessions start now (Kafka's onLoaded)."""
        for group_id, rec in loaded.items():
            try:
                group = restore(group_id, rec)
            except PartitionOwnershipError as exc:
                log.error("not loading consumer group %s: %s", group_id, exc)
                continue
            if group is None or group_id in self.groups:
                continue
            self.groups[group_id] = group
            for member in group.members.values():
                self._schedule_session(group, member)
            log.info("loaded consumer group %s: epoch %d, %d members", group_id, group.group_epoch,
                     len(group.members))

    # ---- topics -------------------------------------------------------------------------

    def _matching(self, pattern: str) -> list[str]:
        """Topic names a subscription regex matches whole (as RE2's matches() does), internal ones left out."""
        rx = _compile(pattern)
        return sorted(name for name, info in self._topics().items() if not info.internal and rx.fullmatch(name))

    def _subscription_metadata(self, group: ConsumerGroup) -> dict[str, tuple[TopicId, int]]:
        topics = self._topics()
        out = {}
        for name in sorted(group.subscribed_names(self._matching)):
            info = topics.get(name)
            if info is not None and info.partitions and info.topic_id != bytes(16):
                out[name] = (info.topic_id, len(info.partitions))
        return out

    def _refresh(self, group: ConsumerGroup, bump: bool) -> None:
        """Raise the group epoch when asked or when a subscribed topic changed, then recompute
        the target assignment if it is behind the group epoch."""
        meta = self._subscription_metadata(group)
        if meta != group.subscription_metadata:
            group.subscription_metadata = meta
            bump = True
        if bump:
            group.group_epoch += 1
        if group.members and group.group_epoch > group.assignment_epoch:
            assignor = ASSIGNORS[group.preferred_assignor(self.config.assignors[0])]
            group.compute_target(assignor, self._matching)
            log.info("group %s epoch %d: target assignment computed by the %s assignor for %d members",
                     group.group_id, group.group_epoch, assignor.name, len(group.members))

    # ---- timers -------------------------------------------------------------------------

    def _schedule_session(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = asyncio.get_running_loop().call_later(
            self.config.session_timeout_ms / 1000, self._on_session_expired, group, member)

    def _on_session_expired(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        member.session_timer = None
        if self.groups.get(group.group_id) is group and group.members.get(member.member_id) is member:
            log.info("member %s of consumer group %s has failed (no heartbeat within %d ms), removing it",
                     member.member_id, group.group_id, self.config.session_timeout_ms)
            self._fence(group, member)

    def _on_rebalance_expired(self, group: ConsumerGroup, member: ConsumerGroupMember, epoch: int) -> None:
        member.rebalance_timer = None
        if (self.groups.get(group.group_id) is group and group.members.get(member.member_id) is member
                and member.state == MemberState.UNREVOKED_PARTITIONS and member.member_epoch == epoch):
            log.info("member %s of consumer group %s did not revoke its partitions within %d ms, removing it",
                     member.member_id, group.group_id, member.rebalance_timeout_ms)
            self._fence(group, member)

    def _fence(self, group: ConsumerGroup, member: ConsumerGroupMember, write: bool = True) -> None:
        group.remove(member.member_id)
        self._refresh(group, bump=False)
        if write:
            self._spawn(self._persist_logged(group), f"write-consumer-group-{group.group_id}")

    # ---- ConsumerGroupHeartbeat ---------------------------------------------------------

    def _invalid(self, req: HeartbeatRequest) -> str | None:
        """Kafka's request validation (INVALID_REQUEST with this message)."""
        if not req.member_id and (req.version >= CLIENT_MEMBER_ID_VERSION or req.member_epoch != 0):
            return "MemberId can't be empty."
        if not req.group_id:
            return "GroupId can't be empty."
        if req.instance_id == "":
            return "InstanceId can't be empty."
        if req.rack_id == "":
            return "RackId can't be empty."
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                return "RebalanceTimeoutMs must be provided in first request."
            if req.owned is None or req.owned:
                return "TopicPartitions must be empty when (re-)joining."
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
        elif req.member_epoch == STATIC_LEAVE_EPOCH:
            if req.instance_id is None:
                return "InstanceId can't be null."
        elif req.member_epoch < STATIC_LEAVE_EPOCH:
            return "MemberEpoch is invalid."
        return None

    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        """Answer one ConsumerGroupHeartbeat (Kafka's consumerGroupHeartbeat) once what it
        changed is written to __consumer_offsets."""
        result = self._heartbeat(req)
        group = self.groups.get(req.group_id)
        if group is not None and self._status(req.group_id) is None:
            err = await self._persist(group)
            if err != E.NONE and result.error == E.NONE:
                return _fail(err, f"writing the group's records failed: {err.name}")
        return result

    def _heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        message = self._invalid(req)
        if message is not None:
            return _fail(E.INVALID_REQUEST, message)
        err = self._status(req.group_id)
        if err is not None:
            return _fail(err)
        if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
            return _fail(E.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported. "
                         f"Supported assignors: {', '.join(self.config.assignors)}.")
        if req.subscribed_topic_regex:
            try:
                _compile(req.subscribed_topic_regex)
            except re.error as exc:
                return _fail(E.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex {req.subscribed_topic_regex} "
                             f"is invalid: {exc}")
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(req)
        group = self.groups.get(req.group_id)
        if group is None:
            classic = self.metadata.groups.get(req.group_id)
            if classic is not None and not classic.is_(GroupState.EMPTY):
                if req.member_epoch == 0:
                    return _fail(E.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {req.group_id} to consumer "
                                 "group because online upgrade is disabled.")
                return _fail(E.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group.")
            if req.member_epoch != 0:
                return _fail(E.GROUP_ID_NOT_FOUND, f"Consumer group {req.group_id} not found.")
            group = self.groups[req.group_id] = ConsumerGroup(req.group_id)
            self.metadata.get_or_create(req.group_id)  # holds the group's offsets (an empty classic group's too)
        try:
            return self._member_heartbeat(group, req)
        except PartitionOwnershipError as exc:
            log.error("%s", exc)
            return _fail(E.UNKNOWN_SERVER_ERROR, str(exc))

    def _member_heartbeat(self, group: ConsumerGroup, req: HeartbeatRequest) -> HeartbeatResult:
        owned = assignment_from_wire(req.owned) if req.owned is not None else None
        bump = False
        if req.member_epoch == 0:
            member, err = self._joining_member(group, req)
            if member is None:
                return err
        else:
            member = group.members.get(req.member_id)
            if member is None:
                return _fail(E.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {group.group_id}.")
            if req.instance_id is not None and group.static_members.get(req.instance_id) != member.member_id:
                return _fail(E.FENCED_INSTANCE_ID, f"Static member {req.member_id} with instance id "
                             f"{req.instance_id} was fenced by another member.")
            if req.member_epoch > member.member_epoch or (
                    req.member_epoch < member.member_epoch
                    and not (req.member_epoch == member.previous_member_epoch and owned is not None
                             and all(ps <= member.assigned.get(t, frozenset()) for t, ps in owned.items()))):
                return _fail(E.FENCED_MEMBER_EPOCH, f"The consumer group member has a member epoch "
                             f"({req.member_epoch}) other than the one known by the group coordinator "
                             f"({member.member_epoch}). The member must abandon all its partitions and rejoin.")
        if member.member_id not in group.members:
            group.add(member)
            bump = True
        bump = self._update_member(member, req) or bump
        self._refresh(group, bump)
        before = (member.member_epoch, member.assigned)
        was_unrevoked = member.state == MemberState.UNREVOKED_PARTITIONS
        step = reconcile(member, group.assignment_epoch, group.target_of(member.member_id), owned,
                         group.partition_epoch)
        group.apply(member, step)
        self._schedule_session(group, member)
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if not was_unrevoked or member.rebalance_timer is None:
                if member.rebalance_timer is not None:
                    member.rebalance_timer.cancel()
                member.rebalance_timer = asyncio.get_running_loop().call_later(
                    member.rebalance_timeout_ms / 1000, self._on_rebalance_expired, group, member, member.member_epoch)
        elif member.rebalance_timer is not None:
            member.rebalance_timer.cancel()
            member.rebalance_timer = None
        full = (req.rebalance_timeout_ms != -1 and req.owned is not None
                and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None))
        if before != (member.member_epoch, member.assigned):
            log.debug("group %s member %s: epoch %d, %s, assigned %s, revoking %s", group.group_id,
                      member.member_id, member.member_epoch, member.state.value, member.assigned, member.revoking)
        send = req.member_epoch == 0 or full or before[1] != member.assigned
        return HeartbeatResult(E.NONE, None, member.member_id, member.member_epoch, self.config.heartbeat_interval_ms,
                               member.assigned if send else None)

    def _joining_member(self, group: ConsumerGroup, req: HeartbeatRequest
                        ) -> tuple[ConsumerGroupMember | None, HeartbeatResult]:
        member_id = req.member_id or str(uuid.uuid4())
        if req.instance_id is not None:
            existing_id = group.static_members.get(req.instance_id)
            if existing_id is not None:
                old = group.members[existing_id]
                if old.member_epoch != STATIC_LEAVE_EPOCH and existing_id != member_id:
                    return None, _fail(E.UNRELEASED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                       f"{req.instance_id} cannot join the group because the instance id is owned "
                                       f"by {existing_id} member.")
                if existing_id != member_id:
                    log.info("static member %s of group %s is back as %s", req.instance_id, group.group_id, member_id)
                    return group.replace_static(old, member_id), HeartbeatResult()
                return old, HeartbeatResult()
        member = group.members.get(member_id)
        if member is not None:
            return member, HeartbeatResult()
        if len(group.members) >= self.config.max_size:
            return None, _fail(E.GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its maximum capacity of "
                               f"{self.config.max_size} members.")
        return ConsumerGroupMember(member_id=member_id, instance_id=req.instance_id), HeartbeatResult()

    @staticmethod
    def _update_member(member: ConsumerGroupMember, req: HeartbeatRequest) -> bool:
        """Take what the heartbeat changed; True when the group's assignment depends on it."""
        changed = False
        member.client_id, member.client_host = req.client_id, req.client_host
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.instance_id is not None:
            member.instance_id = req.instance_id
        if req.subscribed_topic_names is not None and sorted(req.subscribed_topic_names) != sorted(
                member.subscribed_topic_names):
            member.subscribed_topic_names = sorted(set(req.subscribed_topic_names))
            changed = True
        if req.subscribed_topic_regex is not None and (req.subscribed_topic_regex or None) != member.subscribed_topic_regex:
            member.subscribed_topic_regex = req.subscribed_topic_regex or None
            changed = True
        if req.server_assignor is not None and req.server_assignor != member.server_assignor:
            member.server_assignor = req.server_assignor
            changed = True
        return changed

    def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        group = self.groups.get(req.group_id)
        if group is None:
            return _fail(E.GROUP_ID_NOT_FOUND, f"Consumer group {req.group_id} not found.")
        if req.instance_id is not None:
            member_id = group.static_members.get(req.instance_id)
            if member_id is None:
                return _fail(E.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
            if member_id != req.member_id:
                return _fail(E.FENCED_INSTANCE_ID, f"Static member {req.member_id} with instance id "
                             f"{req.instance_id} was fenced by member {member_id}.")
        member = group.members.get(req.member_id)
        if member is None:
            return _fail(E.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {group.group_id}.")
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # The member keeps its partitions for its session timeout, so that it finds them again
            # when it comes back under its group.instance.id.
            log.info("static member %s (instance %s) of group %s leaves for now", member.member_id,
                     member.instance_id, group.group_id)
            if member.member_epoch != STATIC_LEAVE_EPOCH:
                member.previous_member_epoch = member.member_epoch
                member.member_epoch = STATIC_LEAVE_EPOCH
            self._schedule_session(group, member)
        else:
            log.info("member %s has left consumer group %s", member.member_id, group.group_id)
            self._fence(group, member, write=False)  # heartbeat() writes it before answering
        return HeartbeatResult(E.NONE, None, req.member_id, req.member_epoch, 0)

    # ---- offsets, describe, list, delete -------------------------------------------------

    def validate_commit(self, group_id: str, member_id: str, member_epoch: int, api_version: int,
                        transactional: bool = False) -> ErrorCode | None:
        """A commit's member check for a consumer group (Kafka's ConsumerGroup.validateOffsetCommit);
        None when `group_id` is not a consumer group."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not group.members and not member_id:
            return E.NONE  # an admin client or a simple consumer, while the group is empty
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if transactional:
            return E.NONE if member_epoch == member.member_epoch else E.ILLEGAL_GENERATION
        if api_version < MEMBER_EPOCH_COMMIT_VERSION:
            return E.UNSUPPORTED_VERSION
        return E.NONE if member_epoch == member.member_epoch else E.STALE_MEMBER_EPOCH

    def validate_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9's member check for a consumer group (none without a member id)."""
        group = self.groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return E.NONE
        member = group.members.get(member_id or "")
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        return E.NONE if member_epoch == member.member_epoch else E.STALE_MEMBER_EPOCH

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        """The topics a consumer group with members subscribes to; None for any other group."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return None
        return group.subscribed_names(self._matching)

    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def drop_empty(self, group_id: str) -> bool:
        """Forget an empty consumer group (a classic member takes the id, or DeleteGroups); False
        when it has members."""
        group = self.groups.get(group_id)
        if group is None:
            return True
        if group.members:
            return False
        group.dead = True
        del self.groups[group_id]
        self._spawn(self._persist_logged(group), f"delete-consumer-group-{group_id}")
        return True

    def remove_partition(self, partition: int) -> None:
        """This broker no longer coordinates `partition`: forget its consumer groups."""
        for group in [g for g in self.groups.values() if self.metadata.partition_for(g.group_id) == partition]:
            for member in group.members.values():
                member.cancel_timers()
            group.dead = True
            del self.groups[group.group_id]

    def shutdown(self) -> None:
        for group in self.groups.values():
            for member in group.members.values():
                member.cancel_timers()
        self.groups.clear()

    def list(self) -> list[tuple[str, str]]:
        """(group id, state) of every consumer group."""
        return [(g.group_id, g.state.value) for g in self.groups.values()]

    def describe(self, group_id: str) -> GroupDescription:
        """ConsumerGroupDescribe's answer for one group."""
        err = self._status(group_id)
        if err is not None:
            return GroupDescription(group_id, err)
        group = self.groups.get(group_id)
        if group is None:
            if group_id in self.metadata.groups and self.metadata.groups[group_id].protocol_type:
                return GroupDescription(group_id, E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
            return GroupDescription(group_id, E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        names = {info.topic_id: name for name, info in self._topics().items()}

        def named(a: Assignment) -> dict[str, list[int]]:
            return {names[t]: sorted(ps) for t, ps in a.items() if t in names}

        members = [
            MemberDescription(m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                              list(m.subscribed_topic_names), m.subscribed_topic_regex, named(m.assigned),
                              named(group.target_of(m.member_id)))
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        ]
        return GroupDescription(group_id, E.NONE, None, group.state.value, group.group_epoch, group.assignment_epoch,
                                group.assignor_name or self.config.assignors[0], members)
