"""Partition leader election: Kafka's PartitionLeaderElectionAlgorithms and Election.

Pure functions over the controller context: they choose a leader (and ISR) and never write.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kaflet.controller.context import ControllerContext, TopicPartition, new_leader_and_isr
from kaflet.metadata.zkdata import LeaderAndIsr

__all__ = [
    "ElectionResult",
    "controlled_shutdown_partition_leader_election",
    "leader_for_controlled_shutdown",
    "leader_for_offline",
    "leader_for_preferred_replica",
    "leader_for_reassign",
    "offline_partition_leader_election",
    "preferred_replica_partition_leader_election",
    "reassign_partition_leader_election",
]


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """The new state of a partition (None: no leader could be elected) and the replicas that
    must hear about it."""

    topic_partition: TopicPartition
    leader_and_isr: LeaderAndIsr | None
    live_replicas: list[int]


# ---------------------------------------------------------------------------- algorithms


def offline_partition_leader_election(
    assignment: Sequence[int], isr: Sequence[int], live_replicas: set[int], unclean_enabled: bool
) -> tuple[int | None, bool]:
    """First live in-sync replica in assignment order; failing that, with unclean election, the
    first live replica. Returns (leader, whether the choice was unclean)."""
    for r in assignment:
        if r in live_replicas and r in isr:
            return r, False
    if unclean_enabled:
        for r in assignment:
            if r in live_replicas:
                return r, True
    return None, False


def reassign_partition_leader_election(
    reassignment: Sequence[int], isr: Sequence[int], live_replicas: set[int]
) -> int | None:
    """First live in-sync replica of the reassignment's target replicas."""
    return next((r for r in reassignment if r in live_replicas and r in isr), None)


def preferred_replica_partition_leader_election(
    assignment: Sequence[int], isr: Sequence[int], live_replicas: set[int]
) -> int | None:
    """The preferred (first) replica, if it is live and in sync."""
    if assignment and assignment[0] in live_replicas and assignment[0] in isr:
        return assignment[0]
    return None


def controlled_shutdown_partition_leader_election(
    assignment: Sequence[int], isr: Sequence[int], live_replicas: set[int], shutting_down: set[int]
) -> int | None:
    """First live in-sync replica that is not shutting down."""
    return next((r for r in assignment if r in live_replicas and r in isr and r not in shutting_down), None)


# ---------------------------------------------------------------------------- per strategy


def leader_for_offline(
    ctx: ControllerContext, partitions: Iterable[tuple[TopicPartition, LeaderAndIsr | None, bool]]
) -> tuple[list[ElectionResult], int]:
    """OfflinePartitionLeaderElection for (partition, current state, unclean allowed) triples.

    The new ISR is the live part of the old one, or just the leader after an unclean choice.
    Also returns how many elections were unclean (Kafka's UncleanLeaderElectionsPerSec)."""
    results: list[ElectionResult] = []
    unclean_count = 0
    for tp, current, unclean_enabled in partitions:
        assignment = ctx.partition_replica_assignment(tp)
        live = [r for r in assignment if ctx.is_replica_online(r, tp)]
        if current is None:
            results.append(ElectionResult(tp, None, live))
            continue
        leader, unclean = offline_partition_leader_election(assignment, current.isr, set(live), unclean_enabled)
        if leader is None:
            results.append(ElectionResult(tp, None, live))
            continue
        unclean_count += unclean
        if leader in current.isr:
            new_isr = [r for r in current.isr if ctx.is_replica_online(r, tp)]
        else:
            new_isr = [leader]
        results.append(ElectionResult(tp, new_leader_and_isr(current, leader, new_isr), live))
    return results, unclean_count


def leader_for_reassign(
    ctx: ControllerContext, partitions: Iterable[tuple[TopicPartition, LeaderAndIsr]]
) -> list[ElectionResult]:
    """ReassignPartitionLeaderElection: a leader among the target replicas, same ISR."""
    results = []
    for tp, current in partitions:
        target = ctx.partition_full_replica_assignment(tp).target_replicas
        live = [r for r in target if ctx.is_replica_online(r, tp)]
        leader = reassign_partition_leader_election(target, current.isr, set(live))
        new = None if leader is None else new_leader_and_isr(current, leader, current.isr)
        results.append(ElectionResult(tp, new, target))
    return results


def leader_for_preferred_replica(
    ctx: ControllerContext, partitions: Iterable[tuple[TopicPartition, LeaderAndIsr]]
) -> list[ElectionResult]:
    """PreferredReplicaPartitionLeaderElection: the preferred replica, same ISR."""
    results = []
    for tp, current in partitions:
        assignment = ctx.partition_replica_assignment(tp)
        live = {r for r in assignment if ctx.is_replica_online(r, tp)}
        leader = preferred_replica_partition_leader_election(assignment, current.isr, live)
        new = None if leader is None else new_leader_and_isr(current, leader, current.isr)
        results.append(ElectionResult(tp, new, assignment))
    return results


def leader_for_controlled_shutdown(
    ctx: ControllerContext, partitions: Iterable[tuple[TopicPartition, LeaderAndIsr]]
) -> list[ElectionResult]:
    """ControlledShutdownPartitionLeaderElection: a leader that is not shutting down; the
    shutting-down brokers leave the ISR."""
    shutting_down = set(ctx.shutting_down_broker_ids)
    results = []
    for tp, current in partitions:
        assignment = ctx.partition_replica_assignment(tp)
        live = [r for r in assignment if ctx.is_replica_online(r, tp, include_shutting_down=True)]
        leader = controlled_shutdown_partition_leader_election(assignment, current.isr, set(live), shutting_down)
        new_isr = [r for r in current.isr if r not in shutting_down]
        new = None if leader is None else new_leader_and_isr(current, leader, new_isr)
        results.append(ElectionResult(tp, new, live))
    return results
