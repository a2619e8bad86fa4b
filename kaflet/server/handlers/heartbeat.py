"""Heartbeat (key 12): keep a member's session alive; tells it when to rejoin."""

from __future__ import annotations

from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.HEARTBEAT
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R: Any = codec.response_class(API_KEY)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        err = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        err = ctx.services.coordinators.groups.heartbeat(
            req.group_id, req.member_id, req.group_instance_id if ctx.version >= 3 else None, req.generation_id)
    return R(error_code=int(err))
