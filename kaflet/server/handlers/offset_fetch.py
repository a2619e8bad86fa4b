"""OffsetFetch (key 9): a group's committed offsets (v8: several groups per request; v9: a
consumer group's member names its member id and epoch, checked as OffsetCommit checks them)."""

from __future__ import annotations

from typing import Any

from kaflet.coordinator.group.schemas import OffsetValue
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.offset_fetch import (
    OffsetFetchGroup,
    OffsetFetchPartition,
    OffsetFetchResponse,
    OffsetFetchTopic,
)
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.OFFSET_FETCH
MIN_VERSION = 0
MAX_VERSION = 9

TopicPartitions = list[tuple[str, int]] | None
#: Partitions answered with an error of their own: TOPIC_AUTHORIZATION_FAILED, or
#: UNSTABLE_OFFSET_COMMIT when the client requires stable offsets and a transaction's are pending.
PartitionErrors = dict[tuple[str, int], ErrorCode]


def _wanted(topics: Any) -> TopicPartitions:
    """The requested partitions; None (a null topic list, v2+) means all committed ones."""
    if topics is None:
        return None
    return [(t.name, p) for t in topics for p in t.partition_indexes]


def _by_topic(offsets: dict[tuple[str, int], OffsetValue | None], error: ErrorCode = ErrorCode.NONE,
              denied: PartitionErrors | None = None) -> dict[str, list[tuple[int, int, int, str, int]]]:
    out: dict[str, list[tuple[int, int, int, str, int]]] = {}
    denied = denied or {}
    for (topic, part), value in offsets.items():
        if (topic, part) in denied:
            row = (part, -1, -1, "", int(denied[(topic, part)]))
        elif value is None:
            row = (part, -1, -1, "", int(error))  # nothing committed: offset -1, no metadata
        else:
            row = (part, value.offset, value.leader_epoch, value.metadata, int(error))
        out.setdefault(topic, []).append(row)
    return out


def _fetch(ctx: RequestContext, group_id: str, wanted: TopicPartitions, require_stable: bool = False,
           member: tuple[str | None, int] = (None, -1)
           ) -> tuple[ErrorCode, dict[tuple[str, int], OffsetValue | None], PartitionErrors]:
    err, offsets, denied = _fetch_described(ctx, group_id, wanted, member)
    if require_stable and err == ErrorCode.NONE:
        coordinator = ctx.services.coordinators.groups
        for tp in offsets:
            if tp not in denied and coordinator.has_pending_txn_offsets(group_id, tp):
                denied[tp] = ErrorCode.UNSTABLE_OFFSET_COMMIT
    return err, offsets, denied


def _fetch_described(ctx: RequestContext, group_id: str, wanted: TopicPartitions, member: tuple[str | None, int]
                     ) -> tuple[ErrorCode, dict[tuple[str, int], OffsetValue | None], PartitionErrors]:
    """Kafka's checks around the coordinator: Describe on the group, then on each topic.

    Requested partitions of topics the principal may not Describe answer TOPIC_AUTHORIZATION_FAILED;
    when all committed offsets are asked for, such topics are silently left out.
    """
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, {}, {}
    if wanted is None:
        err, offsets = ctx.services.coordinators.groups.fetch_offsets(group_id, None, *member)
        visible = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in offsets))
        return err, {tp: v for tp, v in offsets.items() if tp[0] in visible}, {}
    visible = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in wanted))
    denied = {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED for tp in wanted if tp[0] not in visible}
    err, offsets = ctx.services.coordinators.groups.fetch_offsets(
        group_id, [tp for tp in wanted if tp not in denied], *member)
    if err == ErrorCode.NONE and denied:
        # Keep the request's order, as the coordinator does for the allowed ones.
        offsets = {tp: offsets.get(tp) for tp in wanted}
    return err, offsets, denied


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    return await serve(ctx, codec.decode_request(API_KEY, ctx.version, body))


async def serve(ctx: RequestContext, req: Any) -> Response:
    """Answer a decoded request in real partition numbers (the gateway renumbers: server/renumbering.py)."""
    v = ctx.version
    if v >= 8:
        groups = []
        for g in req.groups:
            member = (g.member_id, g.member_epoch) if v >= 9 else (None, -1)
            err, offsets, denied = _fetch(ctx, g.group_id, _wanted(g.topics), bool(req.require_stable), member)
            topics = [] if err != ErrorCode.NONE else [
                OffsetFetchTopic(name, [OffsetFetchPartition(*row) for row in rows])
                for name, rows in _by_topic(offsets, denied=denied).items()]
            groups.append(OffsetFetchGroup(g.group_id, topics, int(err)))
        return OffsetFetchResponse(groups)

    R: Any = codec.response_class(API_KEY)
    T = R.OffsetFetchResponseTopic
    P = T.OffsetFetchResponsePartition
    wanted = _wanted(req.topics) if v >= 2 else _wanted(req.topics or [])
    err, offsets, denied = _fetch(ctx, req.group_id, wanted, v >= 7 and bool(req.require_stable))
    by_topic: dict[str, list[tuple[int, int, int, str, int]]] = {}
    if err == ErrorCode.NONE:
        by_topic = _by_topic(offsets, denied=denied)
    elif v < 2 and wanted:
        # No top-level error field before v2: every partition carries the group's error.
        by_topic = _by_topic(dict.fromkeys(wanted), err)
    topics = [T(name=name, partitions=[P(partition_index=i, committed_offset=o, committed_leader_epoch=e,
                                         metadata=m, error_code=c) for i, o, e, m, c in rows])
              for name, rows in by_topic.items()]
    return R(topics=topics, error_code=int(err))
