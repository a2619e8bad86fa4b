"""AlterPartitionReassignments (key 45, v0): start, replace or cancel reassignments (KIP-455).

As Kafka 2.8: Alter on the cluster (CLUSTER_AUTHORIZATION_FAILED for the whole request); only
the active controller acts, any other broker answers NOT_CONTROLLER (the admin client sends the
request to the controller). ``replicas`` null cancels a reassignment in progress. The answer
comes once the controller has started (or refused) each reassignment, not when it is complete.
"""

from __future__ import annotations

from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.security.acl import AclOperation
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.ALTER_PARTITION_REASSIGNMENTS
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, body: memoryview) -> Any:
    req = codec.decode_request(API_KEY, ctx.version, body)
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return _response(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, {})
    reassignments: dict[tuple[str, int], list[int] | None] = {}
    for t in req.topics:
        for p in t.partitions:
            reassignments[(t.name, p.partition_index)] = None if p.replicas is None else [int(r) for r in p.replicas]
    controller = ctx.services.admin.controller
    if not controller.is_active:
        return _response(ErrorCode.NOT_CONTROLLER, None, {})
    error, message, results = await controller.alter_partition_reassignments(reassignments)
    return _response(error, message, {(tp.topic, tp.partition): r for tp, r in results.items()})


def _response(error: int, message: str | None, results: dict[tuple[str, int], tuple[int, str | None]]) -> Any:
    R: Any = codec.response_class(API_KEY)
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), (code, msg) in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            R.ReassignableTopicResponse.ReassignablePartitionResponse(
                partition_index=index, error_code=int(code), error_message=msg))
    return R(error_code=int(error), error_message=message, responses=[
        R.ReassignableTopicResponse(name=t, partitions=parts) for t, parts in by_topic.items()])
