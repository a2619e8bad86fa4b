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

This module owns the controllership (election with Logi-Kafka's preferred candidates, failover,
resignation), the event dispatch and the handlers of broker, topic, ISR-change and log-dir
events. The rest is in components the controller builds and routes events to, each given the
context, the ZooKeeper client, the state machines and a request batch of its own:
partition reassignment in :mod:`kaflet.controller.reassignment`, leader elections (ElectLeaders,
the preferred replica election node, the auto rebalance, controlled shutdown) in
:mod:`kaflet.controller.leader_elections`, topic deletion in
:mod:`kaflet.controller.topic_deletion`. Delegation token expiry is not the controller's
business in kaflet.

Longer than the ~800 lines a module should keep to: the broker and topic change handlers share
the watch registrations, the channel and the term counter with failover and resignation, as in
Kafka's KafkaController; moving them out means handing all of that to another component
(the next cut if this module grows).
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
)
from kaflet.controller.events import (
    AlterReassignmentsResult,
    ApiPartitionReassignment,
    AutoPreferredReplicaLeaderElection,
    BrokerChange,
    BrokerModifications,
    ChangeWatches,
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
from kaflet.controller.leader_elections import LeaderElectionManager
from kaflet.controller.reassignment import PartitionReassignmentManager
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
    WatchEvent,
)
from kaflet.metadata.zkdata import TopicAssignment
from kaflet.protocol.errors import ErrorCode, error_name

__all__ = ["ControllerConfig", "ElectionType", "KafkaController"]

log = logging.getLogger("kaflet.controller")

ChannelFactory = Callable[[ControllerConfig], ControllerChannel]

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
        self.reassignments = PartitionReassignmentManager(
            context=self.context, zk=self.zk, replica_state_machine=self.replica_state_machine,
            partition_state_machine=self.partition_state_machine,
            topic_deletion_manager=self.topic_deletion_manager, batch=batch(),
            send_metadata_update=self.send_metadata_update, enqueue=self.events.put,
            is_active=lambda: self.is_active)
        self.leader_elections = LeaderElectionManager(
            context=self.context, zk=self.zk, replica_state_machine=self.replica_state_machine,
            partition_state_machine=self.partition_state_machine,
            topic_deletion_manager=self.topic_deletion_manager, batch=batch(), config=self.config,
            enqueue=self.events.put, schedule=self._schedule, generation=lambda: self._generation,
            is_active=lambda: self.is_active)
        self._broker_modifications = ChangeWatches[int](BrokerModifications, self.events.put)
        self._partition_modifications = ChangeWatches[str](PartitionModifications, self.events.put)
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

    def _on_topics(self, _event: WatchEvent) -> None:
        self.events.put(TopicChange())

    def _on_delete_topics(self, _event: WatchEvent) -> None:
        self.events.put(TopicDeletion())

    def _on_isr_change_notification(self, _event: WatchEvent) -> None:
        self.events.put(IsrChangeNotification())

    def _on_log_dir_event_notification(self, _event: WatchEvent) -> None:
        self.events.put(LogDirEventNotification())

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

    def _schedule(self, delay: float, make: Callable[[], ControllerEvent]) -> None:
        """Put ``make()`` on the queue after ``delay`` seconds (cancelled on resignation)."""
        loop = asyncio.get_running_loop()
        self._timers = [t for t in self._timers if not t.cancelled() and t.when() > loop.time()]
        self._timers.append(loop.call_later(max(0.0, delay), lambda: self.events.put(make())))

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
            await self.leader_elections.process_replica_leader_election(event)
        elif isinstance(event, AutoPreferredReplicaLeaderElection):
            await self.leader_elections.process_auto_preferred_replica_leader_election(event.generation)
        elif isinstance(event, ControlledShutdown):
            await self.leader_elections.process_controlled_shutdown(event)
        elif isinstance(event, ApiPartitionReassignment):
            await self.reassignments.process_api_partition_reassignment(event)
        elif isinstance(event, ZkPartitionReassignment):
            await self.reassignments.process_zk_partition_reassignment()
        elif isinstance(event, PartitionReassignmentIsrChange):
            await self.reassignments.process_partition_reassignment_isr_change(event.topic_partition)
        elif isinstance(event, ListPartitionReassignments):
            self.reassignments.process_list_partition_reassignments(event)
        elif isinstance(event, LeaderAndIsrResponseReceived):
            await self._process_leader_and_isr_response(event.response, event.broker_id)
        elif isinstance(event, UpdateMetadataResponseReceived):
            error = int(getattr(event.response, "error_code", 0))
            if self.is_active and error:
                log.error("Received error %s in UpdateMetadata response from broker %d",
                          error_name(error), event.broker_id)
        elif isinstance(event, TopicDeletionStopReplicaResponseReceived):
            await self._process_topic_deletion_stop_replica_response(event)
        elif isinstance(event, UncleanLeaderElectionEnable):
            await self.leader_elections.process_unclean_leader_election_enable()
        elif isinstance(event, TopicUncleanLeaderElectionEnable):
            await self.leader_elections.process_unclean_leader_election_enable(event.topic)
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
        # Kafka's steps, but the independent reads and writes go out together: with 10,000
        # partitions each round trip to ZooKeeper waited 0.1-0.6 s for the broker's busy loop
        # on the loaded test machine, and they came one after another.
        await asyncio.gather(
            self._maybe_setup_feature_versioning(), self._register_handlers(),
            self._delete_log_dir_event_notifications(zkv), self._delete_isr_change_notifications(zkv))
        # The ISR change notifications were deleted before the states are read: one written
        # since names partitions whose state the controller then reads again.
        log.info("Initializing controller context")
        _, deletions = await asyncio.gather(
            self._initialize_controller_context(), self.zk.get_topic_deletions(self._on_delete_topics))
        log.info("Fetching topic deletions in progress")
        to_delete, ineligible = self._topic_deletions_in_progress(deletions)
        log.info("Initializing topic deletion manager")
        await self.topic_deletion_manager.init(to_delete, ineligible)
        # Brokers need the live brokers before they can act on LeaderAndIsr.
        log.info("Sending update metadata request")
        self.send_update_metadata_request(self.context.live_or_shutting_down_broker_ids, set())
        # The partitions whose leader died get a leader first, in the order of a broker failure
        # (Kafka's onReplicasBecomeOffline). Kafka's failover first takes the dead replicas out
        # of every ISR (their leaderships to -1) and only then elects: at 10,000 partitions
        # that held the new leaders back by seconds and wrote the dead leader's partitions
        # twice. The elections are the same (the live part of the ISR), and so is the end state.
        self.replica_state_machine.initialize_replica_state()
        await self.partition_state_machine.startup()
        await self.replica_state_machine.move_initial_states()
        log.info("Ready to serve as the new controller with epoch %d", self.context.epoch)
        await self.reassignments.initialize_partition_reassignments()
        await self.topic_deletion_manager.try_topic_deletion()
        await self.leader_elections.on_controller_failover()

    async def _register_handlers(self) -> None:
        log.info("Registering handlers")
        await self.zk.preferred_replica_election_exists(self.leader_elections.on_preferred_replica_election_znode)

    async def _delete_log_dir_event_notifications(self, zkv: int) -> None:
        log.info("Deleting log dir event notifications")
        await self.zk.delete_log_dir_event_notifications(
            await self.zk.get_all_log_dir_event_notifications(self._on_log_dir_event_notification), zkv)

    async def _delete_isr_change_notifications(self, zkv: int) -> None:
        log.info("Deleting isr change notifications")
        await self.zk.delete_isr_change_notifications(
            await self.zk.get_all_isr_change_notifications(self._on_isr_change_notification), zkv)

    async def _on_controller_resignation(self) -> None:
        log.debug("Resigning")
        self._generation += 1
        for t in self._timers:
            t.cancel()
        self._timers.clear()
        self._broker_modifications.registered.clear()
        self._partition_modifications.registered.clear()
        self.reassignments.reset()
        self.leader_elections.reset()
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
        brokers, topics = await asyncio.gather(
            self.zk.get_all_broker_and_epochs(self._on_broker_ids, self._broker_modifications.watch),
            self.zk.get_all_topics(self._on_topics))
        ctx.set_live_brokers(brokers)
        log.info("Initialized broker epochs cache: %s", ctx.live_broker_id_and_epochs)
        ctx.set_all_topics(topics)
        self._partition_modifications.registered |= topics
        assignments = await self.zk.get_replica_assignment_and_topic_ids(topics, self._partition_modifications.watch)
        await self._process_topic_ids(assignments)
        for topic, ta in assignments.items():
            for tp, a in _full_assignment(topic, ta).items():
                ctx.update_partition_full_replica_assignment(tp, a)
                if a.is_being_reassigned:
                    ctx.partitions_being_reassigned.add(tp)
        ctx.clear_partition_leadership_info()
        ctx.shutting_down_broker_ids.clear()
        self._broker_modifications.registered |= ctx.live_or_shutting_down_broker_ids
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

    def _topic_deletions_in_progress(self, to_delete: set[str]) -> tuple[set[str], set[str]]:
        """The topics queued for deletion and those of them that cannot be deleted now."""
        ctx = self.context
        with_offline = {
            t for t in ctx.all_topics
            if any(not ctx.is_replica_online(r.replica, r.topic_partition) for r in ctx.replicas_for_topic(t))
        }
        reassigning = {tp.topic for tp in ctx.partitions_being_reassigned}
        log.info("List of topics to be deleted: %s", ",".join(sorted(to_delete)))
        return to_delete, with_offline | reassigning

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
        self._partition_modifications.registered.discard(topic)

    def send_metadata_update(self, partitions: set[TopicPartition]) -> None:
        self.send_update_metadata_request(self.context.live_or_shutting_down_broker_ids, partitions)

    # ================================================================== brokers

    async def _process_broker_change(self) -> None:
        if not self.is_active:
            return
        ctx = self.context
        current = await self.zk.get_all_broker_and_epochs(self._on_broker_ids, self._broker_modifications.watch)
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
        await self.reassignments.on_broker_startup(new_brokers)
        deleting = {r.topic for r in replicas if self.topic_deletion_manager.is_topic_queued_up_for_deletion(r.topic)}
        if deleting:
            log.info("Some replicas for topics scheduled for deletion %s are on the newly restarted brokers %s. "
                     "Signaling restart of topic deletion for these topics", sorted(deleting), new_brokers)
            await self.topic_deletion_manager.resume_deletion_for_topics(deleting)
        self._broker_modifications.registered.update(new_brokers)

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
        self._broker_modifications.registered.difference_update(dead_brokers)

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
        if not self.is_active or broker_id not in self._broker_modifications.registered:
            return
        ctx = self.context
        got = await self.zk.get_broker(broker_id, self._broker_modifications.watch(broker_id))
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
        self._partition_modifications.registered |= new
        added = await self.zk.get_replica_assignment_and_topic_ids(new, self._partition_modifications.watch)
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
        if not self.is_active or topic not in self._partition_modifications.registered:
            return
        ctx = self.context
        ta = await self.zk.get_topic_assignment(topic, self._partition_modifications.watch(topic))
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
                      error_name(response.error_code), broker_id)
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
        back = previous & online
        if back:
            # Kafka waits for another event to elect leaders for partitions that had none. A
            # replica is back online without a restart when a broker that ran short of
            # descriptors asks again (server/resource_retry.py); elect at once from live ISRs.
            log.info("Replicas %s on broker %d are online again", ",".join(map(str, sorted(back))), broker_id)
            if any(ctx.partition_state(tp) == PartitionState.OFFLINE for tp in back):
                await self.partition_state_machine.trigger_online_partition_state_change()

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
                await self.reassignments.on_isr_change(partitions)
        finally:
            await self.zk.delete_isr_change_notifications(names, ctx.epoch_zk_version)

# ---------------------------------------------------------------------------- helpers


def _full_assignment(topic: str, ta: TopicAssignment, by_index: bool = False) -> dict[Any, ReplicaAssignment]:
    out: dict[Any, ReplicaAssignment] = {}
    for p, replicas in ta.partitions.items():
        a = ReplicaAssignment.of(replicas, ta.adding_replicas.get(p, ()), ta.removing_replicas.get(p, ()))
        out[p if by_index else TopicPartition(topic, p)] = a
    return out


