"""Kafka's partition and replica state machines (ZkPartitionStateMachine, ZkReplicaStateMachine).

A state change checks the transition is valid, writes what must be written to the tree (partition
state znodes: created for new partitions, conditionally updated for elections and ISR shrinks,
every write fenced by the controller epoch) and adds the resulting LeaderAndIsr / StopReplica /
UpdateMetadata requests to the machine's batch, which is sent at the end of the call.

Partition states: NonExistent -> New -> Online <-> Offline -> NonExistent.
Replica states: NonExistent -> New -> Online <-> Offline -> ReplicaDeletionStarted ->
ReplicaDeletionSuccessful -> NonExistent, with ReplicaDeletionIneligible for failed deletions.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from kaflet.controller.config import parse_config_bool
from kaflet.controller.context import (
    NO_LEADER,
    ControllerContext,
    PartitionAndReplica,
    PartitionState,
    ReplicaState,
    TopicPartition,
    new_leader_and_isr,
)
from kaflet.controller.election import (
    leader_for_controlled_shutdown,
    leader_for_offline,
    leader_for_preferred_replica,
    leader_for_reassign,
)
from kaflet.controller.request_batch import ControllerBrokerRequestBatch
from kaflet.controller.zk_client import ControllerMovedError, ControllerZkClient
from kaflet.metadata.zkdata import LeaderAndIsr

__all__ = [
    "LeaderElectionStrategy",
    "PartitionStateMachine",
    "ReplicaStateMachine",
    "StateChangeFailedError",
]

log = logging.getLogger("kaflet.state.change")

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"


class StateChangeFailedError(Exception):
    """A partition or replica could not be moved to the requested state."""


class LeaderElectionStrategy(enum.Enum):
    """How OnlinePartition elects a leader for partitions that already have a state."""

    OFFLINE = "OfflinePartitionLeaderElectionStrategy(allowUnclean=false)"
    OFFLINE_ALLOW_UNCLEAN = "OfflinePartitionLeaderElectionStrategy(allowUnclean=true)"
    REASSIGN = "ReassignPartitionLeaderElectionStrategy"
    PREFERRED = "PreferredReplicaPartitionLeaderElectionStrategy"
    CONTROLLED_SHUTDOWN = "ControlledShutdownPartitionLeaderElectionStrategy"


StateChangeResults = dict[TopicPartition, LeaderAndIsr | Exception]


class PartitionStateMachine:
    """Moves partitions between states, electing leaders as needed."""

    def __init__(
        self,
        controller_id: int,
        context: ControllerContext,
        zk_client: ControllerZkClient,
        batch: ControllerBrokerRequestBatch,
        unclean_leader_election_default: Callable[[], bool],
    ) -> None:
        self.controller_id = controller_id
        self.ctx = context
        self.zk = zk_client
        self.batch = batch
        self._unclean_default = unclean_leader_election_default
        #: Unclean elections performed (Kafka's UncleanLeaderElectionsPerSec meter, as a count).
        self.unclean_leader_elections = 0

    # ------------------------------------------------------------------ start-up

    async def startup(self) -> None:
        self.initialize_partition_state()
        await self.trigger_online_partition_state_change()

    def initialize_partition_state(self) -> None:
        ctx = self.ctx
        for tp in ctx.all_partitions:
            st = ctx.partition_leadership_info(tp)
            if st is None:
                ctx.put_partition_state(tp, PartitionState.NEW)
            elif ctx.is_replica_online(st.leader, tp):
                ctx.put_partition_state(tp, PartitionState.ONLINE)
            else:
                ctx.put_partition_state(tp, PartitionState.OFFLINE)

    async def trigger_online_partition_state_change(self, topic: str | None = None) -> None:
        """Try to bring every New or Offline partition (of ``topic``) online, except those of
        topics queued for deletion."""
        partitions = self.ctx.partitions_in_states({PartitionState.OFFLINE, PartitionState.NEW}, topic)
        to_trigger = sorted(tp for tp in partitions if not self.ctx.is_topic_queued_up_for_deletion(tp.topic))
        await self.handle_state_changes(to_trigger, PartitionState.ONLINE, LeaderElectionStrategy.OFFLINE)

    # ------------------------------------------------------------------ state changes

    async def handle_state_changes(
        self,
        partitions: Sequence[TopicPartition],
        target: PartitionState,
        strategy: LeaderElectionStrategy | None = None,
    ) -> StateChangeResults:
        """Move ``partitions`` to ``target``; returns each election's result (new state or error).

        Raises ControllerMovedError (the caller resigns); other errors fail every partition."""
        if not partitions:
            return {}
        try:
            self.batch.new_batch()
            result = await self._do_handle_state_changes(list(partitions), target, strategy)
            self.batch.send_requests_to_brokers(self.ctx.epoch)
            return result
        except ControllerMovedError:
            self.batch.clear()
            raise
        except Exception as e:
            log.error("Error while moving some partitions to %s state", target.value, exc_info=True)
            self.batch.clear()
            return {tp: e for tp in partitions}

    async def _do_handle_state_changes(
        self, partitions: list[TopicPartition], target: PartitionState, strategy: LeaderElectionStrategy | None
    ) -> StateChangeResults:
        ctx = self.ctx
        for tp in partitions:
            ctx.partition_states.setdefault(tp, PartitionState.NON_EXISTENT)
        valid, invalid = ctx.check_valid_partition_state_change(partitions, target)
        for tp in invalid:
            self._log_failed(tp, target, StateChangeFailedError(
                f"Partition {tp} should be in one of {_names(target.valid_previous_states)} states before moving "
                f"to {target.value} state. Instead it is in {ctx.partition_state(tp).value} state"))
        if target is PartitionState.NEW:
            for tp in valid:
                log.info("Changed partition %s state from %s to %s with assigned replicas %s", tp,
                         ctx.partition_state(tp).value, target.value, ctx.partition_replica_assignment(tp))
                ctx.put_partition_state(tp, PartitionState.NEW)
            return {}
        if target is PartitionState.ONLINE:
            uninitialized = [tp for tp in valid if ctx.partition_state(tp) is PartitionState.NEW]
            to_elect = [tp for tp in valid if ctx.partition_state(tp) in (PartitionState.OFFLINE, PartitionState.ONLINE)]
            if uninitialized:
                for tp in await self._initialize_leader_and_isr(uninitialized):
                    log.info("Changed partition %s from NewPartition to OnlinePartition with state %s",
                             tp, ctx.partition_leadership_info(tp))
                    ctx.put_partition_state(tp, PartitionState.ONLINE)
            if not to_elect:
                return {}
            if strategy is None:
                raise ValueError("Election strategy is a required field when the target state is OnlinePartition")
            results = await self._elect_leader_for_partitions(to_elect, strategy)
            changed: list[tuple[TopicPartition, str]] = []
            for tp, r in results.items():
                if isinstance(r, LeaderAndIsr):
                    changed.append((tp, f"from {ctx.partition_state(tp).value} with state {r}"))
                    ctx.put_partition_state(tp, PartitionState.ONLINE)
            log_state_changes("Changed partition %s to OnlinePartition %s", changed)
            return results
        for tp in valid:
            ctx.put_partition_state(tp, target)
        return {}

    async def _initialize_leader_and_isr(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """New -> Online: create the state znodes (leader = first live replica, ISR = the live
        replicas) and tell the ISR (LeaderAndIsr with is_new)."""
        ctx = self.ctx
        states: dict[TopicPartition, LeaderAndIsr] = {}
        for tp in partitions:
            replicas = ctx.partition_replica_assignment(tp)
            live = [r for r in replicas if ctx.is_replica_online(r, tp)]
            if not live:
                self._log_failed(tp, PartitionState.ONLINE, StateChangeFailedError(
                    f"Controller {self.controller_id} epoch {ctx.epoch} encountered error during state change of "
                    f"partition {tp} from New to Online, assigned replicas are [{','.join(map(str, replicas))}], "
                    f"live brokers are [{','.join(map(str, sorted(ctx.live_broker_ids)))}]. No assigned replica "
                    "is alive."))
                continue
            states[tp] = LeaderAndIsr(live[0], 0, live, ctx.epoch, zk_version=0)
        try:
            created = await self.zk.create_topic_partition_states(states, ctx.epoch_zk_version)
        except ControllerMovedError:
            log.error("Controller moved to another broker when trying to create the topic partition state znode")
            raise
        except Exception as e:
            for tp in states:
                self._log_failed(tp, PartitionState.NEW, e)
            return []
        done = []
        for tp, err in created.items():
            if err is not None:
                self._log_failed(tp, PartitionState.ONLINE, err)
                continue
            st = states[tp]
            ctx.put_partition_leadership_info(tp, st)
            self.batch.add_leader_and_isr_request_for_brokers(
                st.isr, tp, st, ctx.partition_full_replica_assignment(tp), is_new=True)
            done.append(tp)
        return done

    async def _elect_leader_for_partitions(
        self, partitions: list[TopicPartition], strategy: LeaderElectionStrategy
    ) -> StateChangeResults:
        remaining = partitions
        finished_elections: StateChangeResults = {}
        while remaining:
            finished, remaining = await self._do_elect_leader_for_partitions(remaining, strategy)
            for tp, r in finished.items():
                if isinstance(r, Exception):
                    self._log_failed(tp, PartitionState.ONLINE, r)
            finished_elections.update(finished)
            if remaining:
                log.info("Retrying leader election with strategy %s for partitions %s", strategy.value,
                         ",".join(map(str, remaining)))
        return finished_elections

    async def _do_elect_leader_for_partitions(
        self, partitions: list[TopicPartition], strategy: LeaderElectionStrategy
    ) -> tuple[StateChangeResults, list[TopicPartition]]:
        ctx = self.ctx
        try:
            current = await self.zk.get_topic_partition_states(partitions)
        except Exception as e:
            return {tp: e for tp in partitions}, []
        failed: StateChangeResults = {}
        valid: list[tuple[TopicPartition, LeaderAndIsr]] = []
        for tp in partitions:
            st = current.get(tp)
            if st is None:
                failed[tp] = StateChangeFailedError(
                    f"LeaderAndIsr information doesn't exist for partition {tp} in "
                    f"{ctx.partition_state(tp).value} state")
            elif st.controller_epoch > ctx.epoch:
                failed[tp] = StateChangeFailedError(
                    f"Aborted leader election for partition {tp} since the LeaderAndIsr path was already written "
                    f"by another controller. This probably means that the current controller {self.controller_id} "
                    f"went through a soft failure and another controller was elected with epoch "
                    f"{st.controller_epoch}.")
            else:
                valid.append((tp, st))
        if not valid:
            return failed, []
        if strategy in (LeaderElectionStrategy.OFFLINE, LeaderElectionStrategy.OFFLINE_ALLOW_UNCLEAN):
            items = await self._collect_unclean_leader_election_state(
                valid, strategy is LeaderElectionStrategy.OFFLINE_ALLOW_UNCLEAN)
            results, unclean = leader_for_offline(ctx, items)
            self.unclean_leader_elections += unclean
        elif strategy is LeaderElectionStrategy.REASSIGN:
            results = leader_for_reassign(ctx, valid)
        elif strategy is LeaderElectionStrategy.PREFERRED:
            results = leader_for_preferred_replica(ctx, valid)
        else:
            results = leader_for_controlled_shutdown(ctx, valid)
        recipients: dict[TopicPartition, list[int]] = {}
        adjusted: dict[TopicPartition, LeaderAndIsr] = {}
        for r in results:
            if r.leader_and_isr is None:
                failed[r.topic_partition] = StateChangeFailedError(
                    f"Failed to elect leader for partition {r.topic_partition} under strategy {strategy.value}")
            else:
                recipients[r.topic_partition] = r.live_replicas
                adjusted[r.topic_partition] = r.leader_and_isr
        finished, retry = await self.zk.update_leader_and_isr(adjusted, ctx.epoch, ctx.epoch_zk_version)
        for tp, written in finished.items():
            if isinstance(written, LeaderAndIsr):
                ctx.put_partition_leadership_info(tp, written)
                self.batch.add_leader_and_isr_request_for_brokers(
                    recipients[tp], tp, written, ctx.partition_full_replica_assignment(tp), is_new=False)
        for tp in retry:
            log.debug("Controller failed to elect leader for partition %s: bad zk version; will retry", tp)
        return {**finished, **failed}, retry

    async def _collect_unclean_leader_election_state(
        self, states: list[tuple[TopicPartition, LeaderAndIsr]], allow_unclean: bool
    ) -> list[tuple[TopicPartition, LeaderAndIsr | None, bool]]:
        """Whether unclean election is allowed for each partition that has no live ISR member:
        always with ``allow_unclean``, else the topic's override or the broker default."""
        ctx = self.ctx
        no_live_isr = [(tp, st) for tp, st in states if not any(ctx.is_replica_online(r, tp) for r in st.isr)]
        with_live_isr = [(tp, st) for tp, st in states if any(ctx.is_replica_online(r, tp) for r in st.isr)]
        out: list[tuple[TopicPartition, LeaderAndIsr | None, bool]] = []
        if allow_unclean:
            out.extend((tp, st, True) for tp, st in no_live_isr)
        elif no_live_isr:
            configs = await self.zk.get_topic_configs({tp.topic for tp, _ in no_live_isr})
            for tp, st in no_live_isr:
                cfg = configs.get(tp.topic)
                try:
                    if isinstance(cfg, Exception):
                        raise cfg
                    raw = (cfg or {}).get(UNCLEAN_LEADER_ELECTION_ENABLE)
                    enabled = self._unclean_default() if raw is None else parse_config_bool(raw)
                except Exception as e:
                    self._log_failed(tp, PartitionState.ONLINE, e)
                    out.append((tp, None, False))
                    continue
                out.append((tp, st, enabled))
        out.extend((tp, st, False) for tp, st in with_live_isr)
        return out

    def _log_failed(self, tp: TopicPartition, target: PartitionState, e: BaseException) -> None:
        log.error("Controller %d epoch %d failed to change state for partition %s from %s to %s: %s",
                  self.controller_id, self.ctx.epoch, tp, self.ctx.partition_state(tp).value, target.value, e)


class ReplicaStateMachine:
    """Moves replicas between states: LeaderAndIsr to bring them online, StopReplica and ISR
    shrink to take them offline, StopReplica(delete) to delete them."""

    def __init__(
        self,
        controller_id: int,
        context: ControllerContext,
        zk_client: ControllerZkClient,
        batch: ControllerBrokerRequestBatch,
    ) -> None:
        self.controller_id = controller_id
        self.ctx = context
        self.zk = zk_client
        self.batch = batch

    async def move_initial_states(self) -> None:
        """After :meth:`initialize_replica_state`: LeaderAndIsr to every live replica, the dead
        ones out of the ISRs."""
        online, offline = self.ctx.online_and_offline_replicas()
        await self.handle_state_changes(sorted(online), ReplicaState.ONLINE)
        await self.handle_state_changes(sorted(offline), ReplicaState.OFFLINE)

    def initialize_replica_state(self) -> None:
        ctx = self.ctx
        for tp in ctx.all_partitions:
            for r in ctx.partition_replica_assignment(tp):
                replica = PartitionAndReplica(tp, r)
                if ctx.is_replica_online(r, tp):
                    ctx.put_replica_state(replica, ReplicaState.ONLINE)
                else:
                    # Deletion cannot go on while a replica is down: mark it ineligible.
                    ctx.put_replica_state(replica, ReplicaState.DELETION_INELIGIBLE)

    async def handle_state_changes(self, replicas: Iterable[PartitionAndReplica], target: ReplicaState) -> None:
        """Move ``replicas`` to ``target``; raises ControllerMovedError, logs other errors."""
        by_broker: dict[int, list[PartitionAndReplica]] = {}
        for r in replicas:
            by_broker.setdefault(r.replica, []).append(r)
        if not by_broker:
            return
        try:
            self.batch.new_batch()
            for broker_id in sorted(by_broker):
                await self._do_handle_state_changes(broker_id, by_broker[broker_id], target)
            self.batch.send_requests_to_brokers(self.ctx.epoch)
        except ControllerMovedError:
            self.batch.clear()
            log.error("Controller moved to another broker when moving some replicas to %s state", target.value)
            raise
        except Exception:
            self.batch.clear()
            log.error("Error while moving some replicas to %s state", target.value, exc_info=True)

    async def _do_handle_state_changes(
        self, replica_id: int, replicas: list[PartitionAndReplica], target: ReplicaState
    ) -> None:
        ctx = self.ctx
        for r in replicas:
            ctx.replica_states.setdefault(r, ReplicaState.NON_EXISTENT)
        valid, invalid = ctx.check_valid_replica_state_change(replicas, target)
        for r in invalid:
            self._log_failed(r, target, StateChangeFailedError(
                f"Replica {r} should be in the {_names(target.valid_previous_states)} states before moving to "
                f"{target.value} state. Instead it is in {ctx.replica_state(r).value} state"))
        if target is ReplicaState.NEW:
            for r in valid:
                st = ctx.partition_leadership_info(r.topic_partition)
                if st is not None and st.leader == replica_id:
                    self._log_failed(r, ReplicaState.OFFLINE, StateChangeFailedError(
                        f"Replica {replica_id} for partition {r.topic_partition} cannot be moved to NewReplica state "
                        "as it is being requested to become leader"))
                    continue
                if st is not None:
                    self.batch.add_leader_and_isr_request_for_brokers(
                        [replica_id], r.topic_partition, st,
                        ctx.partition_full_replica_assignment(r.topic_partition), is_new=True)
                ctx.put_replica_state(r, ReplicaState.NEW)
        elif target is ReplicaState.ONLINE:
            for r in valid:
                tp = r.topic_partition
                if ctx.replica_state(r) is ReplicaState.NEW:
                    assignment = ctx.partition_full_replica_assignment(tp)
                    if replica_id not in assignment.replicas:
                        log.error("Adding replica (%d) that is not part of the assignment %s", replica_id, assignment)
                        ctx.update_partition_full_replica_assignment(
                            tp, replace(assignment, replicas=(*assignment.replicas, replica_id)))
                else:
                    st = ctx.partition_leadership_info(tp)
                    if st is not None:
                        self.batch.add_leader_and_isr_request_for_brokers(
                            [replica_id], tp, st, ctx.partition_full_replica_assignment(tp), is_new=False)
                ctx.put_replica_state(r, ReplicaState.ONLINE)
        elif target is ReplicaState.OFFLINE:
            for r in valid:
                self.batch.add_stop_replica_request_for_brokers([replica_id], r.topic_partition, delete_partition=False)
            with_info = [r for r in valid if ctx.partition_leadership_info(r.topic_partition) is not None]
            without_info = [r for r in valid if ctx.partition_leadership_info(r.topic_partition) is None]
            updated = await self._remove_replicas_from_isr(replica_id, [r.topic_partition for r in with_info])
            log_state_changes(f"Partition %s state changed to %s after removing replica {replica_id} from the ISR as "
                              "part of transition to OfflineReplica", list(updated.items()))
            for tp, st in updated.items():
                if not ctx.is_topic_queued_up_for_deletion(tp.topic):
                    recipients = [b for b in ctx.partition_replica_assignment(tp) if b != replica_id]
                    self.batch.add_leader_and_isr_request_for_brokers(
                        recipients, tp, st, ctx.partition_full_replica_assignment(tp), is_new=False)
                ctx.put_replica_state(PartitionAndReplica(tp, replica_id), ReplicaState.OFFLINE)
            for r in without_info:
                self.batch.add_update_metadata_request_for_brokers(
                    ctx.live_or_shutting_down_broker_ids, [r.topic_partition])
                ctx.put_replica_state(r, ReplicaState.OFFLINE)
        elif target is ReplicaState.DELETION_STARTED:
            for r in valid:
                ctx.put_replica_state(r, ReplicaState.DELETION_STARTED)
                self.batch.add_stop_replica_request_for_brokers([replica_id], r.topic_partition, delete_partition=True)
        elif target in (ReplicaState.DELETION_INELIGIBLE, ReplicaState.DELETION_SUCCESSFUL):
            for r in valid:
                ctx.put_replica_state(r, target)
        elif target is ReplicaState.NON_EXISTENT:
            for r in valid:
                tp = r.topic_partition
                ctx.update_partition_full_replica_assignment(
                    tp, ctx.partition_full_replica_assignment(tp).remove_replica(replica_id))
                ctx.remove_replica_state(r)

    async def _remove_replicas_from_isr(
        self, replica_id: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, LeaderAndIsr]:
        results: dict[TopicPartition, LeaderAndIsr] = {}
        remaining = partitions
        while remaining:
            finished, remaining = await self._do_remove_replicas_from_isr(replica_id, remaining)
            for tp, r in finished.items():
                if isinstance(r, Exception):
                    self._log_failed(PartitionAndReplica(tp, replica_id), ReplicaState.OFFLINE, r)
                else:
                    results[tp] = r
        return results

    async def _do_remove_replicas_from_isr(
        self, replica_id: int, partitions: list[TopicPartition]
    ) -> tuple[dict[TopicPartition, LeaderAndIsr | Exception], list[TopicPartition]]:
        ctx = self.ctx
        try:
            current = await self.zk.get_topic_partition_states(partitions)
        except Exception as e:
            return {tp: e for tp in partitions}, []
        states: dict[TopicPartition, LeaderAndIsr | Exception] = {}
        no_state: list[TopicPartition] = []
        for tp in partitions:
            st = current.get(tp)
            if st is None:
                no_state.append(tp)
            elif st.controller_epoch > ctx.epoch:
                states[tp] = StateChangeFailedError(
                    f"Leader and isr path written by another controller. This probably means the current controller "
                    f"with epoch {ctx.epoch} went through a soft failure and another controller was elected with "
                    f"epoch {st.controller_epoch}. Aborting state change by this controller")
            else:
                states[tp] = st
        with_replica = {tp: st for tp, st in states.items() if isinstance(st, LeaderAndIsr) and replica_id in st.isr}
        without_replica = {tp: st for tp, st in states.items() if tp not in with_replica}
        adjusted = {}
        for tp, st in with_replica.items():
            new_leader = NO_LEADER if st.leader == replica_id else st.leader
            # The last member of the ISR stays in it (nothing else is known to be in sync).
            new_isr = list(st.isr) if len(st.isr) == 1 else [r for r in st.isr if r != replica_id]
            adjusted[tp] = new_leader_and_isr(st, new_leader, new_isr)
        finished, retry = await self.zk.update_leader_and_isr(adjusted, ctx.epoch, ctx.epoch_zk_version)
        out: dict[TopicPartition, LeaderAndIsr | Exception] = {}
        for tp, r in {**without_replica, **finished}.items():
            if isinstance(r, LeaderAndIsr):
                r = replace(r, controller_epoch=ctx.epoch)
                ctx.put_partition_leadership_info(tp, r)
            out[tp] = r
        for tp in no_state:
            if not ctx.is_topic_queued_up_for_deletion(tp.topic):
                out[tp] = StateChangeFailedError(
                    f"Failed to change state of replica {replica_id} for partition {tp} since the leader and isr "
                    "path in zookeeper is empty")
        return out, retry

    def _log_failed(self, replica: PartitionAndReplica, target: ReplicaState, e: BaseException) -> None:
        log.error("Controller %d epoch %d initiated state change of replica %d for partition %s from %s to %s "
                  "failed: %s", self.controller_id, self.ctx.epoch, replica.replica, replica.topic_partition,
                  self.ctx.replica_state(replica).value, target.value, e)


def log_state_changes(line: str, changes: Sequence[tuple[TopicPartition, object]]) -> None:
    """Kafka's state-change ``line`` (two ``%s``: the partition, the change) once per partition at
    debug, and at info one line with the count and the first five.

    A failover or a controlled shutdown at 10,000 partitions changes thousands at once, and a
    line each held the controller's loop: 6,666 ISR removals took 0.9 s of it on the 2-core
    machine (py-spy), while the broker stopping waited for the answer."""
    if not changes:
        return
    if log.isEnabledFor(logging.DEBUG):
        for tp, change in changes:
            log.debug(line, tp, change)
    shown = "; ".join(line % (tp, change) for tp, change in changes[:5])
    log.info("%d state changes: %s%s", len(changes), shown, "; ..." if len(changes) > 5 else "")


def _names(states: Iterable[PartitionState | ReplicaState]) -> str:
    return ",".join(sorted(s.value for s in states))
