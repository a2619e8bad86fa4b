"""JoinGroup (key 11): join a group; the answer waits until the rebalance completes."""

from __future__ import annotations

from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.JOIN_GROUP
MIN_VERSION = 0
MAX_VERSION = 7


def client_host(ctx: RequestContext) -> str:
    """The member's host as Kafka reports it (InetAddress.toString: "/1.2.3.4")."""
    return "/" + ctx.conn.peer[0]


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R: Any = codec.response_class(API_KEY)
    v = ctx.version
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return R(
            error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, generation_id=-1, protocol_type=None, protocol_name=None if v >= 7 else "", leader="", member_id="", members=[])
    protocols = [(p.name, bytes(p.metadata)) for p in req.protocols]
    result = await ctx.services.coordinators.groups.join_group(
        group_id=req.group_id,
        member_id=req.member_id,
        group_instance_id=req.group_instance_id if v >= 5 else None,
        require_known_member_id=v >= 4,  # KIP-394: v4+ clients get MEMBER_ID_REQUIRED first
        client_id=ctx.header.client_id or "",
        client_host=client_host(ctx),
        rebalance_timeout_ms=req.rebalance_timeout_ms if v >= 1 else req.session_timeout_ms,
        session_timeout_ms=req.session_timeout_ms,
        protocol_type=req.protocol_type,
        protocols=protocols,
    )
    M = R.JoinGroupResponseMember
    return R(
        error_code=int(result.error),
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        # Before v7 the name is not nullable: Kafka sends "" when there is none.
        protocol_name=result.protocol_name if v >= 7 else (result.protocol_name or ""),
        leader=result.leader_id,
        member_id=result.member_id,
        members=[M(member_id=m, group_instance_id=i, metadata=md) for m, i, md in result.members],
    )
