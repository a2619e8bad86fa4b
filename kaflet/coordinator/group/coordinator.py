"""The group coordinator: Kafka's rules for joining, syncing, heartbeats, leaving and offsets.

Follows Kafka's classic GroupCoordinator (2.x/3.x) transition for transition and error code for
error code, because client libraries encode that behaviour in their own state machines. All
group state lives on the broker's event loop, so no locks: a method runs to its first `await`
without interference. Requests that must wait (JoinGroup until the rebalance completes,
SyncGroup until the leader's assignment is stored) hold a future that the coordinator
completes; the connection's own task awaits it, so other connections are never blocked.
Timers (session timeouts, rebalance timeouts, the initial rebalance delay) are loop timers.
The group cache and its storage in __consumer_offsets (loading, group and offset writes,
transactional offsets, expiry) are ``GroupMetadataManager``'s (``metadata_manager.py``); this
module checks each request and runs the membership protocol. KIP-848's consumer groups are
``ConsumerGroupCoordinator``'s (``consumer_coordinator.py``); this module routes their requests
and keeps each group id to one protocol. It runs past 800 lines because the classic
transitions are kept together in Kafka's order, each next to the request that starts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kaflet.coordinator.group import schemas
from kaflet.coordinator.group.consumer_coordinator import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    GroupDescription,
    HeartbeatRequest,
    HeartbeatResult,
)
from kaflet.coordinator.group.group import CONSUMER_PROTOCOL_TYPE, Group, GroupState, GroupSummary
from kaflet.coordinator.group.member import NEW_MEMBER_JOIN_TIMEOUT_MS, JoinResult, Member, SyncResult
from kaflet.coordinator.group.metadata_manager import GroupConfig, GroupMetadataManager
from kaflet.coordinator.group.store import GroupStore
from kaflet.coordinator.tasks import BackgroundTasks
from kaflet.metadata.metadata_cache import TopicInfo
from kaflet.protocol.errors import ErrorCode

log = logging.getLogger("kaflet.coordinator")

E = ErrorCode
S = GroupState
TopicPartition = tuple[str, int]


class Api(enum.Enum):
    """The request kinds whose group id rules differ (Kafka's isValidGroupId)."""

    JOIN = "join"
    SYNC = "sync"
    HEARTBEAT = "heartbeat"
    LEAVE = "leave"
    COMMIT = "commit"
    FETCH = "fetch"
    DESCRIBE = "describe"
    DELETE = "delete"
    OFFSET_DELETE = "offset-delete"


_EMPTY_ID_OK = {Api.COMMIT, Api.FETCH, Api.DESCRIBE}


class GroupCoordinator:
    """All groups whose __consumer_offsets partition this broker leads."""

    def __init__(self, config: GroupConfig, store: GroupStore,
                 ensure_topic: Callable[[], Awaitable[bool]] | None = None,
                 now_ms: Callable[[], int] | None = None,
                 consumer_config: ConsumerGroupConfig | None = None,
                 topics: Callable[[], Mapping[str, TopicInfo]] | None = None) -> None:
        self.config = config
        self.ensure_topic = ensure_topic
        self.active = True
        self._now = now_ms or (lambda: int(time.time() * 1000))
        #: The groups and what is stored of them (Kafka's GroupMetadataManager).
        self.metadata = GroupMetadataManager(config, store, self._now)
        #: KIP-848's consumer groups (``consumer_coordinator.py``).
        self.consumer = ConsumerGroupCoordinator(
            consumer_config or ConsumerGroupConfig(), self.metadata,
            lambda group_id: self._status(group_id, Api.HEARTBEAT), topics or dict, self._spawn)
        self._tasks = BackgroundTasks("group coordinator")

    @property
    def groups(self) -> dict[str, Group]:
        """The groups of the partitions this broker leads, by id."""
        return self.metadata.groups

    @property
    def owned(self) -> set[int]:
        """The __consumer_offsets partitions loaded and led here."""
        return self.metadata.owned

    @property
    def loading(self) -> set[int]:
        """The __consumer_offsets partitions being loaded."""
        return self.metadata.loading

    # ---- plumbing ------------------------------------------------------------------------

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        self._tasks.spawn(coro, name)

    def start(self) -> None:
        """Start the periodic offset expiration."""
        self._spawn(self._expiry_loop(), "offsets-expiry")

    def shutdown(self) -> None:
        """Answer every waiting request with NOT_COORDINATOR and stop all timers."""
        self.active = False
        for group in list(self.groups.values()):
            self._unload_group(group)
        self.groups.clear()
        self.consumer.shutdown()
        self._tasks.cancel_all()

    def partition_for(self, group_id: str) -> int:
        return self.metadata.partition_for(group_id)

    def _status(self, group_id: str | None, api: Api) -> ErrorCode | None:
        """Kafka's validateGroupStatus: the error that stops a request before the group is looked at."""
        if group_id is None or (not group_id and api not in _EMPTY_ID_OK):
            return E.INVALID_GROUP_ID
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE
        p = self.partition_for(group_id)
        if p in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if p not in self.owned:
            return E.NOT_COORDINATOR
        return None

    def is_coordinator_for(self, group_id: str) -> bool:
        return self.metadata.is_coordinator_for(group_id)

    def _live(self, group: Group) -> bool:
        """The group is still the one the coordinator holds (not deleted or unloaded meanwhile)."""
        return self.metadata.is_live(group)

    # ---- partition ownership -------------------------------------------------------------

    def on_became_leader(self, partition: int, num_partitions: int | None = None) -> None:
        """This broker leads `partition` of __consumer_offsets: load its groups (once)."""
        if num_partitions:
            self.metadata.num_partitions = num_partitions
        if self.active and self.metadata.begin_load(partition):
            self._spawn(self._load(partition), f"load-offsets-{partition}")

    def on_resigned(self, partition: int) -> None:
        """This broker no longer leads `partition`: forget its groups."""
        for group in self.metadata.remove_partition(partition):
            self._unload_group(group)
        self.consumer.remove_partition(partition)

    async def _load(self, partition: int) -> None:
        for group in await self.metadata.load(partition):
            for member in group.members.values():
                self._schedule_heartbeat(group, member)

    def _unload_group(self, group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        self._clear_pending_sync(group)
        for handle in group.pending_members.values():
            if handle is not None:
                handle.cancel()
        group.pending_members.clear()
        for member in group.members.values():
            member.cancel_heartbeat()
            group.complete_join(member, JoinResult(member.member_id, E.NOT_COORDINATOR))
            member.complete_sync(SyncResult(E.NOT_COORDINATOR))

    # ---- heartbeats and timers -----------------------------------------------------------

    def _schedule_heartbeat(self, group: Group, member: Member, timeout_ms: int | None = None) -> None:
        """Kafka's completeAndScheduleNextHeartbeatExpiration: the member is alive now."""
        member.cancel_heartbeat()
        if not self.active:
            return
        delay = (member.session_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        member.heartbeat_timer = asyncio.get_running_loop().call_later(
            delay, self._on_heartbeat_expired, group, member)

    def _on_heartbeat_expired(self, group: Group, member: Member) -> None:
        member.heartbeat_timer = None
        if not self._live(group) or group.is_(S.DEAD) or group.members.get(member.member_id) is not member:
            return
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            # Waiting in a rebalance counts as alive; the rebalance timeout bounds the wait.
            self._schedule_heartbeat(group, member)
            return
        log.info("member %s in group %s has failed (no heartbeat within %d ms), removing it from the group",
                 member.member_id, group.group_id, member.session_timeout_ms)
        self._remove_member_and_update(group, member)

    def _add_pending_member(self, group: Group, member_id: str, session_timeout_ms: int) -> None:
        handle = asyncio.get_running_loop().call_later(
            session_timeout_ms / 1000, self._on_pending_expired, group, member_id)
        group.pending_members[member_id] = handle

    def _on_pending_expired(self, group: Group, member_id: str) -> None:
        if self._live(group) and member_id in group.pending_members:
            log.info("pending member %s in group %s has been removed after session timeout expiration",
                     member_id, group.group_id)
            self._remove_pending_member(group, member_id)

    def _remove_pending_member(self, group: Group, member_id: str) -> None:
        handle = group.pending_members.pop(member_id, None)
        if handle is not None:
            handle.cancel()
        if group.is_(S.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # ---- rebalancing ---------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, E.REBALANCE_IN_PROGRESS)
        self._clear_pending_sync(group)
        initial = group.is_(S.EMPTY)
        if group.join_timer is not None:
            group.join_timer.cancel()
        loop = asyncio.get_running_loop()
        if initial:
            # A new group waits group.initial.rebalance.delay.ms (and more while members keep
            # arriving, up to the rebalance timeout) so a starting fleet joins in one rebalance.
            delay = self.config.initial_rebalance_delay_ms
            group.join_initial = True
            group.initial_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
        else:
            delay = group.rebalance_timeout_ms()
            group.join_initial = False
        log.info("preparing to rebalance group %s in state %s with old generation %d (reason: %s)",
                 group.group_id, group.state.value, group.generation_id, reason)
        group.transition_to(S.PREPARING_REBALANCE, self._now())
        group.join_timer = loop.call_later(delay / 1000, self._on_join_timer, group)
        self._try_complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        if group.is_(S.PREPARING_REBALANCE) and not group.join_initial and group.has_all_members_joined():
            if group.join_timer is not None:
                group.join_timer.cancel()
                group.join_timer = None
            self._complete_join(group)

    def _on_join_timer(self, group: Group) -> None:
        group.join_timer = None
        if not self._live(group) or not group.is_(S.PREPARING_REBALANCE):
            return
        if group.join_initial and group.new_member_added and group.initial_remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, group.initial_remaining_ms)
            group.initial_remaining_ms = max(group.initial_remaining_ms - self.config.initial_rebalance_delay_ms, 0)
            group.join_timer = asyncio.get_running_loop().call_later(delay / 1000, self._on_join_timer, group)
            return
        self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """Kafka's onCompleteJoin: drop dynamic members that did not rejoin, start the next generation."""
        group.join_initial = False
        for failed in group.not_yet_rejoined():
            if not failed.is_static:
                log.info("member %s of group %s did not rejoin in time; removing it", failed.member_id, group.group_id)
                failed.cancel_heartbeat()
                failed.complete_sync(SyncResult(E.UNKNOWN_MEMBER_ID))
                group.remove(failed.member_id)
        if group.is_(S.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait another rebalance timeout for session expiry to clear them out.
            group.join_timer = asyncio.get_running_loop().call_later(
                group.rebalance_timeout_ms() / 1000, self._on_join_timer, group)
            return
        group.init_next_generation(self._now())
        if group.is_(S.EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            self._spawn(self._store_group_logged(group, {}), f"store-group-{group.group_id}")
            return
        log.info("stabilized group %s generation %d with %d members (protocol %s)",
                 group.group_id, group.generation_id, group.size, group.protocol_name)
        for member in list(group.members.values()):
            result = JoinResult(
                member_id=member.member_id,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader_id=group.leader_id or "",
                members=group.current_member_metadata() if group.is_leader(member.member_id) else [],
            )
            group.complete_join(member, result)
            self._schedule_heartbeat(group, member)
            member.is_new = False
        group.pending_sync = set(group.members)
        group.sync_timer = asyncio.get_running_loop().call_later(
            group.rebalance_timeout_ms() / 1000, self._on_pending_sync_expired, group, group.generation_id)

    # ---- pending SyncGroup (KAFKA-12890) -------------------------------------------------
    # A member that got its JoinGroup response must send SyncGroup within the rebalance
    # timeout. Without this a member that stops after joining keeps the group in
    # CompletingRebalance (waiting for a leader's assignment that never comes) or keeps an
    # assignment it never learns about, until its session times out, which a member waiting
    # in the rebalance never does here (see _on_heartbeat_expired).

    def _clear_pending_sync(self, group: Group) -> None:
        group.pending_sync.clear()
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None

    def _remove_pending_sync(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._clear_pending_sync(group)

    def _on_pending_sync_expired(self, group: Group, generation: int) -> None:
        group.sync_timer = None
        if (not self._live(group) or generation != group.generation_id or not group.pending_sync
                or group.state not in (S.COMPLETING_REBALANCE, S.STABLE)):
            return
        silent = sorted(group.pending_sync)
        for member_id in silent:
            member = group.members.get(member_id)
            if member is None:
                continue
            group.complete_join(member, JoinResult(member_id, E.UNKNOWN_MEMBER_ID))
            member.complete_sync(SyncResult(E.UNKNOWN_MEMBER_ID))
            member.cancel_heartbeat()
            group.remove(member_id)
        log.info("group %s generation %d: removing members %s, which sent no SyncGroup within the rebalance "
                 "timeout", group.group_id, generation, silent)
        self._prepare_rebalance(group, f"removing {silent} on pending sync request expiration")

    def _reset_and_propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            if member.complete_sync(SyncResult(error, member.assignment, group.protocol_type, group.protocol_name)):
                # Sessions restart once the assignment is out: expirations were ignored while waiting.
                self._schedule_heartbeat(group, member)

    def _remove_member_and_update(self, group: Group, member: Member) -> None:
        group.complete_join(member, JoinResult(member.member_id, E.UNKNOWN_MEMBER_ID))
        member.complete_sync(SyncResult(E.UNKNOWN_MEMBER_ID))
        member.cancel_heartbeat()
        group.remove(member.member_id)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"removing member {member.member_id}")
        elif group.is_(S.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # ---- JoinGroup -----------------------------------------------------------------------

    async def join_group(
        self, group_id: str, member_id: str, group_instance_id: str | None, require_known_member_id: bool,
        client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]],
    ) -> JoinResult:
        """Join (or rejoin) a group; returns when the rebalance completes (or at once on error)."""
        err = self._status(group_id, Api.JOIN)
        if err is not None:
            return JoinResult(member_id, err)
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            return JoinResult(member_id, E.INVALID_SESSION_TIMEOUT)
        if not self.consumer.drop_empty(group_id):
            # group.consumer.migration.policy=disabled: a classic member cannot join a consumer group.
            return JoinResult(member_id, E.INCONSISTENT_GROUP_PROTOCOL)
        unknown = member_id == ""
        group = self.groups.get(group_id)
        if group is None:
            if not unknown:
                return JoinResult(member_id, E.UNKNOWN_MEMBER_ID)
            group = self.metadata.get_or_create(group_id)
        if not self._accept_joining_member(group, member_id):
            known = group.members.get(member_id)
            if known is not None:
                self._remove_member_and_update(group, known)
            return JoinResult(member_id, E.GROUP_MAX_SIZE_REACHED)
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        args = (client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)
        if unknown:
            self._join_unknown_member(group, fut, group_instance_id, require_known_member_id, *args)
        else:
            self._join_current_member(group, fut, member_id, group_instance_id, *args)
        if group.is_(S.PREPARING_REBALANCE):
            self._try_complete_join(group)
        return await fut

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        if group.state in (S.EMPTY, S.DEAD):
            return True
        if group.is_(S.PREPARING_REBALANCE):
            m = group.members.get(member_id)
            return (m is not None and m.awaiting_join) or group.num_awaiting_join < self.config.max_size
        return group.has(member_id) or group.size < self.config.max_size

    def _join_unknown_member(
        self, group: Group, fut: asyncio.Future[JoinResult], instance_id: str | None, require_known: bool,
        client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]],
    ) -> None:
        if group.is_(S.DEAD):
            fut.set_result(JoinResult("", E.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, protocols):
            fut.set_result(JoinResult("", E.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_id = f"{client_id}-{uuid.uuid4()}"
        args = (client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)
        if instance_id is not None:
            if instance_id in group.static_members:
                self._update_static_member_and_rebalance(group, fut, new_id, instance_id, *args)
            else:
                self._add_member_and_rebalance(group, fut, new_id, instance_id, *args)
        elif require_known:
            # KIP-394: hand out the id first, so a client that retries its join is not counted twice.
            self._add_pending_member(group, new_id, session_timeout_ms)
            fut.set_result(JoinResult(new_id, E.MEMBER_ID_REQUIRED))
        else:
            self._add_member_and_rebalance(group, fut, new_id, None, *args)

    def _join_current_member(
        self, group: Group, fut: asyncio.Future[JoinResult], member_id: str, instance_id: str | None,
        client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]],
    ) -> None:
        if group.is_(S.DEAD):
            fut.set_result(JoinResult(member_id, E.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, protocols):
            fut.set_result(JoinResult(member_id, E.INCONSISTENT_GROUP_PROTOCOL))
            return
        if member_id in group.pending_members:
            handle = group.pending_members.pop(member_id)
            if handle is not None:
                handle.cancel()
            self._add_member_and_rebalance(group, fut, member_id, instance_id, client_id, client_host,
                                           rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)
            return
        if group.is_static_member_fenced(member_id, instance_id):
            fut.set_result(JoinResult(member_id, E.FENCED_INSTANCE_ID))
            return
        member = group.members.get(member_id)
        if member is None:
            fut.set_result(JoinResult(member_id, E.UNKNOWN_MEMBER_ID))
            return
        member.client_id, member.client_host = client_id, client_host
        member.rebalance_timeout_ms, member.session_timeout_ms = rebalance_timeout_ms, session_timeout_ms
        if group.is_(S.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, protocols, fut, "member rejoined")
        elif group.is_(S.COMPLETING_REBALANCE):
            if member.matches(protocols):
                # A retried join of the generation being synced: answer with what it already got.
                fut.set_result(self._current_join_result(group, member_id, with_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, protocols, fut, "member changed its protocols")
        elif group.is_(S.STABLE):
            if group.is_leader(member_id) or not member.matches(protocols):
                # The leader rejoining means it wants a new assignment (e.g. its metadata changed).
                self._update_member_and_rebalance(group, member, protocols, fut, f"member {member_id} rejoined")
            else:
                fut.set_result(self._current_join_result(group, member_id, with_members=False))
        else:
            fut.set_result(JoinResult(member_id, E.UNKNOWN_MEMBER_ID))

    def _current_join_result(self, group: Group, member_id: str, with_members: bool,
                             leader_id: str | None = None) -> JoinResult:
        return JoinResult(
            member_id=member_id, generation_id=group.generation_id, protocol_type=group.protocol_type,
            protocol_name=group.protocol_name, leader_id=(leader_id if leader_id is not None else group.leader_id) or "",
            members=group.current_member_metadata() if with_members else [],
        )

    def _add_member_and_rebalance(
        self, group: Group, fut: asyncio.Future[JoinResult], member_id: str, instance_id: str | None,
        client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]],
    ) -> None:
        member = Member(member_id, instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                        protocol_type, protocols, is_new=True)
        if group.is_(S.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, fut)
        if instance_id is not None:
            group.static_members[instance_id] = member_id
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}")

    def _update_member_and_rebalance(self, group: Group, member: Member, protocols: list[tuple[str, bytes]],
                                     fut: asyncio.Future[JoinResult], reason: str) -> None:
        group.update_member(member, protocols, fut)
        self._maybe_prepare_rebalance(group, reason)

    def _update_static_member_and_rebalance(
        self, group: Group, fut: asyncio.Future[JoinResult], new_id: str, instance_id: str,
        client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]],
    ) -> None:
        """KIP-345: a static member came back under a new member id; it takes over its old slot."""
        current_leader = group.leader_id
        old_id = group.static_members[instance_id]
        member = group.replace_static_member(old_id, new_id, instance_id)
        old_state = (member.protocols, member.client_id, member.client_host, member.rebalance_timeout_ms,
                     member.session_timeout_ms)
        member.client_id, member.client_host = client_id, client_host
        member.rebalance_timeout_ms, member.session_timeout_ms = rebalance_timeout_ms, session_timeout_ms
        self._schedule_heartbeat(group, member)
        group.update_member(member, protocols, fut)
        if group.is_(S.STABLE):
            if group.select_protocol() == group.protocol_name:
                # Nothing changes for the others: persist the new member id, hand back the old
                # assignment, and skip the rebalance. The old leader id is returned so the member
                # does not think it must compute an assignment.
                assignments = {m.member_id: m.assignment for m in group.members.values()}
                self._spawn(self._finish_static_rejoin(group, member, fut, old_id, instance_id, old_state,
                                                       current_leader, assignments),
                            f"static-rejoin-{group.group_id}")
            else:
                self._maybe_prepare_rebalance(group, f"static member {instance_id} joined with other protocols")
        elif group.is_(S.COMPLETING_REBALANCE):
            # The leader may be assigning to the old member id: start over with the new one.
            self._prepare_rebalance(group, f"updating metadata for static member {instance_id}")

    async def _finish_static_rejoin(self, group: Group, member: Member, fut: asyncio.Future[JoinResult],
                                    old_id: str, instance_id: str, old_state: tuple[Any, ...],
                                    current_leader: str | None, assignments: dict[str, bytes]) -> None:
        err = await self.metadata.store_group(group, assignments)
        if member.join_future is not fut:
            return  # something else (a rebalance, a removal) has answered it meanwhile
        if err != E.NONE:
            log.warning("failed to persist the new member id of static member %s of group %s: %s",
                        instance_id, group.group_id, err.name)
            group.update_member(member, old_state[0], None)
            (member.protocols, member.client_id, member.client_host, member.rebalance_timeout_ms,
             member.session_timeout_ms) = old_state
            group.complete_join(member, JoinResult(member.member_id, err))
            if group.members.get(member.member_id) is member:
                group.replace_static_member(member.member_id, old_id, instance_id)
            return
        group.complete_join(member, self._current_join_result(group, member.member_id, False, current_leader))

    # ---- SyncGroup -----------------------------------------------------------------------

    async def sync_group(self, group_id: str, generation_id: int, member_id: str, protocol_type: str | None,
                         protocol_name: str | None, group_instance_id: str | None,
                         assignments: dict[str, bytes]) -> SyncResult:
        """Receive the leader's assignment (or wait for it) and hand each member its part."""
        err = self._status(group_id, Api.SYNC)
        if err is not None:
            # A loading coordinator makes the member rejoin rather than re-find the coordinator.
            return SyncResult(E.REBALANCE_IN_PROGRESS if err == E.COORDINATOR_LOAD_IN_PROGRESS else err)
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(E.UNKNOWN_MEMBER_ID)
        if group.is_(S.DEAD):
            return SyncResult(E.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(member_id, group_instance_id):
            return SyncResult(E.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None:
            return SyncResult(E.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            return SyncResult(E.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return SyncResult(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_(S.EMPTY):
            return SyncResult(E.UNKNOWN_MEMBER_ID)
        if group.is_(S.PREPARING_REBALANCE):
            return SyncResult(E.REBALANCE_IN_PROGRESS)
        self._remove_pending_sync(group, member_id)
        if group.is_(S.STABLE):
            self._schedule_heartbeat(group, member)
            return SyncResult(E.NONE, member.assignment, group.protocol_type, group.protocol_name)
        fut: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        member.complete_sync(SyncResult(E.REBALANCE_IN_PROGRESS))  # a duplicate sync replaces the first
        member.sync_future = fut
        if group.is_leader(member_id):
            full = {mid: assignments.get(mid, b"") for mid in group.members}
            self._spawn(self._leader_sync(group, group.generation_id, full), f"sync-{group_id}")
        return await fut

    async def _leader_sync(self, group: Group, generation: int, assignments: dict[str, bytes]) -> None:
        err = await self.metadata.store_group(group, assignments)
        if not self._live(group) or not group.is_(S.COMPLETING_REBALANCE) or group.generation_id != generation:
            return
        if err != E.NONE:
            log.warning("failed to store group %s generation %d: %s", group.group_id, generation, err.name)
            self._reset_and_propagate_assignment_error(group, err)
            self._maybe_prepare_rebalance(group, f"error {err.name} storing the group's assignment")
            return
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        self._propagate_assignment(group, E.NONE)
        group.transition_to(S.STABLE, self._now())

    # ---- Heartbeat / LeaveGroup ----------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        err = self._status(group_id, Api.HEARTBEAT)
        if err == E.COORDINATOR_LOAD_IN_PROGRESS:
            return E.NONE  # the group is still loading: let the member carry on and retry later
        if err is not None:
            return err
        group = self.groups.get(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.is_(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(member_id, group_instance_id):
            return E.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        if group.is_(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        self._schedule_heartbeat(group, member)
        if group.is_(S.PREPARING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]
                    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """Remove members (by member id, or by group.instance.id); per-member errors."""
        err = self._status(group_id, Api.LEAVE)
        if err is not None:
            return err, []
        group = self.groups.get(group_id)
        if group is None:
            return E.NONE, [(mid, iid, E.UNKNOWN_MEMBER_ID) for mid, iid in leaving]
        if group.is_(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE, []
        out = []
        for member_id, instance_id in leaving:
            if member_id and group.is_static_member_fenced(member_id, instance_id):
                out.append((member_id, instance_id, E.FENCED_INSTANCE_ID))
            elif member_id in group.pending_members:
                self._remove_pending_member(group, member_id)
                out.append((member_id, instance_id, E.NONE))
            else:
                target = group.static_members.get(instance_id) if instance_id is not None else None
                member = group.members.get(target or member_id)
                if member is None:
                    out.append((member_id, instance_id, E.UNKNOWN_MEMBER_ID))
                    continue
                log.info("member %s (instance %s) has left group %s", member.member_id, instance_id, group_id)
                self._remove_member_and_update(group, member)
                out.append((member_id, instance_id, E.NONE))
        return E.NONE, out

    # ---- offsets -------------------------------------------------------------------------

    async def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                             offsets: dict[TopicPartition, schemas.OffsetValue],
                             api_version: int = 8) -> dict[TopicPartition, ErrorCode]:
        """Store offsets for a group member (or a simple consumer: generation < 0, empty group);
        a consumer group's member names its member epoch as the generation (OffsetCommit v9+)."""
        def all_(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {tp: code for tp in offsets}

        err = self._status(group_id, Api.COMMIT)
        if err is not None:
            return all_(err)
        checked = self.consumer.validate_commit(group_id, member_id, generation_id, api_version)
        if checked is not None:
            if checked != E.NONE:
                return all_(checked)
            return await self.metadata.store_offsets(self.metadata.get_or_create(group_id), offsets)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return all_(E.ILLEGAL_GENERATION)  # a stale member of a group that is gone
            group = self.metadata.get_or_create(group_id)
        if group.is_(S.DEAD):
            return all_(E.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(member_id, group_instance_id):
            return all_(E.FENCED_INSTANCE_ID)
        if not (generation_id < 0 and group.is_(S.EMPTY)):
            # Kafka's validateOffsetCommit: who commits is checked before the group's state, so a
            # removed or stale member hears UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION (and gives up its
            # offsets, CommitFailedException in Java) even while the group completes a rebalance.
            member = group.members.get(member_id)
            if member is None:
                return all_(E.UNKNOWN_MEMBER_ID)
            if generation_id != group.generation_id:
                return all_(E.ILLEGAL_GENERATION)
            if group.is_(S.COMPLETING_REBALANCE):
                return all_(E.REBALANCE_IN_PROGRESS)
            self._schedule_heartbeat(group, member)
        return await self.metadata.store_offsets(group, offsets)

    async def commit_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                                 group_instance_id: str | None, generation_id: int,
                                 offsets: dict[TopicPartition, schemas.OffsetValue]) -> dict[TopicPartition, ErrorCode]:
        """Kafka's handleTxnCommitOffsets: the offsets are written with the producer's
        transaction and become the group's committed offsets when its COMMIT marker arrives."""
        def all_(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {tp: code for tp in offsets}

        err = self._status(group_id, Api.COMMIT)
        if err is not None:
            return all_(err)
        names_member = generation_id >= 0 or bool(member_id) or group_instance_id is not None
        checked = self.consumer.validate_commit(group_id, member_id, generation_id, 9, transactional=True) \
            if names_member else None
        if checked is not None:
            if checked != E.NONE:
                return all_(checked)
            return await self.metadata.store_offsets(self.metadata.get_or_create(group_id), offsets,
                                                     producer_id, producer_epoch)
        group = self.metadata.get_or_create(group_id)
        if group.is_(S.DEAD):
            return all_(E.COORDINATOR_NOT_AVAILABLE)
        # Kafka's validateOffsetCommit (transactional): a producer that names no member and no
        # generation (older clients) may commit to any group; one that names either must be the
        # current member of the current generation, even with generation -1 in a non-empty group.
        if names_member and not (generation_id < 0 and group.is_(S.EMPTY)):
            if group.is_static_member_fenced(member_id, group_instance_id):
                return all_(E.FENCED_INSTANCE_ID)
            if member_id not in group.members:
                return all_(E.UNKNOWN_MEMBER_ID)
            if generation_id != group.generation_id:
                return all_(E.ILLEGAL_GENERATION)
        return await self.metadata.store_offsets(group, offsets, producer_id, producer_epoch)

    def complete_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT/ABORT marker of `producer_id` was written to __consumer_offsets-`partition`:
        its pending offsets are committed or dropped (``GroupMetadataManager.complete_txn``)."""
        self.metadata.complete_txn(partition, producer_id, commit)

    def has_pending_txn_offsets(self, group_id: str, tp: TopicPartition) -> bool:
        """Offsets of an open transaction wait for `tp` (OffsetFetch's UNSTABLE_OFFSET_COMMIT)."""
        return self.metadata.has_pending_txn_offsets(group_id, tp)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None,
                      member_id: str | None = None, member_epoch: int = -1
                      ) -> tuple[ErrorCode, dict[TopicPartition, schemas.OffsetValue | None]]:
        """Committed offsets of the given partitions (None: all); None values: nothing committed.
        A consumer group's member (OffsetFetch v9) must name its current member epoch."""
        err = self._status(group_id, Api.FETCH)
        if err is not None:
            return err, {}
        checked = self.consumer.validate_fetch(group_id, member_id, member_epoch)
        if checked != E.NONE:
            return checked, {}
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None and not group.is_(S.DEAD) else {}
        if partitions is None:
            return E.NONE, dict(sorted(offsets.items()))
        return E.NONE, {tp: offsets.get(tp) for tp in partitions}

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                             ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: only offsets of topics the group does not consume any more."""
        err = self._status(group_id, Api.OFFSET_DELETE)
        if err is not None:
            return err, {}
        group = self.groups.get(group_id)
        if group is None or group.is_(S.DEAD):
            return E.GROUP_ID_NOT_FOUND, {}
        errors: dict[TopicPartition, ErrorCode] = {}
        eligible: list[TopicPartition] = []
        subscribed = self.consumer.subscribed_topics(group_id)
        if subscribed is not None:
            for tp in partitions:
                if tp[0] in subscribed:
                    errors[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    eligible.append(tp)
        elif group.is_(S.EMPTY):
            eligible = list(partitions)
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            for tp in partitions:
                if group.is_subscribed_to(tp[0]):
                    errors[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    eligible.append(tp)
        else:
            return E.NON_EMPTY_GROUP, {}
        code = await self.metadata.remove_offsets(group, [tp for tp in eligible if tp in group.offsets])
        for tp in eligible:
            errors[tp] = code
        return E.NONE, errors

    # ---- describe / list / delete --------------------------------------------------------

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupSummary]:
        dead = GroupSummary(S.DEAD.value, "", "", [])
        err = self._status(group_id, Api.DESCRIBE)
        if err is not None:
            return err, dead
        group = self.groups.get(group_id)
        if group is None or group_id in self.consumer.groups:
            # DescribeGroups (up to v5) describes classic groups; a consumer group is Dead to it,
            # as to Kafka (ConsumerGroupDescribe describes it).
            return E.NONE, dead
        return E.NONE, group.summary()

    def list_groups(self, states: set[str] | None = None, types: set[str] | None = None
                    ) -> tuple[ErrorCode, list[tuple[str, str, str, str]]]:
        """(group id, protocol type, state, group type) of every group, filtered by state and
        type (case-insensitive); COORDINATOR_LOAD_IN_PROGRESS while loading."""
        wanted = {s.lower() for s in states} if states else None
        kinds = {t.lower() for t in types} if types else None
        consumer = dict(self.consumer.list())
        out = [(g.group_id, g.protocol_type or "", g.state.value, "classic") for g in self.groups.values()
               if not g.is_(S.DEAD) and g.group_id not in consumer]
        out += [(gid, CONSUMER_PROTOCOL_TYPE, state, "consumer") for gid, state in consumer.items()]
        out = [row for row in out if (wanted is None or row[2].lower() in wanted)
               and (kinds is None or row[3] in kinds)]
        err = E.COORDINATOR_LOAD_IN_PROGRESS if self.loading else E.NONE
        return err, sorted(out)

    # ---- consumer groups (KIP-848) --------------------------------------------------------

    async def consumer_group_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        """ConsumerGroupHeartbeat (``ConsumerGroupCoordinator.heartbeat``)."""
        return await self.consumer.heartbeat(request)

    def consumer_group_describe(self, group_id: str) -> GroupDescription:
        """ConsumerGroupDescribe's answer for one group."""
        return self.consumer.describe(group_id)

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        result: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            err = self._status(group_id, Api.DELETE)
            if err is not None:
                result[group_id] = err
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_(S.DEAD):
                result[group_id] = E.GROUP_ID_NOT_FOUND
            elif not group.is_(S.EMPTY) or not self.consumer.drop_empty(group_id):
                result[group_id] = E.NON_EMPTY_GROUP
            else:
                group.transition_to(S.DEAD, self._now())
                self._unload_group(group)
                del self.groups[group_id]
                result[group_id] = await self.metadata.remove_offsets(group, list(group.offsets), remove_group=True)
                log.info("deleted group %s", group_id)
        return result

    # ---- storage and expiry --------------------------------------------------------------

    async def _store_group_logged(self, group: Group, assignments: dict[str, bytes]) -> None:
        err = await self.metadata.store_group(group, assignments)
        if err != E.NONE:
            log.warning("failed to write the metadata of group %s generation %d: %s",
                        group.group_id, group.generation_id, err.name)

    async def _expiry_loop(self) -> None:
        while self.active:
            await asyncio.sleep(self.config.retention_check_interval_ms / 1000)
            with contextlib.suppress(Exception):
                await self.expire_offsets()

    async def expire_offsets(self) -> int:
        """Drop offsets past offsets.retention.minutes, and empty groups with no offsets left
        (an empty consumer group too, once its offsets holder is gone)."""
        removed = await self.metadata.expire_offsets(skip=self.consumer.has_members)
        for group_id in [g for g in self.consumer.groups if g not in self.groups]:
            self.consumer.drop_empty(group_id)
        return removed
