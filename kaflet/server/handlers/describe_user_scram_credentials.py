"""DescribeUserScramCredentials (key 50): which SCRAM mechanisms (and iterations) each user has."""

from __future__ import annotations

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    Res = R.DescribeUserScramCredentialsResult
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message="Cluster authorization failed.",
                 results=[])
    users = [u.name for u in req.users] if req.users else None
    results = await ctx.services.admin.scram_credentials.describe(users)
    return R(
        error_code=0, error_message=None, results=[Res(user=r.user, error_code=r.error_code, error_message=r.error_message,
                     credential_infos=[Res.CredentialInfo(mechanism=m, iterations=i) for m, i in (r.credentials or [])])
                 for r in results])
