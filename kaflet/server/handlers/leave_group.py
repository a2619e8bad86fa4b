"""LeaveGroup (key 13): members leave (v3+: several at once, also by group.instance.id)."""

from __future__ import annotations

from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.LEAVE_GROUP
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R: Any = codec.response_class(API_KEY)
    v = ctx.version
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[])
    leaving: list[tuple[str, str | None]] = (
        [(m.member_id, m.group_instance_id) for m in req.members] if v >= 3 else [(req.member_id, None)]
    )
    err, members = ctx.services.coordinators.groups.leave_group(req.group_id, leaving)
    if v >= 3:
        resp = R(error_code=int(err), members=[
            R.MemberResponse(member_id=m, group_instance_id=i, error_code=int(e)) for m, i, e in members])
    else:
        # One member: its error is the request's error (Kafka's LeaveGroupResponse.getError).
        if err == ErrorCode.NONE:
            err = next((e for _, _, e in members if e != ErrorCode.NONE), ErrorCode.NONE)
        resp = R(error_code=int(err))
    return resp
