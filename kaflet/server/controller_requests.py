"""The controller's requests to a broker: LeaderAndIsr, StopReplica and UpdateMetadata.

Each is answered by the replica manager from the request object, so the same function serves a
request decoded from the wire (the handlers) and one this broker's own controller hands over
in-process (``deliver_local``, a controller ``LocalDelivery``). Only a controller may send
them: ClusterAction on the cluster, as Kafka checks; a refusal is Kafka's error response with
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.replication.replica_manager import (
    leader_and_isr_error_response,
    stop_replica_error_response,
    update_metadata_response,
)
from kaflet.security.acl import AclOperation

if TYPE_CHECKING:
    from kaflet.server.broker import Broker
    from kaflet.server.request_context import RequestContext


def _leader_and_isr(broker: Broker, request: Any) -> Any:
    return broker.replica_manager.become_leader_or_follower(request, broker.broker_epoch)


def _stop_replica(broker: Broker, request: Any) -> Any:
    return broker.replica_manager.stop_replicas(request, broker.broker_epoch)


def _update_metadata(broker: Broker, request: Any) -> Any:
    return broker.replica_manager.maybe_update_metadata_cache(request, broker.broker_epoch)


#: API key -> (request object -> response object, the response refusing the request with an error).
_APIS: dict[int, tuple[Callable[[Broker, Any], Any], Callable[[Any, ErrorCode], Any]]] = {
    ApiKey.LEADER_AND_ISR: (_leader_and_isr, leader_and_isr_error_response),
    ApiKey.STOP_REPLICA: (_stop_replica, stop_replica_error_response),
    ApiKey.UPDATE_METADATA: (_update_metadata, lambda _request, error: update_metadata_response(error)),
}


async def process(broker: Broker, api_key: int, request: Any) -> Any:
    """Answer a controller request object with its response object."""
    if api_key == ApiKey.LEADER_AND_ISR:
        # New logs take their topic's configs, read from the tree first (Kafka's fetchLogConfig).
        logs = broker.log_manager
        await broker.config_admin.load_topic_configs(
            t.topic_name for t in request.topic_states
            if any(logs.get_log(t.topic_name, ps.partition_index) is None for ps in t.partition_states))
        await broker.replica_manager.create_logs(request, broker.broker_epoch)
    return _APIS[api_key][0](broker, request)


async def handle(ctx: RequestContext, api_key: int, body: memoryview) -> Response:
    """A handler's whole job: decode, check ClusterAction, process (the dispatcher encodes)."""
    request = codec.decode_request(api_key, ctx.version, body)
    if ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return await process(ctx.broker, api_key, request)
    return _APIS[api_key][1](request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
