"""The controller's requests to a broker: LeaderAndIsr, StopReplica and UpdateMetadata.

Each is answered by the replica manager from the request object, so the same function serves a
request decoded from the wire (the handlers) and one this broker's own controller hands over
in-process (``Broker.deliver_local``, a controller ``LocalDelivery``). Only a controller may send
them: ClusterAction on the cluster, as Kafka checks; a refusal is Kafka's error response with
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, cast

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.controller_messages import (
    ControllerRequest,
    ControllerResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.replication.replica_manager import (
    ReplicaManager,
    leader_and_isr_error_response,
    stop_replica_error_response,
    update_metadata_response,
)
from kaflet.security.acl import AclOperation

if TYPE_CHECKING:
    from kaflet.server.request_context import RequestContext


class ControllerRequests:
    """Applies the controller's requests to this broker's replica manager.

    ``has_log(topic, partition)``: whether the broker has the partition's log already;
    ``load_topic_configs(topics)``: reads those topics' configs from the tree before their
    logs are created (Kafka's fetchLogConfig); ``broker_epoch()``: this broker's epoch now.
    """

    def __init__(self, replicas: ReplicaManager, has_log: Callable[[str, int], bool],
                 load_topic_configs: Callable[[Iterable[str]], Awaitable[None]],
                 broker_epoch: Callable[[], int]) -> None:
        self._replicas = replicas
        self._has_log = has_log
        self._load_topic_configs = load_topic_configs
        self._broker_epoch = broker_epoch

    async def process(self, api_key: int, request: ControllerRequest) -> ControllerResponse:
        """Answer a controller request object (of the API ``api_key`` names) with its response."""
        if api_key == ApiKey.LEADER_AND_ISR:
            return await self.leader_and_isr(cast(LeaderAndIsrRequest, request))
        if api_key == ApiKey.STOP_REPLICA:
            return self._replicas.stop_replicas(cast(StopReplicaRequest, request), self._broker_epoch())
        return self._replicas.maybe_update_metadata_cache(cast(UpdateMetadataRequest, request), self._broker_epoch())

    async def leader_and_isr(self, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        # New logs take their topic's configs, read from the tree first.
        await self._load_topic_configs(
            t.topic_name for t in request.topic_states
            if any(not self._has_log(t.topic_name, ps.partition_index) for ps in t.partition_states))
        # The epoch is read after the await: a new ZooKeeper session may have changed it.
        await self._replicas.create_logs(request, self._broker_epoch())
        return self._replicas.become_leader_or_follower(request, self._broker_epoch())


def _refusal(api_key: int, request: ControllerRequest, error: ErrorCode) -> ControllerResponse:
    """The response refusing a controller request with ``error``."""
    if api_key == ApiKey.LEADER_AND_ISR:
        return leader_and_isr_error_response(cast(LeaderAndIsrRequest, request), error)
    if api_key == ApiKey.STOP_REPLICA:
        return stop_replica_error_response(cast(StopReplicaRequest, request), error)
    return update_metadata_response(error)


async def handle(ctx: RequestContext, api_key: int, body: memoryview) -> Response:
    """A handler's whole job: decode, check ClusterAction, process (the dispatcher encodes)."""
    request = codec.decode_request(api_key, ctx.version, body)
    if ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return await ctx.services.admin.controller_requests.process(api_key, request)
    return _refusal(api_key, request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
