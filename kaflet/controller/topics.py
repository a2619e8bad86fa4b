"""Topic lifecycle writes any broker makes, against the metadata tree only (no logs, no sockets).

What Kafka's AdminZkClient writes to ZooKeeper when topics are created, grow or are deleted,
with Kafka's validation and error codes; the controller (:mod:`kaflet.controller.controller`)
reacts to these writes: it creates the partition state znodes, has the replicas created and,
for a deletion, deletes the replicas and then the topic's znodes.

* :func:`create_topic` writes ``/config/topics/<t>`` and ``/brokers/topics/<t>`` (v3, new topic
  id) in one multi;
* :func:`add_partitions` rewrites the assignment (conditional on its version);
* :func:`delete_topic` only marks the topic (``/admin/delete_topics/<t>``), as Kafka does.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kaflet.metadata import topic_names
from kaflet.metadata import zkdata as zk
from kaflet.metadata.assignment import (
    BrokerMetadata,
    assign_new_partitions,
    assign_replicas_to_brokers,
    validate_new_replica_assignment,
    validate_topic_assignment,
)
from kaflet.metadata.errors import (
    AdminError,
    AdminOperationError,
    BrokerNotAvailableError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    ReassignmentInProgressError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from kaflet.metadata.topic_names import TopicCollisionError
from kaflet.metadata.tree import (
    BadVersionError,
    CreateOp,
    MetadataTree,
    NodeExistsError,
    NoNodeError,
    Op,
    SetOp,
)

__all__ = [
    "AdminError",
    "AdminOperationError",
    "BrokerNotAvailableError",
    "CreateOutcome",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidTopicError",
    "ReassignmentInProgressError",
    "TopicCollisionError",
    "TopicCreated",
    "TopicExistsError",
    "TopicRequest",
    "UnknownTopicOrPartitionError",
    "add_partitions",
    "create_topic",
    "delete_topic",
    "ensure_persistent_paths",
]

log = logging.getLogger(__name__)

LiveBroker = tuple[int, str | None] | BrokerMetadata


@dataclass(frozen=True, slots=True)
class TopicCreated:
    """Result of :func:`create_topic` (``topic_id`` is the zero Uuid when validate_only)."""

    topic_id: str
    assignment: dict[int, list[int]]


@dataclass(slots=True)
class TopicRequest:
    """One topic to create: a CreateTopics entry, an auto-created or an internal topic
    (-1 partitions/RF: the broker's defaults)."""

    name: str
    num_partitions: int
    replication_factor: int
    assignments: dict[int, list[int]] | None
    configs: dict[str, str | None]


@dataclass(slots=True)
class CreateOutcome:
    """What creating a TopicRequest came to, as CreateTopics answers it (``configs``: every
    config of the new topic as (value, DescribeConfigs source))."""

    error_code: int = 0
    error_message: str | None = None
    topic_id: bytes | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, tuple[str, int]] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# helpers


def _brokers(live_brokers: Iterable[LiveBroker]) -> list[BrokerMetadata]:
    metas = [b if isinstance(b, BrokerMetadata) else BrokerMetadata(int(b[0]), b[1]) for b in live_brokers]
    # Kafka hands assignment the brokers ordered by id; the order decides the layout.
    return sorted(metas, key=lambda b: b.id)


async def ensure_persistent_paths(tree: MetadataTree) -> None:
    """Create the persistent nodes Kafka brokers create at startup when missing."""
    for path in zk.PERSISTENT_PATHS:
        await tree.ensure_path(path)


async def _topic_names(tree: MetadataTree) -> list[str]:
    try:
        return await tree.children(zk.TOPICS_PATH)
    except NoNodeError:
        return []


# --------------------------------------------------------------------------------------------
# create


async def create_topic(
    tree: MetadataTree,
    name: str,
    partitions: int | None,
    replication_factor: int | None,
    configs: Mapping[str, str] | None,
    live_brokers: Iterable[LiveBroker],
    assignment: Mapping[int, Sequence[int]] | None = None,
    validate_only: bool = False,
    *,
    rng: random.Random | None = None,
) -> TopicCreated:
    """Validate and create a topic; return its new id and assignment.

    With ``assignment`` (partition → replicas, a manual assignment) ``partitions`` and
    ``replication_factor`` are ignored (pass None or -1; rejecting requests that set both is the
    request handler's job, as in Kafka). Configs must already be validated. The controller
    creates the partition state nodes.

    Raises InvalidTopicError (bad name), TopicExistsError, TopicCollisionError (17),
    InvalidPartitionsError, InvalidReplicationFactorError, InvalidReplicaAssignmentError,
    AdminOperationError (mixed racks).
    """
    topic_names.validate(name)
    brokers = _brokers(live_brokers)

    if await tree.exists(zk.topic_path(name)) is not None:
        raise TopicExistsError(f"Topic '{name}' already exists.")
    if topic_names.has_collision_chars(name):
        topic_names.check_collision(name, await _topic_names(tree))

    if assignment is None:
        if partitions is None or replication_factor is None:
            raise InvalidRequestError(
                "Number of partitions and replication factor are required without an assignment."
            )
        final = assign_replicas_to_brokers(brokers, partitions, replication_factor, rng=rng)
    else:
        final = {int(p): [int(r) for r in reps] for p, reps in assignment.items()}
    validate_topic_assignment(final)

    if validate_only:
        return TopicCreated(zk.ZERO_UUID, final)

    for parent in (zk.TOPICS_PATH, f"{zk.CONFIG_PATH}/{zk.ConfigType.TOPIC}"):
        if await tree.exists(parent) is None:
            await tree.ensure_path(parent)

    topic_id = zk.random_uuid()
    config_path = zk.topic_config_path(name)
    config_data = zk.entity_config_json(dict(configs or {}))
    # Set-or-create, as Kafka's setOrCreateEntityConfigs: a config left over by an unfinished
    # deletion is overwritten. The deletion may remove that config between our look and our
    # write (NoNode), or a racing writer may create it (NodeExists): look again and retry.
    topic_op = CreateOp(zk.topic_path(name), zk.topic_json(final, topic_id))
    for attempt in range(5):
        config_op: Op = (
            SetOp(config_path, config_data)
            if await tree.exists(config_path) is not None
            else CreateOp(config_path, config_data)
        )
        try:
            await tree.multi([config_op, topic_op])
            break
        except NoNodeError:
            if attempt == 4:
                raise
        except NodeExistsError as e:
            if await tree.exists(zk.topic_path(name)) is not None or attempt == 4:
                raise TopicExistsError(f"Topic '{name}' already exists.") from e
    log.info("Created topic %s (id %s) with %d partitions", name, topic_id, len(final))
    return TopicCreated(topic_id, final)


# --------------------------------------------------------------------------------------------
# add partitions


async def add_partitions(
    tree: MetadataTree,
    name: str,
    new_total: int,
    live_brokers: Iterable[LiveBroker],
    assignment: Sequence[Sequence[int]] | Mapping[int, Sequence[int]] | None = None,
    validate_only: bool = False,
    *,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Grow a topic to ``new_total`` partitions; return the complete new assignment.

    ``assignment`` gives the replicas of the new partitions only: a list in partition order (as
    in CreatePartitions requests) or a mapping keyed by the new partition ids. Without it the
    new partitions are assigned as Kafka does (see assign_new_partitions). The controller creates
    the new partitions' state nodes.

    Raises UnknownTopicOrPartitionError, InvalidPartitionsError, ReassignmentInProgressError,
    InvalidReplicaAssignmentError, BrokerNotAvailableError, InvalidReplicationFactorError.
    """
    brokers = _brokers(live_brokers)
    live = {b.id for b in brokers}
    for _attempt in range(5):
        got = await tree.get_or_none(zk.topic_path(name))
        if got is None:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        data, stat = got
        current = zk.parse_topic(name, data)
        if current.adding_replicas or current.removing_replicas:
            raise ReassignmentInProgressError(
                f"A partition reassignment is in progress for the topic '{name}'."
            )
        existing = current.partitions
        old = len(existing)
        if new_total < old:
            raise InvalidPartitionsError(
                f"Topic currently has {old} partitions, which is higher than the requested {new_total}."
            )
        if new_total == old:
            raise InvalidPartitionsError(f"Topic already has {old} partitions.")
        if 0 not in existing:
            raise AdminOperationError(
                f"Unexpected existing replica assignment for topic '{name}', partition id 0 is missing. "
                f"Assignment: {existing}"
            )

        if assignment is not None:
            if isinstance(assignment, Mapping):
                proposed = {int(p): [int(r) for r in reps] for p, reps in assignment.items()}
            else:
                proposed = {old + i: [int(r) for r in reps] for i, reps in enumerate(assignment)}
            unknown = sorted({r for reps in proposed.values() for r in reps} - live)
            if unknown:
                raise InvalidReplicaAssignmentError(
                    f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}."
                )
            if len(proposed) != new_total - old:
                raise InvalidReplicaAssignmentError(
                    f"Increasing the number of partitions by {new_total - old} but {len(proposed)} "
                    "assignments provided."
                )
            if sorted(proposed) != list(range(old, new_total)):
                raise InvalidReplicaAssignmentError(
                    f"New partition ids must be {old}..{new_total - 1}, got {sorted(proposed)}."
                )
            validate_new_replica_assignment(proposed, len(existing[0]), live)
            new_parts = proposed
        else:
            new_parts = assign_new_partitions(brokers, existing, new_total, rng=rng)

        combined = {**existing, **new_parts}
        if validate_only:
            return combined
        try:
            await tree.set(zk.topic_path(name), zk.topic_json(combined, current.topic_id), stat.version)
        except BadVersionError:
            continue  # the assignment changed under us: re-read and retry
        except NoNodeError as e:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.") from e
        log.info("Added %d partitions to topic %s", len(new_parts), name)
        return combined
    raise AdminOperationError(f"Topic '{name}' kept changing while adding partitions; try again.")


# --------------------------------------------------------------------------------------------
# delete


async def delete_topic(tree: MetadataTree, name: str) -> None:
    """Mark a topic for deletion (``/admin/delete_topics/<t>``), as Kafka does.

    Marking an already-marked topic succeeds (Kafka swallows TopicAlreadyMarkedForDeletion).
    Raises UnknownTopicOrPartitionError if the topic does not exist.
    """
    if await tree.exists(zk.topic_path(name)) is None:
        raise UnknownTopicOrPartitionError(f"Topic `{name}` to delete does not exist")
    if await tree.exists(zk.DELETE_TOPICS_PATH) is None:
        await tree.ensure_path(zk.DELETE_TOPICS_PATH)
    try:
        await tree.create(zk.delete_topic_path(name), None)
    except NodeExistsError:
        log.debug("topic %s is already marked for deletion", name)
