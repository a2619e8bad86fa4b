"""The gateway's renumbering step (kaflet/server/renumbering.py) around real handlers and fake
services: clients name partitions 0..n-1 of what is not disabled, handlers see the real ones.

The fakes are tests/unit/test_handlers.py's. A topic "orders" of 4 partitions with 1 and 2
disabled shows clients 0 -> 0 and 1 -> 3.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import tests.unit.test_handlers as h
from kaflet.gateway.partitions import PartitionRouter
from kaflet.log.config import LogConfig
from kaflet.log.log import Log
from kaflet.metadata.metadata_cache import MetadataCache
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.replication.partition import Partition
from kaflet.server.renumbering import renumbered
from kaflet.server.request_context import RequestContext


class View:
    """The gateway's disabled partitions, as its partition cache gives them."""

    def __init__(self, by_topic: dict[str, frozenset[int]]) -> None:
        self.by_topic = by_topic

    def disabled(self, topic: str) -> frozenset[int]:
        return self.by_topic.get(topic, frozenset())


def _router(cache: MetadataCache, disabled: dict[str, frozenset[int]]) -> PartitionRouter:
    return PartitionRouter(View(disabled), cache.partition_count)


async def _call(router: PartitionRouter, ctx: RequestContext, request: Any) -> Any:
    """Run the request through the step, as the dispatcher does while the gateway is on."""
    handler = renumbered(router, ctx.header.api_key)
    assert handler is not None
    return await h._call(SimpleNamespace(handle=handler), ctx, request)


def test_only_apis_that_carry_partition_numbers_are_renumbered() -> None:
    router = _router(h._cache({}), {})
    assert renumbered(router, ApiKey.CREATE_TOPICS) is None
    assert renumbered(router, ApiKey.FIND_COORDINATOR) is None
    for key in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA, ApiKey.OFFSET_COMMIT,
                ApiKey.OFFSET_FETCH, ApiKey.OFFSET_FOR_LEADER_EPOCH, ApiKey.ADD_PARTITIONS_TO_TXN,
                ApiKey.TXN_OFFSET_COMMIT, ApiKey.DESCRIBE_PRODUCERS, ApiKey.DESCRIBE_TOPIC_PARTITIONS):
        assert renumbered(router, key) is not None


async def test_produce_appends_to_the_real_partition_and_answers_the_clients_number() -> None:
    cache = h._cache({"orders": 4})
    replicas = h.InMemoryReplicas([("orders", i) for i in range(4)])
    ctx = h._context(h._services(cache=cache, replicas=replicas), ApiKey.PRODUCE, 9)
    a, b, c = h._batch(b"a"), h._batch(b"b"), h._batch(b"c")
    answer = await _call(_router(cache, {"orders": frozenset({1, 2})}), ctx,
                         h._produce(1, {("orders", 0): a, ("orders", 1): b, ("orders", 5): c}))
    assert h._produce_answers(answer) == {("orders", 0): (ErrorCode.NONE, 0), ("orders", 1): (ErrorCode.NONE, 0),
                                          ("orders", 5): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)}
    ((entries, _),) = replicas.calls
    assert [(e.topic, e.partition, bytes(e.records)) for e in entries] == [("orders", 0, a), ("orders", 3, b)]


async def test_metadata_hides_disabled_partitions_and_numbers_the_others_from_0() -> None:
    cache = h._cache({"orders": 4, "audit": 2})
    ctx = h._context(h._services(cache=cache), ApiKey.METADATA, 12)
    answer = await _call(_router(cache, {"orders": frozenset({1, 2})}), ctx, h._metadata())
    topics = {t.name: [p.partition_index for p in t.partitions] for t in answer.topics}
    assert topics == {"orders": [0, 1], "audit": [0, 1]}


async def test_describe_topic_partitions_pages_in_the_clients_numbers() -> None:
    cache = h._cache({"orders": 4})
    ctx = h._context(h._services(cache=cache), ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0)
    router = _router(cache, {"orders": frozenset({1, 2})})
    D = codec.request_class(ApiKey.DESCRIBE_TOPIC_PARTITIONS)

    async def page(cursor: int | None) -> tuple[list[int], int | None]:
        answer = await _call(router, ctx, D(
            topics=[D.TopicRequest(name="orders")], response_partition_limit=1,
            cursor=None if cursor is None else D.Cursor(topic_name="orders", partition_index=cursor)))
        nxt = answer.next_cursor
        return [p.partition_index for p in answer.topics[0].partitions], None if nxt is None else nxt.partition_index

    # Real 0 is the client's 0; the page ends at disabled real 1, so the client resumes at its 1 (real 3).
    assert await page(None) == ([0], 1)
    assert await page(1) == ([1], None)
    assert await page(2) == ([], None)  # past the client's last partition


async def test_offset_commit_stores_under_the_real_partition() -> None:
    cache = h._cache({"orders": 4})
    groups = h.RecordingGroups()
    ctx = h._context(h._services(cache=cache, groups=groups), ApiKey.OFFSET_COMMIT, 8)
    answer = await _call(_router(cache, {"orders": frozenset({1, 2})}), ctx,
                         h._commit("g", {("orders", 0): 10, ("orders", 1): 20, ("orders", 2): 30}))
    # The client's 2 has no partition behind it (the topic shows 2).
    assert h._commit_answers(answer) == {("orders", 0): ErrorCode.NONE, ("orders", 1): ErrorCode.NONE,
                                         ("orders", 2): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    ((_, _, _, _, offsets),) = groups.commits
    assert {tp: v.offset for tp, v in offsets.items()} == {("orders", 0): 10, ("orders", 3): 20}


async def test_fetch_reads_the_real_partition_under_the_clients_number(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "orders-1"), LogConfig.from_props({}))
    part = Partition("orders", 1, "AAAAAAAAAAAAAAAAAAAAAA", lg, broker_id=1)
    part.make_leader(1, [1], [1])
    hosted = {("orders", 1): part}
    try:
        batch = h._batch(b"v")
        h._append(hosted, "orders", 1, batch)
        cache = h._cache({"orders": 2})
        ctx = h._context(h._services(cache=cache, replicas=h.LogReplicas(hosted)), ApiKey.FETCH, 12)
        answer = await _call(_router(cache, {"orders": frozenset({0})}), ctx, h._fetch({("orders", 0): 0}))
        assert h._fetched(answer) == {("orders", 0): (ErrorCode.NONE, 1, h._as_stored(batch))}
    finally:
        lg.close()
