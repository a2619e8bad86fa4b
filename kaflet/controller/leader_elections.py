"""Leader elections run by the active controller: when, for which partitions, and the answers.

Owns ElectLeaders (preferred and unclean), the /admin/preferred_replica_election node (its watch,
the elections it asks for, its removal) and the ones pending at failover, the auto leader
rebalance (``auto.leader.rebalance.enable``: a preferred election wherever a broker leads too
few of the partitions it is preferred for), retrying offline partitions when unclean leader
election is turned on, and ControlledShutdown (leaderships moved off a stopping broker, its
follower replicas out of the ISRs).

Not to be confused with :mod:`kaflet.controller.election`: that module holds the pure election
algorithms (which replica becomes leader, with which ISR); the elections here go through the
:class:`~kaflet.controller.state_machines.PartitionStateMachine`, which calls those algorithms
and writes the result. :class:`~kaflet.controller.controller.KafkaController` routes the
election events here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kaflet.controller.config import ControllerConfig
from kaflet.controller.context import (
    ControllerContext,
    PartitionAndReplica,
    PartitionState,
    ReplicaState,
    TopicPartition,
)
from kaflet.controller.election import preferred_replica_partition_leader_election
from kaflet.controller.events import (
    AutoPreferredReplicaLeaderElection,
    ControlledShutdown,
    ControllerEvent,
    ElectionTrigger,
    ElectionType,
    ElectResults,
    ReplicaLeaderElection,
    answer,
)
from kaflet.controller.request_batch import ControllerBrokerRequestBatch
from kaflet.controller.state_machines import (
    LeaderElectionStrategy,
    PartitionStateMachine,
    ReplicaStateMachine,
    StateChangeFailedError,
)
from kaflet.controller.topic_deletion import TopicDeletionManager
from kaflet.controller.zk_client import ControllerMovedError, ControllerZkClient
from kaflet.metadata.tree import EventType, WatchEvent
from kaflet.metadata.zkdata import LeaderAndIsr
from kaflet.protocol.errors import ErrorCode

__all__ = ["LeaderElectionManager", "Scheduler"]

# One logger for every controller line, whichever module of the controller writes it.
log = logging.getLogger("kaflet.controller")

#: Puts the event ``make()`` returns on the controller's queue after a delay (seconds); the
#: controller cancels what is still pending when it resigns.
Scheduler = Callable[[float, Callable[[], ControllerEvent]], None]

_ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."


class LeaderElectionManager:
    """Runs preferred, unclean and controlled-shutdown leader elections and the auto rebalance.

    Runs on the controller's event task only. ``enqueue`` puts an event on the controller's
    queue; ``schedule`` does so later; ``generation`` is the controller's term counter (bumped on
    each failover and resignation: a timer of an older term does nothing); ``is_active`` says
    whether this broker is still the active controller. ``config`` is read when used (it may be
    changed at run time).
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
        config: ControllerConfig,
        enqueue: Callable[[ControllerEvent], None],
        schedule: Scheduler,
        generation: Callable[[], int],
        is_active: Callable[[], bool],
    ) -> None:
        self.context = context
        self.zk = zk
        self.replica_state_machine = replica_state_machine
        self.partition_state_machine = partition_state_machine
        self.topic_deletion_manager = topic_deletion_manager
        self._batch = batch
        self.config = config
        self._enqueue = enqueue
        self._schedule = schedule
        self._generation = generation
        self._is_active = is_active

    def reset(self) -> None:
        """The controller resigned: drop anything half-batched."""
        self._batch.clear()

    def on_preferred_replica_election_znode(self, event: WatchEvent) -> None:
        """Watch callback of /admin/preferred_replica_election."""
        if event.type is EventType.CREATED:
            self._enqueue(ReplicaLeaderElection(None, ElectionType.PREFERRED, ElectionTrigger.ZK))

    async def on_controller_failover(self) -> None:
        """This broker became the controller: finish the preferred elections the admin node still
        asks for, and start the auto rebalance timer."""
        pending = await self._fetch_pending_preferred_replica_elections()
        await self._on_replica_election(pending, ElectionType.PREFERRED, ElectionTrigger.ZK)
        if self.config.auto_leader_rebalance_enable:
            self._schedule_auto_leader_rebalance(self.config.auto_leader_rebalance_initial_delay_seconds)

    async def process_unclean_leader_election_enable(self, topic: str | None = None) -> None:
        """unclean.leader.election.enable was turned on (for ``topic``, or as the broker default):
        elect leaders for the offline partitions again."""
        if not self._is_active():
            return
        if topic is None:
            log.info("Unclean leader election has been enabled by default")
        else:
            log.info("Unclean leader election has been enabled for topic %s", topic)
        await self.partition_state_machine.trigger_online_partition_state_change(topic)

    async def process_controlled_shutdown(self, event: ControlledShutdown) -> None:
        """ControlledShutdown: answers the event with (error, partitions the broker still leads)."""
        try:
            result = await self._do_controlled_shutdown(event.broker_id, event.broker_epoch)
        except ControllerMovedError:
            answer(event.future, (ErrorCode.NOT_CONTROLLER, set()))
            raise
        except Exception:
            log.exception("controlled shutdown of broker %d failed", event.broker_id)
            result = (ErrorCode.UNKNOWN_SERVER_ERROR, set())
        answer(event.future, result)

    async def _do_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[int, set[TopicPartition]]:
        ctx = self.context
        if not self._is_active():
            return ErrorCode.NOT_CONTROLLER, set()
        cached = ctx.broker_epoch(broker_id)
        # -1: a request without an epoch (before KIP-380), accepted as Kafka does.
        if broker_epoch != -1 and cached is not None and broker_epoch < cached:
            log.info("Received controlled shutdown request from an old broker epoch %d for broker %d. Current "
                     "broker epoch is %d.", broker_epoch, broker_id, cached)
            return ErrorCode.STALE_BROKER_EPOCH, set()
        log.info("Shutting down broker %d", broker_id)
        if broker_id not in ctx.live_or_shutting_down_broker_ids:
            return ErrorCode.BROKER_NOT_AVAILABLE, set()
        ctx.shutting_down_broker_ids.add(broker_id)
        to_act = [
            tp for tp in sorted(ctx.partitions_on_broker(broker_id))
            if len(ctx.partition_replica_assignment(tp)) > 1
            and ctx.partition_leadership_info(tp) is not None
            and not self.topic_deletion_manager.is_topic_queued_up_for_deletion(tp.topic)
        ]
        led = [tp for tp in to_act if ctx.partition_leader(tp) == broker_id]
        followed = [tp for tp in to_act if ctx.partition_leader(tp) != broker_id]
        await self.partition_state_machine.handle_state_changes(
            led, PartitionState.ONLINE, LeaderElectionStrategy.CONTROLLED_SHUTDOWN)
        self._batch.new_batch()
        for tp in followed:
            self._batch.add_stop_replica_request_for_brokers([broker_id], tp, delete_partition=False)
        self._batch.send_requests_to_brokers(ctx.epoch)
        # Followers leave the ISR; their leaders hear about it.
        await self.replica_state_machine.handle_state_changes(
            [PartitionAndReplica(tp, broker_id) for tp in followed], ReplicaState.OFFLINE)
        return ErrorCode.NONE, ctx.partition_leaders_on_broker(broker_id)

    async def _on_replica_election(
        self, partitions: set[TopicPartition], election_type: ElectionType, trigger: ElectionTrigger
    ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        log.info("Starting replica leader election (%s) for partitions %s triggered by %s", election_type.name,
                 ",".join(map(str, sorted(partitions))), trigger.value)
        try:
            if election_type is ElectionType.PREFERRED:
                strategy = LeaderElectionStrategy.PREFERRED
            elif trigger is ElectionTrigger.ADMIN_CLIENT:
                # Unclean elections only when an administrator asked for one.
                strategy = LeaderElectionStrategy.OFFLINE_ALLOW_UNCLEAN
            else:
                strategy = LeaderElectionStrategy.OFFLINE
            results = await self.partition_state_machine.handle_state_changes(
                sorted(partitions), PartitionState.ONLINE, strategy)
            if trigger is not ElectionTrigger.ADMIN_CLIENT:
                for tp, r in results.items():
                    if isinstance(r, Exception):
                        log.error("Error completing replica leader election (%s) for partition %s: %s",
                                  election_type.name, tp, r)
            return results
        finally:
            if trigger is not ElectionTrigger.ADMIN_CLIENT:
                await self._remove_partitions_from_preferred_replica_election(
                    partitions, trigger is ElectionTrigger.AUTO)

    async def _remove_partitions_from_preferred_replica_election(
        self, partitions: set[TopicPartition], auto: bool
    ) -> None:
        ctx = self.context
        for tp in sorted(partitions):
            st = ctx.partition_leadership_info(tp)
            replicas = ctx.partition_replica_assignment(tp)
            if st is None or not replicas:
                continue
            if st.leader == replicas[0]:
                log.info("Partition %s completed preferred replica leader election. New leader is %d", tp, st.leader)
            else:
                log.warning("Partition %s failed to complete preferred replica leader election to %d. Leader is "
                            "still %d", tp, replicas[0], st.leader)
        if not auto:
            await self.zk.delete_preferred_replica_election(ctx.epoch_zk_version)
            # Re-arms the watch on the admin node.
            self._enqueue(ReplicaLeaderElection(None, ElectionType.PREFERRED, ElectionTrigger.ZK))

    async def process_replica_leader_election(self, event: ReplicaLeaderElection) -> None:
        """ElectLeaders or the admin node: elect where needed; answers the event per partition."""
        ctx = self.context
        if not self._is_active():
            not_controller: ElectResults = {tp: (ErrorCode.NOT_CONTROLLER, None) for tp in (event.partitions or ())}
            answer(event.future, not_controller)
            return
        if event.trigger is not ElectionTrigger.ADMIN_CLIENT and not await self.zk.preferred_replica_election_exists(
                self.on_preferred_replica_election_znode):
            return
        if event.partitions is not None:
            partitions = set(event.partitions)
        elif event.trigger is ElectionTrigger.ADMIN_CLIENT:
            partitions = set(ctx.all_partitions)
        else:
            partitions = await self.zk.get_preferred_replica_election()
        all_partitions = ctx.all_partitions
        known = {tp for tp in partitions if tp in all_partitions}
        unknown = partitions - known
        for tp in sorted(unknown):
            log.info("Skipping replica leader election (%s) for partition %s by %s since it doesn't exist.",
                     event.election_type.name, tp, event.trigger.value)
        being_deleted = {tp for tp in known if self.topic_deletion_manager.is_topic_queued_up_for_deletion(tp.topic)}
        live = known - being_deleted
        electable: set[TopicPartition] = set()
        already_valid: set[TopicPartition] = set()
        no_state: set[TopicPartition] = set()
        for tp in live:
            if ctx.partition_leadership_info(tp) is None:
                no_state.add(tp)  # never initialized: no replica was ever alive
                continue
            leader = ctx.partition_leader(tp)
            if event.election_type is ElectionType.PREFERRED:
                needs = leader != ctx.partition_replica_assignment(tp)[0]
            else:
                needs = leader == -1 or leader not in ctx.live_broker_ids
            (electable if needs else already_valid).add(tp)
        try:
            elected = await self._on_replica_election(electable, event.election_type, event.trigger)
        except ControllerMovedError:
            moved: ElectResults = {tp: (ErrorCode.NOT_CONTROLLER, None) for tp in partitions}
            answer(event.future, moved)
            raise
        results: ElectResults = {}
        for tp, r in elected.items():
            if isinstance(r, StateChangeFailedError):
                code = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if event.election_type is ElectionType.PREFERRED
                        else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
                results[tp] = (code, str(r))
            elif isinstance(r, Exception):
                results[tp] = (ErrorCode.UNKNOWN_SERVER_ERROR, str(r))
            else:
                results[tp] = (ErrorCode.NONE, None)
        # Partitions the state machine skipped (not in a valid state) did not get a leader.
        for tp in (electable - set(elected)) | no_state:
            code = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if event.election_type is ElectionType.PREFERRED
                    else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
            results[tp] = (code, f"Partition {tp} is in state {ctx.partition_state(tp).value}")
        for tp in already_valid:
            results[tp] = (ErrorCode.ELECTION_NOT_NEEDED, _ELECTION_NOT_NEEDED_MESSAGE)
        for tp in being_deleted:
            results[tp] = (ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is being deleted")
        for tp in unknown:
            results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
        answer(event.future, results)

    def _schedule_auto_leader_rebalance(self, delay: float) -> None:
        gen = self._generation()
        self._schedule(delay, lambda: AutoPreferredReplicaLeaderElection(gen))

    async def process_auto_preferred_replica_leader_election(self, generation: int) -> None:
        """The auto rebalance timer of term ``generation`` fired: rebalance, then schedule the next."""
        if not self._is_active() or generation != self._generation():
            return
        try:
            log.info("Processing automatic preferred replica leader election")
            await self._check_and_trigger_auto_leader_rebalance()
        finally:
            if self._is_active() and generation == self._generation():
                self._schedule_auto_leader_rebalance(self.config.leader_imbalance_check_interval_seconds)

    async def _check_and_trigger_auto_leader_rebalance(self) -> None:
        ctx = self.context
        tdm = self.topic_deletion_manager
        by_preferred: dict[int, dict[TopicPartition, list[int]]] = {}
        for tp in ctx.all_partitions:
            if tdm.is_topic_queued_up_for_deletion(tp.topic):
                continue
            replicas = ctx.partition_replica_assignment(tp)
            if replicas:
                by_preferred.setdefault(replicas[0], {})[tp] = replicas
        for broker in sorted(by_preferred):
            parts = by_preferred[broker]
            not_preferred = [
                tp for tp in parts
                if (st := ctx.partition_leadership_info(tp)) is not None and st.leader != broker
            ]
            ratio = len(not_preferred) / len(parts)
            if ratio > self.config.leader_imbalance_per_broker_percentage / 100:
                candidates = {
                    tp for tp in not_preferred
                    if not ctx.partitions_being_reassigned
                    and not tdm.is_topic_queued_up_for_deletion(tp.topic)
                    and tp.topic in ctx.all_topics
                    and self._can_preferred_replica_be_leader(tp)
                }
                await self._on_replica_election(candidates, ElectionType.PREFERRED, ElectionTrigger.AUTO)

    def _can_preferred_replica_be_leader(self, tp: TopicPartition) -> bool:
        ctx = self.context
        assignment = ctx.partition_replica_assignment(tp)
        live = {r for r in assignment if ctx.is_replica_online(r, tp)}
        st = ctx.partition_leadership_info(tp)
        if st is None:
            return False
        return preferred_replica_partition_leader_election(assignment, st.isr, live) is not None

    async def _fetch_pending_preferred_replica_elections(self) -> set[TopicPartition]:
        ctx = self.context
        pending = set()
        for tp in await self.zk.get_preferred_replica_election():
            replicas = ctx.partition_replica_assignment(tp)
            if not replicas:
                continue  # the topic was deleted
            st = ctx.partition_leadership_info(tp)
            if st is not None and st.leader == replicas[0]:
                continue  # completed
            if self.topic_deletion_manager.is_topic_queued_up_for_deletion(tp.topic):
                continue
            pending.add(tp)
        log.info("Resuming preferred replica election for partitions: %s", ",".join(map(str, sorted(pending))))
        return pending

