"""DescribeTopicPartitions (key 75, KIP-966): topics' partitions, paged by a cursor.

As Kafka's DescribeTopicPartitionsRequestHandler: no topics means all topics; topics are
answered in name order from the cursor's (topic, partition) on, until `ResponsePartitionLimit`
partitions (capped by max.request.partition.size.limit, at least 1) are listed, and
`NextCursor` says where the next request resumes. A topic the principal may not Describe is
left out of an all-topics answer and answered TOPIC_AUTHORIZATION_FAILED (with the zero id)
when named; a cursor whose topic is not among the named ones, or whose partition is negative,
makes the whole request INVALID_REQUEST.

Eligible leader replicas and the last known ELR are always empty lists: only a KRaft controller
keeps them (KIP-966's ELR needs the eligible.leader.replicas.version feature), and a ZooKeeper-
mode broker, which kaflet is, has no such state to report.
"""

from __future__ import annotations

import uuid
from typing import Any

from kaflet.metadata.metadata_cache import INTERNAL_TOPICS, MetadataCache, PartitionInfo, TopicInfo
from kaflet.metadata.topic_names import invalid_reason
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.DESCRIBE_TOPIC_PARTITIONS
MIN_VERSION = 0
MAX_VERSION = 0

_ZERO_ID = uuid.UUID(int=0)


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    return await serve(ctx, codec.decode_request(API_KEY, ctx.version, body))


async def serve(ctx: RequestContext, req: Any) -> Response:
    """Answer a decoded request in real partition numbers (the gateway renumbers: server/renumbering.py)."""
    R = codec.response_class(API_KEY)
    cache = ctx.services.cluster.metadata
    cursor = req.cursor
    cursor_topic: str = cursor.topic_name if cursor is not None else ""
    fetch_all = not req.topics
    if fetch_all:
        names = {n for n in cache.topics if n >= cursor_topic}
    else:
        names = {t.name for t in req.topics if t.name >= cursor_topic}
        if cursor is not None and cursor.topic_name not in names:
            return _invalid_request(R, req)  # the cursor's topic must be one of those named
    if cursor is not None and cursor.partition_index < 0:
        return _invalid_request(R, req)
    ordered = sorted(names)
    describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, ordered)
    limit = max(min(ctx.services.settings.max_request_partition_size_limit, req.response_partition_limit), 1)

    topics: list[Any] = []
    next_cursor = None
    remaining = limit
    for name in (n for n in ordered if n in describable):
        if remaining == 0:
            # Every partition of the previous topics is answered: the next page starts here.
            next_cursor = R.Cursor(topic_name=name, partition_index=0)
            break
        info = cache.topics.get(name)
        if info is None:
            if not fetch_all:
                code = ErrorCode.INVALID_TOPIC_EXCEPTION if invalid_reason(name) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                topics.append(R.DescribeTopicPartitionsResponseTopic(
                    error_code=code, name=name, topic_id=_ZERO_ID, is_internal=name in INTERNAL_TOPICS,
                    partitions=[]))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        parts, next_index = _partitions(R, cache, ctx.listener, info, start, remaining)
        topics.append(R.DescribeTopicPartitionsResponseTopic(
            error_code=ErrorCode.NONE, name=name, topic_id=uuid.UUID(bytes=info.topic_id),
            is_internal=info.internal, partitions=parts,
            topic_authorized_operations=_bit_field(ctx.authorized_operations(ResourceType.TOPIC, name))))
        if next_index >= 0:
            next_cursor = R.Cursor(topic_name=name, partition_index=next_index)
            break
        remaining -= len(parts)
    if not fetch_all:
        # The existence of a topic the principal may not Describe is not disclosed.
        topics.extend(R.DescribeTopicPartitionsResponseTopic(
            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=_ZERO_ID, is_internal=False,
            partitions=[]) for name in ordered if name not in describable)
    return R(topics=topics, next_cursor=next_cursor)


def _partitions(R: Any, cache: MetadataCache, listener: str, info: TopicInfo, start: int,
                most: int) -> tuple[list[Any], int]:
    """Partitions start.. of a topic, at most `most`; and the index the next page starts at (-1: none).

    As Kafka: the leader is -1 unless it is alive with an endpoint on the request's listener,
    and a replica is offline when its broker is not, or in an offline log dir.
    """
    count = len(info.partitions)
    upper = min(count, start + most)
    P = R.DescribeTopicPartitionsResponseTopic.DescribeTopicPartitionsResponsePartition
    reachable = {b.id for b in cache.live_brokers() if b.endpoint(listener) is not None}
    out = []
    for index in range(start, upper):
        p = info.partitions.get(index)
        if p is None:
            continue
        out.append(P(error_code=ErrorCode.NONE, partition_index=index,
                     leader_id=p.leader if p.leader in reachable else -1, leader_epoch=p.leader_epoch,
                     replica_nodes=list(p.replicas), isr_nodes=list(p.isr),
                     eligible_leader_replicas=[], last_known_elr=[],
                     offline_replicas=_offline(p, reachable)))
    return out, upper if upper < count else -1


def _offline(p: PartitionInfo, reachable: set[int]) -> list[int]:
    """Replicas on a dead broker (or one without the listener) or in an offline log dir, in replica order."""
    offline = set(p.offline_replicas)
    return [r for r in p.replicas if r in offline or r not in reachable]


def _bit_field(operations: set[int]) -> int:
    """Kafka's Utils.to32BitField: bit `code` set for each operation (this schema's field is a plain int32)."""
    return sum(1 << code for code in operations)


def _invalid_request(R: Any, req: Any) -> Response:
    """Kafka's DescribeTopicPartitionsRequest.getErrorResponse for INVALID_REQUEST."""
    return R(topics=[R.DescribeTopicPartitionsResponseTopic(
        error_code=ErrorCode.INVALID_REQUEST, name=t.name, topic_id=_ZERO_ID, is_internal=False, partitions=[])
        for t in req.topics], next_cursor=None)
