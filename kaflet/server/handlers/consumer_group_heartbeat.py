"""ConsumerGroupHeartbeat (key 68, KIP-848): a consumer-protocol member joins, heartbeats,
reports what it owns and learns its assignment; the group coordinator decides
(``ConsumerGroupCoordinator.heartbeat``)."""

from __future__ import annotations

import uuid
from typing import Any

from kaflet.coordinator.group.consumer_coordinator import HeartbeatRequest
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.handlers.join_group import client_host
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.CONSUMER_GROUP_HEARTBEAT
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R: Any = codec.response_class(API_KEY)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return R(error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED), member_epoch=0, heartbeat_interval_ms=0)
    names = req.subscribed_topic_names
    if names:
        # Kafka's check: a member may only subscribe to topics it may Describe.
        denied = set(names) - ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        if denied:
            return R(error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                     error_message=f"Unauthorized topics: {', '.join(sorted(denied))}", member_epoch=0,
                     heartbeat_interval_ms=0)
    owned: dict[bytes, list[int]] | None = None
    if req.topic_partitions is not None:
        owned = {}
        for t in req.topic_partitions:
            owned.setdefault(t.topic_id.bytes, []).extend(t.partitions)
    result = await ctx.services.coordinators.groups.consumer_group_heartbeat(HeartbeatRequest(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch, instance_id=req.instance_id,
        rack_id=req.rack_id, rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed_topic_names=list(names) if names is not None else None,
        subscribed_topic_regex=req.subscribed_topic_regex if ctx.version >= 1 else None,
        server_assignor=req.server_assignor, owned=owned, client_id=ctx.header.client_id or "",
        client_host=client_host(ctx), version=ctx.version))
    assignment = None
    if result.assignment is not None:
        A = R.Assignment
        assignment = A(topic_partitions=[A.TopicPartitions(topic_id=uuid.UUID(bytes=t), partitions=sorted(ps))
                                         for t, ps in sorted(result.assignment.items())])
    return R(error_code=int(result.error), error_message=result.message, member_id=result.member_id,
             member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms,
             assignment=assignment)
