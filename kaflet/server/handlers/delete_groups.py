"""DeleteGroups (key 42): delete empty groups and their committed offsets."""

from __future__ import annotations

from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.DELETE_GROUPS
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R: Any = codec.response_class(API_KEY)
    names = list(dict.fromkeys(req.groups_names))  # a group named twice is deleted (and answered) once
    deletable = ctx.authorized(AclOperation.DELETE, ResourceType.GROUP, names)
    results: dict[str, int] = dict(await ctx.services.coordinators.groups.delete_groups(
        [g for g in names if g in deletable]))
    for g in names:
        if g not in deletable:
            results[g] = ErrorCode.GROUP_AUTHORIZATION_FAILED
    out = [R.DeletableGroupResult(group_id=g, error_code=int(results[g])) for g in names]
    return R(results=out)
