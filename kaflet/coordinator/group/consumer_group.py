"""A consumer group of KIP-848's protocol: its epochs, members, target assignment and the
reconciliation of each member towards it. Pure state, no timers and no I/O (the heartbeat's
rules and timers are ``ConsumerGroupCoordinator``'s, ``consumer_coordinator.py``).

The group epoch rises whenever what the assignment depends on changes (a member joins, leaves or
changes its subscription; a subscribed topic appears, disappears or grows). The target
assignment is recomputed for the new group epoch (its assignment epoch). Each member then moves
towards its target on its own heartbeats (``reconcile``, Kafka's CurrentAssignmentBuilder): it
first gives up the partitions it loses, keeping its member epoch, and takes the next epoch once
its heartbeat shows they are released; a partition still held by another member (a partition
epoch) is handed over only after that member released it. So no partition is ever owned by two
members, at any epoch.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kaflet.coordinator.group.assignors import Assignment, MemberSpec, PartitionAssignor, TopicId

#: The member epochs of a leave request: -1 leaves, -2 leaves for now (a static member).
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
TopicIdPartition = tuple[TopicId, int]


class MemberState(enum.Enum):
    """Where a member is in its reconciliation (Kafka's MemberState)."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(enum.Enum):
    """The states a consumer group reports (Kafka's ConsumerGroupState names)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class PartitionOwnershipError(RuntimeError):
    """A partition was about to get a second owner: a bug in reconciliation, never a client's fault."""


@dataclass(slots=True)
class ConsumerGroupMember:
    """One member: what it subscribes to, its epochs, what it owns and what it must give up."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    revoking: Assignment = field(default_factory=dict)
    session_timer: asyncio.TimerHandle | None = None
    rebalance_timer: asyncio.TimerHandle | None = None

    def cancel_timers(self) -> None:
        for timer in (self.session_timer, self.rebalance_timer):
            if timer is not None:
                timer.cancel()
        self.session_timer = self.rebalance_timer = None


@dataclass(frozen=True, slots=True)
class Reconciled:
    """A member's next epoch, state and partitions (the result of ``reconcile``)."""

    member_epoch: int
    state: MemberState
    assigned: Assignment
    revoking: Assignment


def _has_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """The member still owns one of `partitions` (None: it did not say, so assume it does)."""
    if owned is None:
        return True
    return any(owned.get(t, frozenset()) & ps for t, ps in partitions.items())


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment, owned: Assignment | None,
              partition_epoch: Callable[[TopicIdPartition], int]) -> Reconciled:
    """The member's next step towards `target` (Kafka's CurrentAssignmentBuilder).

    `owned` is what the member's heartbeat says it owns (None when the heartbeat did not say);
    `partition_epoch` the epoch of a partition's current owner in the group (-1: nobody).
    """
    current = Reconciled(member.member_epoch, member.state, member.assigned, member.revoking)
    if member.state == MemberState.STABLE and member.member_epoch == target_epoch:
        return current
    if member.state == MemberState.UNREVOKED_PARTITIONS and _has_any(owned, member.revoking):
        return current  # wait until its heartbeat shows the revoked partitions are released
    keep: dict[TopicId, frozenset[int]] = {}
    revoke: dict[TopicId, frozenset[int]] = {}
    unreleased = False
    for t in sorted(set(target) | set(member.assigned)):
        want = target.get(t, frozenset())
        have = member.assigned.get(t, frozenset())
        giving_up = member.revoking.get(t, frozenset())
        if have - want:
            revoke[t] = have - want
        assignable = set(have & want)
        for p in sorted(want - have):
            # A partition this member is itself revoking is not someone else's to release.
            if partition_epoch((t, p)) == -1 or p in giving_up:
                assignable.add(p)
            else:
                unreleased = True
        if assignable:
            keep[t] = frozenset(assignable)
    if revoke and _has_any(owned, revoke):
        return Reconciled(member.member_epoch, MemberState.UNREVOKED_PARTITIONS, keep, revoke)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return Reconciled(target_epoch, state, keep, {})


class ConsumerGroup:
    """A consumer group's epochs, members, subscriptions and assignments."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.target: dict[str, Assignment] = {}
        self.partition_epochs: dict[TopicIdPartition, int] = {}
        #: Subscribed topic name -> (topic id, partition count) when the group epoch last moved.
        self.subscription_metadata: dict[str, tuple[TopicId, int]] = {}
        self.assignor_name = ""
        self.dead = False
        #: The records last written for the group, by key (``consumer_records.encode_group``).
        self.persisted: dict[bytes, bytes] = {}

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def partition_epoch(self, tp: TopicIdPartition) -> int:
        return self.partition_epochs.get(tp, -1)

    # ---- members ------------------------------------------------------------------------

    def _drop_epochs(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned, member.revoking):
            for t, ps in assignment.items():
                for p in ps:
                    if self.partition_epochs.get((t, p)) is not None:
                        del self.partition_epochs[(t, p)]

    def _add_epochs(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned, member.revoking):
            for t, ps in assignment.items():
                for p in ps:
                    if (t, p) in self.partition_epochs:
                        raise PartitionOwnershipError(
                            f"group {self.group_id}: partition {p} of topic id {t.hex()} already has an owner "
                            f"(epoch {self.partition_epochs[(t, p)]}), not giving it to {member.member_id}")
                    self.partition_epochs[(t, p)] = member.member_epoch

    def apply(self, member: ConsumerGroupMember, step: Reconciled) -> None:
        """Move `member` to its reconciled epoch, state and partitions (and the partition epochs)."""
        self._drop_epochs(member)
        if step.member_epoch != member.member_epoch:
            member.previous_member_epoch = member.member_epoch
        member.member_epoch = step.member_epoch
        member.state = step.state
        member.assigned = step.assigned
        member.revoking = step.revoking
        self._add_epochs(member)

    def add(self, member: ConsumerGroupMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._add_epochs(member)

    def remove(self, member_id: str) -> ConsumerGroupMember | None:
        """Remove a member: its partitions are free, the group epoch rises."""
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        member.cancel_timers()
        self._drop_epochs(member)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        self.group_epoch += 1
        return member

    def replace_static(self, old: ConsumerGroupMember, new_id: str) -> ConsumerGroupMember:
        """A static member back under a new member id takes over the old one's epoch and partitions."""
        old.cancel_timers()
        self._drop_epochs(old)
        del self.members[old.member_id]
        new = ConsumerGroupMember(
            member_id=new_id, instance_id=old.instance_id, rack_id=old.rack_id, client_id=old.client_id,
            client_host=old.client_host, rebalance_timeout_ms=old.rebalance_timeout_ms,
            subscribed_topic_names=list(old.subscribed_topic_names),
            subscribed_topic_regex=old.subscribed_topic_regex, server_assignor=old.server_assignor,
            member_epoch=old.previous_member_epoch if old.member_epoch == STATIC_LEAVE_EPOCH else old.member_epoch,
            previous_member_epoch=old.previous_member_epoch, state=old.state, assigned=old.assigned,
            revoking=old.revoking)
        if old.member_id in self.target:
            self.target[new_id] = self.target.pop(old.member_id)
        self.add(new)
        return new

    # ---- subscriptions and the target assignment ---------------------------------------

    def subscribed_names(self, topic_names: Callable[[str], list[str]]) -> set[str]:
        """Every topic some member subscribes to, its regex resolved by `topic_names`."""
        out: set[str] = set()
        for m in self.members.values():
            out.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                out.update(topic_names(m.subscribed_topic_regex))
        return out

    def preferred_assignor(self, default: str) -> str:
        """The ServerAssignor most members asked for (ties by name), else the configured default."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return default
        return min(votes, key=lambda name: (-votes[name], name))

    def compute_target(self, assignor: PartitionAssignor, topic_names: Callable[[str], list[str]]) -> None:
        """Recompute the target assignment for the current group epoch."""
        topics = {tid: count for tid, count in self.subscription_metadata.values()}
        ids_by_name = {name: tid for name, (tid, _) in self.subscription_metadata.items()}
        specs: dict[str, MemberSpec] = {}
        for member_id, m in self.members.items():
            names = set(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                names.update(topic_names(m.subscribed_topic_regex))
            specs[member_id] = MemberSpec(frozenset(ids_by_name[n] for n in names if n in ids_by_name),
                                          self.target.get(member_id, {}))
        self.target = assignor.assign(specs, topics)
        self.assignor_name = assignor.name
        self.assignment_epoch = self.group_epoch

    def target_of(self, member_id: str) -> Assignment:
        return self.target.get(member_id, {})


def assignment_from_wire(partitions: Mapping[TopicId, list[int]]) -> Assignment:
    """An assignment from (topic id, partitions) pairs of a request."""
    return {t: frozenset(ps) for t, ps in partitions.items() if ps}
