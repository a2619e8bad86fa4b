"""OffsetFetch (key 9): a group's committed offsets (v8: several groups per request)."""

from __future__ import annotations

from typing import Any

from kaflet.coordinator.group.schemas import OffsetValue
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.OFFSET_FETCH
MIN_VERSION = 0
MAX_VERSION = 8

TopicPartitions = list[tuple[str, int]] | None


def _wanted(topics: Any) -> TopicPartitions:
    """The requested partitions; None (a null topic list, v2+) means all committed ones."""
    if topics is None:
        return None
    return [(t.name, p) for t in topics for p in t.partition_indexes]


def _by_topic(offsets: dict[tuple[str, int], OffsetValue | None], error: ErrorCode = ErrorCode.NONE
              ) -> dict[str, list[tuple[int, int, int, str, int]]]:
    out: dict[str, list[tuple[int, int, int, str, int]]] = {}
    for (topic, part), value in offsets.items():
        if value is None:
            row = (part, -1, -1, "", int(error))  # nothing committed: offset -1, no metadata
        else:
            row = (part, value.offset, value.leader_epoch, value.metadata, int(error))
        out.setdefault(topic, []).append(row)
    return out


async def handle(ctx: RequestContext, body: memoryview) -> bytes:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R: Any = codec.response_class(API_KEY)
    v = ctx.version
    coordinator = ctx.broker.group_coordinator
    if v >= 8:
        G = R.OffsetFetchResponseGroup
        T = G.OffsetFetchResponseTopics
        P = T.OffsetFetchResponsePartitions
        groups = []
        for g in req.groups:
            err, offsets = coordinator.fetch_offsets(g.group_id, _wanted(g.topics))
            topics = [] if err != ErrorCode.NONE else [
                T(name=name, partitions=[P(partition_index=i, committed_offset=o, committed_leader_epoch=e,
                                           metadata=m, error_code=c) for i, o, e, m, c in rows])
                for name, rows in _by_topic(offsets).items()]
            groups.append(G(group_id=g.group_id, topics=topics, error_code=int(err)))
        return codec.encode_response(API_KEY, v, R(throttle_time_ms=0, groups=groups))

    T = R.OffsetFetchResponseTopic
    P = T.OffsetFetchResponsePartition
    wanted = _wanted(req.topics) if v >= 2 else _wanted(req.topics or [])
    err, offsets = coordinator.fetch_offsets(req.group_id, wanted)
    by_topic: dict[str, list[tuple[int, int, int, str, int]]] = {}
    if err == ErrorCode.NONE:
        by_topic = _by_topic(offsets)
    elif v < 2 and wanted:
        # No top-level error field before v2: every partition carries the group's error.
        by_topic = _by_topic(dict.fromkeys(wanted), err)
    topics = [T(name=name, partitions=[P(partition_index=i, committed_offset=o, committed_leader_epoch=e,
                                         metadata=m, error_code=c) for i, o, e, m, c in rows])
              for name, rows in by_topic.items()]
    return codec.encode_response(API_KEY, v, R(throttle_time_ms=0, topics=topics, error_code=int(err)))
