"""The controller's view of the cluster (Kafka's ControllerContext).

Everything here is read from the metadata tree on failover and kept up to date by the controller's
event handlers: live brokers and their epochs, topics, assignments, topic ids, partition
leadership (the partition state znodes with their zk versions), the partition and replica state
machines' states, and topic deletion progress. It is touched only by the controller's event task.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import NamedTuple, TypeVar

from kaflet.metadata.zkdata import BrokerInfo, LeaderAndIsr

__all__ = [
    "EPOCH_DURING_DELETE",
    "LEADER_DURING_DELETE",
    "NO_EPOCH",
    "NO_LEADER",
    "ControllerContext",
    "PartitionAndReplica",
    "PartitionState",
    "ReplicaAssignment",
    "ReplicaState",
    "TopicPartition",
    "new_leader_and_isr",
]

NO_LEADER = -1
NO_EPOCH = -1
#: UpdateMetadata's leader for partitions of a topic being deleted (LeaderAndIsr.LeaderDuringDelete).
LEADER_DURING_DELETE = -2
#: StopReplica's leader epoch for partitions of a topic being deleted.
EPOCH_DURING_DELETE = -2


class TopicPartition(NamedTuple):
    """A partition of a topic (a plain (topic, partition) tuple with names)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class PartitionAndReplica(NamedTuple):
    """One replica of a partition: the partition and the broker holding it."""

    topic_partition: TopicPartition
    replica: int

    @property
    def topic(self) -> str:
        return self.topic_partition.topic

    def __str__(self) -> str:
        return f"[Topic={self.topic_partition.topic},Partition={self.topic_partition.partition},Replica={self.replica}]"


class PartitionState(enum.Enum):
    """Kafka's partition states (PartitionStateMachine)."""

    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"
    NON_EXISTENT = "NonExistentPartition"

    @property
    def valid_previous_states(self) -> frozenset[PartitionState]:
        return _PARTITION_PREVIOUS[self]


_PARTITION_PREVIOUS: dict[PartitionState, frozenset[PartitionState]] = {
    PartitionState.NEW: frozenset({PartitionState.NON_EXISTENT}),
    PartitionState.ONLINE: frozenset({PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}),
    PartitionState.OFFLINE: frozenset({PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}),
    PartitionState.NON_EXISTENT: frozenset({PartitionState.OFFLINE}),
}


class ReplicaState(enum.Enum):
    """Kafka's replica states (ReplicaStateMachine)."""

    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT = "NonExistentReplica"

    @property
    def valid_previous_states(self) -> frozenset[ReplicaState]:
        return _REPLICA_PREVIOUS[self]


_RS = ReplicaState
_REPLICA_PREVIOUS: dict[ReplicaState, frozenset[ReplicaState]] = {
    _RS.NEW: frozenset({_RS.NON_EXISTENT}),
    _RS.ONLINE: frozenset({_RS.NEW, _RS.ONLINE, _RS.OFFLINE, _RS.DELETION_INELIGIBLE}),
    _RS.OFFLINE: frozenset({_RS.NEW, _RS.ONLINE, _RS.OFFLINE, _RS.DELETION_INELIGIBLE}),
    _RS.DELETION_STARTED: frozenset({_RS.OFFLINE}),
    _RS.DELETION_SUCCESSFUL: frozenset({_RS.DELETION_STARTED}),
    _RS.DELETION_INELIGIBLE: frozenset({_RS.OFFLINE, _RS.DELETION_STARTED}),
    _RS.NON_EXISTENT: frozenset({_RS.DELETION_SUCCESSFUL}),
}


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """A partition's replicas, with those being added or removed by a reassignment."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @classmethod
    def of(cls, replicas: Iterable[int], adding: Iterable[int] = (), removing: Iterable[int] = ()) -> ReplicaAssignment:
        return cls(tuple(replicas), tuple(adding), tuple(removing))

    @property
    def origin_replicas(self) -> list[int]:
        return [r for r in self.replicas if r not in self.adding_replicas]

    @property
    def target_replicas(self) -> list[int]:
        return [r for r in self.replicas if r not in self.removing_replicas]

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    def reassign_to(self, target: Iterable[int]) -> ReplicaAssignment:
        """Kafka's ReplicaAssignment.reassignTo: RS = TRS + ORS (target first, no duplicates),
        adding = RS - ORS, removing = RS - TRS."""
        target = list(target)
        origin = self.origin_replicas
        full = list(dict.fromkeys([*target, *origin]))
        return ReplicaAssignment(
            tuple(full), tuple(r for r in full if r not in origin), tuple(r for r in full if r not in target))

    def remove_replica(self, replica: int) -> ReplicaAssignment:
        return ReplicaAssignment(
            tuple(r for r in self.replicas if r != replica),
            tuple(r for r in self.adding_replicas if r != replica),
            tuple(r for r in self.removing_replicas if r != replica),
        )


def new_leader_and_isr(current: LeaderAndIsr, leader: int, isr: list[int]) -> LeaderAndIsr:
    """Kafka's LeaderAndIsr.newLeaderAndIsr: a new leader and ISR in the next leader epoch (the
    zk version stays: it is the expected version of the conditional write)."""
    return replace(current, leader=leader, isr=list(isr), leader_epoch=current.leader_epoch + 1)


class ControllerContext:
    """What the active controller knows about the cluster."""

    def __init__(self) -> None:
        self.epoch = 0
        self.epoch_zk_version = 0
        self.shutting_down_broker_ids: set[int] = set()
        self._live_brokers: dict[int, BrokerInfo] = {}
        self._live_broker_epochs: dict[int, int] = {}
        self.all_topics: set[str] = set()
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.topic_names: dict[uuid.UUID, str] = {}
        self.partition_assignments: dict[str, dict[int, ReplicaAssignment]] = {}
        # LeaderAndIsr carries the controller epoch that wrote it and the node's zk version.
        self._leadership: dict[TopicPartition, LeaderAndIsr] = {}
        self.partitions_being_reassigned: set[TopicPartition] = set()
        self.partition_states: dict[TopicPartition, PartitionState] = {}
        self.replica_states: dict[PartitionAndReplica, ReplicaState] = {}
        self.replicas_on_offline_dirs: dict[int, set[TopicPartition]] = {}
        self.topics_to_be_deleted: set[str] = set()
        self.topics_with_deletion_started: set[str] = set()
        self.topics_ineligible_for_deletion: set[str] = set()

    # ------------------------------------------------------------------ reset

    def reset(self) -> None:
        """Forget everything (on resignation)."""
        self.__init__()  # type: ignore[misc]

    # ------------------------------------------------------------------ brokers

    def set_live_brokers(self, brokers: dict[int, tuple[BrokerInfo, int]]) -> None:
        self._live_brokers.clear()
        self._live_broker_epochs.clear()
        self.add_live_brokers(brokers)

    def add_live_brokers(self, brokers: dict[int, tuple[BrokerInfo, int]]) -> None:
        for broker_id, (info, epoch) in brokers.items():
            self._live_brokers[broker_id] = info
            self._live_broker_epochs[broker_id] = epoch

    def remove_live_brokers(self, broker_ids: Iterable[int]) -> None:
        for b in broker_ids:
            self._live_brokers.pop(b, None)
            self._live_broker_epochs.pop(b, None)

    def update_broker_metadata(self, info: BrokerInfo) -> None:
        if info.id in self._live_brokers:
            self._live_brokers[info.id] = info

    @property
    def live_broker_ids(self) -> set[int]:
        return set(self._live_broker_epochs) - self.shutting_down_broker_ids

    @property
    def live_or_shutting_down_broker_ids(self) -> set[int]:
        return set(self._live_broker_epochs)

    @property
    def live_or_shutting_down_brokers(self) -> list[BrokerInfo]:
        return [self._live_brokers[b] for b in sorted(self._live_brokers)]

    @property
    def live_broker_id_and_epochs(self) -> dict[int, int]:
        return dict(self._live_broker_epochs)

    def broker_epoch(self, broker_id: int) -> int | None:
        return self._live_broker_epochs.get(broker_id)

    def live_or_shutting_down_broker(self, broker_id: int) -> BrokerInfo | None:
        return self._live_brokers.get(broker_id)

    def is_replica_online(self, broker_id: int, tp: TopicPartition, include_shutting_down: bool = False) -> bool:
        if include_shutting_down:
            online = broker_id in self._live_broker_epochs
        else:
            online = broker_id in self._live_broker_epochs and broker_id not in self.shutting_down_broker_ids
        return online and tp not in self.replicas_on_offline_dirs.get(broker_id, ())

    # ------------------------------------------------------------------ topics and assignments

    def set_all_topics(self, topics: Iterable[str]) -> None:
        self.all_topics = set(topics)

    def add_topic_id(self, topic: str, topic_id: uuid.UUID) -> None:
        if topic not in self.all_topics:
            raise ValueError(f"topic {topic} is not contained in all topics.")
        existing = self.topic_ids.get(topic)
        if existing is not None and existing != topic_id:
            raise ValueError(f"topic ID map already contained ID for topic {topic} and new ID {topic_id} "
                             f"did not match existing ID {existing}")
        self.topic_ids[topic] = topic_id
        self.topic_names[topic_id] = topic

    def partition_replica_assignment(self, tp: TopicPartition) -> list[int]:
        a = self.partition_assignments.get(tp.topic, {}).get(tp.partition)
        return list(a.replicas) if a is not None else []

    def partition_full_replica_assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        return self.partition_assignments.get(tp.topic, {}).get(tp.partition, ReplicaAssignment(()))

    def update_partition_full_replica_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        self.partition_assignments.setdefault(tp.topic, {})[tp.partition] = assignment

    def partition_full_replica_assignment_for_topic(self, topic: str) -> dict[TopicPartition, ReplicaAssignment]:
        return {TopicPartition(topic, p): a for p, a in self.partition_assignments.get(topic, {}).items()}

    @property
    def all_partitions(self) -> set[TopicPartition]:
        return {TopicPartition(t, p) for t, parts in self.partition_assignments.items() for p in parts}

    def partitions_for_topic(self, topic: str) -> set[TopicPartition]:
        return {TopicPartition(topic, p) for p in self.partition_assignments.get(topic, {})}

    def partitions_on_broker(self, broker_id: int) -> set[TopicPartition]:
        return {
            TopicPartition(t, p)
            for t, parts in self.partition_assignments.items()
            for p, a in parts.items()
            if broker_id in a.replicas
        }

    def replicas_on_brokers(self, broker_ids: Iterable[int]) -> set[PartitionAndReplica]:
        ids = set(broker_ids)
        return {
            PartitionAndReplica(TopicPartition(t, p), r)
            for t, parts in self.partition_assignments.items()
            for p, a in parts.items()
            for r in a.replicas
            if r in ids
        }

    def replicas_for_topic(self, topic: str) -> set[PartitionAndReplica]:
        return {
            PartitionAndReplica(TopicPartition(topic, p), r)
            for p, a in self.partition_assignments.get(topic, {}).items()
            for r in a.replicas
        }

    def replicas_for_partitions(self, partitions: Iterable[TopicPartition]) -> set[PartitionAndReplica]:
        return {PartitionAndReplica(tp, r) for tp in partitions for r in self.partition_replica_assignment(tp)}

    def online_and_offline_replicas(self) -> tuple[set[PartitionAndReplica], set[PartitionAndReplica]]:
        online: set[PartitionAndReplica] = set()
        offline: set[PartitionAndReplica] = set()
        for t, parts in self.partition_assignments.items():
            for p, a in parts.items():
                tp = TopicPartition(t, p)
                for r in a.replicas:
                    (online if self.is_replica_online(r, tp) else offline).add(PartitionAndReplica(tp, r))
        return online, offline

    def remove_topic(self, topic: str) -> None:
        self.topics_to_be_deleted.discard(topic)
        self.topics_with_deletion_started.discard(topic)
        self.all_topics.discard(topic)
        tid = self.topic_ids.pop(topic, None)
        if tid is not None:
            self.topic_names.pop(tid, None)
        for p, a in self.partition_assignments.pop(topic, {}).items():
            tp = TopicPartition(topic, p)
            self._leadership.pop(tp, None)
            self.partition_states.pop(tp, None)
            # Normally gone already (NonExistentReplica); not when the topic node was removed
            # by hand, and a topic created again under the name must start from NonExistent.
            for r in a.replicas:
                self.replica_states.pop(PartitionAndReplica(tp, r), None)

    # ------------------------------------------------------------------ topic deletion

    def queue_topic_deletion(self, topics: Iterable[str]) -> None:
        self.topics_to_be_deleted.update(topics)

    def begin_topic_deletion(self, topics: Iterable[str]) -> None:
        self.topics_with_deletion_started.update(topics)

    def is_topic_deletion_in_progress(self, topic: str) -> bool:
        return topic in self.topics_with_deletion_started

    def is_topic_queued_up_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_be_deleted

    def replicas_in_state(self, topic: str, state: ReplicaState) -> set[PartitionAndReplica]:
        return {r for r in self.replicas_for_topic(topic) if self.replica_states.get(r) == state}

    def are_all_replicas_in_state(self, topic: str, state: ReplicaState) -> bool:
        return all(self.replica_states.get(r) == state for r in self.replicas_for_topic(topic))

    def is_any_replica_in_state(self, topic: str, state: ReplicaState) -> bool:
        return any(self.replica_states.get(r) == state for r in self.replicas_for_topic(topic))

    # ------------------------------------------------------------------ states

    def partition_state(self, tp: TopicPartition) -> PartitionState:
        return self.partition_states.get(tp, PartitionState.NON_EXISTENT)

    def put_partition_state(self, tp: TopicPartition, state: PartitionState) -> None:
        self.partition_states[tp] = state

    def partitions_in_states(self, states: set[PartitionState], topic: str | None = None) -> set[TopicPartition]:
        if topic is None:
            return {tp for tp, s in self.partition_states.items() if s in states}
        return {tp for tp in self.partitions_for_topic(topic) if self.partition_state(tp) in states}

    def check_valid_partition_state_change(
        self, partitions: Iterable[TopicPartition], target: PartitionState
    ) -> tuple[list[TopicPartition], list[TopicPartition]]:
        """(partitions that may move to ``target``, those that may not)."""
        return _split(partitions, lambda tp: self.partition_state(tp) in target.valid_previous_states)

    def check_valid_replica_state_change(
        self, replicas: Iterable[PartitionAndReplica], target: ReplicaState
    ) -> tuple[list[PartitionAndReplica], list[PartitionAndReplica]]:
        """(replicas that may move to ``target``, those that may not)."""
        return _split(replicas, lambda r: self.replica_state(r) in target.valid_previous_states)

    def replica_state(self, replica: PartitionAndReplica) -> ReplicaState:
        return self.replica_states.get(replica, ReplicaState.NON_EXISTENT)

    def put_replica_state(self, replica: PartitionAndReplica, state: ReplicaState) -> None:
        self.replica_states[replica] = state

    def remove_replica_state(self, replica: PartitionAndReplica) -> None:
        self.replica_states.pop(replica, None)

    # ------------------------------------------------------------------ leadership

    def partition_leadership_info(self, tp: TopicPartition) -> LeaderAndIsr | None:
        return self._leadership.get(tp)

    def put_partition_leadership_info(self, tp: TopicPartition, state: LeaderAndIsr) -> None:
        self._leadership[tp] = state

    def partition_leader(self, tp: TopicPartition) -> int:
        """The partition's leader as last read or written (NO_LEADER when its state is unknown)."""
        st = self._leadership.get(tp)
        return NO_LEADER if st is None else st.leader

    @property
    def partitions_leadership_info(self) -> dict[TopicPartition, LeaderAndIsr]:
        return dict(self._leadership)

    def clear_partition_leadership_info(self) -> None:
        self._leadership.clear()

    @property
    def partitions_with_leaders(self) -> set[TopicPartition]:
        return {tp for tp in self._leadership if not self.is_topic_queued_up_for_deletion(tp.topic)}

    @property
    def partitions_with_offline_leader(self) -> set[TopicPartition]:
        return {
            tp
            for tp, st in self._leadership.items()
            if not self.is_replica_online(st.leader, tp) and not self.is_topic_queued_up_for_deletion(tp.topic)
        }

    def partition_leaders_on_broker(self, broker_id: int) -> set[TopicPartition]:
        return {
            tp
            for tp, st in self._leadership.items()
            if not self.is_topic_queued_up_for_deletion(tp.topic)
            and st.leader == broker_id
            and len(self.partition_replica_assignment(tp)) > 1
        }

    # ------------------------------------------------------------------ metrics (computed on demand)

    @property
    def offline_partition_count(self) -> int:
        return sum(
            1
            for tp, s in self.partition_states.items()
            if s is PartitionState.OFFLINE and not self.is_topic_deletion_in_progress(tp.topic)
        )

    @property
    def preferred_replica_imbalance_count(self) -> int:
        count = 0
        for tp, st in self._leadership.items():
            if self.is_topic_queued_up_for_deletion(tp.topic):
                continue
            a = self.partition_full_replica_assignment(tp)
            if not a.replicas:
                continue
            preferred = a.replicas[0]
            if a.is_being_reassigned and preferred in a.adding_replicas:
                # A reassignment's new preferred replica counts once it has joined the ISR.
                count += preferred in st.isr
            else:
                count += st.leader != preferred
        return count


_T = TypeVar("_T")


def _split(items: Iterable[_T], ok: Callable[[_T], bool]) -> tuple[list[_T], list[_T]]:
    yes: list[_T] = []
    no: list[_T] = []
    for item in items:
        (yes if ok(item) else no).append(item)
    return yes, no
