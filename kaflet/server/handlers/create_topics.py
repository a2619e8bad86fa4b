"""CreateTopics (key 19)."""

from __future__ import annotations

import uuid

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext
from kaflet.server.topic_admin import TopicRequest

API_KEY = ApiKey.CREATE_TOPICS
MIN_VERSION = 0
MAX_VERSION = 7


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    C = R.CreatableTopicResult.CreatableTopicConfigs
    validate_only = bool(getattr(req, "validate_only", False))
    seen: dict[str, int] = {}
    for t in req.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    # Kafka's checks: Create on the cluster, or else on each topic; the configs in the answer
    # (v5+) only for topics the principal may DescribeConfigs.
    names = [t.name for t in req.topics]
    creatable = set(names) if ctx.authorize_cluster(AclOperation.CREATE) else \
        ctx.authorized(AclOperation.CREATE, ResourceType.TOPIC, names)
    config_visible = ctx.authorized(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names)
    results = []
    for t in req.topics:
        if seen[t.name] > 1:
            # Kafka refuses every copy of a topic named twice in one request.
            results.append(R.CreatableTopicResult(
                name=t.name, error_code=42, error_message=f"Create topics request from client contains a duplicate topic: {t.name}",
                topic_id=uuid.UUID(int=0), num_partitions=-1, replication_factor=-1, configs=None))
            continue
        if t.name not in creatable:
            results.append(R.CreatableTopicResult(
                name=t.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Authorization failed.",
                topic_id=uuid.UUID(int=0), num_partitions=-1, replication_factor=-1, configs=None))
            continue
        treq = TopicRequest(
            name=t.name,
            num_partitions=t.num_partitions,
            replication_factor=t.replication_factor,
            assignments={a.partition_index: list(a.broker_ids) for a in t.assignments} or None,
            configs={c.name: c.value for c in t.configs},
        )
        out = await ctx.services.admin.topics.create(treq, validate_only, req.timeout_ms)
        configs = None
        config_error = 0
        if out.error_code == 0 and ctx.version >= 5:
            if t.name in config_visible:
                configs = [C(name=k, value=v, read_only=False, config_source=src, is_sensitive=False)
                           for k, (v, src) in sorted(out.configs.items())]
            else:
                # The topic is created; only its configs are withheld (Kafka's TopicConfigErrorCode).
                config_error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        results.append(R.CreatableTopicResult(
            name=t.name,
            topic_id=uuid.UUID(bytes=out.topic_id) if out.topic_id else uuid.UUID(int=0),
            error_code=out.error_code,
            error_message=out.error_message,
            num_partitions=out.num_partitions if out.error_code == 0 and not config_error else -1,
            replication_factor=out.replication_factor if out.error_code == 0 and not config_error else -1,
            configs=configs,
            topic_config_error_code=config_error,
        ))
    return R(topics=results)
