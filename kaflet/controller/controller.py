"""Kafka 2.8's ZooKeeper-mode controller (KafkaController), on the metadata tree.

Every broker runs one :class:`KafkaController`; the one that creates the ephemeral /controller
node (in one multi with the conditional bump of /controller_epoch) is the active controller. It
reads the whole cluster state into a :class:`ControllerContext`, watches the tree (brokers,
topics, assignments, deletions, ISR change and log-dir notifications, preferred replica
elections) and turns every change into partition and replica state changes, whose requests
(LeaderAndIsr, UpdateMetadata, StopReplica) go to the brokers through the controller channel.

Watches, timers, responses and API calls only enqueue events; one task processes them in order
(see :mod:`kaflet.controller.events`). Every write to the tree is fenced by the controller epoch;
a failed fence, a lost election or a lost session makes the controller resign: it stops its
channel, forgets its state and ignores the watches it had left.

Partition reassignment follows Kafka 2.8 (KIP-455): AlterPartitionReassignments,
ListPartitionReassignments and the legacy /admin/reassign_partitions node; a reassignment in
progress lives in the topic znode (adding/removing replicas), so a new controller resumes it.
Delegation token expiry is not the controller's business in kaflet.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from kaflet.controller.config import ControllerConfig
from kaflet.controller.context import (
    ControllerContext,
    PartitionAndReplica,
    PartitionState,
    ReplicaAssignment,
    ReplicaState,
    TopicPartition,
    new_leader_and_isr,
)
from kaflet.controller.election import preferred_replica_partition_leader_election
from kaflet.controller.events import (
    AlterReassignmentsResult,
    ApiPartitionReassignment,
    AutoPreferredReplicaLeaderElection,
    BrokerChange,
    BrokerModifications,
    ControlledShutdown,
    ControllerChange,
    ControllerEvent,
    ControllerEventManager,
    DeferredElection,
    ElectionTrigger,
    ElectionType,
    ElectResults,
    Expire,
    IsrChangeNotification,
    LeaderAndIsrResponseReceived,
    ListPartitionReassignments,
    ListReassignmentsResult,
    LogDirEventNotification,
    PartitionModifications,
    PartitionReassignmentIsrChange,
    Reelect,
    ReplicaLeaderElection,
    Startup,
    TopicChange,
    TopicDeletion,
    TopicDeletionStopReplicaResponseReceived,
    TopicUncleanLeaderElectionEnable,
    UncleanLeaderElectionEnable,
    UpdateMetadataResponseReceived,
    ZkPartitionReassignment,
)
from kaflet.controller.request_batch import (
    ControllerBrokerRequestBatch,
    ControllerChannel,
    RequestBatchError,
    partition_errors_of_leader_and_isr,
    partition_errors_of_stop_replica,
)
from kaflet.controller.state_machines import (
    LeaderElectionStrategy,
    PartitionStateMachine,
    ReplicaStateMachine,
    StateChangeFailedError,
)
from kaflet.controller.topic_deletion import TopicDeletionManager
from kaflet.controller.zk_client import ControllerMovedError, ControllerZkClient
from kaflet.metadata import zkdata as zk
from kaflet.metadata.tree import (
    CreateOp,
    EventType,
    MetadataTree,
    NoNodeError,
    SessionLostError,
    SetOp,
    WatchCallback,
    WatchEvent,
)
from kaflet.metadata.zkdata import LeaderAndIsr, TopicAssignment
from kaflet.protocol.errors import ErrorCode

__all__ = ["ControllerConfig", "ElectionType", "KafkaController"]

log = logging.getLogger("kaflet.controller")

ChannelFactory = Callable[[ControllerConfig], ControllerChannel]

_ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."
_RETRY_AFTER_SESSION_LOSS_S = 1.0
_REREAD_EVENTS = (
    Startup, ControllerChange, Reelect, BrokerChange, BrokerModifications, TopicChange, PartitionModifications,
    TopicDeletion, IsrChangeNotification, LogDirEventNotification, UncleanLeaderElectionEnable,
    TopicUncleanLeaderElectionEnable, ZkPartitionReassignment, PartitionReassignmentIsrChange,
)


class KafkaController:
    """The controller of one broker (active when it holds /controller).

    ``channel_factory`` makes the controller channel when this broker becomes the controller
    (it is closed on resignation); it gets this controller's config (for
    ``controller.socket.timeout.ms``).
    """

    def __init__(
        self,
        broker_id: int,
        tree: MetadataTree,
        channel_factory: ChannelFactory,
        config: ControllerConfig | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.tree = tree
        self.config = config or ControllerConfig()
        self._channel_factory = channel_factory
        self._channel: ControllerChannel | None = None
        self.context = ControllerContext()
        self.zk = ControllerZkClient(tree)
        self.events = ControllerEventManager(self._process, name=f"controller-{broker_id}")
        #: The broker id in /controller as last read (-1: none).
        self.active_controller_id = -1

        def batch() -> ControllerBrokerRequestBatch:
            return ControllerBrokerRequestBatch(
                broker_id, self.context, lambda: self._channel, self.events.put,
                self.config.inter_broker_listener_name)

        self._batch = batch()
        self.replica_state_machine = ReplicaStateMachine(broker_id, self.context, self.zk, batch())
        self.partition_state_machine = PartitionStateMachine(
            broker_id, self.context, self.zk, batch(), lambda: self.config.unclean_leader_election_enable)
        self.topic_deletion_manager = TopicDeletionManager(
            self.config.delete_topic_enable, self.context, self.replica_state_machine,
            self.partition_state_machine, self)
        # Watch callbacks are kept per path so that re-arming a watch never doubles it.
        self._broker_modification_watches: dict[int, WatchCallback] = {}
        self._partition_modification_watches: dict[str, WatchCallback] = {}
        self._reassignment_isr_watches: dict[TopicPartition, WatchCallback] = {}
        # Brokers and topics whose znode changes are acted on (Kafka's registered handlers).
        self._broker_modifications_registered: set[int] = set()
        self._partition_modifications_registered: set[str] = set()
        # Partitions whose state znode changes are acted on (PartitionReassignmentIsrChangeHandler).
        self._reassignment_isr_registered: set[TopicPartition] = set()
        # Bumped on every failover/resignation: timers and deferred elections of an older
        # generation are ignored.
        self._generation = 0
        self._timers: list[asyncio.TimerHandle] = []
        self._started = False

    # ================================================================== public API

    @property
    def is_active(self) -> bool:
        """Whether this broker is the active controller."""
        return self.active_controller_id == self.broker_id

    @property
    def epoch(self) -> int:
        """The controller epoch of this controller's term (0 when not active)."""
        return self.context.epoch

    @property
    def epoch_zk_version(self) -> int:
        return self.context.epoch_zk_version

    @property
    def unclean_leader_elections(self) -> int:
        """How many unclean leader elections this controller performed."""
        return self.partition_state_machine.unclean_leader_elections

    async def startup(self) -> None:
        """Start the event task and compete for the controllership."""
        if self._started:
            return
        self._started = True
        self.events.start()
        self.events.put(Startup())

    async def shutdown(self) -> None:
        """Stop processing events and resign if active (giving up /controller so that another
        broker takes over at once rather than when this broker's session ends)."""
        if not self._started:
            return
        self._started = False
        await self.events.close()
        if self.is_active:
            zkv = self.context.epoch_zk_version
            self.active_controller_id = -1
            await self._on_controller_resignation()
            try:
                await self.zk.delete_controller(zkv)
            except (ControllerMovedError, SessionLostError):
                pass
            except Exception:
                log.warning("could not remove %s on shutdown", zk.CONTROLLER_PATH, exc_info=True)
        else:
            await self._on_controller_resignation()

    def on_session_lost(self) -> None:
        """The metadata session expired: drop queued events and resign (Kafka's Expire)."""
        self.events.clear_and_put(Expire())

    def on_session_reestablished(self) -> None:
        """A new session is up (and the broker re-registered): compete again."""
        self.events.put(Reelect())

    def enable_unclean_leader_election(self) -> None:
        """unclean.leader.election.enable was turned on: retry offline partitions."""
        self.events.put(UncleanLeaderElectionEnable())

    def enable_topic_unclean_leader_election(self, topic: str) -> None:
        """A topic's unclean.leader.election.enable was turned on: retry its offline partitions."""
        if self.is_active:
            self.events.put(TopicUncleanLeaderElectionEnable(topic))

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[int, list[tuple[str, int]]]:
        """Kafka's ControlledShutdown: move the broker's leaderships away and take it out of the
        ISRs; returns (error code, partitions it still leads)."""
        if not self._started:
            return ErrorCode.NOT_CONTROLLER, []
        fut: asyncio.Future[tuple[int, set[TopicPartition]]] = asyncio.get_running_loop().create_future()
        self.events.put(ControlledShutdown(broker_id, broker_epoch, fut))
        code, remaining = await fut
        return code, sorted((tp.topic, tp.partition) for tp in remaining)

    async def elect_leaders(
        self, election_type: ElectionType | int, partitions: Iterable[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """Kafka's ElectLeaders: (error code, message) per partition; ``None`` means every
        partition."""
        parts = None if partitions is None else {TopicPartition(t, p) for t, p in partitions}
        if not self._started:
            return {(tp.topic, tp.partition): (ErrorCode.NOT_CONTROLLER, None) for tp in parts or ()}
        fut: asyncio.Future[ElectResults] = asyncio.get_running_loop().create_future()
        self.events.put(ReplicaLeaderElection(parts, ElectionType(election_type), ElectionTrigger.ADMIN_CLIENT, fut))
        results = await fut
        return {(tp[0], tp[1]): r for tp, r in results.items()}

    async def alter_partition_reassignments(
        self, reassignments: dict[tuple[str, int], list[int] | None]
    ) -> AlterReassignmentsResult:
        """Kafka's AlterPartitionReassignments: target replicas per partition (None cancels);
        returns (top-level error, message, (error, message) per partition)."""
        parts = {TopicPartition(t, p): None if r is None else list(r) for (t, p), r in reassignments.items()}
        if not self._started:
            return ErrorCode.NOT_CONTROLLER, None, {}
        fut: asyncio.Future[AlterReassignmentsResult] = asyncio.get_running_loop().create_future()
        self.events.put(ApiPartitionReassignment(parts, fut))
        return await fut

    async def list_partition_reassignments(
        self, partitions: Iterable[tuple[str, int]] | None
    ) -> ListReassignmentsResult:
        """Kafka's ListPartitionReassignments: the ongoing reassignments (of ``partitions``, or
        all); returns (top-level error, assignment per partition being reassigned)."""
        parts = None if partitions is None else {TopicPartition(t, p) for t, p in partitions}
        if not self._started:
            return ErrorCode.NOT_CONTROLLER, {}
        fut: asyncio.Future[ListReassignmentsResult] = asyncio.get_running_loop().create_future()
        self.events.put(ListPartitionReassignments(parts, fut))
        return await fut

    async def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until no event is queued or being processed (tests, orderly hand-over)."""
        await self.events.wait_idle(timeout)

    # ================================================================== watches -> events

    def _on_controller_znode(self, event: WatchEvent) -> None:
        self.events.put(Reelect() if event.type is EventType.DELETED else ControllerChange())

    def _on_broker_ids(self, _event: WatchEvent) -> None:
        self.events.put(BrokerChange())

    def _broker_modification_watch(self, broker_id: int) -> WatchCallback:
        existing = self._broker_modification_watches.get(broker_id)
        if existing is not None:
            return existing

        def on_change(event: WatchEvent) -> None:
            if event.type is EventType.CHANGED and broker_id in self._broker_modifications_registered:
                self.events.put(BrokerModifications(broker_id))

        self._broker_modification_watches[broker_id] = on_change
        return on_change

    def _on_topics(self, _event: WatchEvent) -> None:
        self.events.put(TopicChange())

    def _partition_modification_watch(self, topic: str) -> WatchCallback:
        existing = self._partition_modification_watches.get(topic)
        if existing is not None:
            return existing

        def on_change(event: WatchEvent) -> None:
            if event.type is EventType.CHANGED and topic in self._partition_modifications_registered:
                self.events.put(PartitionModifications(topic))

        self._partition_modification_watches[topic] = on_change
        return on_change

    def _on_delete_topics(self, _event: WatchEvent) -> None:
        self.events.put(TopicDeletion())

    def _on_isr_change_notification(self, _event: WatchEvent) -> None:
        self.events.put(IsrChangeNotification())

    def _on_log_dir_event_notification(self, _event: WatchEvent) -> None:
        self.events.put(LogDirEventNotification())

    def _on_reassign_partitions(self, event: WatchEvent) -> None:
        # Creation only, as Kafka: the controller re-arms the watch when it deletes the node.
        if event.type is EventType.CREATED:
            self.events.put(ZkPartitionReassignment())

    def _reassignment_isr_watch(self, tp: TopicPartition) -> WatchCallback:
        existing = self._reassignment_isr_watches.get(tp)
        if existing is not None:
            return existing

        def on_change(event: WatchEvent) -> None:
            if event.type is EventType.CHANGED and tp in self._reassignment_isr_registered:
                self.events.put(PartitionReassignmentIsrChange(tp))

        self._reassignment_isr_watches[tp] = on_change
        return on_change

    def _on_preferred_replica_election(self, event: WatchEvent) -> None:
        if event.type is EventType.CREATED:
            self.events.put(ReplicaLeaderElection(None, ElectionType.PREFERRED, ElectionTrigger.ZK))

    # ================================================================== event processing

    async def _process(self, event: ControllerEvent) -> None:
        try:
            await self._dispatch(event)
        except ControllerMovedError as e:
            log.info("Controller moved to another broker when processing %s: %s", type(event).__name__, e)
            await self._on_controller_moved()
        except RequestBatchError as e:
            # Kafka's handleIllegalState: resign and let a new election sort it out.
            log.error("Forcing the controller to resign after %s: %s", type(event).__name__, e)
            await self._trigger_controller_move()
        except SessionLostError as e:
            log.warning("Metadata session lost while processing %s: %s", type(event).__name__, e)
            if isinstance(event, _REREAD_EVENTS):
                # These handlers re-read what they need, so running them again after a lost
                # connection is safe; an expired session resigns first and cancels the retry.
                self._schedule(_RETRY_AFTER_SESSION_LOSS_S, lambda: event)
        finally:
            event.preempt()  # answers a caller that is still waiting (the handler failed)

    async def _dispatch(self, event: ControllerEvent) -> None:
        if isinstance(event, Startup):
            await self._process_startup()
        elif isinstance(event, ControllerChange):
            await self._maybe_resign()
        elif isinstance(event, Reelect):
            await self._maybe_resign()
            await self._elect()
        elif isinstance(event, DeferredElection):
            if event.generation == self._generation:
                await self._elect(deferred=True)
        elif isinstance(event, Expire):
            self.active_controller_id = -1
            await self._on_controller_resignation()
        elif isinstance(event, BrokerChange):
            await self._process_broker_change()
        elif isinstance(event, BrokerModifications):
            await self._process_broker_modification(event.broker_id)
        elif isinstance(event, TopicChange):
            await self._process_topic_change()
        elif isinstance(event, PartitionModifications):
            await self._process_partition_modifications(event.topic)
        elif isinstance(event, TopicDeletion):
            await self._process_topic_deletion()
        elif isinstance(event, IsrChangeNotification):
            await self._process_isr_change_notification()
        elif isinstance(event, LogDirEventNotification):
            await self._process_log_dir_event_notification()
        elif isinstance(event, ReplicaLeaderElection):
            await self._process_replica_leader_election(event)
        elif isinstance(event, AutoPreferredReplicaLeaderElection):
            await self._process_auto_preferred_replica_leader_election(event.generation)
        elif isinstance(event, ControlledShutdown):
            await self._process_controlled_shutdown(event)
        elif isinstance(event, ApiPartitionReassignment):
            await self._process_api_partition_reassignment(event)
        elif isinstance(event, ZkPartitionReassignment):
            await self._process_zk_partition_reassignment()
        elif isinstance(event, PartitionReassignmentIsrChange):
            await self._process_partition_reassignment_isr_change(event.topic_partition)
        elif isinstance(event, ListPartitionReassignments):
            self._process_list_partition_reassignments(event)
        elif isinstance(event, LeaderAndIsrResponseReceived):
            await self._process_leader_and_isr_response(event.response, event.broker_id)
        elif isinstance(event, UpdateMetadataResponseReceived):
            error = int(getattr(event.response, "error_code", 0))
            if self.is_active and error:
                log.error("Received error %s in UpdateMetadata response from broker %d",
                          _error_name(error), event.broker_id)
        elif isinstance(event, TopicDeletionStopReplicaResponseReceived):
            await self._process_topic_deletion_stop_replica_response(event)
        elif isinstance(event, UncleanLeaderElectionEnable):
            if self.is_active:
                log.info("Unclean leader election has been enabled by default")
                await self.partition_state_machine.trigger_online_partition_state_change()
        elif isinstance(event, TopicUncleanLeaderElectionEnable):
            if self.is_active:
                log.info("Unclean leader election has been enabled for topic %s", event.topic)
                await self.partition_state_machine.trigger_online_partition_state_change(event.topic)
        else:
            log.error("unknown controller event %r", event)

    # ================================================================== election

    async def _process_startup(self) -> None:
        await self._elect()

    async def _read_controller_id(self) -> int:
        cid = await self.zk.get_controller_id(self._on_controller_znode)
        return -1 if cid is None else cid

    async def _maybe_resign(self) -> None:
        was_active = self.is_active
        self.active_controller_id = await self._read_controller_id()
        if was_active and not self.is_active:
            await self._on_controller_resignation()

    async def _should_defer_to_candidate(self) -> bool:
        """Logi-Kafka: a broker that is not a listed candidate lets the candidates go first.

        As the seed does, whether or not a candidate is registered yet: when brokers start
        together a candidate may register a moment later than the others look. A candidate that
        is down only costs the wait.
        """
        candidates = await self.zk.get_controller_candidates()
        return bool(candidates) and self.broker_id not in candidates

    async def _elect(self, deferred: bool = False) -> None:
        self.active_controller_id = await self._read_controller_id()
        if self.active_controller_id != -1:
            log.debug("Broker %d has been elected as the controller, so stopping the election process.",
                      self.active_controller_id)
            return
        if not deferred and self.config.candidate_wait_seconds > 0 and await self._should_defer_to_candidate():
            log.info("Broker %d is not a preferred controller candidate: waiting %.1f s before competing",
                     self.broker_id, self.config.candidate_wait_seconds)
            gen = self._generation
            self._schedule(self.config.candidate_wait_seconds, lambda: DeferredElection(gen))
            return
        try:
            epoch, zkv = await self.zk.register_controller_and_increment_controller_epoch(self.broker_id)
            self.context.epoch = epoch
            self.context.epoch_zk_version = zkv
            self.active_controller_id = self.broker_id
            log.info("%d successfully elected as the controller. Epoch incremented to %d and epoch zk version "
                     "is now %d", self.broker_id, epoch, zkv)
            await self._on_controller_failover()
        except ControllerMovedError as e:
            await self._maybe_resign()
            if self.active_controller_id != -1:
                log.debug("Broker %d was elected as controller instead of broker %d: %s",
                          self.active_controller_id, self.broker_id, e)
            else:
                log.warning("A controller has been elected but just resigned, this will result in another "
                            "round of election: %s", e)
        except SessionLostError:
            raise
        except Exception:
            log.exception("Error while electing or becoming controller on broker %d. Trigger controller movement "
                          "immediately", self.broker_id)
            await self._trigger_controller_move()

    async def _on_controller_moved(self) -> None:
        """A fenced write failed: another controller was elected since this one's term began."""
        await self._maybe_resign()
        if self.is_active:
            # /controller still names this broker, but /controller_epoch moved on without it:
            # this term is over. Resign and give up /controller so that a fresh election runs.
            log.warning("The controller epoch moved while %s still names broker %d; resigning",
                        zk.CONTROLLER_PATH, self.broker_id)
            self.active_controller_id = -1
            await self._on_controller_resignation()
            try:
                await self.tree.delete(zk.CONTROLLER_PATH)
            except NoNodeError:
                pass

    async def _trigger_controller_move(self) -> None:
        self.active_controller_id = await self._read_controller_id()
        if not self.is_active:
            log.warning("Controller has already moved when trying to trigger controller movement")
            return
        zkv = self.context.epoch_zk_version
        self.active_controller_id = -1
        await self._on_controller_resignation()
        try:
            await self.zk.delete_controller(zkv)
        except ControllerMovedError:
            log.warning("Controller has already moved when trying to trigger controller movement")

    # ================================================================== failover and resignation

    async def _maybe_setup_feature_versioning(self) -> None:
        """Kafka 2.8's enableFeatureVersioning (IBP >= 2.7): /feature exists and is enabled.
        ZooKeeper-mode brokers support no features, so its feature map stays what it is (empty)."""
        zkv = self.context.epoch_zk_version
        got = await self.tree.get_or_none(zk.FEATURE_PATH)
        if got is None:
            log.info("Creating %s", zk.FEATURE_PATH)
            await self.zk.fenced([CreateOp(zk.FEATURE_PATH, zk.feature_json(zk.FEATURE_STATUS_ENABLED))], zkv)
            return
        try:
            status, features = zk.parse_feature(got[0])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.error("Cannot parse %s (%s); leaving it as it is", zk.FEATURE_PATH, e)
            return
        if status != zk.FEATURE_STATUS_ENABLED:
            if features:
                log.warning("%s with disabled status contains non-empty features: %s", zk.FEATURE_PATH, features)
            log.info("Enabling %s", zk.FEATURE_PATH)
            await self.zk.fenced([SetOp(zk.FEATURE_PATH, zk.feature_json(zk.FEATURE_STATUS_ENABLED))], zkv)

    async def _on_controller_failover(self) -> None:
        zkv = self.context.epoch_zk_version
        await self._maybe_setup_feature_versioning()
        log.info("Registering handlers")
        await self.zk.preferred_replica_election_exists(self._on_preferred_replica_election)
        log.info("Deleting log dir event notifications")
        await self.zk.delete_log_dir_event_notifications(
            await self.zk.get_all_log_dir_event_notifications(self._on_log_dir_event_notification), zkv)
        log.info("Deleting isr change notifications")
        await self.zk.delete_isr_change_notifications(
            await self.zk.get_all_isr_change_notifications(self._on_isr_change_notification), zkv)
        log.info("Initializing controller context")
        await self._initialize_controller_context()
        log.info("Fetching topic deletions in progress")
        to_delete, ineligible = await self._fetch_topic_deletions_in_progress()
        log.info("Initializing topic deletion manager")
        await self.topic_deletion_manager.init(to_delete, ineligible)
        # Brokers need the live brokers before they can act on LeaderAndIsr.
        log.info("Sending update metadata request")
        self.send_update_metadata_request(self.context.live_or_shutting_down_broker_ids, set())
        await self.replica_state_machine.startup()
        await self.partition_state_machine.startup()
        log.info("Ready to serve as the new controller with epoch %d", self.context.epoch)
        await self._initialize_partition_reassignments()
        await self.topic_deletion_manager.try_topic_deletion()
        pending = await self._fetch_pending_preferred_replica_elections()
        await self._on_replica_election(pending, ElectionType.PREFERRED, ElectionTrigger.ZK)
        if self.config.auto_leader_rebalance_enable:
            self._schedule_auto_leader_rebalance(self.config.auto_leader_rebalance_initial_delay_seconds)

    async def _on_controller_resignation(self) -> None:
        log.debug("Resigning")
        self._generation += 1
        for t in self._timers:
            t.cancel()
        self._timers.clear()
        self._broker_modifications_registered.clear()
        self._partition_modifications_registered.clear()
        self._reassignment_isr_registered.clear()
        self._batch.clear()
        self.replica_state_machine.batch.clear()
        self.partition_state_machine.batch.clear()
        channel, self._channel = self._channel, None
        if channel is not None:
            try:
                await channel.close()
            except Exception:
                log.warning("closing the controller channel failed", exc_info=True)
        self.context.reset()
        log.info("Resigned")

    async def _initialize_controller_context(self) -> None:
        ctx = self.context
        brokers = await self.zk.get_all_broker_and_epochs(self._on_broker_ids, self._broker_modification_watch)
        ctx.set_live_brokers(brokers)
        log.info("Initialized broker epochs cache: %s", ctx.live_broker_id_and_epochs)
        topics = await self.zk.get_all_topics(self._on_topics)
        ctx.set_all_topics(topics)
        self._partition_modifications_registered |= topics
        assignments = await self.zk.get_replica_assignment_and_topic_ids(topics, self._partition_modification_watch)
        await self._process_topic_ids(assignments)
        for topic, ta in assignments.items():
            for tp, a in _full_assignment(topic, ta).items():
                ctx.update_partition_full_replica_assignment(tp, a)
                if a.is_being_reassigned:
                    ctx.partitions_being_reassigned.add(tp)
        ctx.clear_partition_leadership_info()
        ctx.shutting_down_broker_ids.clear()
        self._broker_modifications_registered |= ctx.live_or_shutting_down_broker_ids
        await self._update_leader_and_isr_cache(ctx.all_partitions)
        channel = self._channel_factory(self.config)
        for info in ctx.live_or_shutting_down_brokers:
            channel.add_broker(info)
        self._channel = channel
        log.info("Currently active brokers in the cluster: %s", sorted(ctx.live_broker_ids))
        log.info("Current list of topics in the cluster: %s", sorted(ctx.all_topics))

    async def _process_topic_ids(self, assignments: dict[str, TopicAssignment]) -> None:
        """Give topics without an id one (Kafka 2.8 with IBP 2.8) and remember every id."""
        ctx = self.context
        for topic in sorted(assignments):
            ta = assignments[topic]
            topic_id = ta.topic_id
            if topic_id is None:
                topic_id = zk.random_uuid()
                await self.zk.set_topic_assignment(topic, topic_id, _full_assignment(topic, ta, by_index=True),
                                                   ctx.epoch_zk_version)
                log.info("Assigned topic id %s to topic %s", topic_id, topic)
            try:
                ctx.add_topic_id(topic, uuid.UUID(bytes=zk.uuid_from_str(topic_id)))
            except ValueError as e:
                log.error("Ignoring the topic id of topic %s: %s", topic, e)

    async def _update_leader_and_isr_cache(self, partitions: Iterable[TopicPartition]) -> None:
        states = await self.zk.get_topic_partition_states(sorted(partitions))
        for tp, st in states.items():
            if st is not None:
                self.context.put_partition_leadership_info(tp, st)

    async def _fetch_topic_deletions_in_progress(self) -> tuple[set[str], set[str]]:
        ctx = self.context
        to_delete = await self.zk.get_topic_deletions(self._on_delete_topics)
        with_offline = {
            t for t in ctx.all_topics
            if any(not ctx.is_replica_online(r.replica, r.topic_partition) for r in ctx.replicas_for_topic(t))
        }
        reassigning = {tp.topic for tp in ctx.partitions_being_reassigned}
        log.info("List of topics to be deleted: %s", ",".join(sorted(to_delete)))
        return to_delete, with_offline | reassigning

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

    # ================================================================== requests

    def send_update_metadata_request(self, brokers: Iterable[int], partitions: Iterable[TopicPartition]) -> None:
        """UpdateMetadata for ``partitions`` to ``brokers`` (now)."""
        self._batch.new_batch()
        self._batch.add_update_metadata_request_for_brokers(brokers, partitions)
        self._batch.send_requests_to_brokers(self.context.epoch)

    # DeletionClient ------------------------------------------------------------------------

    async def delete_topic(self, topic: str) -> None:
        zkv = self.context.epoch_zk_version
        await self.zk.delete_topic_znode(topic, zkv)
        await self.zk.delete_topic_configs([topic], zkv)
        await self.zk.delete_topic_deletions([topic], zkv)

    async def delete_topic_deletions(self, topics: Iterable[str]) -> None:
        await self.zk.delete_topic_deletions(topics, self.context.epoch_zk_version)

    def mute_partition_modifications(self, topic: str) -> None:
        self._partition_modifications_registered.discard(topic)

    def send_metadata_update(self, partitions: set[TopicPartition]) -> None:
        self.send_update_metadata_request(self.context.live_or_shutting_down_broker_ids, partitions)

    # ================================================================== brokers

    async def _process_broker_change(self) -> None:
        if not self.is_active:
            return
        ctx = self.context
        current = await self.zk.get_all_broker_and_epochs(self._on_broker_ids, self._broker_modification_watch)
        cur_ids = set(current)
        known = ctx.live_or_shutting_down_broker_ids
        new = cur_ids - known
        dead = known - cur_ids
        bounced = {b for b in cur_ids & known if current[b][1] > (ctx.broker_epoch(b) or 0)}
        log.info("Newly added brokers: %s, deleted brokers: %s, bounced brokers: %s, all live brokers: %s",
                 sorted(new), sorted(dead), sorted(bounced), sorted(cur_ids))
        channel = self._channel
        if channel is not None:
            for b in sorted(new):
                channel.add_broker(current[b][0])
            for b in sorted(bounced):
                channel.remove_broker(b)
                channel.add_broker(current[b][0])
            for b in sorted(dead):
                channel.remove_broker(b)
        if new:
            ctx.add_live_brokers({b: current[b] for b in new})
            await self._on_broker_startup(sorted(new))
        if bounced:
            ctx.remove_live_brokers(bounced)
            await self._on_broker_failure(sorted(bounced))
            ctx.add_live_brokers({b: current[b] for b in bounced})
            await self._on_broker_startup(sorted(bounced))
        if dead:
            ctx.remove_live_brokers(dead)
            await self._on_broker_failure(sorted(dead))
        if new or dead or bounced:
            log.info("Updated broker epochs cache: %s", ctx.live_broker_id_and_epochs)

    async def _on_broker_startup(self, new_brokers: list[int]) -> None:
        ctx = self.context
        log.info("New broker startup callback for %s", ",".join(map(str, new_brokers)))
        for b in new_brokers:
            ctx.replicas_on_offline_dirs.pop(b, None)
        existing = ctx.live_or_shutting_down_broker_ids - set(new_brokers)
        self.send_update_metadata_request(existing, set())
        # The new brokers get every partition state at once.
        self.send_update_metadata_request(new_brokers, ctx.partitions_with_leaders)
        replicas = ctx.replicas_on_brokers(new_brokers)
        await self.replica_state_machine.handle_state_changes(sorted(replicas), ReplicaState.ONLINE)
        await self.partition_state_machine.trigger_online_partition_state_change()
        started = set(new_brokers)
        await self._maybe_resume_reassignments(lambda _tp, a: any(r in started for r in a.target_replicas))
        deleting = {r.topic for r in replicas if self.topic_deletion_manager.is_topic_queued_up_for_deletion(r.topic)}
        if deleting:
            log.info("Some replicas for topics scheduled for deletion %s are on the newly restarted brokers %s. "
                     "Signaling restart of topic deletion for these topics", sorted(deleting), new_brokers)
            await self.topic_deletion_manager.resume_deletion_for_topics(deleting)
        self._broker_modifications_registered.update(new_brokers)

    async def _on_broker_failure(self, dead_brokers: list[int]) -> None:
        ctx = self.context
        log.info("Broker failure callback for %s", ",".join(map(str, dead_brokers)))
        for b in dead_brokers:
            ctx.replicas_on_offline_dirs.pop(b, None)
        was_shutting_down = [b for b in dead_brokers if b in ctx.shutting_down_broker_ids]
        ctx.shutting_down_broker_ids.difference_update(dead_brokers)
        if was_shutting_down:
            log.info("Removed %s from list of shutting down brokers.", was_shutting_down)
        await self._on_replicas_become_offline(ctx.replicas_on_brokers(dead_brokers))
        self._broker_modifications_registered.difference_update(dead_brokers)

    async def _on_replicas_become_offline(self, replicas: set[PartitionAndReplica]) -> None:
        ctx = self.context
        tdm = self.topic_deletion_manager
        for_deletion = {r for r in replicas if tdm.is_topic_queued_up_for_deletion(r.topic)}
        not_for_deletion = replicas - for_deletion
        offline_leader = ctx.partitions_with_offline_leader
        await self.partition_state_machine.handle_state_changes(sorted(offline_leader), PartitionState.OFFLINE)
        await self.partition_state_machine.trigger_online_partition_state_change()
        await self.replica_state_machine.handle_state_changes(sorted(not_for_deletion), ReplicaState.OFFLINE)
        if for_deletion:
            # A replica that cannot be deleted now must not stay in ReplicaDeletionStarted.
            await tdm.fail_replica_deletion(for_deletion)
        if not offline_leader:
            # No election happened, so no request carried the news: tell every broker.
            self.send_update_metadata_request(ctx.live_or_shutting_down_broker_ids, set())

    async def _process_broker_modification(self, broker_id: int) -> None:
        if not self.is_active or broker_id not in self._broker_modifications_registered:
            return
        ctx = self.context
        got = await self.zk.get_broker(broker_id, self._broker_modification_watch(broker_id))
        old = ctx.live_or_shutting_down_broker(broker_id)
        if got is None or old is None:
            return
        new = got[0]
        if new.endpoints != old.endpoints or new.features != old.features:
            log.info("Updated broker metadata: %s -> %s", old, new)
            ctx.update_broker_metadata(new)
            if self._channel is not None:
                # The channel must reach the broker at its new address.
                self._channel.remove_broker(broker_id)
                self._channel.add_broker(new)
            self.send_update_metadata_request(ctx.live_or_shutting_down_broker_ids, set())

    async def _process_log_dir_event_notification(self) -> None:
        if not self.is_active:
            return
        names = await self.zk.get_all_log_dir_event_notifications(self._on_log_dir_event_notification)
        try:
            broker_ids = await self.zk.get_broker_ids_from_log_dir_events(names)
            if broker_ids:
                # LeaderAndIsr to every replica there: those in a failed dir answer KAFKA_STORAGE_ERROR.
                log.info("Handling log directory failure for brokers %s", ",".join(map(str, broker_ids)))
                replicas = self.context.replicas_on_brokers(broker_ids)
                await self.replica_state_machine.handle_state_changes(sorted(replicas), ReplicaState.ONLINE)
        finally:
            await self.zk.delete_log_dir_event_notifications(names, self.context.epoch_zk_version)

    # ================================================================== topics

    async def _process_topic_change(self) -> None:
        if not self.is_active:
            return
        ctx = self.context
        topics = await self.zk.get_all_topics(self._on_topics)
        new = topics - ctx.all_topics
        deleted = ctx.all_topics - topics
        ctx.set_all_topics(topics)
        self._partition_modifications_registered |= new
        added = await self.zk.get_replica_assignment_and_topic_ids(new, self._partition_modification_watch)
        for t in deleted:
            ctx.remove_topic(t)
        await self._process_topic_ids(added)
        new_partitions: set[TopicPartition] = set()
        for topic, ta in added.items():
            for tp, a in _full_assignment(topic, ta).items():
                ctx.update_partition_full_replica_assignment(tp, a)
                new_partitions.add(tp)
        log.info("New topics: %s, deleted topics: %s", sorted(new), sorted(deleted))
        if new_partitions:
            await self._on_new_partition_creation(new_partitions)

    async def _on_new_partition_creation(self, partitions: set[TopicPartition]) -> None:
        log.info("New partition creation callback for %s", ",".join(map(str, sorted(partitions))))
        psm, rsm = self.partition_state_machine, self.replica_state_machine
        ordered = sorted(partitions)
        await psm.handle_state_changes(ordered, PartitionState.NEW)
        await rsm.handle_state_changes(sorted(self.context.replicas_for_partitions(ordered)), ReplicaState.NEW)
        await psm.handle_state_changes(ordered, PartitionState.ONLINE, LeaderElectionStrategy.OFFLINE)
        await rsm.handle_state_changes(sorted(self.context.replicas_for_partitions(ordered)), ReplicaState.ONLINE)

    async def _process_partition_modifications(self, topic: str) -> None:
        if not self.is_active or topic not in self._partition_modifications_registered:
            return
        ctx = self.context
        ta = await self.zk.get_topic_assignment(topic, self._partition_modification_watch(topic))
        if ta is None:
            return
        full = _full_assignment(topic, ta)
        to_add = {tp: a for tp, a in full.items() if not ctx.partition_replica_assignment(tp)}
        if self.topic_deletion_manager.is_topic_queued_up_for_deletion(topic):
            if to_add:
                log.warning("Skipping adding partitions %s for topic %s since it is currently being deleted",
                            ",".join(str(tp.partition) for tp in sorted(to_add)), topic)
                await self._restore_partition_replica_assignment(topic, full)
            else:
                log.info("Ignoring partition change during topic deletion as no new partitions are added")
        elif to_add:
            log.info("New partitions to be added %s", ",".join(map(str, sorted(to_add))))
            for tp, a in to_add.items():
                ctx.update_partition_full_replica_assignment(tp, a)
            await self._on_new_partition_creation(set(to_add))

    async def _restore_partition_replica_assignment(
        self, topic: str, new_assignment: dict[TopicPartition, ReplicaAssignment]
    ) -> None:
        log.info("Restoring the partition replica assignment for topic %s", topic)
        try:
            existing = set(await self.tree.children(zk.partitions_path(topic)))
        except NoNodeError:
            existing = set()
        restored = {
            tp.partition: self.context.partition_full_replica_assignment(tp)
            for tp in new_assignment
            if str(tp.partition) in existing
        }
        tid = self.context.topic_ids.get(topic)
        await self.zk.set_topic_assignment(topic, None if tid is None else zk.uuid_to_str(tid.bytes), restored,
                                           self.context.epoch_zk_version)

    async def _process_topic_deletion(self) -> None:
        if not self.is_active:
            return
        ctx = self.context
        to_delete = await self.zk.get_topic_deletions(self._on_delete_topics)
        non_existent = to_delete - ctx.all_topics
        if non_existent:
            log.warning("Ignoring request to delete non-existing topics %s", ",".join(sorted(non_existent)))
            await self.zk.delete_topic_deletions(non_existent, ctx.epoch_zk_version)
        to_delete -= non_existent
        if self.config.delete_topic_enable:
            if to_delete:
                log.info("Starting topic deletion for topics %s", ",".join(sorted(to_delete)))
                reassigning = {tp.topic for tp in ctx.partitions_being_reassigned}
                self.topic_deletion_manager.mark_topic_ineligible_for_deletion(
                    to_delete & reassigning, "topic reassignment in progress")
                await self.topic_deletion_manager.enqueue_topics_for_deletion(to_delete)
        else:
            log.info("Removing %s since delete topic is disabled", sorted(to_delete))
            await self.zk.delete_topic_deletions(to_delete, ctx.epoch_zk_version)

    async def _process_topic_deletion_stop_replica_response(self, event: TopicDeletionStopReplicaResponseReceived) -> None:
        if not self.is_active:
            return
        ctx = self.context
        request_error = getattr(event.response, "error_code", 0)
        errors = {
            tp: err for tp, err in partition_errors_of_stop_replica(event.response).items()
            if tp in event.deleted and ctx.is_topic_deletion_in_progress(tp.topic)
        }
        if request_error and not errors:
            # A request-level error without partition results (e.g. STALE_BROKER_EPOCH): every
            # replica it asked to delete failed.
            errors = {tp: request_error for tp in event.deleted if ctx.is_topic_deletion_in_progress(tp.topic)}
        if not errors:
            return
        log.debug("Delete topic callback invoked on StopReplica response received from broker %d: request error "
                  "= %s, partition errors = %s", event.broker_id, request_error, errors)
        in_error = set(errors) if request_error else {tp for tp, e in errors.items() if e}
        await self.topic_deletion_manager.fail_replica_deletion(
            {PartitionAndReplica(tp, event.broker_id) for tp in in_error})
        if len(in_error) != len(errors):
            await self.topic_deletion_manager.complete_replica_deletion(
                {PartitionAndReplica(tp, event.broker_id) for tp in set(errors) - in_error})

    async def _process_leader_and_isr_response(self, response: Any, broker_id: int) -> None:
        if not self.is_active:
            return
        ctx = self.context
        if getattr(response, "error_code", 0):
            log.error("Received error %s in LeaderAndIsr response from broker %d",
                      _error_name(response.error_code), broker_id)
            return
        offline: set[TopicPartition] = set()
        online: set[TopicPartition] = set()
        for tp, err in partition_errors_of_leader_and_isr(response, ctx.topic_names).items():
            if err == ErrorCode.KAFKA_STORAGE_ERROR:
                offline.add(tp)
            elif err == ErrorCode.NONE:
                online.add(tp)
        previous = ctx.replicas_on_offline_dirs.get(broker_id, set())
        current = (previous - online) | offline
        ctx.replicas_on_offline_dirs[broker_id] = current
        new_offline = current - previous
        if new_offline:
            log.info("Mark replicas %s on broker %d as offline", ",".join(map(str, sorted(new_offline))), broker_id)
            await self._on_replicas_become_offline({PartitionAndReplica(tp, broker_id) for tp in new_offline})

    async def _process_isr_change_notification(self) -> None:
        if not self.is_active:
            return
        ctx = self.context
        names = await self.zk.get_all_isr_change_notifications(self._on_isr_change_notification)
        try:
            partitions = await self.zk.get_partitions_from_isr_change_notifications(names)
            # Only partitions the controller knows (a notification may outlive its topic).
            partitions &= ctx.all_partitions
            if partitions:
                await self._update_leader_and_isr_cache(partitions)
                self.send_update_metadata_request(ctx.live_or_shutting_down_broker_ids, partitions)
                for tp in sorted(partitions & ctx.partitions_being_reassigned):
                    await self._maybe_complete_reassignment(tp)
        finally:
            await self.zk.delete_isr_change_notifications(names, ctx.epoch_zk_version)

    # ================================================================== partition reassignment
    #
    # Kafka 2.8's onPartitionReassignment. RS = current replicas, ORS = original, TRS = target,
    # AR = adding (TRS - ORS), RR = removing (ORS - TRS).
    #   U: write RS = TRS + ORS with AR and RR to the topic znode, then to memory; replicas a
    #      replaced reassignment was adding that the new one does not need are stopped.
    #   A (TRS not all in the ISR): bump the leader epoch, LeaderAndIsr to RS, start AR.
    #   B (TRS all in the ISR): RS = TRS in memory; a leader from TRS if the current one is not
    #      in it or not alive (else an epoch bump); RR out of the ISR, stopped and deleted; RS =
    #      TRS in the topic znode; /admin/reassign_partitions updated; UpdateMetadata to all.
    # The topic znode is written last in B because it is the only place ORS is kept.

    async def _initialize_partition_reassignments(self) -> None:
        resumed = await self._process_zk_partition_reassignment()
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
        self.send_update_metadata_request(ctx.live_or_shutting_down_broker_ids, {tp})
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
        self._reassignment_isr_registered.add(tp)
        await self.zk.watch_partition_state(tp, self._reassignment_isr_watch(tp))
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
        leader = _leader(ctx.partition_leadership_info(tp))
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
        self._reassignment_isr_registered.discard(tp)
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
            self.events.put(ZkPartitionReassignment())
        elif removed:
            await self.zk.set_or_create_partition_reassignment(remaining, zkv)

    async def _process_zk_partition_reassignment(self) -> set[TopicPartition]:
        """Start what /admin/reassign_partitions asks for; returns the partitions started."""
        if not self.is_active or not await self.zk.reassign_partitions_exists(self._on_reassign_partitions):
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
                        {str(tp): _error_name(r[0]) for tp, r in failed.items()})
            await self._maybe_remove_from_zk_reassignment(lambda tp, _r: tp in failed)
        return set(results) - set(failed)

    async def _process_api_partition_reassignment(self, event: ApiPartitionReassignment) -> None:
        if not self.is_active:
            _set(event.future, (ErrorCode.NOT_CONTROLLER, None, {}))
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
            _set(event.future, (ErrorCode.NOT_CONTROLLER, None, {}))
            raise
        _set(event.future, (ErrorCode.NONE, None, results))

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

    async def _process_partition_reassignment_isr_change(self, tp: TopicPartition) -> None:
        if not self.is_active or tp not in self.context.partitions_being_reassigned:
            return
        # Watches fire once: watch again before reading, so no later change is missed.
        await self.zk.watch_partition_state(tp, self._reassignment_isr_watch(tp))
        await self._maybe_complete_reassignment(tp)

    async def _maybe_complete_reassignment(self, tp: TopicPartition) -> None:
        reassignment = self.context.partition_full_replica_assignment(tp)
        if await self._is_reassignment_complete(tp, reassignment):
            await self._on_partition_reassignment(tp, reassignment)

    def _process_list_partition_reassignments(self, event: ListPartitionReassignments) -> None:
        ctx = self.context
        if not self.is_active:
            _set(event.future, (ErrorCode.NOT_CONTROLLER, {}))
            return
        asked = ctx.partitions_being_reassigned if event.partitions is None else event.partitions
        results = {}
        for tp in asked:
            a = ctx.partition_full_replica_assignment(tp)
            if a.is_being_reassigned:
                results[tp] = a
        _set(event.future, (ErrorCode.NONE, results))

    # ================================================================== controlled shutdown

    async def _process_controlled_shutdown(self, event: ControlledShutdown) -> None:
        try:
            result = await self._do_controlled_shutdown(event.broker_id, event.broker_epoch)
        except ControllerMovedError:
            _set(event.future, (ErrorCode.NOT_CONTROLLER, set()))
            raise
        except Exception:
            log.exception("controlled shutdown of broker %d failed", event.broker_id)
            result = (ErrorCode.UNKNOWN_SERVER_ERROR, set())
        _set(event.future, result)

    async def _do_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[int, set[TopicPartition]]:
        ctx = self.context
        if not self.is_active:
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
        led = [tp for tp in to_act if _leader(ctx.partition_leadership_info(tp)) == broker_id]
        followed = [tp for tp in to_act if _leader(ctx.partition_leadership_info(tp)) != broker_id]
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

    # ================================================================== leader elections

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
            self.events.put(ReplicaLeaderElection(None, ElectionType.PREFERRED, ElectionTrigger.ZK))

    async def _process_replica_leader_election(self, event: ReplicaLeaderElection) -> None:
        ctx = self.context
        if not self.is_active:
            _set(event.future, {tp: (ErrorCode.NOT_CONTROLLER, None) for tp in (event.partitions or ())})
            return
        if event.trigger is not ElectionTrigger.ADMIN_CLIENT and not await self.zk.preferred_replica_election_exists(
                self._on_preferred_replica_election):
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
            leader = _leader(ctx.partition_leadership_info(tp))
            if event.election_type is ElectionType.PREFERRED:
                needs = leader != ctx.partition_replica_assignment(tp)[0]
            else:
                needs = leader == -1 or leader not in ctx.live_broker_ids
            (electable if needs else already_valid).add(tp)
        try:
            elected = await self._on_replica_election(electable, event.election_type, event.trigger)
        except ControllerMovedError:
            _set(event.future, {tp: (ErrorCode.NOT_CONTROLLER, None) for tp in partitions})
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
        _set(event.future, results)

    # ---------------------------------------------------------------- auto leader rebalance

    def _schedule(self, delay: float, make: Callable[[], ControllerEvent]) -> None:
        loop = asyncio.get_running_loop()
        self._timers = [t for t in self._timers if not t.cancelled() and t.when() > loop.time()]
        self._timers.append(loop.call_later(max(0.0, delay), lambda: self.events.put(make())))

    def _schedule_auto_leader_rebalance(self, delay: float) -> None:
        gen = self._generation
        self._schedule(delay, lambda: AutoPreferredReplicaLeaderElection(gen))

    async def _process_auto_preferred_replica_leader_election(self, generation: int) -> None:
        if not self.is_active or generation != self._generation:
            return
        try:
            log.info("Processing automatic preferred replica leader election")
            await self._check_and_trigger_auto_leader_rebalance()
        finally:
            if self.is_active and generation == self._generation:
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


# ---------------------------------------------------------------------------- helpers


def _full_assignment(topic: str, ta: TopicAssignment, by_index: bool = False) -> dict[Any, ReplicaAssignment]:
    out: dict[Any, ReplicaAssignment] = {}
    for p, replicas in ta.partitions.items():
        a = ReplicaAssignment.of(replicas, ta.adding_replicas.get(p, ()), ta.removing_replicas.get(p, ()))
        out[p if by_index else TopicPartition(topic, p)] = a
    return out


def _leader(st: LeaderAndIsr | None) -> int:
    return -1 if st is None else st.leader


def _set(fut: asyncio.Future[Any] | None, value: Any) -> None:
    if fut is not None and not fut.done():
        fut.set_result(value)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
