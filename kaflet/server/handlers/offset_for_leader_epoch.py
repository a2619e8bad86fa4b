"""OffsetForLeaderEpoch (key 23, v0-4): where a leader epoch ends in the leader's log.

Followers ask it before fetching, to find where their log diverges from the leader's; consumers
(KIP-320, e.g. librdkafka after a leader change) ask it to detect truncation. Kafka's rules:
ClusterAction on the cluster allows every topic, otherwise Describe on each topic is needed
(TOPIC_AUTHORIZATION_FAILED); only the leader answers (NOT_LEADER_OR_FOLLOWER, or
UNKNOWN_TOPIC_OR_PARTITION for a partition the metadata does not know); a current leader epoch
(v2+) older than the partition's gets FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH. The
answer is the largest epoch at or below the requested one and its end offset (the log end offset
for the current epoch), or -1/-1 when the log has no such epoch. As in Kafka, the replica id
(v3+) does not change the answer.
"""

from __future__ import annotations

from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    return await serve(ctx, codec.decode_request(API_KEY, ctx.version, body))


async def serve(ctx: RequestContext, req: Any) -> Response:
    """Answer a decoded request in real partition numbers (the gateway renumbers: server/renumbering.py)."""
    R = codec.response_class(API_KEY)
    T = R.OffsetForLeaderTopicResult
    names = [t.topic for t in req.topics]
    if ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        allowed = set(names)
    else:
        allowed = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    replicas = ctx.services.storage.replicas
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if t.topic not in allowed:
                error, epoch, offset = ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, -1
            else:
                current = p.current_leader_epoch if ctx.version >= 2 else -1
                error, epoch, offset = replicas.last_offset_for_leader_epoch(t.topic, p.partition, current,
                                                                             p.leader_epoch)
            parts.append(T.EpochEndOffset(error_code=error, partition=p.partition, leader_epoch=epoch,
                                          end_offset=offset))
        topics.append(T(topic=t.topic, partitions=parts))
    return R(topics=topics)
