"""ListPartitionReassignments (key 46, v0): the reassignments in progress (KIP-455).

As Kafka 2.8: Describe on the cluster (CLUSTER_AUTHORIZATION_FAILED); only the active
controller answers (NOT_CONTROLLER elsewhere); null topics lists every ongoing reassignment,
otherwise those of the partitions named (partitions not being reassigned are left out).
"""

from __future__ import annotations

from typing import Any

from kaflet.controller.context import ReplicaAssignment
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.security.acl import AclOperation
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.LIST_PARTITION_REASSIGNMENTS
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, body: memoryview) -> Any:
    req = codec.decode_request(API_KEY, ctx.version, body)
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return _response(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, {})
    partitions = None if req.topics is None else [
        (t.name, int(p)) for t in req.topics for p in t.partition_indexes]
    controller = ctx.services.admin.controller
    if not controller.is_active:
        return _response(ErrorCode.NOT_CONTROLLER, {})
    error, ongoing = await controller.list_partition_reassignments(partitions)
    return _response(error, {(tp.topic, tp.partition): a for tp, a in ongoing.items()})


def _response(error: int, ongoing: dict[tuple[str, int], ReplicaAssignment]) -> Any:
    R: Any = codec.response_class(API_KEY)
    P = R.OngoingTopicReassignment.OngoingPartitionReassignment
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), a in sorted(ongoing.items()):
        by_topic.setdefault(topic, []).append(P(
            partition_index=index, replicas=list(a.replicas), adding_replicas=list(a.adding_replicas),
            removing_replicas=list(a.removing_replicas)))
    return R(error_code=int(error), error_message=None, topics=[
        R.OngoingTopicReassignment(name=t, partitions=parts) for t, parts in by_topic.items()])
