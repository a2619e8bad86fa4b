"""DescribeGroups (key 15): state, protocol and members of groups."""

from __future__ import annotations

from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.DESCRIBE_GROUPS
MIN_VERSION = 0
MAX_VERSION = 5



async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R: Any = codec.response_class(API_KEY)
    G = R.DescribedGroup
    M = G.DescribedGroupMember
    include_ops = ctx.version >= 3 and bool(req.include_authorized_operations)
    groups = []
    for group_id in req.groups:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(G(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=group_id, group_state="",
                            protocol_type="", protocol_data="", members=[], authorized_operations=None))
            continue
        err, summary = ctx.services.coordinators.groups.describe_group(group_id)
        if err != ErrorCode.NONE:
            groups.append(G(error_code=int(err), group_id=group_id, group_state="", protocol_type="",
                            protocol_data="", members=[], authorized_operations=None))
            continue
        members = [M(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                     client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
                   for m in summary.members]
        groups.append(G(error_code=0, group_id=group_id, group_state=summary.state,
                        protocol_type=summary.protocol_type, protocol_data=summary.protocol, members=members,
                        authorized_operations=ctx.authorized_operations(ResourceType.GROUP, group_id)
                        if include_ops else None))
    return R(groups=groups)
