"""Topic lifecycle writes any broker makes, against the metadata tree only (no logs, no sockets).

What Kafka's AdminZkClient writes to ZooKeeper when topics are created, grow or are deleted,
with Kafka's validation and error codes; the controller (:mod:`kaflet.controller.controller`)
reacts to these writes and creates the partition state znodes:

* :func:`create_topic` writes ``/config/topics/<t>`` and ``/brokers/topics/<t>`` (v3, new topic
  id) in one multi;
* :func:`add_partitions` rewrites the assignment (conditional on its version);
* :func:`delete_topic` only marks the topic (``/admin/delete_topics/<t>``), as Kafka does.

Until the broker runs the controller, it passes ``write_partition_states=True``: create and
add also write the partitions' state nodes (leader = first live replica), in the same multi (a
very large topic on ZooKeeper is split in several multis, the first holding the topic node), and
the broker removes a deleted topic's logs when :class:`TopicWatcher` reports the deletion, then
calls :func:`complete_topic_deletion`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kaflet.controller.zk_client import ZK_MULTI_BUDGET, multi_op_size
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
    CheckOp,
    CreateOp,
    MetadataTree,
    NodeExistsError,
    NoNodeError,
    Op,
    SetOp,
    WatchEvent,
)
from kaflet.metadata.zkdata import LeaderAndIsr

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
    "TopicMeta",
    "TopicRequest",
    "TopicWatcher",
    "UnknownTopicOrPartitionError",
    "add_partitions",
    "complete_topic_deletion",
    "create_topic",
    "delete_topic",
    "ensure_persistent_paths",
    "get_topic",
    "list_topics",
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


@dataclass(frozen=True, slots=True)
class TopicMeta:
    """A topic as stored in the tree."""

    topic_id: str | None
    assignment: dict[int, list[int]]
    partition_states: dict[int, LeaderAndIsr] = field(default_factory=dict)
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)
    marked_for_deletion: bool = False


# --------------------------------------------------------------------------------------------
# helpers


def _brokers(live_brokers: Iterable[LiveBroker]) -> list[BrokerMetadata]:
    metas = [b if isinstance(b, BrokerMetadata) else BrokerMetadata(int(b[0]), b[1]) for b in live_brokers]
    # Kafka hands assignment the brokers ordered by id; the order decides the layout.
    return sorted(metas, key=lambda b: b.id)


def _initial_state(replicas: Sequence[int], live: set[int], controller_epoch: int) -> LeaderAndIsr:
    alive = [r for r in replicas if r in live]
    if alive:
        return LeaderAndIsr(leader=alive[0], leader_epoch=0, isr=alive, controller_epoch=controller_epoch)
    # No replica is up: no leader yet; every replica is empty, hence in sync, so whichever comes
    # back first can lead without losing anything.
    return LeaderAndIsr(
        leader=zk.NO_LEADER, leader_epoch=0, isr=list(replicas), controller_epoch=controller_epoch
    )


def _partition_ops(
    topic: str, assignment: Mapping[int, Sequence[int]], live: set[int], controller_epoch: int
) -> list[CreateOp]:
    ops: list[CreateOp] = []
    for p in sorted(assignment):
        ops.append(CreateOp(zk.partition_path(topic, p), None))
        state = _initial_state(assignment[p], live, controller_epoch)
        ops.append(CreateOp(zk.partition_state_path(topic, p), zk.partition_state_json(state)))
    return ops


async def _run_batched(
    tree: MetadataTree, fence: Sequence[Op], head: Sequence[Op], tail: Sequence[Op]
) -> None:
    """Run fence + head (+ as much of tail as fits) in one multi, the rest in further multis,
    each again behind the fence. Only ZooKeeper needs the split (request size limit)."""
    if tree.backend != "zookeeper":
        await tree.multi([*fence, *head, *tail])
        return
    batch: list[Op] = [*fence, *head]
    min_len = len(batch)
    size = sum(multi_op_size(op) for op in batch)
    for op in tail:
        s = multi_op_size(op)
        if size + s > ZK_MULTI_BUDGET and len(batch) > min_len:
            await tree.multi(batch)
            batch = list(fence)
            min_len = len(batch)
            size = sum(multi_op_size(op) for op in batch)
        batch.append(op)
        size += s
    if len(batch) > len(fence):
        await tree.multi(batch)


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
    controller_epoch: int = 0,
    fence: Sequence[CheckOp] = (),
    rng: random.Random | None = None,
    write_partition_states: bool = False,
) -> TopicCreated:
    """Validate and create a topic; return its new id and assignment.

    With ``assignment`` (partition → replicas, a manual assignment) ``partitions`` and
    ``replication_factor`` are ignored (pass None or -1; rejecting requests that set both is the
    request handler's job, as in Kafka). Configs must already be validated. The controller
    creates the partition state nodes; with ``write_partition_states`` (the broker without a
    controller) they are written here: leader = first live replica, isr = live replicas,
    leader_epoch 0 and ``controller_epoch``. ``fence`` ops (e.g. a check of /controller_epoch's
    version) are prepended to the write so a deposed controller cannot write.

    Raises InvalidTopicError (bad name), TopicExistsError, TopicCollisionError (17),
    InvalidPartitionsError, InvalidReplicationFactorError, InvalidReplicaAssignmentError,
    AdminOperationError (mixed racks).
    """
    topic_names.validate(name)
    brokers = _brokers(live_brokers)
    live = {b.id for b in brokers}

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
    # deletion is overwritten.
    cstat = await tree.exists(config_path)
    config_op: Op = (
        SetOp(config_path, config_data, cstat.version)
        if cstat is not None
        else CreateOp(config_path, config_data)
    )
    head: list[Op] = [config_op, CreateOp(zk.topic_path(name), zk.topic_json(final, topic_id))]
    tail: list[CreateOp] = []
    if write_partition_states:
        head.append(CreateOp(zk.partitions_path(name), None))
        tail = _partition_ops(name, final, live, controller_epoch)
    try:
        await _run_batched(tree, fence, head, tail)
    except (NodeExistsError, BadVersionError) as e:
        if e.op_index is not None and e.op_index < len(fence):
            raise
        # Someone created the topic (or its config) concurrently.
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
    controller_epoch: int = 0,
    fence: Sequence[CheckOp] = (),
    rng: random.Random | None = None,
    write_partition_states: bool = False,
) -> dict[int, list[int]]:
    """Grow a topic to ``new_total`` partitions; return the complete new assignment.

    ``assignment`` gives the replicas of the new partitions only: a list in partition order (as
    in CreatePartitions requests) or a mapping keyed by the new partition ids. Without it the
    new partitions are assigned as Kafka does (see assign_new_partitions). The controller creates
    the new partitions' state nodes (here only with ``write_partition_states``, see create_topic).

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
        head: list[Op] = [
            SetOp(zk.topic_path(name), zk.topic_json(combined, current.topic_id), stat.version),
        ]
        tail: list[CreateOp] = []
        if write_partition_states:
            if await tree.exists(zk.partitions_path(name)) is None:
                head.append(CreateOp(zk.partitions_path(name), None))
            tail = _partition_ops(name, new_parts, live, controller_epoch)
        try:
            await _run_batched(tree, fence, head, tail)
        except BadVersionError as e:
            if e.op_index is not None and e.op_index < len(fence):
                raise
            continue  # the assignment changed under us: re-read and retry
        except NoNodeError as e:
            if e.op_index is not None and e.op_index < len(fence):
                raise
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


async def complete_topic_deletion(tree: MetadataTree, name: str) -> None:
    """Remove what remains of a deleted topic: /brokers/topics/<t> (recursively), its config and
    the deletion marker. Idempotent; call it after the topic's logs are gone."""
    for path, recursive in (
        (zk.topic_path(name), True),
        (zk.topic_config_path(name), False),
        (zk.delete_topic_path(name), False),
    ):
        try:
            await tree.delete(path, recursive=recursive)
        except NoNodeError:
            pass
    log.info("Completed deletion of topic %s", name)


# --------------------------------------------------------------------------------------------
# read


async def _read_states(tree: MetadataTree, name: str, partitions: Iterable[int]) -> dict[int, LeaderAndIsr]:
    async def one(p: int) -> tuple[int, LeaderAndIsr | None]:
        got = await tree.get_or_none(zk.partition_state_path(name, p))
        if got is None or got[0] is None:
            return p, None
        return p, zk.parse_partition_state(got[0], got[1].version)

    # Concurrent requests: on ZooKeeper this pipelines instead of one round trip per partition.
    results = await asyncio.gather(*(one(p) for p in partitions))
    return {p: s for p, s in results if s is not None}


async def get_topic(tree: MetadataTree, name: str, *, marked: bool | None = None) -> TopicMeta | None:
    """Read one topic (assignment, id, partition states) or None if it does not exist."""
    got = await tree.get_or_none(zk.topic_path(name))
    if got is None:
        return None
    ta = zk.parse_topic(name, got[0])
    states = await _read_states(tree, name, ta.partitions)
    if marked is None:
        marked = await tree.exists(zk.delete_topic_path(name)) is not None
    return TopicMeta(
        topic_id=ta.topic_id,
        assignment=ta.partitions,
        partition_states=states,
        adding_replicas=ta.adding_replicas,
        removing_replicas=ta.removing_replicas,
        marked_for_deletion=marked,
    )


async def list_topics(tree: MetadataTree) -> dict[str, TopicMeta]:
    """All topics in the tree, by name (topics marked for deletion included, and flagged)."""
    names = await _topic_names(tree)
    try:
        marked = set(await tree.children(zk.DELETE_TOPICS_PATH))
    except NoNodeError:
        marked = set()
    metas = await asyncio.gather(*(get_topic(tree, n, marked=n in marked) for n in names))
    return {n: m for n, m in zip(names, metas, strict=True) if m is not None}


# --------------------------------------------------------------------------------------------
# watch


class TopicWatcher:
    """Reports topic changes in the tree to a broker, so it can create and delete logs.

    Watches the children of /brokers/topics and /admin/delete_topics and the data of every
    /brokers/topics/<t>. ``on_topic_changed(name, meta)`` is awaited for every topic found at
    start, created, or whose assignment changed (it is not called for topics marked for
    deletion); ``on_topic_deleted(name)`` is awaited once when a topic is marked for deletion
    (or disappears without a mark). Callbacks run one at a time, in order. After a ZooKeeper
    session loss, call :meth:`resync` (watches do not survive a session).
    """

    def __init__(
        self,
        tree: MetadataTree,
        on_topic_changed: Callable[[str, TopicMeta], Awaitable[Any]],
        on_topic_deleted: Callable[[str], Awaitable[Any]],
    ) -> None:
        self.tree = tree
        self.on_topic_changed = on_topic_changed
        self.on_topic_deleted = on_topic_deleted
        self.known: dict[str, TopicMeta] = {}
        self.deleting: set[str] = set()
        self._queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._idle = asyncio.Event()

    async def start(self) -> None:
        """Report the current topics (deletions first), arm the watches, start following changes."""
        await self._sync_deletes()
        await self._sync_topics()
        self._task = asyncio.create_task(self._run(), name="kaflet-topic-watcher")

    async def stop(self) -> None:
        """Stop reporting (pending watches fire into nothing)."""
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def resync(self) -> None:
        """Re-read everything and re-arm the watches (after a session loss)."""
        self._queue.put_nowait(("deletes", ""))
        self._queue.put_nowait(("topics", ""))

    async def wait_idle(self, timeout: float = 5.0) -> None:
        """Wait until queued events are processed (for tests and orderly shutdown)."""

        async def drained() -> None:
            while True:
                await asyncio.sleep(0)
                if self._queue.empty() and self._idle.is_set():
                    # Give watch callbacks scheduled with call_soon a chance to enqueue.
                    await asyncio.sleep(0.01)
                    if self._queue.empty() and self._idle.is_set():
                        return
                await asyncio.sleep(0.005)

        await asyncio.wait_for(drained(), timeout)

    # ----------------------------------------------------------------- internals

    def _enqueue(self, kind: str, name: str = "") -> Callable[[WatchEvent], None]:
        def cb(_event: WatchEvent) -> None:
            if not self._stopped:
                self._queue.put_nowait((kind, name))

        return cb

    async def _run(self) -> None:
        while True:
            self._idle.set()
            kind, name = await self._queue.get()
            self._idle.clear()
            try:
                if kind == "topics":
                    await self._sync_topics()
                elif kind == "deletes":
                    await self._sync_deletes()
                elif kind == "topic":
                    await self._sync_topic(name)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("topic watcher failed handling %s %s; resyncing", kind, name)
                await asyncio.sleep(0.5)
                if kind != "topic":
                    self._queue.put_nowait((kind, name))

    async def _watch_children(self, path: str, kind: str) -> list[str]:
        while True:
            try:
                return await self.tree.children(path, watch=self._enqueue(kind))
            except NoNodeError:
                # Not there yet: watch for its creation, then read again.
                if await self.tree.exists(path, watch=self._enqueue(kind)) is None:
                    return []

    async def _sync_deletes(self) -> None:
        marked = set(await self._watch_children(zk.DELETE_TOPICS_PATH, "deletes"))
        for name in sorted(marked - self.deleting):
            self.deleting.add(name)
            self.known.pop(name, None)
            await self.on_topic_deleted(name)
        for name in self.deleting - marked:
            # Deletion finished (or the mark was removed): a topic with that name may exist again.
            self.deleting.discard(name)
            self._queue.put_nowait(("topic", name))

    async def _sync_topics(self) -> None:
        names = set(await self._watch_children(zk.TOPICS_PATH, "topics"))
        for name in sorted(set(self.known) - names):
            self.known.pop(name, None)
            if name not in self.deleting:
                await self.on_topic_deleted(name)
        for name in sorted(names - set(self.known)):
            await self._sync_topic(name)

    async def _sync_topic(self, name: str) -> None:
        if name in self.deleting:
            return
        try:
            data, stat = await self.tree.get(zk.topic_path(name), watch=self._enqueue("topic", name))
        except NoNodeError:
            if self.known.pop(name, None) is not None:
                await self.on_topic_deleted(name)
            return
        ta = zk.parse_topic(name, data)
        states = await _read_states(self.tree, name, ta.partitions)
        meta = TopicMeta(
            topic_id=ta.topic_id,
            assignment=ta.partitions,
            partition_states=states,
            adding_replicas=ta.adding_replicas,
            removing_replicas=ta.removing_replicas,
        )
        old = self.known.get(name)
        if old is not None and old.topic_id != meta.topic_id:
            # Same name, new topic: the old one is gone.
            self.known.pop(name, None)
            await self.on_topic_deleted(name)
        if old == meta:
            return
        self.known[name] = meta
        await self.on_topic_changed(name, meta)
