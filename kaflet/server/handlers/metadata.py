"""Metadata (key 3): brokers, controller and topic partitions; auto-creates topics.

With an authorizer, as Kafka: topics the principal may not Describe are left out of an all-topics
answer and get TOPIC_AUTHORIZATION_FAILED when asked for by name (or id); auto-creation needs
Create on the cluster or on the topic.

By topic id, as Kafka's handleTopicMetadataRequest: from v12, as soon as one requested topic has
a non-zero id every topic is looked up by its id, whatever its name says (null, or the Java
client's ""), and an unknown id is answered UNKNOWN_TOPIC_ID with the id; v10 and v11 carry the
id field but a non-zero id (or a null name) makes the request INVALID_REQUEST.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, TypeVar

from kaflet.metadata.metadata_cache import TopicInfo
from kaflet.metadata.topic_names import invalid_reason
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.metadata_response import (
    MetadataAnswer,
    MetadataBroker,
    encode_partitions,
    encode_topic,
    operations_bits,
)
from kaflet.protocol.response import Response
from kaflet.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.METADATA
MIN_VERSION = 0
MAX_VERSION = 12

# Authorized operations go out as the set of AclOperation codes the codec turns into the bit
# field; None encodes "not requested" (INT32_MIN).
NO_OPERATIONS = None

T = TypeVar("T")
ZERO_ID = bytes(16)


#: A topic the answer names with an error and no partitions: (error code, name, raw topic id).
_TopicError = tuple[int, str | None, bytes]
#: A topic the answer describes: its cached state and authorized operations (None: not asked).
_TopicFound = tuple[TopicInfo, set[int] | None]


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    return await serve(ctx, codec.decode_request(API_KEY, ctx.version, body), encoded=True)


async def serve(ctx: RequestContext, req: Any, *, encoded: bool = False) -> Response:
    """Answer a decoded request in real partition numbers (the gateway renumbers: server/renumbering.py).

    ``encoded``: the answer as bytes of our own encoder, each unchanged topic's part reused
    (protocol/metadata_response.py); otherwise a message of the generic codec to rewrite.
    """
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
    if not all_topics and v < 12 and any(
            t.name is None or _nonzero(getattr(t, "topic_id", None)) for t in requested):
        # Kafka's InvalidRequestException: v10 and v11 carry the fields but not their meaning.
        return _invalid_request(R, requested)
    # Kafka looks every topic up by id as soon as one id is non-zero, whatever the names say
    # (the Java client sends "" with an id); topics with the zero id are then left out.
    ids = [] if all_topics else _unique(t.topic_id for t in requested if _nonzero(getattr(t, "topic_id", None)))
    topics: list[_TopicError | _TopicFound] = []
    names: list[str]
    if all_topics:
        names = sorted(cache.topics)
    elif ids:
        names = []
        for tid in ids:
            found = cache.topic_by_id(tid.bytes)
            if found is None:
                topics.append((ErrorCode.UNKNOWN_TOPIC_ID, None, tid.bytes))
            else:
                names.append(found.name)
    else:
        names = _unique(t.name for t in requested)
    describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    may_create_any = auto_create and auto_create_enabled and \
        ctx.authorize_cluster(AclOperation.CREATE)

    to_create: list[str] = []
    live = cache.live_brokers()
    for name in names:
        info = cache.topics.get(name)
        if name not in describable:
            if ids and info is not None:
                # Topic ids are not secret (Kafka): the id is echoed, the name is not.
                topics.append((ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, info.topic_id))
            elif not all_topics:
                topics.append((ErrorCode.TOPIC_AUTHORIZATION_FAILED, name, ZERO_ID))
            continue
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
            topics.append((code, name, ZERO_ID))
            continue
        ops = ctx.authorized_operations(ResourceType.TOPIC, name) if include_ops else NO_OPERATIONS
        topics.append((info, ops))
    if to_create:
        await services.admin.topics.auto_create(to_create)

    endpoints = [(b, ep) for b in live if (ep := b.endpoint(ctx.listener)) is not None]
    cluster_ops = NO_OPERATIONS
    if 8 <= v <= 10 and getattr(req, "include_cluster_authorized_operations", False):
        cluster_ops = cluster_operations(ctx)
    if encoded:
        return MetadataAnswer(
            version=v,
            brokers=[MetadataBroker(b.id, ep.host or "", ep.port, b.rack) for b, ep in endpoints],
            cluster_id=services.cluster.cluster_id,
            controller_id=cache.controller_id,
            topics=[_topic_wire(v, t) for t in topics],
            cluster_operations=operations_bits(cluster_ops),
        )
    resp = R(
        brokers=[R.MetadataResponseBroker(node_id=b.id, host=ep.host or "", port=ep.port, rack=b.rack)
                 for b, ep in endpoints],
        cluster_id=services.cluster.cluster_id,
        controller_id=cache.controller_id,
        topics=[_topic(R, t) for t in topics],
    )
    if 8 <= v <= 10:
        resp.authorized_operations = cluster_ops
    return resp


def _nonzero(topic_id: uuid.UUID | None) -> bool:
    return topic_id is not None and topic_id.int != 0


def _unique(items: Iterable[T]) -> list[T]:
    """The items without repeats, in request order (Kafka answers each topic once)."""
    return list(dict.fromkeys(items))


def _invalid_request(R: Any, requested: list[Any]) -> Response:
    """Kafka's MetadataRequest.getErrorResponse: every topic INVALID_REQUEST, its id echoed."""
    return R(brokers=[], cluster_id=None, controller_id=-1, topics=[
        R.MetadataResponseTopic(error_code=ErrorCode.INVALID_REQUEST, name=t.name or "",
                                topic_id=getattr(t, "topic_id", None) or uuid.UUID(int=0),
                                is_internal=False, partitions=[])
        for t in requested])


def cluster_operations(ctx: RequestContext) -> set[int]:
    """The cluster's authorized operations; empty without Describe on the cluster, as Kafka."""
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return set()
    return ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)


def _topic_wire(v: int, topic: _TopicError | _TopicFound) -> bytes:
    """A topic's part of an encoded answer; a described one's is kept until the topic changes."""
    if len(topic) == 3:
        code, name, topic_id = topic
        return encode_topic(v, code, name, topic_id, False, encode_partitions(v, ()))
    info, ops = topic
    bits = operations_bits(ops)
    wire = info.wire.get((v, bits))
    if wire is None:
        # The partitions alone are kept too: principals that differ in their operations share them.
        parts = info.wire.get((v, None))
        if parts is None:
            parts = info.wire[(v, None)] = encode_partitions(v, sorted(info.partitions.items()))
        wire = info.wire[(v, bits)] = encode_topic(v, 0, info.name, info.topic_id, info.internal, parts, bits)
    return wire


def _topic(R: Any, topic: _TopicError | _TopicFound) -> Any:
    if len(topic) == 3:
        code, name, topic_id = topic
        return R.MetadataResponseTopic(error_code=code, name=name, topic_id=uuid.UUID(bytes=topic_id),
                                       is_internal=False, partitions=[])
    info, ops = topic
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
