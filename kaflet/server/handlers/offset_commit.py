"""OffsetCommit (key 8): store a group's (or a simple consumer's) committed offsets (v9: the
generation is a consumer group member's member epoch, STALE_MEMBER_EPOCH when it is not the
current one)."""

from __future__ import annotations

import time
from typing import Any

from kaflet.coordinator.group.schemas import OffsetValue
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.OFFSET_COMMIT
MIN_VERSION = 0
MAX_VERSION = 9


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    return await serve(ctx, codec.decode_request(API_KEY, ctx.version, body))


async def serve(ctx: RequestContext, req: Any) -> Response:
    """Answer a decoded request in real partition numbers (the gateway renumbers: server/renumbering.py)."""
    R: Any = codec.response_class(API_KEY)
    v = ctx.version
    now = int(time.time() * 1000)
    retention = req.retention_time_ms if 2 <= v <= 4 else -1
    topics = ctx.services.cluster.metadata.topics
    errors: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], OffsetValue] = {}
    # Kafka's checks: Read on the group (else every partition fails), then Read on each topic.
    group_ok = ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id)
    readable = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, (t.name for t in req.topics)) if group_ok \
        else set()
    for t in req.topics:
        info = topics.get(t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if not group_ok:
                errors[tp] = ErrorCode.GROUP_AUTHORIZATION_FAILED
                continue
            if t.name not in readable:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if info is None or tp[1] not in info.partitions:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            # v1 may carry the commit time; v2-v4 a retention that becomes an expire time.
            commit_ts = p.commit_timestamp if v == 1 and p.commit_timestamp != -1 else now
            offsets[tp] = OffsetValue(
                offset=p.committed_offset,
                metadata=p.committed_metadata or "",
                commit_timestamp=commit_ts,
                leader_epoch=p.committed_leader_epoch if v >= 6 else -1,
                expire_timestamp=commit_ts + retention if retention >= 0 else -1,
            )
    if offsets:
        errors.update(await ctx.services.coordinators.groups.commit_offsets(
            req.group_id,
            req.member_id if v >= 1 else "",
            req.group_instance_id if v >= 7 else None,
            req.generation_id_or_member_epoch if v >= 1 else -1,
            offsets,
            api_version=v,
        ))
    T = R.OffsetCommitResponseTopic
    P = T.OffsetCommitResponsePartition
    out = [T(name=t.name, partitions=[P(partition_index=p.partition_index, error_code=int(errors[(t.name, p.partition_index)]))
                                      for p in t.partitions])
           for t in req.topics]
    return R(topics=out)
