"""DeleteTopics (key 20): by name (v0-6) or by topic id (v6).

As Kafka: a topic named and given an id makes the request INVALID_REQUEST; an unknown id is
UNKNOWN_TOPIC_ID; an id whose topic the principal may not Describe is TOPIC_AUTHORIZATION_FAILED
without its name (ids are not secret, names are).
"""

from __future__ import annotations

import uuid

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.DELETE_TOPICS
MIN_VERSION = 0
MAX_VERSION = 6


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    cache = ctx.services.cluster.metadata
    targets: list[tuple[str | None, uuid.UUID]] = []
    if ctx.version >= 6:
        # The codec decodes the zero id as None.
        targets = [(t.name, t.topic_id or uuid.UUID(int=0)) for t in req.topics]
    else:
        targets = [(n, uuid.UUID(int=0)) for n in req.topic_names]
    if any(name is not None and tid.int != 0 for name, tid in targets):
        # Kafka's InvalidRequestException, answered for every topic of the request.
        return R(responses=[R.DeletableTopicResult(
            name=name, topic_id=tid, error_code=ErrorCode.INVALID_REQUEST,
            error_message="Topic name and topic ID can not both be specified.") for name, tid in targets])
    results = []
    for name, tid in targets:
        if name is None:
            info = cache.topic_by_id(tid.bytes)
            if info is None:
                results.append(R.DeletableTopicResult(name=None, topic_id=tid, error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                                                      error_message="This server does not host this topic ID."))
                continue
            if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, info.name):
                # Ids are not secret (Kafka), the name is: it stays out of the answer.
                results.append(R.DeletableTopicResult(name=None, topic_id=tid,
                                                      error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                      error_message="Authorization failed."))
                continue
            name = info.name
        if not ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, name):
            results.append(R.DeletableTopicResult(name=name, topic_id=tid,
                                                  error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                  error_message="Authorization failed."))
            continue
        code, message = await ctx.services.admin.topics.delete(name, req.timeout_ms)
        results.append(R.DeletableTopicResult(name=name, topic_id=tid, error_code=code, error_message=message))
    return R(responses=results)
