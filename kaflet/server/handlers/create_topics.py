"""CreateTopics (key 19)."""

from __future__ import annotations

import uuid

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.server.request_context import RequestContext
from kaflet.server.topic_admin import TopicRequest

API_KEY = ApiKey.CREATE_TOPICS
MIN_VERSION = 0
MAX_VERSION = 7


async def handle(ctx: RequestContext, body: memoryview) -> bytes:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    C = R.CreatableTopicResult.CreatableTopicConfigs
    validate_only = bool(getattr(req, "validate_only", False))
    seen: dict[str, int] = {}
    for t in req.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    results = []
    for t in req.topics:
        if seen[t.name] > 1:
            # Kafka refuses every copy of a topic named twice in one request.
            results.append(R.CreatableTopicResult(
                name=t.name, error_code=42, error_message=f"Create topics request from client contains a duplicate topic: {t.name}",
                topic_id=uuid.UUID(int=0), num_partitions=-1, replication_factor=-1, configs=None))
            continue
        treq = TopicRequest(
            name=t.name,
            num_partitions=t.num_partitions,
            replication_factor=t.replication_factor,
            assignments={a.partition_index: list(a.broker_ids) for a in t.assignments} or None,
            configs={c.name: c.value for c in t.configs},
        )
        out = await ctx.broker.topic_admin.create(treq, validate_only, req.timeout_ms)
        configs = None
        if out.error_code == 0 and ctx.version >= 5:
            configs = [C(name=k, value=v, read_only=False, config_source=src, is_sensitive=False)
                       for k, (v, src) in sorted(out.configs.items())]
        results.append(R.CreatableTopicResult(
            name=t.name,
            topic_id=uuid.UUID(bytes=out.topic_id) if out.topic_id else uuid.UUID(int=0),
            error_code=out.error_code,
            error_message=out.error_message,
            num_partitions=out.num_partitions if out.error_code == 0 else -1,
            replication_factor=out.replication_factor if out.error_code == 0 else -1,
            configs=configs,
        ))
    return codec.encode_response(API_KEY, ctx.version, R(throttle_time_ms=0, topics=results))
