"""Topics by id and DescribeTopicPartitions (KIP-966) against the handlers and fake services.

The fakes are tests/unit/test_handlers.py's: a metadata cache with one live broker (1) leading
every partition, and an authorizer that denies the pairs it is given.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import tests.unit.test_handlers as h
from kaflet.metadata.metadata_cache import MetadataCache
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.security.acl import ResourceType
from kaflet.server.handlers import describe_topic_partitions, metadata
from kaflet.server.services import Services

M = codec.request_class(ApiKey.METADATA)
D = codec.request_class(ApiKey.DESCRIBE_TOPIC_PARTITIONS)


def _tid(cache: MetadataCache, name: str) -> uuid.UUID:
    return uuid.UUID(bytes=cache.topics[name].topic_id)


def _by_id(*ids: uuid.UUID, name: str | None = None) -> Any:
    return M(topics=[M.MetadataRequestTopic(name=name, topic_id=i) for i in ids], allow_auto_topic_creation=True,
             include_topic_authorized_operations=False)


async def test_metadata_looks_topics_up_by_id_whatever_the_name() -> None:
    cache = h._cache({"orders": 2, "audit": 1})
    unknown = uuid.uuid4()
    ctx = h._context(h._services(cache=cache), ApiKey.METADATA, 12)
    for name in (None, "", "audit"):  # a non-zero id wins over any name, as in Kafka
        answer = await h._call(metadata, ctx, _by_id(_tid(cache, "orders"), unknown, name=name))
        got = {t.topic_id: (t.error_code, t.name, len(t.partitions)) for t in answer.topics}
        assert got == {_tid(cache, "orders"): (0, "orders", 2), unknown: (ErrorCode.UNKNOWN_TOPIC_ID, None, 0)}


async def test_metadata_by_id_of_an_undescribable_topic_echoes_the_id_not_the_name() -> None:
    cache = h._cache({"secret": 1})
    services = h._services(cache=cache, authorizer=h.DenyingAuthorizer([(ResourceType.TOPIC, "secret")]))
    answer = await h._call(metadata, h._context(services, ApiKey.METADATA, 12), _by_id(_tid(cache, "secret")))
    assert [(t.error_code, t.name, t.topic_id) for t in answer.topics] == [
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, _tid(cache, "secret"))]


async def test_metadata_v10_and_v11_refuse_ids_and_null_names() -> None:
    cache = h._cache({"orders": 1})
    for version in (10, 11):
        ctx = h._context(h._services(cache=cache), ApiKey.METADATA, version)
        for request in (_by_id(_tid(cache, "orders"), name="orders"), _by_id(uuid.UUID(int=0))):
            answer = await h._call(metadata, ctx, request)
            assert [t.error_code for t in answer.topics] == [ErrorCode.INVALID_REQUEST]


def _dtp(*names: str, limit: int = 2000, cursor: tuple[str, int] | None = None) -> Any:
    return D(topics=[D.TopicRequest(name=n) for n in names], response_partition_limit=limit,
             cursor=None if cursor is None else D.Cursor(topic_name=cursor[0], partition_index=cursor[1]))


def _with_limit(services: Services, limit: int) -> Services:
    return dataclasses.replace(services, settings=dataclasses.replace(
        services.settings, max_request_partition_size_limit=limit))


def _pages(answer: Any) -> tuple[list[tuple[str, list[int]]], tuple[str, int] | None]:
    cursor = answer.next_cursor
    return ([(t.name, [p.partition_index for p in t.partitions]) for t in answer.topics],
            None if cursor is None else (cursor.topic_name, cursor.partition_index))


async def test_describe_topic_partitions_pages_all_topics_in_name_order() -> None:
    cache = h._cache({"b": 3, "a": 2, "c": 1})
    ctx = h._context(h._services(cache=cache), ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0)
    answer = await h._call(describe_topic_partitions, ctx, _dtp(limit=3))
    assert _pages(answer) == ([("a", [0, 1]), ("b", [0])], ("b", 1))
    answer = await h._call(describe_topic_partitions, ctx, _dtp(limit=3, cursor=("b", 1)))
    assert _pages(answer) == ([("b", [1, 2]), ("c", [0])], None)
    # A page that ends with a topic's last partition points at the next topic's first.
    answer = await h._call(describe_topic_partitions, ctx, _dtp(limit=2))
    assert _pages(answer) == ([("a", [0, 1])], ("b", 0))
    answer = await h._call(describe_topic_partitions, ctx, _dtp())
    assert [(t.name, t.topic_id, t.is_internal) for t in answer.topics] == [
        (n, _tid(cache, n), False) for n in "abc"]
    p = answer.topics[0].partitions[0]
    assert (p.leader_id, p.replica_nodes, p.isr_nodes, p.eligible_leader_replicas, p.last_known_elr,
            p.offline_replicas) == (1, [1], [1], [], [], [])


async def test_describe_topic_partitions_marks_internal_topics() -> None:
    cache = h._cache({"__consumer_offsets": 1, "orders": 1})
    ctx = h._context(h._services(cache=cache), ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0)
    answer = await h._call(describe_topic_partitions, ctx, _dtp("__consumer_offsets", "orders", "__transaction_state"))
    assert [(t.name, t.error_code, t.is_internal) for t in answer.topics] == [
        ("__consumer_offsets", 0, True), ("__transaction_state", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True),
        ("orders", 0, False)]


async def test_describe_topic_partitions_limit_is_capped_by_the_broker_and_at_least_one() -> None:
    services = _with_limit(h._services(cache=h._cache({"a": 5})), 2)
    ctx = h._context(services, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0)
    assert _pages(await h._call(describe_topic_partitions, ctx, _dtp("a"))) == ([("a", [0, 1])], ("a", 2))
    assert _pages(await h._call(describe_topic_partitions, ctx, _dtp("a", limit=0))) == ([("a", [0])], ("a", 1))


async def test_describe_topic_partitions_named_topics_errors_and_cursor_rules() -> None:
    cache = h._cache({"orders": 2, "secret": 1})
    services = h._services(cache=cache, authorizer=h.DenyingAuthorizer([(ResourceType.TOPIC, "secret")]))
    ctx = h._context(services, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0)
    answer = await h._call(describe_topic_partitions, ctx, _dtp("secret", "orders", "missing", "bad name!"))
    assert [(t.name, t.error_code, t.topic_id) for t in answer.topics] == [
        ("bad name!", ErrorCode.INVALID_TOPIC_EXCEPTION, None), ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None),
        ("orders", ErrorCode.NONE, _tid(cache, "orders")),
        ("secret", ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)]
    # All topics: an undescribable one is simply not there.
    assert [t.name for t in (await h._call(describe_topic_partitions, ctx, _dtp())).topics] == ["orders"]
    # The cursor's topic must be among those named, and its partition not negative.
    for request in (_dtp("orders", cursor=("other", 0)), _dtp("orders", cursor=("orders", -1))):
        answer = await h._call(describe_topic_partitions, ctx, request)
        assert [(t.name, t.error_code) for t in answer.topics] == [("orders", ErrorCode.INVALID_REQUEST)]
    # Topics before the cursor's are skipped.
    answer = await h._call(describe_topic_partitions, ctx, _dtp("orders", "missing", cursor=("orders", 1)))
    assert _pages(answer) == ([("orders", [1])], None)


async def test_describe_topic_partitions_leader_on_a_dead_broker_is_none_and_replica_offline() -> None:
    cache = h._cache({"orders": 1}, brokers=(1, 2))
    part = cache.topics["orders"].partitions[0]
    part.leader, part.replicas, part.isr = 2, [2, 1], [2, 1]
    del cache.brokers[2]
    ctx = h._context(h._services(cache=cache), ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0)
    p = (await h._call(describe_topic_partitions, ctx, _dtp("orders"))).topics[0].partitions[0]
    assert (p.leader_id, p.replica_nodes, p.offline_replicas) == (-1, [2, 1], [2])
