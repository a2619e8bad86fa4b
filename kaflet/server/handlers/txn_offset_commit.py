"""TxnOffsetCommit (key 28, v0-3): a transactional producer commits a group's offsets inside its
transaction (the consume-transform-produce loop). Kafka's checks: Write on the transactional
id, Read on the group, Read on each topic; the offsets become the group's committed offsets
when the transaction's COMMIT marker reaches __consumer_offsets."""

from __future__ import annotations

import time
from typing import Any

from kaflet.coordinator.group.schemas import OffsetValue
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.handlers.add_partitions_to_txn import fenced_error
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.TXN_OFFSET_COMMIT
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    return await serve(ctx, codec.decode_request(API_KEY, ctx.version, body))


async def serve(ctx: RequestContext, req: Any) -> Response:
    """Answer a decoded request in real partition numbers (the gateway renumbers: server/renumbering.py)."""
    R: Any = codec.response_class(API_KEY)
    v = ctx.version
    now = int(time.time() * 1000)
    wanted = [(t.name, p) for t in req.topics for p in t.partitions]
    errors: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], OffsetValue] = {}
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        errors = {(t, p.partition_index): ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for t, p in wanted}
    elif not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        errors = {(t, p.partition_index): ErrorCode.GROUP_AUTHORIZATION_FAILED for t, p in wanted}
    else:
        readable = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, (t.name for t in req.topics))
        cache = ctx.services.cluster.metadata
        for topic, p in wanted:
            tp = (topic, p.partition_index)
            if topic not in readable:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif cache.partition(*tp) is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                offsets[tp] = OffsetValue(offset=p.committed_offset, metadata=p.committed_metadata or "",
                                          commit_timestamp=now,
                                          leader_epoch=p.committed_leader_epoch if v >= 2 else -1)
        if offsets:
            result = await ctx.services.coordinators.groups.commit_txn_offsets(
                req.group_id, req.producer_id, req.producer_epoch, req.member_id if v >= 3 else "",
                req.group_instance_id if v >= 3 else None, req.generation_id if v >= 3 else -1, offsets)
            errors.update({tp: fenced_error(code, v, 2) for tp, code in result.items()})
    T = R.TxnOffsetCommitResponseTopic
    P = T.TxnOffsetCommitResponsePartition
    return R(topics=[T(name=t.name, partitions=[P(partition_index=p.partition_index,
                                                  error_code=int(errors[(t.name, p.partition_index)]))
                                                for p in t.partitions])
                     for t in req.topics])
