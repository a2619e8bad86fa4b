"""SyncGroup (key 14): the leader hands in the assignment, every member gets its part."""

from __future__ import annotations

from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.SYNC_GROUP
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R: Any = codec.response_class(API_KEY)
    v = ctx.version
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, protocol_type=None, protocol_name=None,
                 assignment=b"")
    result = await ctx.services.coordinators.groups.sync_group(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        protocol_type=req.protocol_type if v >= 5 else None,
        protocol_name=req.protocol_name if v >= 5 else None,
        group_instance_id=req.group_instance_id if v >= 3 else None,
        assignments={a.member_id: bytes(a.assignment) for a in req.assignments},
    )
    return R(error_code=int(result.error), protocol_type=result.protocol_type,
             protocol_name=result.protocol_name, assignment=result.assignment)
