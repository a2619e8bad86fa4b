"""CreatePartitions (key 37): add partitions to existing topics."""

from __future__ import annotations

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.CREATE_PARTITIONS
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    counts: dict[str, int] = {}
    for t in req.topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    alterable = ctx.authorized(AclOperation.ALTER, ResourceType.TOPIC, (t.name for t in req.topics))
    results = []
    for t in req.topics:
        if counts[t.name] > 1:
            results.append(R.CreatePartitionsTopicResult(
                name=t.name, error_code=42, error_message="Duplicate topic in request."))
            continue
        if t.name not in alterable:
            results.append(R.CreatePartitionsTopicResult(
                name=t.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Authorization failed."))
            continue
        assignments = [list(a.broker_ids) for a in t.assignments] if t.assignments is not None else None
        code, message = await ctx.services.admin.topics.create_partitions(
            t.name, t.count, assignments, bool(req.validate_only), req.timeout_ms
        )
        results.append(R.CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=message))
    return R(results=results)
