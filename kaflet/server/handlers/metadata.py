"""Metadata (key 3): brokers, controller and topic partitions; auto-creates topics.

With an authorizer, as Kafka: topics the principal may not Describe are left out of an all-topics
answer and get TOPIC_AUTHORIZATION_FAILED when asked for by name (or id); auto-creation needs
Create on the cluster or on the topic.
"""

from __future__ import annotations

import uuid
from typing import Any

from kaflet.metadata.metadata_cache import MetadataCache, TopicInfo
from kaflet.metadata.topic_names import invalid_reason
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.METADATA
MIN_VERSION = 0
MAX_VERSION = 12

# Authorized operations go out as the set of AclOperation codes the codec turns into the bit
# field; None encodes "not requested" (INT32_MIN).
NO_OPERATIONS = None


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    return await serve(ctx, codec.decode_request(API_KEY, ctx.version, body))


async def serve(ctx: RequestContext, req: Any) -> Response:
    """Answer a decoded request in real partition numbers (the gateway renumbers: server/renumbering.py)."""
    services = ctx.services
    await services.cluster.metadata_known()
    cache = services.cluster.metadata
    auto_create_enabled = services.settings.auto_create_topics_enable
    R = codec.response_class(API_KEY)
    v = ctx.version
    auto_create = getattr(req, "allow_auto_topic_creation", True) if v >= 4 else True
    include_ops = v >= 8 and bool(getattr(req, "include_topic_authorized_operations", False))

    requested = req.topics
    all_topics = requested is None or (v == 0 and not requested)
    if all_topics:
        names: list[tuple[str | None, Any]] = [(n, None) for n in sorted(cache.topics)]
    else:
        names = [(t.name, getattr(t, "topic_id", None)) for t in requested]
    # Describe decides what is visible; names of ids are resolved first (ids are not secret).
    describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, _names(names, cache))
    may_create_any = auto_create and auto_create_enabled and \
        ctx.authorize_cluster(AclOperation.CREATE)

    topics = []
    to_create: list[str] = []
    live = cache.live_brokers()
    for name, tid in names:
        info: TopicInfo | None = None
        by_id = name is None
        if name is None and tid is not None:
            info = cache.topic_by_id(tid.bytes)
            if info is None:
                topics.append(R.MetadataResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=tid, is_internal=False, partitions=[]))
                continue
            name = info.name
        assert name is not None
        if name not in describable:
            if not all_topics:
                topics.append(R.MetadataResponseTopic(
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=None if by_id else name,
                    topic_id=tid if by_id else uuid.UUID(int=0), is_internal=False, partitions=[]))
            continue
        info = info or cache.topics.get(name)
        if info is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if invalid_reason(name) is not None:
                code = ErrorCode.INVALID_TOPIC_EXCEPTION
            elif auto_create and auto_create_enabled:
                if may_create_any or ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, name):
                    to_create.append(name)
                    code = ErrorCode.LEADER_NOT_AVAILABLE
                else:
                    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            topics.append(R.MetadataResponseTopic(
                error_code=code, name=name, topic_id=uuid.UUID(int=0), is_internal=False, partitions=[]))
            continue
        ops = ctx.authorized_operations(ResourceType.TOPIC, name) if include_ops else NO_OPERATIONS
        topics.append(_topic(R, info, ops))
    if to_create:
        await services.admin.topics.auto_create(to_create)

    brokers = []
    for b in live:
        ep = b.endpoint(ctx.listener)
        if ep is not None:
            brokers.append(R.MetadataResponseBroker(node_id=b.id, host=ep.host or "", port=ep.port, rack=b.rack))
    resp = R(
        brokers=brokers,
        cluster_id=services.cluster.cluster_id,
        controller_id=cache.controller_id,
        topics=topics,
    )
    if 8 <= v <= 10:
        include_cluster = bool(getattr(req, "include_cluster_authorized_operations", False))
        resp.authorized_operations = cluster_operations(ctx) if include_cluster else NO_OPERATIONS
    return resp


def _names(names: list[tuple[str | None, Any]], cache: MetadataCache) -> list[str]:
    out = []
    for name, tid in names:
        if name is None and tid is not None:
            info = cache.topic_by_id(tid.bytes)
            name = info.name if info is not None else None
        if name is not None:
            out.append(name)
    return out


def cluster_operations(ctx: RequestContext) -> set[int]:
    """The cluster's authorized operations; empty without Describe on the cluster, as Kafka."""
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return set()
    return ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)


def _topic(R: Any, info: TopicInfo, ops: set[int] | None) -> Any:
    P = R.MetadataResponseTopic.MetadataResponsePartition
    parts = []
    for idx in sorted(info.partitions):
        p = info.partitions[idx]
        code = ErrorCode.NONE if p.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE
        parts.append(P(error_code=code, partition_index=idx, leader_id=p.leader, leader_epoch=p.leader_epoch,
                       replica_nodes=p.replicas, isr_nodes=p.isr, offline_replicas=p.offline_replicas))
    return R.MetadataResponseTopic(
        error_code=0, name=info.name, topic_id=uuid.UUID(bytes=info.topic_id), is_internal=info.internal,
        partitions=parts, authorized_operations=ops,
    )
