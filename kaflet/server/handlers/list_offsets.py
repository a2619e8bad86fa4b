"""ListOffsets (key 2): earliest, latest, max-timestamp and by-timestamp offset lookups."""

from __future__ import annotations

from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode, KafkaError
from kaflet.protocol.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
    decode_list_offsets_request,
)
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.LIST_OFFSETS
MIN_VERSION = 0
MAX_VERSION = 7

CONSUMER_REPLICA_ID = -1
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
READ_COMMITTED = 1


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    return await serve(ctx, decode_list_offsets_request(body, ctx.version))


async def serve(ctx: RequestContext, req: ListOffsetsRequest) -> Response:
    """Answer a decoded request in real partition numbers (the gateway renumbers: server/renumbering.py)."""
    topics = []
    describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in req.topics))
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if t.name not in describable:
                parts.append(ListOffsetsPartitionResponse(p.partition_index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            parts.append(_lookup(ctx, t.name, p, req.replica_id, req.isolation_level))
        topics.append(ListOffsetsTopicResponse(t.name, parts))
    return ListOffsetsResponse(topics, ctx.version)


def _lookup(ctx: RequestContext, topic: str, p: ListOffsetsPartition, replica_id: int,
            isolation_level: int) -> ListOffsetsPartitionResponse:
    """One partition's answer."""
    resp = ListOffsetsPartitionResponse(p.partition_index)
    partition = ctx.services.storage.replicas.get(topic, p.partition_index)
    if partition is None:
        resp.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return resp
    if not partition.is_leader:
        resp.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return resp
    epoch_error = partition.check_leader_epoch(p.current_leader_epoch)
    if epoch_error:
        resp.error_code = epoch_error
        return resp
    log = partition.log
    # Consumers see up to the high watermark, read_committed ones up to the last stable offset;
    # a follower (replica id >= 0) asks for the leader's log end offset, as in Kafka.
    if replica_id != CONSUMER_REPLICA_ID:
        latest = log.log_end_offset
    else:
        latest = log.last_stable_offset if isolation_level == READ_COMMITTED else log.high_watermark
    ts = p.timestamp
    if ctx.version == 0:
        if ts == LATEST:
            resp.old_style_offsets = [latest]
        elif ts == EARLIEST:
            resp.old_style_offsets = [log.log_start_offset]
        else:
            found = log.offset_for_timestamp(ts)
            resp.old_style_offsets = [found[0] if found else latest]
        return resp
    resp.leader_epoch = partition.leader_epoch
    if ts == LATEST:
        resp.offset = latest
    elif ts == EARLIEST:
        resp.offset = log.log_start_offset
    elif ts == MAX_TIMESTAMP and ctx.version >= 7:
        found = log.offset_for_timestamp(MAX_TIMESTAMP)
        if found is not None and found.offset >= 0:
            resp.offset, resp.timestamp = found.offset, found.timestamp
            resp.leader_epoch = log.epoch_for_offset(found.offset)
    elif ts < 0:
        resp.error_code = ErrorCode.INVALID_REQUEST
    else:
        try:
            found = log.offset_for_timestamp(ts)
        except KafkaError as exc:
            resp.error_code = exc.code
            return resp
        if found is not None and found.offset < latest:
            resp.offset, resp.timestamp = found.offset, found.timestamp
            resp.leader_epoch = log.epoch_for_offset(found.offset)
    return resp
