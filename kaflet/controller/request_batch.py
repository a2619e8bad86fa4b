"""Controller-to-broker requests collected during one event (ControllerBrokerRequestBatch).

State changes add LeaderAndIsr, UpdateMetadata and StopReplica entries per broker; at the end of
the step :meth:`ControllerBrokerRequestBatch.send_requests_to_brokers` builds one request of
each kind per broker (LeaderAndIsr v5, UpdateMetadata v7, StopReplica v3, each with the target
broker's epoch) and hands them to the channel, in that order. Responses come back as events.
LeaderAndIsr and UpdateMetadata partition states are kept as protocol/controller_codec.py's
objects from the start, so sending one is grouping, not copying; StopReplica's are rare and go
through the generic codec.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kaflet.controller.context import (
    EPOCH_DURING_DELETE,
    LEADER_DURING_DELETE,
    NO_EPOCH,
    ControllerContext,
    ReplicaAssignment,
    TopicPartition,
)
from kaflet.controller.events import (
    ControllerEvent,
    LeaderAndIsrResponseReceived,
    TopicDeletionStopReplicaResponseReceived,
    UpdateMetadataResponseReceived,
)
from kaflet.metadata.zkdata import BrokerInfo, LeaderAndIsr
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.controller_codec import (
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrTopicState,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)

__all__ = [
    "SECURITY_PROTOCOL_IDS",
    "ControllerBrokerRequestBatch",
    "ControllerChannel",
    "RequestBatchError",
    "partition_errors_of_leader_and_isr",
    "partition_errors_of_stop_replica",
]

log = logging.getLogger(__name__)

#: SecurityProtocol ids as UpdateMetadata carries them.
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


class ControllerChannel(Protocol):
    """What the controller needs of ``kaflet.controller.channel.ControllerChannel``."""

    def add_broker(self, broker: BrokerInfo) -> None: ...

    def remove_broker(self, broker_id: int) -> None: ...

    def send(
        self, broker_id: int, api_key: ApiKey, request: Any, callback: Callable[[Any], None] | None = None
    ) -> None: ...

    async def close(self) -> None: ...


class RequestBatchError(Exception):
    """A batch was started while the previous one still held requests (Kafka's IllegalState)."""


@dataclass(slots=True)
class _StopReplicaEntry:
    leader_epoch: int
    delete_partition: bool


class ControllerBrokerRequestBatch:
    """One batch of controller requests, per broker (see the module docstring)."""

    def __init__(
        self,
        controller_id: int,
        context: ControllerContext,
        channel: Callable[[], ControllerChannel | None],
        send_event: Callable[[ControllerEvent], None],
        inter_broker_listener: str,
    ) -> None:
        self.controller_id = controller_id
        self.context = context
        self._channel = channel
        self._send_event = send_event
        self.inter_broker_listener = inter_broker_listener
        self.leader_and_isr_requests: dict[int, dict[TopicPartition, LeaderAndIsrPartitionState]] = {}
        self.stop_replica_requests: dict[int, dict[TopicPartition, _StopReplicaEntry]] = {}
        self.update_metadata_brokers: set[int] = set()
        self.update_metadata_partitions: dict[TopicPartition, UpdateMetadataPartitionState] = {}

    def new_batch(self) -> None:
        if self.leader_and_isr_requests or self.stop_replica_requests or self.update_metadata_brokers:
            raise RequestBatchError(
                "Controller to broker state change requests batch is not empty while creating a new one: "
                f"LeaderAndIsr to {sorted(self.leader_and_isr_requests)}, StopReplica to "
                f"{sorted(self.stop_replica_requests)}, UpdateMetadata to {sorted(self.update_metadata_brokers)}"
            )

    def clear(self) -> None:
        self.leader_and_isr_requests.clear()
        self.stop_replica_requests.clear()
        self.update_metadata_brokers.clear()
        self.update_metadata_partitions.clear()

    # ------------------------------------------------------------------ adding

    def add_leader_and_isr_request_for_brokers(
        self,
        broker_ids: Iterable[int],
        tp: TopicPartition,
        state: LeaderAndIsr,
        assignment: ReplicaAssignment,
        is_new: bool,
    ) -> None:
        for b in broker_ids:
            if b < 0:
                continue
            per_broker = self.leader_and_isr_requests.setdefault(b, {})
            previous = per_broker.get(tp)
            # The request's own partition state, kept as it will be sent: no copy at sending.
            per_broker[tp] = LeaderAndIsrPartitionState(
                tp.partition, state.controller_epoch, state.leader, state.leader_epoch, list(state.isr),
                state.zk_version, list(assignment.replicas), list(assignment.adding_replicas),
                list(assignment.removing_replicas), is_new or (previous is not None and previous.is_new))
        self.add_update_metadata_request_for_brokers(self.context.live_or_shutting_down_broker_ids, [tp])

    def add_stop_replica_request_for_brokers(
        self, broker_ids: Iterable[int], tp: TopicPartition, delete_partition: bool
    ) -> None:
        ctx = self.context
        if ctx.is_topic_queued_up_for_deletion(tp.topic):
            # A sentinel epoch overrides any other while the topic is being deleted.
            leader_epoch = EPOCH_DURING_DELETE
        else:
            st = ctx.partition_leadership_info(tp)
            leader_epoch = st.leader_epoch if st is not None else NO_EPOCH
        for b in broker_ids:
            if b < 0:
                continue
            per_broker = self.stop_replica_requests.setdefault(b, {})
            previous = per_broker.get(tp)
            per_broker[tp] = _StopReplicaEntry(
                leader_epoch, delete_partition or (previous is not None and previous.delete_partition)
            )

    def add_update_metadata_request_for_brokers(
        self, broker_ids: Iterable[int], partitions: Iterable[TopicPartition]
    ) -> None:
        """UpdateMetadata to ``broker_ids`` carrying ``partitions`` (those with a leader)."""
        ctx = self.context
        self.update_metadata_brokers.update(b for b in broker_ids if b >= 0)
        for tp in partitions:
            st = ctx.partition_leadership_info(tp)
            if st is None:
                log.info("Leader not yet assigned for partition %s. Skip sending UpdateMetadataRequest.", tp)
                continue
            replicas = ctx.partition_replica_assignment(tp)
            offline = [r for r in replicas if not ctx.is_replica_online(r, tp)]
            if tp.topic in ctx.topics_to_be_deleted:
                # LeaderAndIsr.duringDelete: leader -2, epoch and zk version reset.
                leader, leader_epoch, zk_version = LEADER_DURING_DELETE, 0, 0
            else:
                leader, leader_epoch, zk_version = st.leader, st.leader_epoch, st.zk_version
            self.update_metadata_partitions[tp] = UpdateMetadataPartitionState(
                tp.partition, st.controller_epoch, leader, leader_epoch, list(st.isr), zk_version, replicas, offline)

    # ------------------------------------------------------------------ sending

    def send_requests_to_brokers(self, controller_epoch: int) -> None:
        """Send what was collected (LeaderAndIsr, then UpdateMetadata, then StopReplica)."""
        try:
            channel = self._channel()
            if channel is None:
                raise RequestBatchError("the controller channel is not running")
            self._send_leader_and_isr(channel, controller_epoch)
            self._send_update_metadata(channel, controller_epoch)
            self._send_stop_replica(channel, controller_epoch)
        except Exception as e:
            if not isinstance(e, RequestBatchError):
                log.error("cannot send controller requests: %s", e)
            self.clear()
            raise RequestBatchError(str(e)) from e

    # Responses become events: the controller's task handles them in order.

    def _leader_and_isr_callback(self, broker: int) -> Callable[[Any], None]:
        def on_response(response: Any) -> None:
            self._send_event(LeaderAndIsrResponseReceived(response, broker))

        return on_response

    def _update_metadata_callback(self, broker: int) -> Callable[[Any], None]:
        def on_response(response: Any) -> None:
            self._send_event(UpdateMetadataResponseReceived(response, broker))

        return on_response

    def _stop_replica_callback(self, broker: int, deleted: set[TopicPartition]) -> Callable[[Any], None]:
        def on_response(response: Any) -> None:
            self._send_event(TopicDeletionStopReplicaResponseReceived(broker, response, deleted))

        return on_response

    def _topic_id(self, topic: str) -> uuid.UUID:
        return self.context.topic_ids.get(topic, uuid.UUID(int=0))

    def _send_leader_and_isr(self, channel: ControllerChannel, controller_epoch: int) -> None:
        ctx = self.context
        for broker, states in self.leader_and_isr_requests.items():
            epoch = ctx.broker_epoch(broker)
            if epoch is None:
                continue
            leader_ids = {e.leader for e in states.values()}
            live_leaders = []
            for info in ctx.live_or_shutting_down_brokers:
                if info.id not in leader_ids:
                    continue
                ep = info.endpoint(self.inter_broker_listener)
                if ep is None:
                    log.error("Broker %d has no endpoint for the inter-broker listener %s",
                              info.id, self.inter_broker_listener)
                    continue
                live_leaders.append(LeaderAndIsrLiveLeader(info.id, ep.host or "", ep.port))
            by_topic: dict[str, list[LeaderAndIsrPartitionState]] = {}
            for tp in sorted(states):
                by_topic.setdefault(tp.topic, []).append(states[tp])
            leaders = sum(1 for e in states.values() if e.leader == broker)
            log.info("Sending LeaderAndIsr request to broker %d with %d become-leader and %d become-follower "
                     "partitions", broker, leaders, len(states) - leaders)
            request = LeaderAndIsrRequest(
                self.controller_id, controller_epoch, epoch, 0,
                [LeaderAndIsrTopicState(t, self._topic_id(t), ps) for t, ps in by_topic.items()], live_leaders)
            channel.send(broker, ApiKey.LEADER_AND_ISR, request, self._leader_and_isr_callback(broker))
        self.leader_and_isr_requests.clear()

    def _send_update_metadata(self, channel: ControllerChannel, controller_epoch: int) -> None:
        ctx = self.context
        if not self.update_metadata_brokers:
            return
        log.info("Sending UpdateMetadata request to brokers %s for %d partitions",
                 sorted(self.update_metadata_brokers), len(self.update_metadata_partitions))
        by_topic: dict[str, list[UpdateMetadataPartitionState]] = {}
        for tp in sorted(self.update_metadata_partitions):
            by_topic.setdefault(tp.topic, []).append(self.update_metadata_partitions[tp])
        live_brokers = [
            UpdateMetadataBroker(info.id, [
                UpdateMetadataEndpoint(ep.port, ep.host or "", ep.listener,
                                       SECURITY_PROTOCOL_IDS.get(ep.security_protocol, 0))
                for ep in info.endpoints], info.rack)
            for info in ctx.live_or_shutting_down_brokers
        ]
        topic_states = [UpdateMetadataTopicState(t, self._topic_id(t), ps) for t, ps in by_topic.items()]
        encoded_topics: list[bytes] = []
        for broker in sorted(self.update_metadata_brokers & ctx.live_or_shutting_down_broker_ids):
            epoch = ctx.broker_epoch(broker)
            assert epoch is not None
            # Every broker's request shares the topic states, and their encoding for the remote
            # brokers: nothing changes a request once it is queued.
            request = UpdateMetadataRequest(self.controller_id, controller_epoch, epoch, topic_states, live_brokers,
                                            encoded_topics)
            channel.send(broker, ApiKey.UPDATE_METADATA, request, self._update_metadata_callback(broker))
        self.update_metadata_brokers.clear()
        self.update_metadata_partitions.clear()

    def _send_stop_replica(self, channel: ControllerChannel, controller_epoch: int) -> None:
        if not self.stop_replica_requests:
            return  # the generic codec's classes are built on first use: 0.2 s at start-up
        ctx = self.context
        R = codec.request_class(ApiKey.STOP_REPLICA)
        T = R.StopReplicaTopicState
        P = T.StopReplicaPartitionState
        for broker, states in self.stop_replica_requests.items():
            epoch = ctx.broker_epoch(broker)
            if epoch is None:
                continue
            by_topic: dict[str, list[Any]] = {}
            for tp in sorted(states):
                e = states[tp]
                by_topic.setdefault(tp.topic, []).append(
                    P(partition_index=tp.partition, leader_epoch=e.leader_epoch, delete_partition=e.delete_partition))
            log.info("Sending StopReplica request for %d replicas to broker %d", len(states), broker)
            request = R(controller_id=self.controller_id, controller_epoch=controller_epoch, broker_epoch=epoch,
                        topic_states=[T(topic_name=t, partition_states=ps) for t, ps in by_topic.items()])
            deleted = {tp for tp, e in states.items() if e.delete_partition}
            channel.send(broker, ApiKey.STOP_REPLICA, request, self._stop_replica_callback(broker, deleted))
        self.stop_replica_requests.clear()


def partition_errors_of_stop_replica(response: Any) -> dict[TopicPartition, int]:
    """A StopReplica response's per-partition error codes."""
    return {
        TopicPartition(pe.topic_name, pe.partition_index): pe.error_code
        for pe in (getattr(response, "partition_errors", None) or [])
    }


def partition_errors_of_leader_and_isr(response: Any, topic_names: dict[uuid.UUID, str]) -> dict[TopicPartition, int]:
    """A LeaderAndIsr v5 response's per-partition error codes (topics are named by id)."""
    out: dict[TopicPartition, int] = {}
    for t in getattr(response, "topics", None) or []:
        name = topic_names.get(t.topic_id)
        if name is None:
            continue
        for pe in t.partition_errors or []:
            out[TopicPartition(name, pe.partition_index)] = pe.error_code
    return out

