"""The fields kaflet reads of the controller's requests to a broker and of their responses.

LeaderAndIsr and UpdateMetadata requests are the slotted objects of controller_codec.py when
the controller or the wire made them, and the generic codec's (kafka-python's schema codec, built
at run time by kaflet/protocol/inter_broker.py, without static types) when a test or a tool
built them; StopReplica's are always the generic codec's. These Protocols name the fields the
replica manager and the metadata cache read, so the seams that pass the objects around
(server/ -> replication/, metadata/) are typed and either kind fits them structurally.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol, TypeAlias

# The LeaderAndIsr and UpdateMetadata responses have one maker and one parser each, in
# controller_codec.py.
from kaflet.protocol.controller_codec import LeaderAndIsrResponse, UpdateMetadataResponse


class LiveLeader(Protocol):
    broker_id: int
    host_name: str
    port: int


class PartitionState(Protocol):
    """A partition's leadership as LeaderAndIsr and UpdateMetadata both carry it."""

    partition_index: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: Sequence[int]
    zk_version: int
    replicas: Sequence[int]


class LeaderAndIsrPartitionState(PartitionState, Protocol):
    is_new: bool


class LeaderAndIsrTopicState(Protocol):
    topic_name: str
    topic_id: uuid.UUID
    partition_states: Sequence[LeaderAndIsrPartitionState]


class LeaderAndIsrRequest(Protocol):
    """LeaderAndIsr v5."""

    controller_id: int
    controller_epoch: int
    broker_epoch: int
    topic_states: Sequence[LeaderAndIsrTopicState]
    live_leaders: Sequence[LiveLeader]


class StopReplicaPartitionState(Protocol):
    partition_index: int
    leader_epoch: int
    delete_partition: bool


class StopReplicaTopicState(Protocol):
    topic_name: str
    partition_states: Sequence[StopReplicaPartitionState]


class StopReplicaRequest(Protocol):
    """StopReplica v3."""

    controller_id: int
    controller_epoch: int
    broker_epoch: int
    topic_states: Sequence[StopReplicaTopicState]


class StopReplicaPartitionError(Protocol):
    topic_name: str
    partition_index: int
    error_code: int


class StopReplicaResponse(Protocol):
    error_code: int
    partition_errors: Sequence[StopReplicaPartitionError]


class UpdateMetadataEndpoint(Protocol):
    port: int
    host: str
    listener: str
    security_protocol: int


class UpdateMetadataBroker(Protocol):
    id: int
    endpoints: Sequence[UpdateMetadataEndpoint]
    rack: str | None


class UpdateMetadataPartitionState(PartitionState, Protocol):
    offline_replicas: Sequence[int]


class UpdateMetadataTopicState(Protocol):
    topic_name: str
    topic_id: uuid.UUID
    partition_states: Sequence[UpdateMetadataPartitionState]


class UpdateMetadataRequest(Protocol):
    """UpdateMetadata v7."""

    controller_id: int
    controller_epoch: int
    broker_epoch: int
    topic_states: Sequence[UpdateMetadataTopicState]
    live_brokers: Sequence[UpdateMetadataBroker]


ControllerRequest: TypeAlias = "LeaderAndIsrRequest | StopReplicaRequest | UpdateMetadataRequest"
ControllerResponse: TypeAlias = "LeaderAndIsrResponse | StopReplicaResponse | UpdateMetadataResponse"
