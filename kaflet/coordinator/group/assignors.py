"""The server-side partition assignors of consumer groups (KIP-848): ``uniform`` and ``range``.

The group coordinator computes each member's target assignment itself; a member names the
assignor it wants (``group.remote.assignor`` in the clients, ServerAssignor on the wire) or gets
the first of ``group.consumer.assignors``. Both assignors are pure functions of the members'
subscriptions, their previous target assignments and the partition counts, so the same input
always gives the same answer (members and topics are taken in sorted order).

- ``uniform`` (Kafka's default) balances the number of partitions per member and moves as few
  partitions as it can: every member first keeps what it had (where it is still subscribed and
  the partition still exists), the rest go to the least loaded subscribed member, then partitions
  move from the most to the least loaded member only while their counts differ by more than one.
  Kafka's UniformAssignor reaches the same balance with an optimised algorithm per case
  (homogeneous or heterogeneous subscriptions); its choice of which partitions move may differ.
- ``range`` gives each subscribed member a contiguous range of every topic's partitions, members
  in member id order, the first ``partitions % members`` members one more (the classic
  RangeAssignor's rule). Kafka's server-side RangeAssignor also keeps ranges sticky across
  rebalances; this one recomputes them, so a joining member can move more partitions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

TopicId = bytes
#: One member's partitions: topic id -> partition indexes.
Assignment = dict[TopicId, frozenset[int]]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What an assignor knows of a member: its subscribed topics (by id, existing ones only) and
    its previous target assignment."""

    subscribed: frozenset[TopicId]
    current: Mapping[TopicId, frozenset[int]] = field(default_factory=dict)


class PartitionAssignor(Protocol):
    """A server-side assignor (Kafka's ConsumerGroupPartitionAssignor)."""

    name: str

    def assign(self, members: Mapping[str, MemberSpec], topics: Mapping[TopicId, int]) -> dict[str, Assignment]:
        """Each member's target assignment, given the partition count of every subscribed topic."""
        ...


def _freeze(owned: Mapping[str, dict[TopicId, set[int]]]) -> dict[str, Assignment]:
    return {m: {t: frozenset(ps) for t, ps in sorted(by_topic.items()) if ps} for m, by_topic in owned.items()}


class UniformAssignor:
    """Balanced and sticky (see the module docstring)."""

    name = "uniform"

    def assign(self, members: Mapping[str, MemberSpec], topics: Mapping[TopicId, int]) -> dict[str, Assignment]:
        ids = sorted(members)
        owner: dict[tuple[TopicId, int], str] = {}
        owned: dict[str, dict[TopicId, set[int]]] = {m: {} for m in ids}
        count = dict.fromkeys(ids, 0)
        eligible: dict[TopicId, list[str]] = {
            t: [m for m in ids if t in members[m].subscribed] for t in sorted(topics)}

        def give(tp: tuple[TopicId, int], member: str) -> None:
            owner[tp] = member
            owned[member].setdefault(tp[0], set()).add(tp[1])
            count[member] += 1

        def take(tp: tuple[TopicId, int]) -> None:
            member = owner.pop(tp)
            owned[member][tp[0]].discard(tp[1])
            count[member] -= 1

        # 1. Stickiness: what a member had stays with it while still valid (first claim wins).
        for m in ids:
            spec = members[m]
            for t, parts in sorted(spec.current.items()):
                if t not in spec.subscribed or t not in topics:
                    continue
                for p in sorted(parts):
                    if p < topics[t] and (t, p) not in owner:
                        give((t, p), m)
        # 2. Unowned partitions to the least loaded subscribed member.
        for t, subscribers in eligible.items():
            if not subscribers:
                continue
            for p in range(topics[t]):
                if (t, p) not in owner:
                    give((t, p), min(subscribers, key=lambda m: (count[m], m)))
        # 3. Balance: one partition at a time from the most loaded member that has one to give
        # to a subscribed member with at least two fewer, until none has. Each move lowers the
        # sum of squared counts, so this ends; taking from the heaviest moves the fewest.
        while True:
            move = None
            for m in sorted(ids, key=lambda m: (-count[m], m)):
                for t in sorted(owned[m]):
                    for p in sorted(owned[m][t], reverse=True):
                        target = min(eligible[t], key=lambda x: (count[x], x))
                        if count[target] < count[m] - 1:
                            move = ((t, p), target)
                            break
                    if move:
                        break
                if move:
                    break
            if move is None:
                break
            take(move[0])
            give(*move)
        return _freeze(owned)


class RangeAssignor:
    """Contiguous ranges per topic (see the module docstring)."""

    name = "range"

    def assign(self, members: Mapping[str, MemberSpec], topics: Mapping[TopicId, int]) -> dict[str, Assignment]:
        owned: dict[str, dict[TopicId, set[int]]] = {m: {} for m in members}
        for t in sorted(topics):
            subscribers = sorted(m for m, spec in members.items() if t in spec.subscribed)
            if not subscribers:
                continue
            quota, extra = divmod(topics[t], len(subscribers))
            start = 0
            for i, m in enumerate(subscribers):
                n = quota + (1 if i < extra else 0)
                if n:
                    owned[m][t] = set(range(start, start + n))
                start += n
        return _freeze(owned)


ASSIGNORS: dict[str, PartitionAssignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}

#: Kafka's class names for the same assignors, accepted in group.consumer.assignors.
CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def assignor_names(configured: list[str]) -> list[str]:
    """group.consumer.assignors as short names; ValueError for one kaflet does not have."""
    out = []
    for name in configured:
        short = CLASS_NAMES.get(name, name)
        if short not in ASSIGNORS:
            raise ValueError(f"unknown assignor {name!r} (kaflet has: {', '.join(ASSIGNORS)})")
        out.append(short)
    if not out:
        raise ValueError("at least one assignor is needed")
    return out
