"""DeleteAcls (key 31): delete the ACLs each filter matches (needs Alter on the cluster)."""

from __future__ import annotations

from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclBindingFilter, AclError, AclOperation, PatternType, filter_from_wire
from kaflet.server.handlers.create_acls import NO_AUTHORIZER
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.DELETE_ACLS
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R: Any = codec.response_class(API_KEY)
    FR = R.DeleteAclsFilterResult
    M = FR.DeleteAclsMatchingAcl
    n = len(req.filters)
    authorizer = ctx.services.authorizer
    if not ctx.authorize_cluster(AclOperation.ALTER):
        out = [FR(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message="Cluster authorization failed.",
                  matching_acls=[]) for _ in range(n)]
    elif authorizer is None:
        out = [FR(error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER, matching_acls=[])
               for _ in range(n)]
    else:
        out = [FR(error_code=0, error_message=None, matching_acls=[]) for _ in range(n)]
        valid: list[tuple[int, AclBindingFilter]] = []
        for i, f in enumerate(req.filters):
            pattern_type = f.pattern_type_filter if ctx.version >= 1 else PatternType.LITERAL
            try:
                valid.append((i, filter_from_wire(f.resource_type_filter, f.resource_name_filter, pattern_type,
                                                  f.principal_filter, f.host_filter, f.operation, f.permission_type)))
            except AclError as exc:
                out[i] = FR(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc), matching_acls=[])
        if valid:
            results = await authorizer.delete_acls([f for _, f in valid])
            for (i, _), res in zip(valid, results, strict=True):
                out[i] = FR(error_code=res.error_code, error_message=res.error_message, matching_acls=[
                    M(error_code=0, error_message=None, resource_type=b.pattern.resource_type,
                      resource_name=b.pattern.name, pattern_type=b.pattern.pattern_type, principal=b.entry.principal,
                      host=b.entry.host, operation=b.entry.operation, permission_type=b.entry.permission)
                    for b in res.deleted])
    return R(filter_results=out)
