"""Handlers against fake services: Produce, Fetch, Metadata and OffsetCommit.

Each test builds a `Services` (kaflet/server/services.py) from in-memory fakes of the narrow
interfaces a handler uses, encodes a request with the codec, runs the handler's ``handle`` and
decodes what it answers. No sockets, no broker process; what a handler must not touch is an
`Unused` that fails the test when reached. Fetch reads real partitions over logs in a temporary
directory, since reading, the high watermark and the long poll are what it is about.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from kaflet.coordinator.group.schemas import OffsetValue
from kaflet.log.config import LogConfig
from kaflet.log.log import Log
from kaflet.metadata.metadata_cache import MetadataCache, PartitionInfo
from kaflet.metadata.zkdata import BrokerInfo, EndPoint, random_uuid
from kaflet.network.connection import DeferredResponse
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.fetch import PartitionFetchData
from kaflet.protocol.header import RequestHeader
from kaflet.protocol.records import Record, build_batch
from kaflet.protocol.response import encode_body
from kaflet.quota.entity import QuotaType
from kaflet.replication.append import AppendEntry, PartitionAppendResult, PendingAppends, append_records
from kaflet.replication.fetch_path import FetchParams, FetchResult, PartitionFetchInfo, fetch_messages
from kaflet.replication.partition import Partition
from kaflet.security.acl import ResourceType
from kaflet.security.authorizer import Action
from kaflet.security.principal import KafkaPrincipal
from kaflet.server.fetch_session import FetchManager, FetchSessionCache
from kaflet.server.handlers import fetch, metadata, offset_commit, produce
from kaflet.server.request_context import RequestContext
from kaflet.server.services import (
    Accounting,
    Admin,
    Cluster,
    Coordinators,
    RunState,
    Services,
    Settings,
    Storage,
)

LISTENER = "PLAINTEXT"
CLUSTER_ID = "kaflet-unit-cluster"


# -- fakes --------------------------------------------------------------------------------


class Unused:
    """A part the handler under test must not reach."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        raise AssertionError(f"the handler used {self._name}.{attr}")


class FakeConnection:
    """What a handler reads of its connection."""

    def __init__(self) -> None:
        self.principal = KafkaPrincipal.user("alice")
        self.peer = ("10.0.0.7", 40000)
        self.listener = LISTENER
        self.authenticated = True
        self.throttled_until = 0.0
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


class DenyingAuthorizer:
    """Allows everything but the (resource type, name) pairs it is given."""

    def __init__(self, denied: Iterable[tuple[ResourceType, str]]) -> None:
        self.denied = set(denied)

    def authorize(self, principal: KafkaPrincipal, host: str, actions: Sequence[Action]) -> list[bool]:
        return [(a.resource_type, a.name) not in self.denied for a in actions]


class NoQuotas:
    """A quota manager with no quota in force (so handlers may defer their answers)."""

    def active(self, quota_type: QuotaType) -> bool:
        return False

    def active_per_topic(self, quota_type: QuotaType) -> bool:
        return False


class _FakeLog:
    def __init__(self) -> None:
        self.log_start_offset = 0
        self.batches: list[bytes] = []


class _FakePartition:
    def __init__(self) -> None:
        self.log = _FakeLog()


class InMemoryReplicas:
    """The replica manager's write path over lists of batches: each append lands at the
    partition's next offset and is final at once (acks=1 semantics)."""

    def __init__(self, hosted: Iterable[tuple[str, int]]) -> None:
        self.partitions = {tp: _FakePartition() for tp in hosted}
        self.calls: list[tuple[list[AppendEntry], int]] = []

    def get(self, topic: str, partition: int) -> Any:
        return self.partitions.get((topic, partition))

    def append_records(self, entries: Sequence[AppendEntry], required_acks: int, *,
                       internal_topics_allowed: bool = False, started: float | None = None) -> PendingAppends:
        self.calls.append((list(entries), required_acks))
        results = []
        for entry in entries:
            log = self.partitions[(entry.topic, entry.partition)].log
            results.append(PartitionAppendResult(base_offset=len(log.batches), log_start_offset=0, record_count=1))
            log.batches.append(bytes(entry.records))
        return PendingAppends(results, 0.0)


class LogReplicas:
    """Real partitions over real logs, looked up and read the way the replica manager does."""

    def __init__(self, partitions: dict[tuple[str, int], Partition],
                 stopping: Callable[[], bool] = lambda: False) -> None:
        self.partitions = partitions
        self.stopping = stopping

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    async def fetch_messages(self, params: FetchParams, infos: Sequence[PartitionFetchInfo],
                             quota: Any = None, disk_load: Any = None) -> FetchResult:
        return await fetch_messages(self.partitions, lambda t, i: (t, i) in self.partitions, self.stopping,
                                    params, infos, quota, disk_load)


class RecordingReadPath:
    """The replica manager's read path and nothing else: records each fetch_messages call and
    answers each partition with the data it is given (else an empty read at offset 5)."""

    def __init__(self, answers: dict[tuple[str, int], PartitionFetchData] | None = None) -> None:
        self.answers = answers or {}
        #: (params, (topic, partition, fetch offset, log start offset, max bytes, leader epoch) of
        #: each partition, quota, disk load protector) of each call.
        self.calls: list[tuple[FetchParams, list[tuple[str | None, int, int, int, int, int]], Any, Any]] = []

    async def fetch_messages(self, params: FetchParams, infos: Sequence[PartitionFetchInfo],
                             quota: Any = None, disk_load: Any = None) -> FetchResult:
        self.calls.append((params, [(i.topic, i.partition, i.fetch_offset, i.fetcher_log_start_offset, i.max_bytes,
                                     i.leader_epoch) for i in infos], quota, disk_load))
        return FetchResult([self.answers.get((i.topic, i.partition)) or
                            PartitionFetchData(i.partition, high_watermark=5, last_stable_offset=5, log_start_offset=0)
                            for i in infos])

    def __getattr__(self, attr: str) -> Any:
        raise AssertionError(f"the handler used replicas.{attr} besides fetch_messages")


class IdleLeaderQuota:
    """The leader replication quota while no partition is throttled."""

    throttles_any = False


class RecordingGroups:
    """The group coordinator's OffsetCommit: remembers what it was asked to store and answers
    with the errors it is told to."""

    def __init__(self, errors: dict[tuple[str, int], ErrorCode] | None = None) -> None:
        self.errors = errors or {}
        self.commits: list[tuple[str, str, str | None, int, dict[tuple[str, int], OffsetValue]]] = []

    async def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None,
                             generation_id: int, offsets: dict[tuple[str, int], OffsetValue],
                             api_version: int = 8) -> dict[tuple[str, int], ErrorCode]:
        self.commits.append((group_id, member_id, group_instance_id, generation_id, offsets))
        return {tp: self.errors.get(tp, ErrorCode.NONE) for tp in offsets}


class RecordingTopicAdmin:
    def __init__(self) -> None:
        self.auto_created: list[str] = []

    async def auto_create(self, names: list[str]) -> None:
        self.auto_created.extend(names)


def _cache(topics: dict[str, int], brokers: Iterable[int] = (1,)) -> MetadataCache:
    cache = MetadataCache()
    cache.brokers = {b: BrokerInfo(b, (EndPoint(LISTENER, f"broker{b}.example", 9092),), rack=f"r{b}")
                     for b in brokers}
    cache.controller_id = 1
    for name, count in topics.items():
        cache.put_topic(name, random_uuid(), {i: PartitionInfo(i, 1, 0, [1], [1]) for i in range(count)})
    return cache


def _services(*, cache: MetadataCache | None = None, replicas: Any = None, groups: Any = None,
              topics: Any = None, authorizer: Any = None, state: RunState | None = None,
              auto_create: bool = True, fetch_max_bytes: int = 55 << 20, leader_quota: Any = None) -> Services:
    async def no_wait(_predicate: Any, _timeout_ms: int) -> bool:
        raise AssertionError("the handler waited for metadata")

    storage = Storage(replicas or Unused("replicas"), Unused("logs"),
                      FetchManager(FetchSessionCache(10), lambda: 0.0), leader_quota or Unused("leader_quota"),
                      None)
    return Services(
        cluster=Cluster(1, CLUSTER_ID, cache or _cache({}), no_wait),
        settings=Settings(fetch_max_bytes=fetch_max_bytes, auto_create_topics_enable=auto_create,
                          request_timeout_ms=30000),
        storage=storage,
        coordinators=Coordinators(groups or Unused("groups"), Unused("transactions"),
                                  Unused("producer_ids")),
        admin=Admin(topics or Unused("topics"), Unused("configs"), Unused("controller"),
                    Unused("controller_requests"), Unused("quota_configs"),
                    Unused("scram_credentials")),
        authorizer=authorizer,
        accounting=Accounting(None, NoQuotas(), track_traffic=False, session_report=None),
        state=state or RunState())


def _context(services: Services, api_key: int, version: int, client_id: str = "unit") -> RequestContext:
    header = RequestHeader(api_key, version, 7, client_id, False, 0)
    return RequestContext(services, FakeConnection(), header)


async def _call(module: Any, ctx: RequestContext, request: Any) -> Any:
    """Run the handler on the encoded request; the decoded response (None: no answer)."""
    api_key, version = ctx.header.api_key, ctx.version
    response = await module.handle(ctx, memoryview(bytes(request.encode(version=version))))
    if isinstance(response, DeferredResponse):
        response = await response.completion
    if response is None:
        return None
    body = encode_body(api_key, version, response, 0)
    if not isinstance(body, bytes | bytearray):
        body = b"".join(r.read_bytes() if hasattr(r, "read_bytes") else bytes(r) for r in body)
    return codec.response_class(api_key).decode(memoryview(bytes(body)), version=version)


def _batch(*values: bytes) -> bytes:
    return build_batch([Record(i, 0, None, v) for i, v in enumerate(values)], base_timestamp=1000)


# -- Produce ------------------------------------------------------------------------------

P = codec.request_class(ApiKey.PRODUCE)


def _produce(acks: int, parts: dict[tuple[str, int], bytes]) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), records in parts.items():
        by_topic.setdefault(topic, []).append(P.TopicProduceData.PartitionProduceData(index=index, records=records))
    return P(acks=acks, timeout_ms=5000, topic_data=[P.TopicProduceData(name=t, partition_data=ps)
                                                     for t, ps in by_topic.items()])


def _produce_answers(response: Any) -> dict[tuple[str, int], tuple[int, int]]:
    return {(t.name, p.index): (p.error_code, p.base_offset)
            for t in response.responses for p in t.partition_responses}


async def test_produce_appends_each_partition_once_with_the_request_acks() -> None:
    replicas = InMemoryReplicas([("orders", 0), ("orders", 1)])
    ctx = _context(_services(replicas=replicas), ApiKey.PRODUCE, 9)
    first, second = _batch(b"a"), _batch(b"b", b"c")
    answer = await _call(produce, ctx, _produce(-1, {("orders", 0): first, ("orders", 1): second}))
    assert _produce_answers(answer) == {("orders", 0): (0, 0), ("orders", 1): (0, 0)}
    ((entries, acks),) = replicas.calls
    assert acks == -1
    assert [(e.topic, e.partition, bytes(e.records), e.legacy) for e in entries] == [
        ("orders", 0, first, False), ("orders", 1, second, False)]
    answer = await _call(produce, ctx, _produce(1, {("orders", 0): _batch(b"d")}))
    assert _produce_answers(answer) == {("orders", 0): (0, 1)}  # the next offset of that partition


async def test_produce_refuses_unknown_partitions_and_denied_topics_without_appending() -> None:
    replicas = InMemoryReplicas([("orders", 0), ("secret", 0)])
    services = _services(replicas=replicas, authorizer=DenyingAuthorizer([(ResourceType.TOPIC, "secret")]))
    ctx = _context(services, ApiKey.PRODUCE, 9)
    answer = await _call(produce, ctx, _produce(1, {("orders", 0): _batch(b"a"), ("orders", 5): _batch(b"b"),
                                                    ("secret", 0): _batch(b"c")}))
    assert _produce_answers(answer) == {
        ("orders", 0): (ErrorCode.NONE, 0),
        ("orders", 5): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ("secret", 0): (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)}
    ((entries, _),) = replicas.calls
    assert [(e.topic, e.partition) for e in entries] == [("orders", 0)]
    assert replicas.partitions[("secret", 0)].log.batches == []


async def test_produce_with_acks_0_answers_nothing_and_closes_on_an_error() -> None:
    replicas = InMemoryReplicas([("orders", 0)])
    ctx = _context(_services(replicas=replicas), ApiKey.PRODUCE, 9)
    assert await _call(produce, ctx, _produce(0, {("orders", 0): _batch(b"a")})) is None
    assert not ctx.conn.aborted and len(replicas.partitions[("orders", 0)].log.batches) == 1
    assert await _call(produce, ctx, _produce(0, {("missing", 0): _batch(b"a")})) is None
    assert ctx.conn.aborted  # Kafka's way of telling an acks=0 producer that something failed


async def test_produce_counts_bytes_per_topic_when_traffic_is_tracked() -> None:
    replicas = InMemoryReplicas([("orders", 0), ("orders", 1)])
    ctx = _context(_services(replicas=replicas), ApiKey.PRODUCE, 9)
    ctx.traffic = {}
    first, second = _batch(b"a"), _batch(b"bb")
    await _call(produce, ctx, _produce(1, {("orders", 0): first, ("orders", 1): second, ("gone", 0): first}))
    assert ctx.traffic == {"orders": len(first) + len(second)}


# -- Fetch --------------------------------------------------------------------------------

F = codec.request_class(ApiKey.FETCH)


@pytest.fixture
def hosted(tmp_path: Path) -> Iterator[dict[tuple[str, int], Partition]]:
    out: dict[tuple[str, int], Partition] = {}
    for index in (0, 1):
        lg = Log(str(tmp_path / f"orders-{index}"), LogConfig.from_props({}))
        part = Partition("orders", index, "AAAAAAAAAAAAAAAAAAAAAA", lg, broker_id=1)
        part.make_leader(1, [1], [1])
        out[("orders", index)] = part
    yield out
    for part in out.values():
        part.log.close()


def _fetch(parts: dict[tuple[str, int], int], max_wait_ms: int = 0, min_bytes: int = 1,
           partition_max_bytes: int = 1 << 20) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), offset in parts.items():
        by_topic.setdefault(topic, []).append(
            F.FetchTopic.FetchPartition(partition=index, fetch_offset=offset, partition_max_bytes=partition_max_bytes))
    return F(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20,
             topics=[F.FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()])


def _fetched(response: Any) -> dict[tuple[str, int], tuple[int, int, bytes]]:
    return {(t.topic, p.partition_index): (p.error_code, p.high_watermark, bytes(p.records or b""))
            for t in response.responses for p in t.partitions}


def _as_stored(batch: bytes, leader_epoch: int = 1) -> bytes:
    """The batch as the leader stored it: stamped with its leader epoch (outside the CRC)."""
    return batch[:12] + leader_epoch.to_bytes(4, "big") + batch[16:]


def _append(partitions: dict[tuple[str, int], Partition], topic: str, index: int, records: bytes) -> None:
    (res,) = append_records(lambda t, i: partitions.get((t, i)), [AppendEntry(topic, index, memoryview(records))],
                            1).results
    assert res.error == ErrorCode.NONE


async def test_fetch_reads_up_to_the_high_watermark_and_answers_unknown_partitions(
        hosted: dict[tuple[str, int], Partition]) -> None:
    batch = _batch(b"v1", b"v2")
    _append(hosted, "orders", 0, batch)
    ctx = _context(_services(cache=_cache({"orders": 2}), replicas=LogReplicas(hosted)), ApiKey.FETCH, 12)
    answer = await _call(fetch, ctx, _fetch({("orders", 0): 0, ("orders", 1): 0, ("orders", 7): 0}))
    assert _fetched(answer) == {
        ("orders", 0): (ErrorCode.NONE, 2, _as_stored(batch)),
        ("orders", 1): (ErrorCode.NONE, 0, b""),
        ("orders", 7): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, b"")}


async def test_fetch_answers_a_later_partition_whose_first_batch_does_not_fit_without_records(
        hosted: dict[tuple[str, int], Partition]) -> None:
    small, large = _batch(b"v"), _batch(b"x" * 200, b"y" * 200)
    _append(hosted, "orders", 0, small)
    _append(hosted, "orders", 1, large)
    ctx = _context(_services(cache=_cache({"orders": 2}), replicas=LogReplicas(hosted)), ApiKey.FETCH, 12)
    limit = len(large) - 1
    # Kafka (KIP-74): the first partition with data may exceed its limit by its first batch; a
    # later one gets no records rather than a piece of a batch no client could read.
    answer = await _call(fetch, ctx, _fetch({("orders", 0): 0, ("orders", 1): 0}, partition_max_bytes=limit))
    assert _fetched(answer) == {("orders", 0): (ErrorCode.NONE, 1, _as_stored(small)),
                                ("orders", 1): (ErrorCode.NONE, 2, b"")}
    answer = await _call(fetch, ctx, _fetch({("orders", 0): 1, ("orders", 1): 0}, partition_max_bytes=limit))
    assert _fetched(answer)[("orders", 1)] == (ErrorCode.NONE, 2, _as_stored(large))


@pytest.mark.parametrize(("version", "hard"), [(2, True), (3, False), (12, False)])
async def test_fetch_byte_limits_are_hard_up_to_v2(version: int, hard: bool) -> None:
    # An error answer, so Fetch v0-3's down-conversion has nothing to look up.
    replicas = RecordingReadPath({("orders", 0): PartitionFetchData(0, ErrorCode.NOT_LEADER_OR_FOLLOWER)})
    ctx = _context(_services(cache=_cache({"orders": 1}), replicas=replicas), ApiKey.FETCH, version)
    ctx.traffic = {}
    await _call(fetch, ctx, _fetch_request({("orders", 0): 0}))
    ((params, _, _, _),) = replicas.calls
    assert params.hard_max_bytes_limit is hard


async def test_fetch_long_polls_until_an_append_arrives(hosted: dict[tuple[str, int], Partition]) -> None:
    ctx = _context(_services(cache=_cache({"orders": 2}), replicas=LogReplicas(hosted)), ApiKey.FETCH, 12)
    waiting = asyncio.create_task(_call(fetch, ctx, _fetch({("orders", 0): 0, ("orders", 1): 0}, max_wait_ms=10000)))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    batch = _batch(b"late")
    _append(hosted, "orders", 1, batch)
    answer = await asyncio.wait_for(waiting, 5)
    assert _fetched(answer)[("orders", 1)] == (ErrorCode.NONE, 1, _as_stored(batch))


async def test_fetch_answers_at_once_while_the_broker_stops(hosted: dict[tuple[str, int], Partition]) -> None:
    state = RunState(stopping=True)
    services = _services(cache=_cache({"orders": 2}), replicas=LogReplicas(hosted, lambda: state.stopping),
                         state=state)
    ctx = _context(services, ApiKey.FETCH, 12)
    answer = await asyncio.wait_for(_call(fetch, ctx, _fetch({("orders", 0): 0}, max_wait_ms=60000)), 5)
    assert _fetched(answer) == {("orders", 0): (ErrorCode.NONE, 0, b"")}


async def test_fetch_refuses_topics_the_consumer_may_not_read(hosted: dict[tuple[str, int], Partition]) -> None:
    _append(hosted, "orders", 0, _batch(b"v"))
    services = _services(cache=_cache({"orders": 2}), replicas=LogReplicas(hosted),
                         authorizer=DenyingAuthorizer([(ResourceType.TOPIC, "orders")]))
    answer = await _call(fetch, _context(services, ApiKey.FETCH, 12), _fetch({("orders", 0): 0}))
    assert _fetched(answer) == {("orders", 0): (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, b"")}


def _fetch_request(parts: dict[tuple[str, int], int], *, replica_id: int = -1, max_wait_ms: int = 500,
                   min_bytes: int = 1, max_bytes: int = 1 << 20, isolation_level: int = 0) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), offset in parts.items():
        by_topic.setdefault(topic, []).append(F.FetchTopic.FetchPartition(
            partition=index, fetch_offset=offset, partition_max_bytes=4096, current_leader_epoch=3))
    return F(replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
             isolation_level=isolation_level, topics=[F.FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()])


async def test_fetch_makes_one_call_to_the_read_path_with_the_request_params() -> None:
    replicas = RecordingReadPath()
    services = _services(cache=_cache({"orders": 2}), replicas=replicas, fetch_max_bytes=1000)
    ctx = _context(services, ApiKey.FETCH, 12)
    ctx.traffic = {}
    answer = await _call(fetch, ctx, _fetch_request({("orders", 0): 7, ("orders", 1): 9, ("orders", 7): 0},
                                                    min_bytes=5000, max_bytes=1 << 20, isolation_level=1))
    ((params, infos, quota, disk_load),) = replicas.calls
    # max_bytes capped by fetch.max.bytes, min_bytes by max_bytes; the partitions the metadata
    # cache does not know are answered without asking.
    assert params == FetchParams(replica_id=-1, max_wait_ms=500, min_bytes=1000, max_bytes=1000, isolation_level=1)
    assert infos == [("orders", 0, 7, -1, 4096, 3), ("orders", 1, 9, -1, 4096, 3)]
    assert quota is None and disk_load is None
    assert _fetched(answer) == {("orders", 0): (ErrorCode.NONE, 5, b""), ("orders", 1): (ErrorCode.NONE, 5, b""),
                                ("orders", 7): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, b"")}
    assert ctx.traffic == {"orders": 0}  # a consumer's topics read, with their bytes
    assert not ctx.quota_exempt


async def test_fetch_of_a_follower_calls_the_read_path_once_and_counts_no_traffic() -> None:
    replicas = RecordingReadPath()
    services = _services(cache=_cache({"orders": 2}), replicas=replicas, leader_quota=IdleLeaderQuota())
    ctx = _context(services, ApiKey.FETCH, 12)
    ctx.traffic = {}
    await _call(fetch, ctx, _fetch_request({("orders", 0): 7}, replica_id=2, isolation_level=1))
    ((params, infos, quota, _),) = replicas.calls
    assert params.is_follower and params.replica_id == 2
    assert infos == [("orders", 0, 7, -1, 4096, 3)]
    assert quota is None  # the leader quota throttles nothing
    assert ctx.traffic == {} and ctx.quota_exempt


@pytest.mark.parametrize(("version", "expected"), [(5, ErrorCode.NOT_LEADER_OR_FOLLOWER),
                                                    (6, ErrorCode.KAFKA_STORAGE_ERROR)])
async def test_fetch_tells_clients_before_v6_not_leader_for_a_storage_error(version: int, expected: ErrorCode) -> None:
    failed = PartitionFetchData(0, ErrorCode.KAFKA_STORAGE_ERROR)
    replicas = RecordingReadPath({("orders", 0): failed})
    ctx = _context(_services(cache=_cache({"orders": 1}), replicas=replicas), ApiKey.FETCH, version)
    answer = await _call(fetch, ctx, _fetch_request({("orders", 0): 0}))
    assert _fetched(answer) == {("orders", 0): (expected, -1, b"")}


# -- Metadata -----------------------------------------------------------------------------

M = codec.request_class(ApiKey.METADATA)


def _metadata(*names: str, auto_create: bool = True) -> Any:
    topics = [M.MetadataRequestTopic(name=n, topic_id=uuid.UUID(int=0)) for n in names] if names else None
    return M(topics=topics, allow_auto_topic_creation=auto_create, include_topic_authorized_operations=False)


async def test_metadata_describes_brokers_controller_and_topics_from_the_cache() -> None:
    cache = _cache({"orders": 3, "audit": 1}, brokers=(1, 2))
    ctx = _context(_services(cache=cache), ApiKey.METADATA, 12)
    answer = await _call(metadata, ctx, _metadata())
    assert answer.cluster_id == CLUSTER_ID and answer.controller_id == 1
    assert sorted((b.node_id, b.host, b.port, b.rack) for b in answer.brokers) == [
        (1, "broker1.example", 9092, "r1"), (2, "broker2.example", 9092, "r2")]
    topics = {t.name: t for t in answer.topics}
    assert sorted(topics) == ["audit", "orders"]
    assert [(p.partition_index, p.leader_id, p.error_code) for p in topics["orders"].partitions] == [
        (0, 1, 0), (1, 1, 0), (2, 1, 0)]
    assert topics["orders"].topic_id == uuid.UUID(bytes=cache.topics["orders"].topic_id)


async def test_metadata_auto_creates_unknown_topics_only_when_enabled() -> None:
    admin = RecordingTopicAdmin()
    ctx = _context(_services(topics=admin), ApiKey.METADATA, 12)
    answer = await _call(metadata, ctx, _metadata("fresh", "bad name!"))
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("fresh", ErrorCode.LEADER_NOT_AVAILABLE), ("bad name!", ErrorCode.INVALID_TOPIC_EXCEPTION)]
    assert admin.auto_created == ["fresh"]
    # Off in the broker's config, or not asked for by the client: unknown, nothing created.
    for services, request in ((_services(auto_create=False), _metadata("fresh")),
                              (_services(), _metadata("fresh", auto_create=False))):
        answer = await _call(metadata, _context(services, ApiKey.METADATA, 12), request)
        assert [(t.name, t.error_code) for t in answer.topics] == [("fresh", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]


async def test_metadata_hides_topics_the_principal_may_not_describe() -> None:
    services = _services(cache=_cache({"orders": 1, "secret": 1}),
                         authorizer=DenyingAuthorizer([(ResourceType.TOPIC, "secret")]))
    answer = await _call(metadata, _context(services, ApiKey.METADATA, 12), _metadata())
    assert [t.name for t in answer.topics] == ["orders"]
    answer = await _call(metadata, _context(services, ApiKey.METADATA, 12), _metadata("secret"))
    assert [(t.name, t.error_code) for t in answer.topics] == [("secret", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]


# -- OffsetCommit -------------------------------------------------------------------------

OC = codec.request_class(ApiKey.OFFSET_COMMIT)


def _commit(group: str, parts: dict[tuple[str, int], int]) -> Any:
    T = OC.OffsetCommitRequestTopic
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), offset in parts.items():
        by_topic.setdefault(topic, []).append(T.OffsetCommitRequestPartition(
            partition_index=index, committed_offset=offset, committed_leader_epoch=3, committed_metadata="m"))
    return OC(group_id=group, generation_id_or_member_epoch=4, member_id="member-1", group_instance_id=None,
              topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()])


def _commit_answers(response: Any) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


async def test_offset_commit_hands_known_partitions_to_the_coordinator() -> None:
    groups = RecordingGroups({("orders", 1): ErrorCode.ILLEGAL_GENERATION})
    ctx = _context(_services(cache=_cache({"orders": 2}), groups=groups), ApiKey.OFFSET_COMMIT, 8)
    answer = await _call(offset_commit, ctx, _commit("g", {("orders", 0): 10, ("orders", 1): 20, ("orders", 9): 5}))
    assert _commit_answers(answer) == {("orders", 0): ErrorCode.NONE, ("orders", 1): ErrorCode.ILLEGAL_GENERATION,
                                       ("orders", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    ((group, member, instance, generation, offsets),) = groups.commits
    assert (group, member, instance, generation) == ("g", "member-1", None, 4)
    assert sorted(offsets) == [("orders", 0), ("orders", 1)]
    stored = offsets[("orders", 0)]
    assert (stored.offset, stored.metadata, stored.leader_epoch, stored.expire_timestamp) == (10, "m", 3, -1)


async def test_offset_commit_without_read_on_the_group_stores_nothing() -> None:
    groups = RecordingGroups()
    services = _services(cache=_cache({"orders": 1}), groups=groups,
                         authorizer=DenyingAuthorizer([(ResourceType.GROUP, "g")]))
    answer = await _call(offset_commit, _context(services, ApiKey.OFFSET_COMMIT, 8), _commit("g", {("orders", 0): 1}))
    assert _commit_answers(answer) == {("orders", 0): ErrorCode.GROUP_AUTHORIZATION_FAILED}
    assert groups.commits == []
