"""DescribeProducers (key 61): the active producers of partitions (kafka-transactions.sh
describe-producers, Admin.describeProducers), from the local replica's producer state.

As Kafka: Read on the topic, else TOPIC_AUTHORIZATION_FAILED; an unknown topic
UNKNOWN_TOPIC_OR_PARTITION; a partition without a replica here NOT_LEADER_OR_FOLLOWER (or
UNKNOWN_TOPIC_OR_PARTITION when the topic has no such partition).
"""

from __future__ import annotations

from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.DESCRIBE_PRODUCERS
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    return await serve(ctx, codec.decode_request(API_KEY, ctx.version, body))


async def serve(ctx: RequestContext, req: Any) -> Response:
    """Answer a decoded request in real partition numbers (the gateway renumbers: server/renumbering.py)."""
    R = codec.response_class(API_KEY)
    TR = R.TopicResponse
    readable = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, (t.name for t in req.topics))
    topics = ctx.services.cluster.metadata.topics
    out = []
    for t in req.topics:
        if t.name not in readable:
            error: int | None = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif t.name not in topics:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            error = None
        parts = []
        for index in t.partition_indexes:
            resp = TR.PartitionResponse(partition_index=index, error_code=0, error_message=None, active_producers=[])
            if error is not None:
                resp.error_code = error
            else:
                _describe(ctx, resp, t.name, index, topics[t.name])
            parts.append(resp)
        out.append(TR(name=t.name, partitions=parts))
    return R(topics=out)


def _describe(ctx: RequestContext, resp: Any, topic: str, index: int, info: Any) -> None:
    partition = ctx.services.storage.replicas.get(topic, index)
    if partition is None:
        resp.error_code = (ErrorCode.NOT_LEADER_OR_FOLLOWER if index in info.partitions
                           else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return
    PS = resp.ProducerState
    resp.active_producers = [
        PS(producer_id=e.producer_id, producer_epoch=e.producer_epoch, last_sequence=e.last_seq,
           last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
           current_txn_start_offset=e.current_txn_first_offset)
        for e in partition.log.producer_state.producers.values()
    ]
