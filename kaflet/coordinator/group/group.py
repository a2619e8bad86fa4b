"""A group's state machine, members, protocol choice and committed offsets (no I/O, no timers)."""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from dataclasses import dataclass

from kaflet.coordinator.group.member import JoinResult, Member, SyncResult
from kaflet.coordinator.group.schemas import OffsetValue, consumer_subscription_topics
from kaflet.protocol.errors import ErrorCode

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(enum.Enum):
    """Kafka's group states; the value is the name DescribeGroups / ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
# The states each state may be entered from (Kafka's GroupState.validPreviousStates).
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    _S.DEAD: frozenset({_S.STABLE, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
}


class IllegalStateTransition(RuntimeError):
    """A transition Kafka's state machine does not allow: a coordinator bug, never client input."""


@dataclass(slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupSummary:
    """What DescribeGroups reports for one group."""

    state: str
    protocol_type: str
    protocol: str
    members: list[MemberSummary]


class Group:
    """One group's state. The coordinator drives it; every method here is synchronous."""

    def __init__(self, group_id: str, now_ms: int, state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        self.current_state_timestamp: int | None = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: dict[str, asyncio.TimerHandle | None] = {}  # MEMBER_ID_REQUIRED handed out
        self.num_awaiting_join = 0
        self.supported_protocols: Counter[str] = Counter()
        self.new_member_added = False
        self.subscribed_topics: set[str] | None = None
        self.offsets: dict[tuple[str, int], OffsetValue] = {}
        # Transactional offsets (TxnOffsetCommit) per producer id, with the order they were
        # written in, until the transaction's marker commits or aborts them; ``offset_order`` is
        # the order of each committed offset's write (a later plain commit wins over them).
        self.pending_txn_offsets: dict[int, dict[tuple[str, int], tuple[OffsetValue, int]]] = {}
        self.offset_order: dict[tuple[str, int], int] = {}
        # The rebalance timer (Kafka's DelayedJoin / InitialDelayedJoin).
        self.join_timer: asyncio.TimerHandle | None = None
        self.join_initial = False
        self.initial_remaining_ms = 0
        # Members that got their JoinGroup response but have not sent SyncGroup yet, and the
        # timer that removes them after the rebalance timeout (Kafka's DelayedSync, KAFKA-12890).
        self.pending_sync: set[str] = set()
        self.sync_timer: asyncio.TimerHandle | None = None

    # ---- state ---------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalStateTransition(
                f"group {self.group_id} cannot go from {self.state.value} to {state.value}")
        self.state = state
        self.current_state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # ---- members -------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    @property
    def size(self) -> int:
        return len(self.members)

    def add(self, member: Member, join_future: asyncio.Future[JoinResult] | None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(member.protocol_names)
        member.join_future = join_future
        if join_future is not None:
            self.num_awaiting_join += 1

    def remove(self, member_id: str) -> Member | None:
        """Drop a member (its waiting requests must be answered first by the caller)."""
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.supported_protocols.subtract(member.protocol_names)
        if member.awaiting_join:
            self.num_awaiting_join -= 1
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_sync.discard(member_id)
        return member

    def update_member(self, member: Member, protocols: list[tuple[str, bytes]],
                      join_future: asyncio.Future[JoinResult] | None) -> None:
        """New protocols and (maybe) a new waiting JoinGroup for an existing member."""
        self.supported_protocols.subtract(member.protocol_names)
        self.supported_protocols.update(name for name, _ in protocols)
        member.protocols = protocols
        if join_future is not None:
            if member.awaiting_join:
                # A second JoinGroup (another connection) replaces the first: answer the old one.
                member.complete_join(JoinResult(member.member_id, ErrorCode.REBALANCE_IN_PROGRESS))
            else:
                self.num_awaiting_join += 1
            member.join_future = join_future

    def complete_join(self, member: Member, result: JoinResult) -> None:
        if member.complete_join(result):
            self.num_awaiting_join -= 1

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep a leader that rejoined, else pick one that did; False if nobody rejoined."""
        if self.leader_id is not None:
            leader = self.members.get(self.leader_id)
            if leader is not None and leader.awaiting_join:
                return True
        for m in self.members.values():
            if m.awaiting_join:
                self.leader_id = m.member_id
                return True
        return False

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ---- static membership ---------------------------------------------------------------

    def is_static_member_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """Another member id now holds this group.instance.id (KIP-345)."""
        return instance_id is not None and instance_id in self.static_members \
            and self.static_members[instance_id] != member_id

    def replace_static_member(self, old_id: str, new_id: str, instance_id: str) -> Member:
        """Hand the static member's slot to a new member id (a restarted static member)."""
        member = self.members.pop(old_id)
        # Whoever still waits under the old id is a zombie of the same instance: fence it.
        if member.complete_join(JoinResult(old_id, ErrorCode.FENCED_INSTANCE_ID)):
            self.num_awaiting_join -= 1
        member.complete_sync(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_id
        self.members[new_id] = member
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        if old_id in self.pending_sync:  # the new id owes the SyncGroup the old one did
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    # ---- protocols -----------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """A joining member must share the type and at least one protocol every member supports."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        n = len(self.members)
        return protocol_type == self.protocol_type and any(
            self.supported_protocols[name] == n for name, _ in protocols)

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        """Each member votes for its preferred common protocol; the most votes win."""
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        # Ties go to the protocol the earliest member prefers, so the choice is deterministic.
        for m in self.members.values():
            choice = m.vote(candidates)
            if votes[choice] == best:
                return choice
        raise AssertionError("unreachable")

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        assert self.protocol_name is not None
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    def _compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None or not self.members:
            return None if self.members else set()
        topics: set[str] = set()
        for m in self.members.values():
            t = consumer_subscription_topics(m.metadata(self.protocol_name))
            if t is None:
                return None  # unknown: treat the group as subscribed to every topic
            topics |= t
        return topics

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        self.pending_sync.clear()
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self._compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self._compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)

    def is_subscribed_to(self, topic: str) -> bool:
        return self.subscribed_topics is None or topic in self.subscribed_topics

    # ---- describe ------------------------------------------------------------------------

    def summary(self) -> GroupSummary:
        if self.is_(GroupState.STABLE) and self.protocol_name is not None:
            proto = self.protocol_name
            members = [MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                     m.metadata(proto), m.assignment) for m in self.members.values()]
            return GroupSummary(self.state.value, self.protocol_type or "", proto, members)
        members = [MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host, b"", b"")
                   for m in self.members.values()]
        return GroupSummary(self.state.value, self.protocol_type or "", "", members)

    # ---- offsets -------------------------------------------------------------------------

    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
        """Offsets past retention (Kafka's KIP-211 rules): for an Empty group counted from when it
        became Empty, for a simple (typeless) group from each commit, for a Stable consumer group
        only the topics it no longer subscribes to."""

        def expired(tp: tuple[str, int], base: int) -> bool:
            v = self.offsets[tp]
            if v.expire_timestamp >= 0:
                return now_ms >= v.expire_timestamp
            return now_ms - base >= retention_ms

        if self.protocol_type and self.is_(GroupState.EMPTY):
            return [tp for tp, v in self.offsets.items()
                    if expired(tp, self.current_state_timestamp if self.current_state_timestamp is not None
                               else v.commit_timestamp)]
        if self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.subscribed_topics is not None \
                and self.is_(GroupState.STABLE):
            return [tp for tp, v in self.offsets.items()
                    if tp[0] not in self.subscribed_topics and expired(tp, v.commit_timestamp)]
        if not self.protocol_type:
            return [tp for tp, v in self.offsets.items() if expired(tp, v.commit_timestamp)]
        return []
