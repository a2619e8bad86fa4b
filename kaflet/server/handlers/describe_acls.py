"""DescribeAcls (key 29): the ACLs a filter matches (needs Describe on the cluster)."""

from __future__ import annotations

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import (
    AccessControlEntry,
    AclError,
    AclOperation,
    PatternType,
    ResourcePattern,
    filter_from_wire,
)
from kaflet.server.handlers.create_acls import NO_AUTHORIZER
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.DESCRIBE_ACLS
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    Res = R.DescribeAclsResource
    authorizer = ctx.services.authorizer

    def error(code: ErrorCode, message: str) -> Response:
        return R(error_code=code, error_message=message, resources=[])

    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    if authorizer is None:
        return error(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    # v0 filters have no pattern type: they match literal ACLs only.
    pattern_type = req.pattern_type_filter if ctx.version >= 1 else PatternType.LITERAL
    try:
        acl_filter = filter_from_wire(req.resource_type_filter, req.resource_name_filter, pattern_type,
                                      req.principal_filter, req.host_filter, req.operation, req.permission_type)
    except AclError as exc:
        return error(ErrorCode.INVALID_REQUEST, str(exc))
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in authorizer.acls(acl_filter):
        grouped.setdefault(b.pattern, []).append(b.entry)
    resources = [
        Res(resource_type=p.resource_type, resource_name=p.name, pattern_type=p.pattern_type,
            acls=[Res.AclDescription(principal=e.principal, host=e.host, operation=e.operation,
                                     permission_type=e.permission)
                  for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission))])
        for p, entries in sorted(grouped.items(), key=lambda kv: (kv[0].resource_type, kv[0].pattern_type, kv[0].name))
        # v0 cannot express prefixed ACLs
        if ctx.version >= 1 or p.pattern_type is PatternType.LITERAL
    ]
    return R(error_code=0, error_message=None, resources=resources)
