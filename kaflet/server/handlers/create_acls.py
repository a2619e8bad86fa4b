"""CreateAcls (key 30): store ACLs (needs Alter on the cluster)."""

from __future__ import annotations

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclBinding, AclError, AclOperation, PatternType, binding_from_wire
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.CREATE_ACLS
MIN_VERSION = 0
MAX_VERSION = 3

NO_AUTHORIZER = "No Authorizer is configured on the broker"


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    Result = R.AclCreationResult
    n = len(req.creations)
    authorizer = ctx.services.authorizer
    if not ctx.authorize_cluster(AclOperation.ALTER):
        results = [Result(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                          error_message="Cluster authorization failed.")] * n
    elif authorizer is None:
        results = [Result(error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER)] * n
    else:
        results = [Result(error_code=0, error_message=None)] * n
        valid: list[tuple[int, AclBinding]] = []
        for i, c in enumerate(req.creations):
            # v0 has no pattern type: its ACLs are literal.
            pattern_type = c.resource_pattern_type if ctx.version >= 1 else PatternType.LITERAL
            try:
                valid.append((i, binding_from_wire(c.resource_type, c.resource_name, pattern_type, c.principal,
                                                   c.host, c.operation, c.permission_type)))
            except AclError as exc:
                results[i] = Result(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc))
        if valid:
            errors = await authorizer.create_acls([b for _, b in valid])
            for (i, _), err in zip(valid, errors, strict=True):
                if err is not None:
                    results[i] = Result(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=err)
    return R(results=results)
