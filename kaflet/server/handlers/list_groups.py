"""ListGroups (key 16): the groups this broker coordinates (v4: filtered by state; v5: by type,
classic or consumer, and each group's type)."""

from __future__ import annotations

from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.LIST_GROUPS
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R: Any = codec.response_class(API_KEY)
    states = set(req.states_filter or []) if ctx.version >= 4 else set()
    types = set(req.types_filter or []) if ctx.version >= 5 else set()
    err, groups = ctx.services.coordinators.groups.list_groups(states or None, types or None)
    # Kafka lists every group to a principal with Describe on the cluster, else those it may Describe.
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        visible = ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, (g[0] for g in groups))
        groups = [g for g in groups if g[0] in visible]
    listed = [R.ListedGroup(group_id=g, protocol_type=pt, group_state=st, group_type=kind)
              for g, pt, st, kind in groups]
    return R(error_code=int(err), groups=listed)
