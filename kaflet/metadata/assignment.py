"""Replica assignment, as Kafka's AdminUtils.assignReplicasToBrokers does it.

Goals (Kafka's): spread replicas evenly over brokers; for the partitions led by one broker,
spread their followers over the other brokers; with rack information, put each partition's
replicas on different racks when possible.

Rack-unaware: the first replica of each partition goes round-robin over the broker list from a
start index; the followers follow at an increasing shift, which grows by one after every full
round of partitions. Rack-aware: the same over a rack-alternated broker list (one broker of each
rack in turn, racks sorted by name), skipping followers whose rack (or broker) already has a
replica while racks (brokers) without one remain.

The random start index and shift can be fixed so results are deterministic (tests, and adding
partitions, where Kafka fixes them).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kaflet.metadata.errors import (
    AdminOperationError,
    BrokerNotAvailableError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)

__all__ = [
    "BrokerMetadata",
    "assign_new_partitions",
    "assign_replicas_to_brokers",
    "rack_alternated_broker_list",
    "replica_index",
    "validate_new_replica_assignment",
    "validate_topic_assignment",
]

_rand = random.Random()


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    """A broker as assignment sees it: its id and optional rack."""

    id: int
    rack: str | None = None


BrokerLike = BrokerMetadata | tuple[int, str | None]


def _brokers(brokers: Iterable[BrokerLike]) -> list[BrokerMetadata]:
    return [b if isinstance(b, BrokerMetadata) else BrokerMetadata(int(b[0]), b[1]) for b in brokers]


def replica_index(
    first_replica_index: int, second_replica_shift: int, replica_idx: int, n_brokers: int
) -> int:
    """Index of a follower: never the first replica's index, shifted by ``second_replica_shift``."""
    shift = 1 + (second_replica_shift + replica_idx) % (n_brokers - 1)
    return (first_replica_index + shift) % n_brokers


def rack_alternated_broker_list(broker_racks: Mapping[int, str]) -> list[int]:
    """Brokers alternated by rack: racks in sorted order, each rack's brokers in id order.

    For rack1: 0,1,2; rack2: 3,4,5; rack3: 6,7,8 this is 0,3,6,1,4,7,2,5,8.
    """
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in broker_racks.items():
        by_rack.setdefault(rack, []).append(broker_id)
    racks = sorted(by_rack)
    iters = {rack: iter(sorted(ids)) for rack, ids in by_rack.items()}
    result: list[int] = []
    rack_index = 0
    while len(result) < len(broker_racks):
        nxt = next(iters[racks[rack_index]], None)
        if nxt is not None:
            result.append(nxt)
        rack_index = (rack_index + 1) % len(racks)
    return result


def assign_replicas_to_brokers(
    brokers: Sequence[BrokerLike],
    n_partitions: int,
    replication_factor: int,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Assign ``n_partitions`` partitions (ids from ``max(0, start_partition_id)``) to brokers.

    ``brokers`` is used in the order given (Kafka sorts by id where it matters; so do our
    callers). With ``fixed_start_index >= 0`` both the start index and the follower shift are
    that value; otherwise both are random (from ``rng`` if given).

    Raises InvalidPartitionsError, InvalidReplicationFactorError, and AdminOperationError when
    only some brokers have a rack.
    """
    metas = _brokers(brokers)
    if n_partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(metas):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(metas)}."
        )
    rng = rng or _rand
    if all(b.rack is None for b in metas):
        return _assign_rack_unaware(
            n_partitions,
            replication_factor,
            [b.id for b in metas],
            fixed_start_index,
            start_partition_id,
            rng,
        )
    if any(b.rack is None for b in metas):
        raise AdminOperationError("Not all brokers have rack information for replica rack aware assignment.")
    return _assign_rack_aware(
        n_partitions, replication_factor, metas, fixed_start_index, start_partition_id, rng
    )


def _assign_rack_unaware(
    n_partitions: int,
    replication_factor: int,
    broker_ids: list[int],
    fixed_start_index: int,
    start_partition_id: int,
    rng: random.Random,
) -> dict[int, list[int]]:
    n = len(broker_ids)
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    next_replica_shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    partition = max(0, start_partition_id)
    result: dict[int, list[int]] = {}
    for _ in range(n_partitions):
        if partition > 0 and partition % n == 0:
            next_replica_shift += 1
        first = (partition + start_index) % n
        replicas = [broker_ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(broker_ids[replica_index(first, next_replica_shift, j, n)])
        result[partition] = replicas
        partition += 1
    return result


def _assign_rack_aware(
    n_partitions: int,
    replication_factor: int,
    metas: list[BrokerMetadata],
    fixed_start_index: int,
    start_partition_id: int,
    rng: random.Random,
) -> dict[int, list[int]]:
    broker_rack = {b.id: b.rack for b in metas if b.rack is not None}
    num_racks = len(set(broker_rack.values()))
    arranged = rack_alternated_broker_list(broker_rack)
    n = len(arranged)
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    next_replica_shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    partition = max(0, start_partition_id)
    result: dict[int, list[int]] = {}
    for _ in range(n_partitions):
        if partition > 0 and partition % n == 0:
            next_replica_shift += 1
        first = (partition + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_with = {broker_rack[leader]}
        brokers_with = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[replica_index(first, next_replica_shift * num_racks, k, n)]
                rack = broker_rack[broker]
                k += 1
                # Take it unless its rack already has a replica while some rack has none, or the
                # broker already has one while some broker has none.
                if (rack not in racks_with or len(racks_with) == num_racks) and (
                    broker not in brokers_with or len(brokers_with) == n
                ):
                    replicas.append(broker)
                    racks_with.add(rack)
                    brokers_with.add(broker)
                    break
        result[partition] = replicas
        partition += 1
    return result


def assign_new_partitions(
    brokers: Sequence[BrokerLike],
    existing: Mapping[int, Sequence[int]],
    new_total: int,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Assignment for the partitions added when a topic grows to ``new_total`` partitions.

    As Kafka (AdminZkClient.createNewPartitionsAssignment): the replication factor is partition
    0's, the start index (and shift) is fixed at the position of the first broker (brokers sorted
    by id) whose id is >= partition 0's first replica, and partition ids continue after the
    existing ones. Returns only the new partitions.
    """
    if 0 not in existing:
        raise AdminOperationError(
            f"Unexpected existing replica assignment, partition id 0 is missing. Assignment: {dict(existing)}"
        )
    to_add = new_total - len(existing)
    if to_add <= 0:
        raise InvalidPartitionsError(
            "The number of partitions for a topic can only be increased. "
            f"Topic currently has {len(existing)} partitions, {new_total} would not be an increase."
        )
    metas = sorted(_brokers(brokers), key=lambda b: b.id)
    p0 = list(existing[0])
    start_index = next((i for i, b in enumerate(metas) if b.id >= p0[0]), 0)
    return assign_replicas_to_brokers(metas, to_add, len(p0), start_index, len(existing), rng)


def validate_topic_assignment(assignment: Mapping[int, Sequence[int]]) -> None:
    """Kafka's checks of a (manual or computed) assignment at topic creation.

    All partitions have the same number of replicas, no partition has duplicates, and the
    partition ids are 0..n-1.
    """
    if not assignment:
        raise InvalidReplicaAssignmentError("partitions should be a consecutive 0-based integer sequence")
    if len({len(r) for r in assignment.values()}) != 1:
        raise InvalidReplicaAssignmentError("All partitions should have the same number of replicas")
    for p in sorted(assignment):
        reps = assignment[p]
        if len(reps) == 0:
            raise InvalidReplicaAssignmentError(f"Cannot have replication factor of 0 for partition id {p}.")
        if len(reps) != len(set(reps)):
            raise InvalidReplicaAssignmentError(
                f"Duplicate replica assignment found: {_fmt_assignment(assignment)}"
            )
    if sorted(assignment) != list(range(len(assignment))):
        raise InvalidReplicaAssignmentError("partitions should be a consecutive 0-based integer sequence")


def validate_new_replica_assignment(
    assignment: Mapping[int, Sequence[int]],
    expected_replication_factor: int,
    available_broker_ids: Iterable[int],
) -> None:
    """Kafka's checks of a manual assignment for added partitions (AdminZkClient)."""
    available = set(available_broker_ids)
    for p in sorted(assignment):
        reps = list(assignment[p])
        if not reps:
            raise InvalidReplicaAssignmentError(f"Cannot have replication factor of 0 for partition id {p}.")
        if len(reps) != len(set(reps)):
            raise InvalidReplicaAssignmentError(
                f"Duplicate brokers not allowed in replica assignment: {', '.join(map(str, reps))} "
                f"for partition id {p}."
            )
        if not set(reps) <= available:
            raise BrokerNotAvailableError(
                f"Some brokers specified for partition id {p} are not available. "
                f"Specified brokers: {', '.join(map(str, reps))}, "
                f"available brokers: {', '.join(map(str, sorted(available)))}."
            )
    bad = [
        (p, len(assignment[p]))
        for p in sorted(assignment)
        if len(assignment[p]) != expected_replication_factor
    ]
    if bad:
        raise InvalidReplicaAssignmentError(
            "Inconsistent replication factor between partitions, "
            f"partition 0 has {expected_replication_factor} while partitions "
            f"[{', '.join(str(p) for p, _ in bad)}] have replication factors "
            f"[{', '.join(str(n) for _, n in bad)}], respectively."
        )


def _fmt_assignment(assignment: Mapping[int, Sequence[int]]) -> str:
    return "{" + ", ".join(f"{p}: [{', '.join(map(str, assignment[p]))}]" for p in sorted(assignment)) + "}"
