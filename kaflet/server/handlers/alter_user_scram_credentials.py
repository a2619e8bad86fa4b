"""AlterUserScramCredentials (key 51): upsert and delete SCRAM credentials in /config/users."""

from __future__ import annotations

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation
from kaflet.security.scram_store import Deletion, Upsertion
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.ALTER_USER_SCRAM_CREDENTIALS
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    if not ctx.authorize_cluster(AclOperation.ALTER):
        # Kafka answers every user named in the request with the error, once each.
        users = dict.fromkeys([u.name for u in req.upsertions] + [d.name for d in req.deletions])
        return R(results=[
            R.AlterUserScramCredentialsResult(user=u, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                              error_message=None) for u in users])
    results = await ctx.services.admin.scram_credentials.alter(
        [Upsertion(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password)) for u in req.upsertions],
        [Deletion(d.name, d.mechanism) for d in req.deletions],
    )
    return R(results=[
        R.AlterUserScramCredentialsResult(user=r.user, error_code=r.error_code, error_message=r.error_message)
        for r in results])
