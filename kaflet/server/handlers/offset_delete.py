"""OffsetDelete (key 47): delete a group's offsets for topics it no longer consumes."""

from __future__ import annotations

from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.OFFSET_DELETE
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R: Any = codec.response_class(API_KEY)
    topics = ctx.services.cluster.metadata.topics
    errors: dict[tuple[str, int], ErrorCode] = {}
    known: list[tuple[str, int]] = []
    # Kafka's checks: Delete on the group (else the whole request fails), Read on each topic.
    if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, req.group_id):
        return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, topics=[])
    readable = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, (t.name for t in req.topics))
    for t in req.topics:
        info = topics.get(t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if t.name not in readable:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None or p.partition_index not in info.partitions:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                known.append(tp)
    err, deleted = await ctx.services.coordinators.groups.delete_offsets(req.group_id, known)
    T = R.OffsetDeleteResponseTopic
    P = T.OffsetDeleteResponsePartition
    out = []
    if err == ErrorCode.NONE:
        errors.update(deleted)
        out = [T(name=t.name, partitions=[P(partition_index=p.partition_index,
                                            error_code=int(errors.get((t.name, p.partition_index), ErrorCode.NONE)))
                                          for p in t.partitions])
               for t in req.topics]
    return R(error_code=int(err), topics=out)
