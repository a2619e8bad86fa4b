"""Partition reassignment for the active controller (Kafka 2.8's onPartitionReassignment, KIP-455).

Owns every reassignment from its start to its end: AlterPartitionReassignments and
ListPartitionReassignments, the legacy /admin/reassign_partitions node (its watch, and its
rewriting as partitions complete), the watches on the state znodes of partitions being reassigned
(Kafka's PartitionReassignmentIsrChangeHandler), and resuming reassignments at failover and when a
target broker starts. A reassignment in progress lives in the topic znode (adding/removing
replicas), so a new controller resumes it. :class:`~kaflet.controller.controller.KafkaController`
routes the reassignment events here; leader elections are in
:mod:`kaflet.controller.leader_elections`.

The steps, with RS = current replicas, ORS = original, TRS = target, AR = adding (TRS - ORS),
RR = removing (ORS - TRS):

- U: write RS = TRS + ORS with AR and RR to the topic znode, then to memory; replicas a replaced
  reassignment was adding that the new one does not need are stopped.
- A (TRS not all in the ISR): bump the leader epoch, LeaderAndIsr to RS, start AR.
- B (TRS all in the ISR): RS = TRS in memory; a leader from TRS if the current one is not in it
  or not alive (else an epoch bump); RR out of the ISR, stopped and deleted; RS = TRS in the
  topic znode; /admin/reassign_partitions updated; UpdateMetadata to all.

The topic znode is written last in B because it is the only place ORS is kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from kaflet.controller.context import (
    ControllerContext,
    PartitionAndReplica,
    PartitionState,
    ReplicaAssignment,
    ReplicaState,
    TopicPartition,
    new_leader_and_isr,
)
from kaflet.controller.events import (
    ApiPartitionReassignment,
    ChangeWatches,
    ControllerEvent,
    ListPartitionReassignments,
    PartitionReassignmentIsrChange,
    ZkPartitionReassignment,
    answer,
)
from kaflet.controller.request_batch import ControllerBrokerRequestBatch, RequestBatchError
from kaflet.controller.state_machines import (
    LeaderElectionStrategy,
    PartitionStateMachine,
    ReplicaStateMachine,
    StateChangeFailedError,
)
from kaflet.controller.topic_deletion import TopicDeletionManager
from kaflet.controller.zk_client import ControllerMovedError, ControllerZkClient
from kaflet.metadata import zkdata as zk
from kaflet.metadata.tree import EventType, SessionLostError, WatchEvent
from kaflet.metadata.zkdata import LeaderAndIsr
from kaflet.protocol.errors import ErrorCode, error_name

__all__ = ["PartitionReassignmentManager"]

# One logger for every controller line, whichever module of the controller writes it.
log = logging.getLogger("kaflet.controller")


class PartitionReassignmentManager:
    """Starts, resumes, cancels and completes partition reassignments.

    Runs on the controller's event task only. ``send_metadata_update`` sends UpdateMetadata for
    the partitions to every live broker; ``enqueue`` puts an event on the controller's queue;
    ``is_active`` says whether this broker is still the active controller.
    """

    def __init__(
        self,
        *,
        context: ControllerContext,
        zk: ControllerZkClient,
        replica_state_machine: ReplicaStateMachine,
        partition_state_machine: PartitionStateMachine,
        topic_deletion_manager: TopicDeletionManager,
        batch: ControllerBrokerRequestBatch,
        send_metadata_update: Callable[[set[TopicPartition]], None],
        enqueue: Callable[[ControllerEvent], None],
        is_active: Callable[[], bool],
    ) -> None:
        self.context = context
        self.zk = zk
        self.replica_state_machine = replica_state_machine
        self.partition_state_machine = partition_state_machine
        self.topic_deletion_manager = topic_deletion_manager
        self._batch = batch
        self._send_metadata_update = send_metadata_update
        self._enqueue = enqueue
        self._is_active = is_active
        # The state znodes of the partitions being reassigned (PartitionReassignmentIsrChangeHandler).
        self._isr_watches = ChangeWatches[TopicPartition](PartitionReassignmentIsrChange, enqueue)

    def reset(self) -> None:
        """The controller resigned: forget the watched partitions and anything half-batched."""
        self._isr_watches.registered.clear()
        self._batch.clear()

    async def on_broker_startup(self, brokers: Iterable[int]) -> None:
        """Resume the reassignments with a target replica on one of the started ``brokers``."""
        started = set(brokers)
        await self._maybe_resume_reassignments(lambda _tp, a: any(r in started for r in a.target_replicas))

    async def on_isr_change(self, partitions: set[TopicPartition]) -> None:
        """ISR change notifications named ``partitions``: complete the reassignments now in sync."""
        for tp in sorted(partitions & self.context.partitions_being_reassigned):
            await self._maybe_complete_reassignment(tp)

    def _on_reassign_partitions_znode(self, event: WatchEvent) -> None:
        # Creation only, as Kafka: the controller re-arms the watch when it deletes the node.
        if event.type is EventType.CREATED:
            self._enqueue(ZkPartitionReassignment())

    async def initialize_partition_reassignments(self) -> None:
        """At failover: start what /admin/reassign_partitions asks for, resume the rest."""
        resumed = await self.process_zk_partition_reassignment()
        await self._maybe_resume_reassignments(lambda tp, _a: tp not in resumed)

    async def _maybe_resume_reassignments(self, should_resume: Callable[[TopicPartition, ReplicaAssignment], bool]) -> None:
        ctx = self.context
        for tp in sorted(ctx.partitions_being_reassigned):
            current = ctx.partition_full_replica_assignment(tp)
            if should_resume(tp, current):
                await self._on_partition_reassignment(tp, current)

    async def _on_partition_reassignment(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
        ctx = self.context
        self.topic_deletion_manager.mark_topic_ineligible_for_deletion({tp.topic}, "topic reassignment in progress")
        await self._update_current_reassignment(tp, reassignment)
        adding = list(reassignment.adding_replicas)
        removing = list(reassignment.removing_replicas)
        if not await self._is_reassignment_complete(tp, reassignment):
            await self._update_leader_epoch_and_send_request(tp, reassignment)
            for r in adding:
                await self.replica_state_machine.handle_state_changes([PartitionAndReplica(tp, r)], ReplicaState.NEW)
            return
        log.info("Target replicas %s have all caught up with the leader for reassigning partition %s",
                 reassignment.target_replicas, tp)
        await self.replica_state_machine.handle_state_changes(
            [PartitionAndReplica(tp, r) for r in adding], ReplicaState.ONLINE)
        completed = ReplicaAssignment.of(reassignment.target_replicas)
        ctx.update_partition_full_replica_assignment(tp, completed)
        await self._move_reassigned_partition_leader_if_required(tp, completed)
        await self._stop_removed_replicas_of_reassigned_partition(tp, removing)
        await self._update_replica_assignment_for_partition(tp, completed)
        await self._remove_partition_from_reassigning_partitions(tp, completed)
        self._send_metadata_update({tp})
        await self.topic_deletion_manager.resume_deletion_for_topics({tp.topic})

    async def _update_current_reassignment(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
        ctx = self.context
        current = ctx.partition_full_replica_assignment(tp)
        if current != reassignment:
            log.info("Updating assignment of partition %s from %s to %s", tp, current, reassignment)
            await self._update_replica_assignment_for_partition(tp, reassignment)
            ctx.update_partition_full_replica_assignment(tp, reassignment)
            # A replaced (or cancelled) reassignment may have been adding replicas no longer wanted.
            unneeded = [r for r in current.replicas if r not in reassignment.replicas]
            if unneeded:
                await self._stop_removed_replicas_of_reassigned_partition(tp, unneeded)
        self._isr_watches.registered.add(tp)
        await self.zk.watch_partition_state(tp, self._isr_watches.watch(tp))
        ctx.partitions_being_reassigned.add(tp)

    async def _maybe_trigger_partition_reassignment(
        self, reassignments: dict[TopicPartition, ReplicaAssignment]
    ) -> dict[TopicPartition, tuple[int, str | None]]:
        results: dict[TopicPartition, tuple[int, str | None]] = {}
        for tp in sorted(reassignments):
            if self.topic_deletion_manager.is_topic_queued_up_for_deletion(tp.topic):
                log.info("Skipping reassignment of %s since the topic is currently being deleted", tp)
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            elif not self.context.partition_replica_assignment(tp):
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            else:
                try:
                    await self._on_partition_reassignment(tp, reassignments[tp])
                    results[tp] = (ErrorCode.NONE, None)
                except (ControllerMovedError, SessionLostError, RequestBatchError):
                    log.info("Failed completing reassignment of partition %s because controller has moved to "
                             "another broker", tp)
                    raise
                except Exception as e:
                    log.exception("Error completing reassignment of partition %s", tp)
                    results[tp] = (ErrorCode.UNKNOWN_SERVER_ERROR, str(e))
        return results

    async def _is_reassignment_complete(self, tp: TopicPartition, assignment: ReplicaAssignment) -> bool:
        if not assignment.is_being_reassigned:
            return True
        st = (await self.zk.get_topic_partition_states([tp])).get(tp)
        return st is not None and set(assignment.target_replicas) <= set(st.isr)

    async def _move_reassigned_partition_leader_if_required(
        self, tp: TopicPartition, new_assignment: ReplicaAssignment
    ) -> None:
        ctx = self.context
        leader = ctx.partition_leader(tp)
        replicas = list(new_assignment.replicas)
        if leader not in replicas:
            log.info("Leader %d for partition %s being reassigned, is not in the new list of replicas %s. "
                     "Re-electing leader", leader, tp, replicas)
            await self.partition_state_machine.handle_state_changes(
                [tp], PartitionState.ONLINE, LeaderElectionStrategy.REASSIGN)
        elif ctx.is_replica_online(leader, tp):
            log.info("Leader %d for partition %s being reassigned, is already in the new list of replicas %s and "
                     "is alive", leader, tp, replicas)
            await self._update_leader_epoch_and_send_request(tp, new_assignment)
        else:
            log.info("Leader %d for partition %s being reassigned, is already in the new list of replicas %s but "
                     "is dead", leader, tp, replicas)
            await self.partition_state_machine.handle_state_changes(
                [tp], PartitionState.ONLINE, LeaderElectionStrategy.REASSIGN)

    async def _stop_removed_replicas_of_reassigned_partition(self, tp: TopicPartition, removed: list[int]) -> None:
        rsm = self.replica_state_machine
        replicas = [PartitionAndReplica(tp, r) for r in removed]
        # Out of the ISR first (OfflineReplica), then StopReplica with deletion.
        await rsm.handle_state_changes(replicas, ReplicaState.OFFLINE)
        await rsm.handle_state_changes(replicas, ReplicaState.DELETION_STARTED)
        await rsm.handle_state_changes(replicas, ReplicaState.DELETION_SUCCESSFUL)
        await rsm.handle_state_changes(replicas, ReplicaState.NON_EXISTENT)

    async def _update_replica_assignment_for_partition(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        ctx = self.context
        full = {p.partition: a for p, a in ctx.partition_full_replica_assignment_for_topic(tp.topic).items()}
        full[tp.partition] = assignment
        tid = ctx.topic_ids.get(tp.topic)
        await self.zk.set_topic_assignment(tp.topic, None if tid is None else zk.uuid_to_str(tid.bytes), full,
                                           ctx.epoch_zk_version)
        log.info("Successfully updated assignment of partition %s to %s", tp, assignment)

    async def _update_leader_epoch(self, tp: TopicPartition) -> LeaderAndIsr | None:
        """Bump the partition's leader epoch (same leader and ISR) so that the replicas accept
        a LeaderAndIsr carrying the new replica set."""
        ctx = self.context
        while True:
            st = (await self.zk.get_topic_partition_states([tp])).get(tp)
            if st is None:
                raise StateChangeFailedError(f"Cannot update leader epoch for partition {tp} as leaderAndIsr path "
                                             "is empty. This could mean we somehow tried to reassign a partition "
                                             "that doesn't exist")
            if st.controller_epoch > ctx.epoch:
                raise StateChangeFailedError(
                    "Leader and isr path written by another controller. This probably means the current controller "
                    f"with epoch {ctx.epoch} went through a soft failure and another controller was elected with "
                    f"epoch {st.controller_epoch}. Aborting state change by this controller")
            bumped = new_leader_and_isr(st, st.leader, st.isr)
            finished, _retry = await self.zk.update_leader_and_isr({tp: bumped}, ctx.epoch, ctx.epoch_zk_version)
            written = finished.get(tp)
            if isinstance(written, Exception):
                raise written
            if written is not None:
                ctx.put_partition_leadership_info(tp, written)
                log.info("Updated leader epoch for partition %s to %d, zkVersion=%d", tp, written.leader_epoch,
                         written.zk_version)
                return written
            # A version conflict (the leader changed the ISR meanwhile): read again.

    async def _update_leader_epoch_and_send_request(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        try:
            st = await self._update_leader_epoch(tp)
        except StateChangeFailedError as e:
            log.error("Failed to send LeaderAndIsr request with new replica assignment %s to leader for partition "
                      "being reassigned %s: %s", assignment, tp, e)
            return
        if st is None:
            return
        batch = self._batch
        batch.new_batch()
        # is_new only for the added replicas: an original replica on a failed log dir must not
        # be recreated empty elsewhere.
        batch.add_leader_and_isr_request_for_brokers(assignment.origin_replicas, tp, st, assignment, is_new=False)
        batch.add_leader_and_isr_request_for_brokers(assignment.adding_replicas, tp, st, assignment, is_new=True)
        batch.send_requests_to_brokers(self.context.epoch)
        log.info("Sent LeaderAndIsr request %s with new replica assignment %s to leader %d for partition being "
                 "reassigned %s", st, assignment, st.leader, tp)

    async def _remove_partition_from_reassigning_partitions(
        self, tp: TopicPartition, assignment: ReplicaAssignment
    ) -> None:
        ctx = self.context
        if tp not in ctx.partitions_being_reassigned:
            raise RequestBatchError(f"Cannot remove reassigning partition {tp} because it is not present in memory")
        self._isr_watches.registered.discard(tp)
        replicas = list(assignment.replicas)
        await self._maybe_remove_from_zk_reassignment(lambda p, r: p == tp and list(r) == replicas)
        ctx.partitions_being_reassigned.discard(tp)

    async def _maybe_remove_from_zk_reassignment(self, should_remove: Callable[[TopicPartition, list[int]], bool]) -> None:
        if not await self.zk.reassign_partitions_exists():
            return
        zkv = self.context.epoch_zk_version
        try:
            current = await self.zk.get_partition_reassignment()
        except (ValueError, KeyError, TypeError) as e:
            log.error("Deleting %s, which cannot be parsed: %s", zk.REASSIGN_PARTITIONS_PATH, e)
            current = {}
        remaining = {tp: r for tp, r in current.items() if not should_remove(tp, r)}
        removed = sorted(set(current) - set(remaining))
        if removed:
            log.info("Removing partitions %s from the list of reassigned partitions in zookeeper",
                     ",".join(map(str, removed)))
        if not remaining:
            log.info("No more partitions need to be reassigned. Deleting zk path %s", zk.REASSIGN_PARTITIONS_PATH)
            await self.zk.delete_partition_reassignment(zkv)
            # Watch the path again for the next reassignment.
            self._enqueue(ZkPartitionReassignment())
        elif removed:
            await self.zk.set_or_create_partition_reassignment(remaining, zkv)

    async def process_zk_partition_reassignment(self) -> set[TopicPartition]:
        """Start what /admin/reassign_partitions asks for; returns the partitions started."""
        if not self._is_active() or not await self.zk.reassign_partitions_exists(self._on_reassign_partitions_znode):
            return set()
        try:
            wanted = await self.zk.get_partition_reassignment()
        except (ValueError, KeyError, TypeError) as e:
            # Kafka ignores such a node and leaves it, which blocks every later reassignment
            # through ZooKeeper; it is removed instead.
            log.error("Ignoring partition reassignment due to invalid json in %s: %s", zk.REASSIGN_PARTITIONS_PATH, e)
            await self._maybe_remove_from_zk_reassignment(lambda _tp, _r: True)
            return set()
        results: dict[TopicPartition, tuple[int, str | None]] = {}
        to_reassign: dict[TopicPartition, ReplicaAssignment] = {}
        for tp, target in wanted.items():
            built = self._maybe_build_reassignment(tp, target)
            if built is None:
                results[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
            else:
                to_reassign[tp] = built
        results.update(await self._maybe_trigger_partition_reassignment(to_reassign))
        failed = {tp: r for tp, r in results.items() if r[0] != ErrorCode.NONE}
        if failed:
            log.warning("Failed reassignment through zk with the following errors: %s",
                        {str(tp): error_name(r[0]) for tp, r in failed.items()})
            await self._maybe_remove_from_zk_reassignment(lambda tp, _r: tp in failed)
        return set(results) - set(failed)

    async def process_api_partition_reassignment(self, event: ApiPartitionReassignment) -> None:
        """AlterPartitionReassignments: validate, start, replace or cancel; answers the event."""
        if not self._is_active():
            answer(event.future, (ErrorCode.NOT_CONTROLLER, None, {}))
            return
        results: dict[TopicPartition, tuple[int, str | None]] = {}
        to_reassign: dict[TopicPartition, ReplicaAssignment] = {}
        for tp, target in event.reassignments.items():
            error = None if target is None else self._validate_replicas(tp, target)
            if error is not None:
                results[tp] = error
                continue
            built = self._maybe_build_reassignment(tp, target)
            if built is None:
                results[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
            else:
                to_reassign[tp] = built
        try:
            # The latest reassignment, by API or through ZooKeeper, takes precedence.
            await self._maybe_remove_from_zk_reassignment(lambda tp, _r: tp in to_reassign)
            results.update(await self._maybe_trigger_partition_reassignment(to_reassign))
        except (ControllerMovedError, SessionLostError, RequestBatchError):
            answer(event.future, (ErrorCode.NOT_CONTROLLER, None, {}))
            raise
        answer(event.future, (ErrorCode.NONE, None, results))

    def _validate_replicas(self, tp: TopicPartition, replicas: list[int]) -> tuple[int, str] | None:
        ctx = self.context
        if not replicas:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Empty replica list specified in partition reassignment."
        if len(set(replicas)) != len(replicas):
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Duplicate replica ids in partition reassignment replica list: {replicas}")
        if any(r < 0 for r in replicas):
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Invalid broker id in replica list: {replicas}"
        new = ctx.partition_full_replica_assignment(tp).reassign_to(replicas)
        live = ctx.live_broker_ids
        if not set(new.adding_replicas) <= live:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Replica assignment has brokers that are not alive. Replica list: {list(new.adding_replicas)}, "
                    f"live broker list: {sorted(live)}")
        return None

    def _maybe_build_reassignment(self, tp: TopicPartition, target: list[int] | None) -> ReplicaAssignment | None:
        current = self.context.partition_full_replica_assignment(tp)
        if current.is_being_reassigned:
            # No target: a cancellation, back to the original replicas.
            return current.reassign_to(current.origin_replicas if target is None else target)
        return None if target is None else current.reassign_to(target)

    async def process_partition_reassignment_isr_change(self, tp: TopicPartition) -> None:
        """The state znode of a partition being reassigned changed: complete it if in sync."""
        if not self._is_active() or tp not in self.context.partitions_being_reassigned:
            return
        # Watches fire once: watch again before reading, so no later change is missed.
        await self.zk.watch_partition_state(tp, self._isr_watches.watch(tp))
        await self._maybe_complete_reassignment(tp)

    async def _maybe_complete_reassignment(self, tp: TopicPartition) -> None:
        reassignment = self.context.partition_full_replica_assignment(tp)
        if await self._is_reassignment_complete(tp, reassignment):
            await self._on_partition_reassignment(tp, reassignment)

    def process_list_partition_reassignments(self, event: ListPartitionReassignments) -> None:
        """ListPartitionReassignments: answers the event with the ongoing reassignments."""
        ctx = self.context
        if not self._is_active():
            answer(event.future, (ErrorCode.NOT_CONTROLLER, {}))
            return
        asked = ctx.partitions_being_reassigned if event.partitions is None else event.partitions
        results = {}
        for tp in asked:
            a = ctx.partition_full_replica_assignment(tp)
            if a.is_being_reassigned:
                results[tp] = a
        answer(event.future, (ErrorCode.NONE, results))
