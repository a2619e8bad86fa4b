"""Every version of every API kaflet advertises answers a real request correctly.

Each API has one check in CHECKS, with the versions it covers; the check runs once per version,
over a real socket (tests.support.raw_client), and asserts on the decoded answer, including the
fields that exist only in some versions. The advertised set (HANDLER_MODULES, which ApiVersions
is built from, and what ApiVersions says on the wire at each of its versions) must equal the
checked set exactly: a new handler or a new version fails here until it has a check.

A version above an API's maximum (or below its minimum) gets what kaflet implements, as Kafka
does: ApiVersions answers UNSUPPORTED_VERSION in its v0 form with the supported ranges, and any
other API closes the connection (with one log line naming the version).
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode as E
from kaflet.protocol.legacy_records import LegacyRecord, decode_message_set, encode_message_set
from kaflet.protocol.records import Record, build_batch, decode_records, iter_batches
from kaflet.security.scram import SCRAM_SHA_256, ScramClient
from kaflet.server.handlers import supported_versions
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.groups import join, subscription, sync
from tests.support.quotas import alter as alter_quotas
from tests.support.quotas import as_dict as quotas_as_dict
from tests.support.quotas import describe as describe_quotas
from tests.support.raw_client import RawClient
from tests.support.replication import leader_and_isr, stop_replica
from tests.support.topics import create_topic

K = ApiKey
ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{ADMIN}" password="{ADMIN_PASSWORD}" user_{ADMIN}="{ADMIN_PASSWORD}";')
# Kafka's enum values in the ACL APIs.
ANY, TOPIC, LITERAL, PREFIXED, READ, ALLOW = 1, 2, 3, 4, 3, 3

ADVERTISED = supported_versions()
PARAMS = [(key, v) for key, lo, hi in ADVERTISED for v in range(lo, hi + 1)]


BROKER_OVERRIDES = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": f"User:ANONYMOUS;User:{ADMIN}",
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000",
        "offsets.topic.num.partitions": "1",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A plain and a SASL listener, with an authorizer under which the plain clients are super users."""
    with running_broker(tmp_path_factory.mktemp("versions") / "data", BROKER_OVERRIDES) as b:
        c = RawClient(b.bootstrap)
        deadline = time.monotonic() + 30
        # The first FindCoordinator creates __consumer_offsets; wait until it is served.
        while _call(c, K.FIND_COORDINATOR, 1, key="any", key_type=0).error_code != 0:
            assert time.monotonic() < deadline, "no group coordinator"
            time.sleep(0.1)
        c.close()
        yield b


# The controller's requests come from a made-up controller with a much newer epoch; after them
# the broker's own controller is stale to it, so they get a broker of their own.
CONTROLLER_APIS = frozenset({K.LEADER_AND_ISR, K.STOP_REPLICA, K.UPDATE_METADATA, K.CONTROLLED_SHUTDOWN})


@pytest.fixture(scope="module")
def fenced_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Like `broker`, for the controller's APIs."""
    with running_broker(tmp_path_factory.mktemp("fenced") / "data", BROKER_OVERRIDES) as b:
        yield b


# -- plumbing ---------------------------------------------------------------------------------------

def _call(c: RawClient, api_key: int, version: int, /, **fields: Any) -> Any:
    """One request of `api_key` at `version` built from keyword fields; the decoded response."""
    return c.request(api_key, version, codec.request_class(api_key)(**fields))


def _req(key: int) -> Any:
    return codec.request_class(key)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _topic(broker: BrokerProcess, prefix: str, partitions: int = 1, config: dict[str, str] | None = None) -> str:
    name = _name(prefix)
    create_topic(broker.bootstrap, name, partitions, config)
    return name


def _produce(c: RawClient, topic: str, values: list[bytes], version: int = 7, partition: int = 0,
             timestamps: list[int] | None = None) -> Any:
    P = _req(K.PRODUCE)
    ts = timestamps or [int(time.time() * 1000)] * len(values)
    if version < 3:
        # Produce v0-1 clients write message format v0, v2 clients v1 (kaflet up-converts both).
        batch = encode_message_set([LegacyRecord(i, ts[i], b"k%d" % i, v) for i, v in enumerate(values)],
                                   0 if version < 2 else 1)
    else:
        batch = build_batch([Record(i, ts[i] - ts[0], b"k%d" % i, v, []) for i, v in enumerate(values)],
                            base_timestamp=ts[0], max_timestamp=max(ts))
    resp = c.request(K.PRODUCE, version, P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[
            P.TopicProduceData.PartitionProduceData(index=partition, records=batch)])]))
    return resp.responses[0].partition_responses[0]


def _topic_id(c: RawClient, topic: str) -> uuid.UUID:
    M = _req(K.METADATA)
    return c.request(K.METADATA, 12, M(
        topics=[M.MetadataRequestTopic(name=topic, topic_id=uuid.UUID(int=0))], allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False, include_topic_authorized_operations=False)).topics[0].topic_id


def _fetch(c: RawClient, topic: str, version: int, offset: int = 0) -> Any:
    """A sessionless fetch of partition 0; from v13 the topic goes by its id (KIP-516)."""
    F = _req(K.FETCH)
    topic_id = _topic_id(c, topic) if version >= 13 else uuid.UUID(int=0)
    resp = c.request(K.FETCH, version, F(
        replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[F.FetchTopic(topic=topic, topic_id=topic_id, partitions=[F.FetchTopic.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id=""))
    if version >= 13:
        assert [t.topic_id for t in resp.responses] == [topic_id]
    return resp


def _records(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in a fetched partition's record batches."""
    out = []
    for pos, h in iter_batches(data):
        out += [(h.base_offset + r.offset_delta, r.key, r.value) for r in decode_records(data[pos:pos + h.size])]
    return out


def _list_offset(c: RawClient, topic: str, timestamp: int, version: int = 5) -> Any:
    L = _req(K.LIST_OFFSETS)
    resp = c.request(K.LIST_OFFSETS, version, L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(
        name=topic, partitions=[L.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=timestamp, max_num_offsets=1)])]))
    return resp.topics[0].partitions[0]


def _commit(c: RawClient, group: str, topic: str, offset: int, metadata: str = "", version: int = 7,
            generation: int = -1, member: str = "") -> int:
    R = _req(K.OFFSET_COMMIT)
    T = R.OffsetCommitRequestTopic
    resp = c.request(K.OFFSET_COMMIT, version, R(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member, group_instance_id=None,
        retention_time_ms=-1, topics=[T(name=topic, partitions=[T.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=offset, committed_leader_epoch=-1, commit_timestamp=-1,
            committed_metadata=metadata)])]))
    return resp.topics[0].partitions[0].error_code


def _committed(c: RawClient, group: str, topic: str) -> tuple[int, str, int]:
    """(offset, metadata, error) of partition 0 as OffsetFetch v5 reports it."""
    R = _req(K.OFFSET_FETCH)
    resp = c.request(K.OFFSET_FETCH, 5, R(group_id=group, topics=[
        R.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]))
    p = resp.topics[0].partitions[0]
    return p.committed_offset, p.metadata, p.error_code


def _describe_group(c: RawClient, group: str, version: int = 3) -> Any:
    return _call(c, K.DESCRIBE_GROUPS, version, groups=[group], include_authorized_operations=True).groups[0]


def _consumer_join(c: RawClient, group: str, topic: str, version: int = 1, member: str | None = None,
                   regex: str | None = None) -> Any:
    """A ConsumerGroupHeartbeat join (member epoch 0) of a KIP-848 consumer group; the response."""
    return _call(c, K.CONSUMER_GROUP_HEARTBEAT, version, group_id=group,
                 member_id=uuid.uuid4().hex if member is None else member, member_epoch=0,
                 rebalance_timeout_ms=30000, subscribed_topic_names=[] if regex else [topic],
                 subscribed_topic_regex=regex, topic_partitions=[])


def _stable_member(c: RawClient, group: str, assignment: bytes = b"the-assignment") -> tuple[Any, bytes]:
    """Join as the only member and sync; the join response and the member's metadata."""
    meta = subscription(["t"])
    r = join(c, group, version=5, protocols=[("range", meta)])
    if r.error_code == E.MEMBER_ID_REQUIRED:
        r = join(c, group, member=r.member_id, version=5, protocols=[("range", meta)])
    assert r.error_code == 0, r
    assert sync(c, group, r.generation_id, r.member_id, {r.member_id: assignment}).error_code == 0
    return r, meta


def _acl_filter(topic: str) -> dict[str, Any]:
    return dict(resource_type_filter=TOPIC, resource_name_filter=topic, pattern_type_filter=LITERAL,
                principal_filter=None, host_filter=None, operation=ANY, permission_type=ANY)


def _create_acl(c: RawClient, topic: str, version: int = 1, pattern: int = LITERAL) -> Any:
    C = _req(K.CREATE_ACLS)
    return c.request(K.CREATE_ACLS, version, C(creations=[C.AclCreation(
        resource_type=TOPIC, resource_name=topic, resource_pattern_type=pattern, principal="User:alice", host="*",
        operation=READ, permission_type=ALLOW)])).results[0]


def _acls(c: RawClient, topic: str, pattern: int = LITERAL) -> list[tuple[str, str, int, int]]:
    resp = _call(c, K.DESCRIBE_ACLS, 1, **{**_acl_filter(topic), "pattern_type_filter": pattern})
    assert resp.error_code == 0, resp
    return [(a.principal, a.host, a.operation, a.permission_type) for r in resp.resources for a in r.acls]


def _configs(c: RawClient, topic: str, version: int = 1) -> dict[str, Any]:
    D = _req(K.DESCRIBE_CONFIGS)
    resp = c.request(K.DESCRIBE_CONFIGS, version, D(resources=[D.DescribeConfigsResource(
        resource_type=TOPIC, resource_name=topic, configuration_keys=None)], include_synonyms=False,
        include_documentation=False))
    assert resp.results[0].error_code == 0
    return {cfg.name: cfg for cfg in resp.results[0].configs}


def _sasl(broker: BrokerProcess) -> RawClient:
    return RawClient(broker.bootstrap_for("SASL_PLAINTEXT"))


def _metadata_works(c: RawClient) -> bool:
    resp = _call(c, K.METADATA, 1, topics=[])
    return bool(resp.brokers)


# -- one check per API, run once per advertised version ---------------------------------------------

Check = Callable[[BrokerProcess, RawClient, int], None]
CHECKS: dict[int, tuple[range, Check]] = {}


def check(key: int, versions: range) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        CHECKS[key] = (versions, fn)
        return fn
    return register


@check(K.PRODUCE, range(0, 11))
def _produce_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _topic(broker, f"p{v}")
    part = _produce(c, topic, [b"a", b"b", b"c"], version=v)
    assert part.error_code == 0 and part.base_offset == 0
    if v >= 2:
        assert part.log_append_time_ms == -1  # CreateTime topic
    if v >= 5:
        assert part.log_start_offset == 0
    if v >= 8:
        assert part.record_errors == [] and part.error_message is None
    again = _produce(c, topic, [b"d"], version=v)
    assert again.error_code == 0 and again.base_offset == 3
    fpart = _fetch(c, topic, 11).responses[0].partitions[0]
    assert [value for _, _, value in _records(bytes(fpart.records))] == [b"a", b"b", b"c", b"d"]


@check(K.FETCH, range(0, 17))
def _fetch_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _topic(broker, f"f{v}")
    ts = int(time.time() * 1000)
    assert _produce(c, topic, [b"x", b"y", b"z"], timestamps=[ts, ts + 1, ts + 2]).error_code == 0
    resp = _fetch(c, topic, v, offset=1)
    if v >= 7:
        assert resp.error_code == 0
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 3
    if v >= 4:
        assert part.last_stable_offset == 3
    if v >= 5:
        assert part.log_start_offset == 0
    if v < 4:
        # Down-converted to a message set of magic 0 (v0-1) or 1 (v2-3); from an uncompressed
        # batch only the records from the fetch offset on, as Kafka does.
        got = decode_message_set(bytes(part.records), 1 << 20)
        assert got.magic == (0 if v < 2 else 1)
        assert [(r.offset, r.timestamp, r.key, r.value) for r in got.records] == [
            (1, -1 if v < 2 else ts + 1, b"k1", b"y"), (2, -1 if v < 2 else ts + 2, b"k2", b"z")]
    else:
        # A fetch answers whole batches: the one holding offset 1 starts at 0.
        assert _records(bytes(part.records)) == [(0, b"k0", b"x"), (1, b"k1", b"y"), (2, b"k2", b"z")]
    past = _fetch(c, topic, v, offset=10).responses[0].partitions[0]
    assert past.error_code == E.OFFSET_OUT_OF_RANGE


@check(K.LIST_OFFSETS, range(0, 8))
def _list_offsets_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _topic(broker, f"lo{v}")
    base = int(time.time() * 1000) - 60_000
    assert _produce(c, topic, [b"a", b"b", b"c"], timestamps=[base, base + 20, base + 10]).error_code == 0
    latest, earliest = _list_offset(c, topic, -1, v), _list_offset(c, topic, -2, v)
    assert latest.error_code == 0 and earliest.error_code == 0
    if v == 0:
        assert latest.old_style_offsets == [3] and earliest.old_style_offsets == [0]
        return
    assert latest.offset == 3 and earliest.offset == 0
    by_time = _list_offset(c, topic, base + 5, v)  # the first record at or after that time
    assert (by_time.offset, by_time.timestamp) == (1, base + 20)
    if v >= 4:
        assert latest.leader_epoch == 0
    if v >= 7:
        newest = _list_offset(c, topic, -3, v)  # MAX_TIMESTAMP (KIP-734)
        assert (newest.offset, newest.timestamp) == (1, base + 20)


@check(K.METADATA, range(0, 13))
def _metadata_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _topic(broker, f"mv{v}", 2)
    M = _req(K.METADATA)
    resp = c.request(K.METADATA, v, M(
        topics=[M.MetadataRequestTopic(name=topic, topic_id=uuid.UUID(int=0))], allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False, include_topic_authorized_operations=False))
    assert [(b.host, b.port) for b in resp.brokers] == [("127.0.0.1", broker.port)]
    t = resp.topics[0]
    assert t.error_code == 0 and t.name == topic and sorted(p.partition_index for p in t.partitions) == [0, 1]
    assert all(p.leader_id == resp.brokers[0].node_id for p in t.partitions)
    if v >= 1:
        assert resp.controller_id == resp.brokers[0].node_id
    if v >= 2:
        assert resp.cluster_id
    if v >= 10:
        assert t.topic_id != uuid.UUID(int=0)
    missing = c.request(K.METADATA, v, M(
        topics=[M.MetadataRequestTopic(name=_name("none"), topic_id=uuid.UUID(int=0))],
        allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False)).topics[0]
    # v0-3 cannot ask not to auto-create, so the topic is created (LEADER_NOT_AVAILABLE or none).
    assert missing.error_code in ((E.NONE, E.LEADER_NOT_AVAILABLE) if v < 4 else (E.UNKNOWN_TOPIC_OR_PARTITION,))
    if v >= 10:
        # By id (Kafka: whenever an id is non-zero, whatever the name): v12 looks it up, with a
        # null name or the Java client's "", and echoes an unknown id; v10-11 carry the field
        # but not its meaning, so the request is invalid (each topic answered, its id echoed).
        unknown = uuid.uuid4()
        for name in (None, ""):
            resp = c.request(K.METADATA, v, M(
                topics=[M.MetadataRequestTopic(name=name, topic_id=t.topic_id),
                        M.MetadataRequestTopic(name=name, topic_id=unknown)],
                allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False))
            got = {r.topic_id: r for r in resp.topics}
            assert set(got) == {t.topic_id, unknown}
            if v >= 12:
                assert (got[t.topic_id].error_code, got[t.topic_id].name) == (0, topic)
                assert sorted(p.partition_index for p in got[t.topic_id].partitions) == [0, 1]
                assert (got[unknown].error_code, got[unknown].name) == (E.UNKNOWN_TOPIC_ID, None)
            else:
                assert {r.error_code for r in resp.topics} == {E.INVALID_REQUEST}


@check(K.DESCRIBE_TOPIC_PARTITIONS, range(0, 1))
def _describe_topic_partitions_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _topic(broker, "dtp", 3)
    D = _req(K.DESCRIBE_TOPIC_PARTITIONS)
    resp = c.request(K.DESCRIBE_TOPIC_PARTITIONS, v, D(
        topics=[D.TopicRequest(name=topic), D.TopicRequest(name=_name("none"))], response_partition_limit=2000,
        cursor=None))
    t, missing = resp.topics
    node = broker_id(c)
    assert (t.error_code, t.name, t.topic_id, t.is_internal) == (0, topic, _topic_id(c, topic), False)
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes, p.eligible_leader_replicas,
             p.last_known_elr, p.offline_replicas) for p in t.partitions] == [
        (i, node, [node], [node], [], [], []) for i in range(3)]
    assert t.topic_authorized_operations != -2147483648  # always filled in, as Kafka does
    assert missing.error_code == E.UNKNOWN_TOPIC_OR_PARTITION and resp.next_cursor is None
    # A limit of 2 pages the topic: two partitions, then a cursor at the third.
    first = c.request(K.DESCRIBE_TOPIC_PARTITIONS, v, D(topics=[D.TopicRequest(name=topic)],
                                                        response_partition_limit=2, cursor=None))
    assert [p.partition_index for p in first.topics[0].partitions] == [0, 1]
    assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == (topic, 2)
    rest = c.request(K.DESCRIBE_TOPIC_PARTITIONS, v, D(topics=[D.TopicRequest(name=topic)],
                                                       response_partition_limit=2, cursor=D.Cursor(
                                                           topic_name=topic, partition_index=2)))
    assert [p.partition_index for p in rest.topics[0].partitions] == [2] and rest.next_cursor is None


def broker_id(c: RawClient) -> int:
    """The node id of the (only) broker, from Metadata."""
    return int(_call(c, K.METADATA, 4, topics=[], allow_auto_topic_creation=False).brokers[0].node_id)


@check(K.OFFSET_COMMIT, range(0, 10))
def _offset_commit_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic, group = _topic(broker, f"oc{v}"), _name("g")
    assert _commit(c, group, topic, 7, f"meta-{v}", version=v) == 0
    assert _committed(c, group, topic) == (7, f"meta-{v}", 0)
    assert _commit(c, group, _name("none"), 1, version=v) == E.UNKNOWN_TOPIC_OR_PARTITION
    if v >= 1:  # a generation for a group that has none
        assert _commit(c, group, topic, 8, version=v, generation=3, member="m") in (
            E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID)
    # A consumer group's member commits with its member epoch, from v9 on.
    cg = _name("cg")
    joined = _consumer_join(c, cg, topic)
    assert (joined.error_code, joined.member_epoch) == (0, 1)
    if v >= 9:
        assert _commit(c, cg, topic, 5, version=v, generation=1, member=joined.member_id) == 0
        assert _commit(c, cg, topic, 6, version=v, generation=0, member=joined.member_id) == E.STALE_MEMBER_EPOCH
        assert _committed(c, cg, topic)[0] == 5
    elif v >= 1:
        assert _commit(c, cg, topic, 5, version=v, generation=1, member=joined.member_id) == E.UNSUPPORTED_VERSION


@check(K.OFFSET_FETCH, range(0, 10))
def _offset_fetch_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic, group = _topic(broker, f"of{v}"), _name("g")
    assert _commit(c, group, topic, 9, "x") == 0
    R = _req(K.OFFSET_FETCH)
    if v >= 9:  # a consumer group's member names its member epoch
        cg = _name("cg")
        joined = _consumer_join(c, cg, topic)
        G = R.OffsetFetchRequestGroup
        for epoch, code in ((1, 0), (4, E.STALE_MEMBER_EPOCH)):
            resp = c.request(K.OFFSET_FETCH, v, R(groups=[G(group_id=cg, member_id=joined.member_id, member_epoch=epoch,
                                                            topics=None)], require_stable=False))
            assert resp.groups[0].error_code == code
    if v >= 8:
        resp = c.request(K.OFFSET_FETCH, v, R(groups=[R.OffsetFetchRequestGroup(group_id=group, topics=[
            R.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name=topic, partition_indexes=[0, 1])])],
            require_stable=True))
        g = resp.groups[0]
        assert g.group_id == group and g.error_code == 0
        parts = {p.partition_index: p for p in g.topics[0].partitions}
    else:
        resp = c.request(K.OFFSET_FETCH, v, R(group_id=group, require_stable=True, topics=[
            R.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1])]))
        if v >= 2:
            assert resp.error_code == 0
        parts = {p.partition_index: p for p in resp.topics[0].partitions}
    assert (parts[0].committed_offset, parts[0].metadata, parts[0].error_code) == (9, "x", 0)
    assert parts[1].committed_offset == -1  # nothing committed there
    if v >= 5:
        assert parts[0].committed_leader_epoch == -1
    if 2 <= v < 8:  # v2+ may ask for every committed partition of the group
        every = c.request(K.OFFSET_FETCH, v, R(group_id=group, require_stable=False, topics=None))
        assert [(t.name, [p.committed_offset for p in t.partitions]) for t in every.topics] == [(topic, [9])]


@check(K.FIND_COORDINATOR, range(0, 5))
def _find_coordinator_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    node = _call(c, K.METADATA, 1, topics=[]).brokers[0].node_id
    if v >= 4:
        resp = _call(c, K.FIND_COORDINATOR, v, key_type=0, coordinator_keys=["g1", "g2"])
        assert [(x.key, x.error_code, x.node_id, x.port) for x in resp.coordinators] == [
            ("g1", 0, node, broker.port), ("g2", 0, node, broker.port)]
        txn = _call(c, K.FIND_COORDINATOR, v, key_type=1, coordinator_keys=["tx"]).coordinators[0]
        assert (txn.error_code, txn.node_id, txn.port) == (0, node, broker.port)
        return
    resp = _call(c, K.FIND_COORDINATOR, v, key=_name("g"), key_type=0)
    assert (resp.error_code, resp.node_id, resp.host, resp.port) == (0, node, "127.0.0.1", broker.port)
    if v >= 1:
        txn = _call(c, K.FIND_COORDINATOR, v, key="tx", key_type=1)
        assert (txn.error_code, txn.node_id, txn.port) == (0, node, broker.port)


@check(K.JOIN_GROUP, range(0, 8))
def _join_group_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    group, meta = _name("g"), subscription(["t"], pad=3)
    r = join(c, group, version=v, protocols=[("range", meta)])
    if v >= 4:  # KIP-394: a new member first gets its id
        assert r.error_code == E.MEMBER_ID_REQUIRED and r.member_id
        r = join(c, group, member=r.member_id, version=v, protocols=[("range", meta)])
    assert r.error_code == 0, r
    assert r.generation_id == 1 and r.leader == r.member_id and r.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in r.members] == [(r.member_id, meta)]
    if v >= 7:
        assert r.protocol_type == "consumer"
    assert join(c, group, version=v, protocol_type="connect").error_code == E.INCONSISTENT_GROUP_PROTOCOL


@check(K.HEARTBEAT, range(0, 5))
def _heartbeat_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    group = _name("g")
    r, _ = _stable_member(c, group)
    H = dict(group_id=group, member_id=r.member_id, group_instance_id=None)
    assert _call(c, K.HEARTBEAT, v, generation_id=r.generation_id, **H).error_code == 0
    assert _call(c, K.HEARTBEAT, v, generation_id=r.generation_id + 1, **H).error_code == E.ILLEGAL_GENERATION


@check(K.LEAVE_GROUP, range(0, 5))
def _leave_group_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    group = _name("g")
    r, _ = _stable_member(c, group)
    L = _req(K.LEAVE_GROUP)
    resp = c.request(K.LEAVE_GROUP, v, L(group_id=group, member_id=r.member_id, members=[
        L.MemberIdentity(member_id=r.member_id, group_instance_id=None)]))
    assert resp.error_code == 0
    if v >= 3:
        assert [(m.member_id, m.error_code) for m in resp.members] == [(r.member_id, 0)]
    described = _describe_group(c, group)
    assert described.group_state == "Empty" and described.members == []


@check(K.SYNC_GROUP, range(0, 6))
def _sync_group_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    group = _name("g")
    r = join(c, group, version=3)
    assert r.error_code == 0
    names = {"protocol_type": "consumer", "protocol_name": "range"} if v >= 5 else {}
    s = sync(c, group, r.generation_id, r.member_id, {r.member_id: b"yours"}, version=v, **names)
    assert s.error_code == 0 and s.assignment == b"yours"
    if v >= 5:
        assert (s.protocol_type, s.protocol_name) == ("consumer", "range")
    assert sync(c, group, r.generation_id + 1, r.member_id, version=v, **names).error_code == E.ILLEGAL_GENERATION


@check(K.DESCRIBE_GROUPS, range(0, 6))
def _describe_groups_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    group = _name("g")
    r, meta = _stable_member(c, group, b"given")
    g = _describe_group(c, group, v)
    assert (g.error_code, g.group_id, g.group_state, g.protocol_type, g.protocol_data) == (
        0, group, "Stable", "consumer", "range")
    m = g.members[0]
    assert (m.member_id, m.client_id, m.client_host, m.member_metadata, m.member_assignment) == (
        r.member_id, "raw", "/127.0.0.1", meta, b"given")
    if v >= 3:  # asked for: every operation a group has (Read, Delete, Describe), as a super user
        assert g.authorized_operations == {3, 6, 8}
    dead = _describe_group(c, _name("none"), v)
    assert (dead.error_code, dead.group_state) == (0, "Dead")


@check(K.LIST_GROUPS, range(0, 6))
def _list_groups_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    stable, empty = _name("g"), _name("g")
    _stable_member(c, stable)
    topic = _topic(broker, "lg")
    assert _commit(c, empty, topic, 1) == 0
    if v >= 5:
        modern = _name("cg")
        assert _consumer_join(c, modern, topic).error_code == 0
        resp = _call(c, K.LIST_GROUPS, v, states_filter=[], types_filter=[])
        kinds = {g.group_id: (g.group_type, g.protocol_type) for g in resp.groups}
        assert kinds[modern] == ("consumer", "consumer") and kinds[stable] == ("classic", "consumer")
        only = _call(c, K.LIST_GROUPS, v, states_filter=[], types_filter=["consumer"]).groups
        assert modern in {g.group_id for g in only} and stable not in {g.group_id for g in only}
    resp = _call(c, K.LIST_GROUPS, v, states_filter=[])
    assert resp.error_code == 0
    listed = {g.group_id: g for g in resp.groups}
    assert listed[stable].protocol_type == "consumer" and listed[empty].protocol_type == ""
    if v >= 4:
        assert (listed[stable].group_state, listed[empty].group_state) == ("Stable", "Empty")
        only = _call(c, K.LIST_GROUPS, v, states_filter=["Empty"]).groups
        assert empty in {g.group_id for g in only} and stable not in {g.group_id for g in only}


@check(K.CONSUMER_GROUP_HEARTBEAT, range(0, 2))
def _consumer_group_heartbeat_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic, group = _topic(broker, f"cgh{v}", partitions=2), _name("cg")
    if v == 0:  # the coordinator names the member
        joined = _consumer_join(c, group, topic, version=0, member="")
        assert joined.member_id
    else:  # KIP-1082: the client does, and must
        empty = _consumer_join(c, group, topic, version=1, member="")
        assert (empty.error_code, empty.error_message) == (E.INVALID_REQUEST, "MemberId can't be empty.")
        joined = _consumer_join(c, group, topic, version=1, regex=f"{topic}|nothing.*")
    assert (joined.error_code, joined.member_epoch, joined.heartbeat_interval_ms) == (0, 1, 5000)
    (tp,) = joined.assignment.topic_partitions
    assert (tp.topic_id, sorted(tp.partitions)) == (_topic_id(c, topic), [0, 1])
    again = _call(c, K.CONSUMER_GROUP_HEARTBEAT, v, group_id=group, member_id=joined.member_id, member_epoch=1,
                  topic_partitions=[tp])
    assert (again.error_code, again.member_epoch, again.assignment) == (0, 1, None)
    fenced = _call(c, K.CONSUMER_GROUP_HEARTBEAT, v, group_id=group, member_id=joined.member_id, member_epoch=9)
    assert fenced.error_code == E.FENCED_MEMBER_EPOCH
    left = _call(c, K.CONSUMER_GROUP_HEARTBEAT, v, group_id=group, member_id=joined.member_id, member_epoch=-1)
    assert (left.error_code, left.member_epoch) == (0, -1)


@check(K.CONSUMER_GROUP_DESCRIBE, range(0, 1))
def _consumer_group_describe_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic, group, classic = _topic(broker, "cgd", partitions=3), _name("cg"), _name("g")
    joined = _consumer_join(c, group, topic)
    _stable_member(c, classic)
    resp = _call(c, K.CONSUMER_GROUP_DESCRIBE, v, group_ids=[group, classic, _name("none")],
                 include_authorized_operations=True)
    d, not_consumer, missing = resp.groups
    assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == (
        0, "Stable", 1, 1, "uniform")
    assert d.authorized_operations > 0
    (m,) = d.members
    assert m.member_id == joined.member_id and m.member_epoch == 1 and m.subscribed_topic_names == [topic]
    (tp,) = m.assignment.topic_partitions
    assert (tp.topic_name, sorted(tp.partitions), tp.topic_id) == (topic, [0, 1, 2], _topic_id(c, topic))
    assert m.target_assignment.topic_partitions[0].partitions == tp.partitions
    assert (not_consumer.error_code, not_consumer.error_message) == (
        E.GROUP_ID_NOT_FOUND, f"Group {classic} is not a consumer group.")
    assert missing.error_code == E.GROUP_ID_NOT_FOUND


@check(K.SASL_HANDSHAKE, range(0, 2))
def _sasl_handshake_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    s = _sasl(broker)
    try:
        resp = _call(s, K.SASL_HANDSHAKE, v, mechanism="PLAIN")
        assert resp.error_code == 0 and list(resp.mechanisms) == ["PLAIN", "SCRAM-SHA-256"]
        token = f"\0{ADMIN}\0{ADMIN_PASSWORD}".encode()
        if v == 0:  # then the token goes raw, size-prefixed, and so does the (empty) answer
            s.send_raw(struct.pack(">i", len(token)) + token)
            assert s.read_frame() == b""
        else:
            assert _call(s, K.SASL_AUTHENTICATE, 2, auth_bytes=token).error_code == 0
        assert _metadata_works(s)
    finally:
        s.close()
    s = _sasl(broker)
    try:
        resp = _call(s, K.SASL_HANDSHAKE, v, mechanism="GSSAPI")
        assert resp.error_code == E.UNSUPPORTED_SASL_MECHANISM and list(resp.mechanisms) == ["PLAIN", "SCRAM-SHA-256"]
        assert s.is_closed_by_peer()
    finally:
        s.close()
    # On a listener without SASL there is no handshake to do.
    assert _call(c, K.SASL_HANDSHAKE, v, mechanism="PLAIN").error_code == E.ILLEGAL_SASL_STATE


@check(K.SASL_AUTHENTICATE, range(0, 3))
def _sasl_authenticate_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    s = _sasl(broker)
    try:
        assert _call(s, K.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
        resp = _call(s, K.SASL_AUTHENTICATE, v, auth_bytes=f"\0{ADMIN}\0{ADMIN_PASSWORD}".encode())
        assert resp.error_code == 0 and resp.error_message is None and resp.auth_bytes == b""
        if v >= 1:
            assert resp.session_lifetime_ms == 0  # no re-authentication (KIP-368)
        assert _metadata_works(s)
    finally:
        s.close()
    s = _sasl(broker)
    try:
        assert _call(s, K.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
        resp = _call(s, K.SASL_AUTHENTICATE, v, auth_bytes=f"\0{ADMIN}\0wrong".encode())
        assert resp.error_code == E.SASL_AUTHENTICATION_FAILED and resp.error_message
        assert s.is_closed_by_peer()
    finally:
        s.close()


@check(K.API_VERSIONS, range(0, 4))
def _api_versions_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    resp = _call(c, K.API_VERSIONS, v, client_software_name="kaflet-tests", client_software_version="1.0")
    assert resp.error_code == 0
    assert sorted((k.api_key, k.min_version, k.max_version) for k in resp.api_keys) == ADVERTISED
    if v >= 1:
        assert resp.throttle_time_ms == 0


@check(K.CREATE_TOPICS, range(0, 8))
def _create_topics_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    name = _name(f"ct{v}")
    C = _req(K.CREATE_TOPICS)

    def create(validate_only: bool = False) -> Any:
        return c.request(K.CREATE_TOPICS, v, C(topics=[C.CreatableTopic(
            name=name, num_partitions=2, replication_factor=1, assignments=[],
            configs=[C.CreatableTopic.CreatableTopicConfig(name="segment.bytes", value="1048576")])],
            timeout_ms=10000, validate_only=validate_only)).topics[0]

    if v >= 1:  # validate_only creates nothing
        assert create(validate_only=True).error_code == 0
    r = create()
    assert r.error_code == 0, r
    if v >= 5:
        assert (r.num_partitions, r.replication_factor) == (2, 1)
        assert {x.name: x.value for x in r.configs}["segment.bytes"] == "1048576"
    if v >= 7:
        assert r.topic_id != uuid.UUID(int=0)
    assert _configs(c, name)["segment.bytes"].value == "1048576"
    assert create().error_code == E.TOPIC_ALREADY_EXISTS


@check(K.DELETE_TOPICS, range(0, 7))
def _delete_topics_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    name = _topic(broker, f"dt{v}")
    D = _req(K.DELETE_TOPICS)
    resp = c.request(K.DELETE_TOPICS, v, D(topic_names=[name], topics=[
        D.DeleteTopicState(name=name, topic_id=uuid.UUID(int=0))], timeout_ms=10000))
    r = resp.responses[0]
    assert r.error_code == 0 and r.name == name
    M = _req(K.METADATA)
    deadline = time.monotonic() + 10
    while _call(c, K.METADATA, 4, topics=[M.MetadataRequestTopic(name=name)],
                allow_auto_topic_creation=False).topics[0].error_code != E.UNKNOWN_TOPIC_OR_PARTITION:
        assert time.monotonic() < deadline, "the deleted topic is still in the metadata"
        time.sleep(0.05)
    gone = c.request(K.DELETE_TOPICS, v, D(topic_names=[name], topics=[
        D.DeleteTopicState(name=name, topic_id=uuid.UUID(int=0))], timeout_ms=10000)).responses[0]
    assert gone.error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    if v >= 6:
        # By id: the topic's id deletes it (answered with its name), an unknown id is
        # UNKNOWN_TOPIC_ID, and a name with an id makes the request invalid.
        by_id = _topic(broker, "dtid")
        tid = _topic_id(c, by_id)
        both = c.request(K.DELETE_TOPICS, v, D(topics=[D.DeleteTopicState(name=by_id, topic_id=tid)],
                                               timeout_ms=10000)).responses[0]
        assert (both.error_code, both.topic_id) == (E.INVALID_REQUEST, tid)
        unknown = uuid.uuid4()
        resp = c.request(K.DELETE_TOPICS, v, D(topics=[D.DeleteTopicState(name=None, topic_id=tid),
                                                       D.DeleteTopicState(name=None, topic_id=unknown)],
                                               timeout_ms=10000)).responses
        got = {r.topic_id: (r.error_code, r.name) for r in resp}
        assert got == {tid: (0, by_id), unknown: (E.UNKNOWN_TOPIC_ID, None)}


@check(K.DELETE_RECORDS, range(0, 3))
def _delete_records_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _topic(broker, f"dr{v}")
    assert _produce(c, topic, [b"a", b"b", b"c", b"d", b"e"]).error_code == 0
    D = _req(K.DELETE_RECORDS)
    T = D.DeleteRecordsTopic
    resp = c.request(K.DELETE_RECORDS, v, D(timeout_ms=5000, topics=[T(name=topic, partitions=[
        T.DeleteRecordsPartition(partition_index=0, offset=3)])]))
    p = resp.topics[0].partitions[0]
    assert (p.partition_index, p.error_code, p.low_watermark) == (0, 0, 3)
    assert _list_offset(c, topic, -2).offset == 3
    beyond = c.request(K.DELETE_RECORDS, v, D(timeout_ms=5000, topics=[T(name=topic, partitions=[
        T.DeleteRecordsPartition(partition_index=0, offset=99)])])).topics[0].partitions[0]
    assert beyond.error_code == E.OFFSET_OUT_OF_RANGE


@check(K.INIT_PRODUCER_ID, range(0, 5))
def _init_producer_id_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    a = _call(c, K.INIT_PRODUCER_ID, v, transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
              producer_epoch=-1)
    b = _call(c, K.INIT_PRODUCER_ID, v, transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
              producer_epoch=-1)
    assert a.error_code == 0 and b.error_code == 0
    assert a.producer_id >= 0 and b.producer_id != a.producer_id and a.producer_epoch == 0


def _transactional_id(c: RawClient) -> tuple[str, int]:
    """A new transactional id initialised at epoch 0 (waits for __transaction_state's coordinator)."""
    txn_id = _name("tx")
    deadline = time.monotonic() + 30
    while True:
        r = _call(c, K.INIT_PRODUCER_ID, 4, transactional_id=txn_id, transaction_timeout_ms=60000, producer_id=-1,
                  producer_epoch=-1)
        if r.error_code == 0:
            return txn_id, r.producer_id
        assert r.error_code in (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR)
        assert time.monotonic() < deadline, "no transaction coordinator"
        _call(c, K.FIND_COORDINATOR, 3, key=txn_id, key_type=1)
        time.sleep(0.1)


@check(K.DESCRIBE_TRANSACTIONS, range(0, 1))
def _describe_transactions_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    txn_id, pid = _transactional_id(c)
    found, missing = _call(c, K.DESCRIBE_TRANSACTIONS, v, transactional_ids=[txn_id, _name("none")]).transaction_states
    assert (found.error_code, found.transactional_id, found.transaction_state, found.transaction_timeout_ms,
            found.producer_id, found.producer_epoch, found.topics) == (0, txn_id, "Empty", 60000, pid, 0, [])
    assert missing.error_code == E.TRANSACTIONAL_ID_NOT_FOUND


@check(K.LIST_TRANSACTIONS, range(0, 2))
def _list_transactions_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    txn_id, pid = _transactional_id(c)
    extra = {"duration_filter": -1} if v >= 1 else {}
    r = _call(c, K.LIST_TRANSACTIONS, v, state_filters=["Empty", "Bogus"], producer_id_filters=[pid], **extra)
    assert (r.error_code, r.unknown_state_filters) == (0, ["Bogus"])
    assert [(t.transactional_id, t.producer_id, t.transaction_state) for t in r.transaction_states] == [
        (txn_id, pid, "Empty")]
    assert _call(c, K.LIST_TRANSACTIONS, v, state_filters=["Ongoing"], producer_id_filters=[pid],
                 **extra).transaction_states == []
    if v >= 1:  # KIP-994: only transactions running longer than the filter (no transaction: start -1)
        assert _call(c, K.LIST_TRANSACTIONS, v, state_filters=[], producer_id_filters=[pid],
                     duration_filter=10**14).transaction_states == []


@check(K.DESCRIBE_ACLS, range(0, 4))
def _describe_acls_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _name("acl")
    assert _create_acl(c, topic).error_code == 0
    resp = _call(c, K.DESCRIBE_ACLS, v, **_acl_filter(topic))
    assert resp.error_code == 0
    got = [(r.resource_type, r.resource_name, [(a.principal, a.host, a.operation, a.permission_type) for a in r.acls])
           for r in resp.resources]
    assert got == [(TOPIC, topic, [("User:alice", "*", READ, ALLOW)])]
    if v >= 1:
        assert resp.resources[0].pattern_type == LITERAL
        match = _call(c, K.DESCRIBE_ACLS, v, **{**_acl_filter(topic + "-x"), "pattern_type_filter": 2})
        assert match.resources == []  # MATCH: no literal, prefixed or wildcard ACL covers that name


@check(K.CREATE_ACLS, range(0, 4))
def _create_acls_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _name("acl")
    pattern = PREFIXED if v >= 1 else LITERAL  # v0 has no pattern type: literal
    r = _create_acl(c, topic, version=v, pattern=pattern)
    assert r.error_code == 0 and r.error_message is None
    assert _acls(c, topic, pattern) == [("User:alice", "*", READ, ALLOW)]
    C = _req(K.CREATE_ACLS)
    bad = c.request(K.CREATE_ACLS, v, C(creations=[C.AclCreation(
        resource_type=TOPIC, resource_name=topic, resource_pattern_type=LITERAL, principal="alice", host="*",
        operation=READ, permission_type=ALLOW)])).results[0]
    assert bad.error_code == E.INVALID_REQUEST  # a principal is TYPE:name


@check(K.DELETE_ACLS, range(0, 4))
def _delete_acls_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _name("acl")
    assert _create_acl(c, topic).error_code == 0
    resp = _call(c, K.DELETE_ACLS, v, filters=[_req(K.DELETE_ACLS).DeleteAclsFilter(**_acl_filter(topic))])
    f = resp.filter_results[0]
    assert f.error_code == 0
    assert [(m.error_code, m.resource_name, m.principal, m.operation) for m in f.matching_acls] == [
        (0, topic, "User:alice", READ)]
    if v >= 1:
        assert f.matching_acls[0].pattern_type == LITERAL
    assert _acls(c, topic) == []


@check(K.DESCRIBE_CONFIGS, range(0, 5))
def _describe_configs_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _topic(broker, f"dc{v}", config={"retention.ms": "123456"})
    D = _req(K.DESCRIBE_CONFIGS)
    resp = c.request(K.DESCRIBE_CONFIGS, v, D(resources=[D.DescribeConfigsResource(
        resource_type=TOPIC, resource_name=topic, configuration_keys=["retention.ms", "cleanup.policy"])],
        include_synonyms=True, include_documentation=True))
    r = resp.results[0]
    assert (r.error_code, r.resource_type, r.resource_name) == (0, TOPIC, topic)
    cfg = {x.name: x for x in r.configs}
    assert set(cfg) == {"retention.ms", "cleanup.policy"}
    retention, policy = cfg["retention.ms"], cfg["cleanup.policy"]
    assert (retention.value, retention.read_only, retention.is_sensitive) == ("123456", False, False)
    assert policy.value == "delete"
    if v == 0:
        assert (retention.is_default, policy.is_default) == (False, True)
    else:
        assert (retention.config_source, policy.config_source) == (1, 5)  # DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG
        assert (retention.synonyms[0].name, retention.synonyms[0].value) == ("retention.ms", "123456")
        assert retention.synonyms[0].source == 1
    if v >= 3:
        assert (retention.config_type, policy.config_type) == (5, 7)  # LONG, LIST
        assert retention.documentation
    unknown = c.request(K.DESCRIBE_CONFIGS, v, D(resources=[D.DescribeConfigsResource(
        resource_type=TOPIC, resource_name=_name("none"), configuration_keys=None)], include_synonyms=False,
        include_documentation=False)).results[0]
    assert unknown.error_code == E.UNKNOWN_TOPIC_OR_PARTITION


@check(K.ALTER_CONFIGS, range(0, 3))
def _alter_configs_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _topic(broker, f"ac{v}", config={"retention.ms": "123456"})
    A = _req(K.ALTER_CONFIGS)

    def alter(configs: dict[str, str], validate_only: bool) -> Any:
        return c.request(K.ALTER_CONFIGS, v, A(resources=[A.AlterConfigsResource(
            resource_type=TOPIC, resource_name=topic, configs=[
                A.AlterConfigsResource.AlterableConfig(name=k, value=val) for k, val in configs.items()])],
            validate_only=validate_only)).responses[0]

    assert alter({"segment.ms": "600000"}, validate_only=True).error_code == 0
    assert "segment.ms" not in {k for k, x in _configs(c, topic).items() if x.config_source == 1}
    r = alter({"segment.ms": "600000"}, validate_only=False)
    assert (r.error_code, r.resource_type, r.resource_name) == (0, TOPIC, topic)
    dynamic = {k: x.value for k, x in _configs(c, topic).items() if x.config_source == 1}
    assert dynamic == {"segment.ms": "600000"}  # AlterConfigs replaces the whole set
    assert alter({"retention.ms": "soon"}, validate_only=False).error_code == E.INVALID_CONFIG


@check(K.INCREMENTAL_ALTER_CONFIGS, range(0, 2))
def _incremental_alter_configs_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _topic(broker, f"iac{v}", config={"retention.ms": "123456"})
    A = _req(K.INCREMENTAL_ALTER_CONFIGS)
    Cfg = A.AlterConfigsResource.AlterableConfig
    r = c.request(K.INCREMENTAL_ALTER_CONFIGS, v, A(resources=[A.AlterConfigsResource(
        resource_type=TOPIC, resource_name=topic, configs=[
            Cfg(name="cleanup.policy", config_operation=0, value="compact"),  # SET
            Cfg(name="retention.ms", config_operation=1, value=None),  # DELETE
        ])], validate_only=False)).responses[0]
    assert (r.error_code, r.resource_name) == (0, topic)
    dynamic = {k: x.value for k, x in _configs(c, topic).items() if x.config_source == 1}
    assert dynamic == {"cleanup.policy": "compact"}
    bad = c.request(K.INCREMENTAL_ALTER_CONFIGS, v, A(resources=[A.AlterConfigsResource(
        resource_type=TOPIC, resource_name=topic, configs=[Cfg(name="no.such.config", config_operation=0,
                                                              value="1")])], validate_only=False)).responses[0]
    assert bad.error_code == E.INVALID_CONFIG


@check(K.CREATE_PARTITIONS, range(0, 4))
def _create_partitions_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    name = _topic(broker, f"cp{v}")
    CP = _req(K.CREATE_PARTITIONS)

    def grow(count: int) -> Any:
        return c.request(K.CREATE_PARTITIONS, v, CP(topics=[CP.CreatePartitionsTopic(
            name=name, count=count, assignments=None)], timeout_ms=10000, validate_only=False)).results[0]

    r = grow(3)
    assert (r.name, r.error_code) == (name, 0)
    M = _req(K.METADATA)
    meta = _call(c, K.METADATA, 4, topics=[M.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False)
    assert len(meta.topics[0].partitions) == 3
    assert grow(2).error_code == E.INVALID_PARTITIONS


@check(K.DELETE_GROUPS, range(0, 3))
def _delete_groups_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic, empty, busy = _topic(broker, f"dg{v}"), _name("g"), _name("g")
    assert _commit(c, empty, topic, 4) == 0
    _stable_member(c, busy)
    resp = _call(c, K.DELETE_GROUPS, v, groups_names=[empty, busy])
    assert {r.group_id: r.error_code for r in resp.results} == {empty: 0, busy: E.NON_EMPTY_GROUP}
    assert _committed(c, empty, topic)[0] == -1
    again = _call(c, K.DELETE_GROUPS, v, groups_names=[empty]).results[0]
    assert again.error_code == E.GROUP_ID_NOT_FOUND


@check(K.OFFSET_DELETE, range(0, 1))
def _offset_delete_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic, group = _topic(broker, "od", 2), _name("g")
    assert _commit(c, group, topic, 6) == 0
    O = _req(K.OFFSET_DELETE)  # noqa: E741
    resp = c.request(K.OFFSET_DELETE, v, O(group_id=group, topics=[O.OffsetDeleteRequestTopic(
        name=topic, partitions=[O.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=0)])]))
    assert resp.error_code == 0
    assert [(p.partition_index, p.error_code) for p in resp.topics[0].partitions] == [(0, 0)]
    assert _committed(c, group, topic)[0] == -1
    unknown = c.request(K.OFFSET_DELETE, v, O(group_id=_name("none"), topics=[]))
    assert unknown.error_code == E.GROUP_ID_NOT_FOUND


@check(K.DESCRIBE_CLIENT_QUOTAS, range(0, 2))
def _describe_client_quotas_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    client = _name("app")
    assert alter_quotas(broker.bootstrap, [("client-id", client)], {"producer_byte_rate": 2048.0}).error_code == 0
    resp = describe_quotas(broker.bootstrap, [("client-id", 0, client)], version=v)  # match exactly
    assert resp.error_code == 0
    assert quotas_as_dict(resp) == {(("client-id", client),): {"producer_byte_rate": 2048.0}}
    assert describe_quotas(broker.bootstrap, [("nope", 2, None)], version=v).error_code == E.UNSUPPORTED_VERSION


@check(K.ALTER_CLIENT_QUOTAS, range(0, 2))
def _alter_client_quotas_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    user = _name("u")
    r = alter_quotas(broker.bootstrap, [("user", user)], {"consumer_byte_rate": 4096.0}, version=v)
    assert r.error_code == 0 and [(e.entity_type, e.entity_name) for e in r.entity] == [("user", user)]
    assert quotas_as_dict(describe_quotas(broker.bootstrap, [("user", 0, user)])) == {
        (("user", user),): {"consumer_byte_rate": 4096.0}}
    assert alter_quotas(broker.bootstrap, [("user", user)], {"consumer_byte_rate": None}, version=v).error_code == 0
    assert quotas_as_dict(describe_quotas(broker.bootstrap, [("user", 0, user)])) == {}
    assert alter_quotas(broker.bootstrap, [("user", user)], {"no_such_quota": 1.0}, version=v).error_code == \
        E.INVALID_REQUEST


def _upsert_scram(c: RawClient, user: str, password: str, version: int = 0) -> Any:
    A = _req(K.ALTER_USER_SCRAM_CREDENTIALS)
    salt = uuid.uuid4().bytes
    return c.request(K.ALTER_USER_SCRAM_CREDENTIALS, version, A(deletions=[], upsertions=[A.ScramCredentialUpsertion(
        name=user, mechanism=SCRAM_SHA_256.type_id, iterations=4096, salt=salt,
        salted_password=SCRAM_SHA_256.salted_password(password, salt, 4096))])).results[0]


def _scram_login(broker: BrokerProcess, user: str, password: str) -> bool:
    """A SCRAM-SHA-256 exchange over SaslAuthenticate on the SASL listener; True if it succeeds."""
    s = _sasl(broker)
    try:
        assert _call(s, K.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-256").error_code == 0
        client = ScramClient(SCRAM_SHA_256, user, password)
        first = _call(s, K.SASL_AUTHENTICATE, 2, auth_bytes=client.first())
        if first.error_code != 0:
            return False
        final = _call(s, K.SASL_AUTHENTICATE, 2, auth_bytes=client.final(bytes(first.auth_bytes)))
        if final.error_code != 0:
            return False
        client.verify(bytes(final.auth_bytes))
        return _metadata_works(s)
    finally:
        s.close()


@check(K.DESCRIBE_USER_SCRAM_CREDENTIALS, range(0, 1))
def _describe_user_scram_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    user = _name("u")
    assert _upsert_scram(c, user, "pw").error_code == 0
    D = _req(K.DESCRIBE_USER_SCRAM_CREDENTIALS)
    resp = c.request(K.DESCRIBE_USER_SCRAM_CREDENTIALS, v, D(users=[D.UserName(name=user)]))
    assert resp.error_code == 0
    r = resp.results[0]
    assert (r.user, r.error_code, [(i.mechanism, i.iterations) for i in r.credential_infos]) == (
        user, 0, [(SCRAM_SHA_256.type_id, 4096)])
    everyone = c.request(K.DESCRIBE_USER_SCRAM_CREDENTIALS, v, D(users=None))
    assert user in {x.user for x in everyone.results}
    unknown = c.request(K.DESCRIBE_USER_SCRAM_CREDENTIALS, v, D(users=[D.UserName(name=_name("none"))]))
    assert unknown.results[0].error_code == E.RESOURCE_NOT_FOUND


@check(K.ALTER_USER_SCRAM_CREDENTIALS, range(0, 1))
def _alter_user_scram_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    user = _name("u")
    r = _upsert_scram(c, user, "secret", version=v)
    assert (r.user, r.error_code) == (user, 0)
    assert _scram_login(broker, user, "secret")
    A = _req(K.ALTER_USER_SCRAM_CREDENTIALS)
    gone = c.request(K.ALTER_USER_SCRAM_CREDENTIALS, v, A(upsertions=[], deletions=[A.ScramCredentialDeletion(
        name=user, mechanism=SCRAM_SHA_256.type_id)])).results[0]
    assert gone.error_code == 0
    assert not _scram_login(broker, user, "secret")


@check(K.DESCRIBE_CLUSTER, range(0, 2))
def _describe_cluster_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    resp = _call(c, K.DESCRIBE_CLUSTER, v, include_cluster_authorized_operations=True, endpoint_type=1)
    assert resp.error_code == 0 and resp.cluster_id
    assert [(b.host, b.port) for b in resp.brokers] == [("127.0.0.1", broker.port)]
    assert resp.controller_id == resp.brokers[0].broker_id
    # Asked for, as a super user: every cluster operation (Create, Alter, Describe, ClusterAction,
    # DescribeConfigs, AlterConfigs, IdempotentWrite).
    assert resp.authorized_operations == {5, 7, 8, 9, 10, 11, 12}
    if v >= 1:
        assert resp.endpoint_type == 1


# The controller's requests: this broker alone, told by a controller with a much newer epoch.
CONTROLLER_EPOCH = 1_000_000


def _broker_id(c: RawClient) -> int:
    return int(_call(c, K.METADATA, 1, topics=[]).brokers[0].node_id)


def _lead(c: RawClient, topic: str, broker_id: int, leader_epoch: int = 0) -> Any:
    return c.request(K.LEADER_AND_ISR, 5, leader_and_isr(CONTROLLER_EPOCH, topic, [
        {"index": 0, "leader": broker_id, "leader_epoch": leader_epoch, "isr": [broker_id],
         "replicas": [broker_id], "is_new": True}], controller_id=broker_id))


@check(K.LEADER_AND_ISR, range(5, 6))
def _leader_and_isr_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    me, topic = _broker_id(c), _name("lai")
    resp = _lead(c, topic, me, leader_epoch=3)
    assert resp.error_code == 0
    assert [(p.partition_index, p.error_code) for t in resp.topics for p in t.partition_errors] == [(0, 0)]
    assert _produce(c, topic, [b"led"]).error_code == 0  # the partition is led here now
    again = _lead(c, topic, me, leader_epoch=3)  # not a newer leader epoch
    assert again.topics[0].partition_errors[0].error_code == E.STALE_CONTROLLER_EPOCH
    old = c.request(K.LEADER_AND_ISR, 5, leader_and_isr(
        1, topic, [{"index": 0, "leader": me, "leader_epoch": 9, "isr": [me], "replicas": [me]}]))
    assert old.error_code == E.STALE_CONTROLLER_EPOCH


@check(K.STOP_REPLICA, range(3, 4))
def _stop_replica_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    me, topic = _broker_id(c), _name("sr")
    assert _lead(c, topic, me, leader_epoch=2).error_code == 0
    # An older leader epoch is fenced; the same one is accepted (Kafka 3.4+, KAFKA-13972).
    fenced = c.request(K.STOP_REPLICA, v, stop_replica(CONTROLLER_EPOCH, topic, [(0, 1, True)]))
    assert fenced.error_code == 0 and [(p.topic_name, p.error_code) for p in fenced.partition_errors] == [
        (topic, E.FENCED_LEADER_EPOCH)]
    resp = c.request(K.STOP_REPLICA, v, stop_replica(CONTROLLER_EPOCH, topic, [(0, -2, True)]))
    assert resp.error_code == 0 and [(p.partition_index, p.error_code) for p in resp.partition_errors] == [(0, 0)]
    assert _produce(c, topic, [b"gone"]).error_code == E.UNKNOWN_TOPIC_OR_PARTITION


@check(K.UPDATE_METADATA, range(7, 8))
def _update_metadata_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    me, topic = _broker_id(c), _name("um")
    R = _req(K.UPDATE_METADATA)
    T, B = R.UpdateMetadataTopicState, R.UpdateMetadataBroker
    live = [B(id=me, rack=None, endpoints=[
        B.UpdateMetadataEndpoint(port=broker.ports["PLAINTEXT"], host="127.0.0.1", listener="PLAINTEXT",
                                 security_protocol=0),
        B.UpdateMetadataEndpoint(port=broker.ports["SASL_PLAINTEXT"], host="127.0.0.1", listener="SASL_PLAINTEXT",
                                 security_protocol=2)])]
    topic_id = uuid.uuid4()
    req = R(controller_id=me, controller_epoch=CONTROLLER_EPOCH, broker_epoch=-1, live_brokers=live, topic_states=[
        T(topic_name=topic, topic_id=topic_id, partition_states=[T.UpdateMetadataPartitionState(
            partition_index=0, controller_epoch=CONTROLLER_EPOCH, leader=me, leader_epoch=4, isr=[me],
            zk_version=2, replicas=[me, 4242], offline_replicas=[4242])])])
    assert c.request(K.UPDATE_METADATA, v, req).error_code == 0
    M = _req(K.METADATA)
    t = c.request(K.METADATA, 12, M(topics=[M.MetadataRequestTopic(name=topic, topic_id=uuid.UUID(int=0))],
                                    allow_auto_topic_creation=False, include_topic_authorized_operations=False)).topics[0]
    assert t.error_code == 0 and t.topic_id == topic_id
    p = t.partitions[0]
    assert (p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes, p.offline_replicas) == (
        me, 4, [me, 4242], [me], [4242])
    req.controller_epoch = 1
    assert c.request(K.UPDATE_METADATA, v, req).error_code == E.STALE_CONTROLLER_EPOCH


@check(K.CONTROLLED_SHUTDOWN, range(3, 4))
def _controlled_shutdown_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    me = _broker_id(c)
    R = _req(K.CONTROLLED_SHUTDOWN)
    # This broker is the (only, hence active) controller: a registration older than the
    # broker's own is refused, the broker itself may stop (nothing could move: no replicas).
    assert c.request(K.CONTROLLED_SHUTDOWN, v, R(broker_id=me, broker_epoch=0)).error_code == E.STALE_BROKER_EPOCH
    resp = c.request(K.CONTROLLED_SHUTDOWN, v, R(broker_id=me, broker_epoch=-1))
    assert (resp.error_code, resp.remaining_partitions) == (0, [])
    unknown = c.request(K.CONTROLLED_SHUTDOWN, v, R(broker_id=me + 1000, broker_epoch=-1))
    assert unknown.error_code == E.BROKER_NOT_AVAILABLE


@check(K.ELECT_LEADERS, range(0, 3))
def _elect_leaders_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _topic(broker, f"el{v}")
    EL = _req(K.ELECT_LEADERS)
    fields: dict[str, Any] = {"election_type": 0} if v >= 1 else {}
    resp = c.request(K.ELECT_LEADERS, v, EL(topic_partitions=[EL.TopicPartitions(topic=topic, partitions=[0, 7])],
                                              timeout_ms=5000, **fields))
    results = {(r.topic, p.partition_id): p.error_code for r in resp.replica_election_results
               for p in r.partition_result}
    # The preferred replica (the only one) already leads; partition 7 does not exist.
    assert results == {(topic, 0): E.ELECTION_NOT_NEEDED, (topic, 7): E.UNKNOWN_TOPIC_OR_PARTITION}
    if v >= 1:
        assert resp.error_code == 0
        unclean = c.request(K.ELECT_LEADERS, v, EL(election_type=1, timeout_ms=5000, topic_partitions=[
            EL.TopicPartitions(topic=topic, partitions=[0])]))
        # A leader is alive: no unclean election is needed.
        assert [p.error_code for r in unclean.replica_election_results for p in r.partition_result] == [
            E.ELECTION_NOT_NEEDED]
    everything = c.request(K.ELECT_LEADERS, v, EL(topic_partitions=None, timeout_ms=5000, **fields))
    assert everything.replica_election_results == []  # no partition needed an election


@check(K.ALTER_PARTITION_REASSIGNMENTS, range(0, 1))
def _alter_partition_reassignments_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _topic(broker, f"apr{v}")
    me = _broker_id(c)
    AR = _req(K.ALTER_PARTITION_REASSIGNMENTS)
    P = AR.ReassignableTopic.ReassignablePartition

    def alter(name: str, replicas: list[int] | None) -> tuple[int, int]:
        resp = c.request(K.ALTER_PARTITION_REASSIGNMENTS, v, AR(timeout_ms=5000, topics=[
            AR.ReassignableTopic(name=name, partitions=[P(partition_index=0, replicas=replicas)])]))
        assert [t.name for t in resp.responses] == [name]
        return resp.error_code, resp.responses[0].partitions[0].error_code

    # A move to where the partition already is completes at once; the rest are refused.
    assert alter(topic, [me]) == (0, E.NONE)
    assert alter(topic, None) == (0, E.NO_REASSIGNMENT_IN_PROGRESS)
    assert alter(topic, []) == (0, E.INVALID_REPLICA_ASSIGNMENT)
    assert alter(topic, [me, me + 100]) == (0, E.INVALID_REPLICA_ASSIGNMENT)  # not a live broker
    assert alter(_name("nosuch"), [me]) == (0, E.UNKNOWN_TOPIC_OR_PARTITION)


@check(K.LIST_PARTITION_REASSIGNMENTS, range(0, 1))
def _list_partition_reassignments_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _topic(broker, f"lpr{v}")
    LR = _req(K.LIST_PARTITION_REASSIGNMENTS)
    everything = c.request(K.LIST_PARTITION_REASSIGNMENTS, v, LR(timeout_ms=5000, topics=None))
    assert (everything.error_code, everything.topics) == (0, [])
    asked = c.request(K.LIST_PARTITION_REASSIGNMENTS, v, LR(timeout_ms=5000, topics=[
        LR.ListPartitionReassignmentsTopics(name=topic, partition_indexes=[0])]))
    assert (asked.error_code, asked.topics) == (0, [])  # not being reassigned: left out


@check(K.OFFSET_FOR_LEADER_EPOCH, range(0, 5))
def _offset_for_leader_epoch_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _topic(broker, f"ole{v}")
    assert _produce(c, topic, [b"a", b"b", b"c"]).error_code == 0
    OE = _req(K.OFFSET_FOR_LEADER_EPOCH)

    def ask(current: int, epoch: int, partition: int = 0) -> Any:
        return c.request(K.OFFSET_FOR_LEADER_EPOCH, v, OE(replica_id=-1, topics=[OE.OffsetForLeaderTopic(
            topic=topic, partitions=[OE.OffsetForLeaderTopic.OffsetForLeaderPartition(
                partition=partition, current_leader_epoch=current, leader_epoch=epoch)])])).topics[0].partitions[0]

    got = ask(-1, 0)
    assert (got.error_code, got.end_offset) == (0, 3)  # the current epoch ends at the log end
    if v >= 1:
        assert got.leader_epoch == 0
    assert ask(-1, 0, partition=5).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    if v >= 2:
        assert ask(0, 0).error_code == 0
        assert ask(7, 0).error_code == E.UNKNOWN_LEADER_EPOCH


def _producer_record(c: RawClient, topic: str, transactional_id: str | None) -> Any:
    """A new producer id's first record on partition 0 (transactional with an id); its InitProducerId answer."""
    ip = c.request(K.INIT_PRODUCER_ID, 1, _req(K.INIT_PRODUCER_ID)(transactional_id=None,
                                                                     transaction_timeout_ms=60000))
    batch = build_batch([Record(0, 0, None, b"t", [])], producer_id=ip.producer_id, producer_epoch=ip.producer_epoch,
                        base_sequence=0, is_transactional=transactional_id is not None)
    P = _req(K.PRODUCE)
    assert c.request(K.PRODUCE, 7, P(transactional_id=transactional_id, acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[P.TopicProduceData.PartitionProduceData(
            index=0, records=batch)])])).responses[0].partition_responses[0].error_code == 0
    return ip


@check(K.WRITE_TXN_MARKERS, range(0, 2))
def _write_txn_markers_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _topic(broker, f"wtm{v}")
    ip = _producer_record(c, topic, "wtm")
    W = _req(K.WRITE_TXN_MARKERS)
    M = W.WritableTxnMarker
    resp = c.request(K.WRITE_TXN_MARKERS, v, W(markers=[M(
        producer_id=ip.producer_id, producer_epoch=ip.producer_epoch, transaction_result=True, coordinator_epoch=0,
        topics=[M.WritableTxnMarkerTopic(name=topic, partition_indexes=[0, 9])])]))
    [marker] = resp.markers
    assert marker.producer_id == ip.producer_id
    assert [(p.partition_index, p.error_code) for p in marker.topics[0].partitions] == [
        (0, 0), (9, E.UNKNOWN_TOPIC_OR_PARTITION)]
    # The marker is at offset 1: the log end is past it.
    assert _produce(c, topic, [b"after"]).base_offset == 2


@check(K.DESCRIBE_PRODUCERS, range(0, 1))
def _describe_producers_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _topic(broker, f"dp{v}")
    ip = _producer_record(c, topic, None)
    D = _req(K.DESCRIBE_PRODUCERS)
    [t] = c.request(K.DESCRIBE_PRODUCERS, v, D(topics=[D.TopicRequest(name=topic, partition_indexes=[0])])).topics
    [p] = t.partitions
    assert p.error_code == 0
    assert [(s.producer_id, s.producer_epoch, s.last_sequence) for s in p.active_producers] == [
        (ip.producer_id, ip.producer_epoch, 0)]


@check(K.DESCRIBE_LOG_DIRS, range(0, 5))
def _describe_log_dirs_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    topic = _topic(broker, f"ld{v}", partitions=2)
    assert _produce(c, topic, [b"a", b"bb", b"ccc"]).error_code == 0
    D = _req(K.DESCRIBE_LOG_DIRS)
    on_disk = sum(f.stat().st_size for f in (broker.data_dir / f"{topic}-0").glob("*.log"))
    resp = c.request(K.DESCRIBE_LOG_DIRS, v, D(topics=[D.DescribableLogDirTopic(topic=topic, partitions=[0])]))
    [result] = resp.results
    assert result.error_code == 0 and Path(result.log_dir) == broker.data_dir.resolve()
    [t] = [t for t in result.topics if t.name == topic]
    assert [(p.partition_index, p.partition_size, p.offset_lag, p.is_future_key) for p in t.partitions] == [
        (0, on_disk, 0, False)]
    assert on_disk > 0
    every = c.request(K.DESCRIBE_LOG_DIRS, v, D(topics=None)).results[0]
    assert sorted(p.partition_index for t in every.topics if t.name == topic for p in t.partitions) == [0, 1]
    if v >= 3:
        assert resp.error_code == 0
    if v >= 4:
        assert 0 < result.usable_bytes <= result.total_bytes


@check(K.ALTER_REPLICA_LOG_DIRS, range(0, 3))
def _alter_replica_log_dirs_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    """The broker has one log dir: a replica already there needs nothing; a path that is not one
    of log.dirs (absolute or relative) and an unknown partition get Kafka's errors. Real moves
    are in test_log_dir_moves.py."""
    topic = _topic(broker, f"ard{v}")
    D = _req(K.DESCRIBE_LOG_DIRS)
    [here] = [r.log_dir for r in c.request(K.DESCRIBE_LOG_DIRS, 1, D(topics=None)).results]
    A = _req(K.ALTER_REPLICA_LOG_DIRS)

    def alter(path: str, t: str) -> list[tuple[str, int, int]]:
        resp = c.request(K.ALTER_REPLICA_LOG_DIRS, v, A(dirs=[A.AlterReplicaLogDir(path=path, topics=[
            A.AlterReplicaLogDir.AlterReplicaLogDirTopic(name=t, partitions=[0])])]))
        return [(r.topic_name, p.partition_index, p.error_code) for r in resp.results for p in r.partitions]

    assert alter(here, topic) == [(topic, 0, E.NONE)]
    assert alter(str(broker.data_dir.parent / "elsewhere"), topic) == [(topic, 0, E.LOG_DIR_NOT_FOUND)]
    assert alter("data", topic) == [(topic, 0, E.LOG_DIR_NOT_FOUND)]
    assert alter(here, "no-such-topic-" + topic) == [("no-such-topic-" + topic, 0, E.UNKNOWN_TOPIC_OR_PARTITION)]


# -- the tests --------------------------------------------------------------------------------------

def test_every_advertised_version_has_a_check_and_nothing_more() -> None:
    checked = {(key, v) for key, (versions, _) in CHECKS.items() for v in versions}
    missing = sorted(set(PARAMS) - checked)
    extra = sorted(checked - set(PARAMS))
    assert not missing, "advertised without a check: " + ", ".join(f"{K(k).name} v{v}" for k, v in missing)
    assert not extra, "checked but not advertised: " + ", ".join(f"{K(k).name} v{v}" for k, v in extra)


@pytest.mark.parametrize(("api_key", "version"), PARAMS, ids=[f"{K(k).name}-v{v}" for k, v in PARAMS])
def test_version(request: pytest.FixtureRequest, api_key: int, version: int) -> None:
    broker: BrokerProcess = request.getfixturevalue("fenced_broker" if api_key in CONTROLLER_APIS else "broker")
    versions, fn = CHECKS.get(api_key, (range(0), None))
    assert fn is not None and version in versions, f"{K(api_key).name} v{version} is advertised but has no check"
    c = RawClient(broker.bootstrap)
    try:
        fn(broker, c, version)
    finally:
        c.close()


RANGES = {key: (lo, hi) for key, lo, hi in ADVERTISED}
OUTSIDE = [(key, hi + 1) for key, (lo, hi) in RANGES.items()] + [(key, lo - 1) for key, (lo, hi) in RANGES.items() if lo]


@pytest.mark.parametrize(("api_key", "version"), OUTSIDE, ids=[f"{K(k).name}-v{v}" for k, v in OUTSIDE])
def test_unsupported_version(broker: BrokerProcess, api_key: int, version: int) -> None:
    lo, hi = RANGES[api_key]
    # A body well-formed at the nearest supported version (every field at its default), so only
    # the version is wrong.
    body = bytes(codec.request_class(api_key)().encode(version=min(max(version, lo), hi)))
    c = RawClient(broker.bootstrap)
    try:
        c.send_raw(c.frame(api_key, version, body))
        if api_key == K.API_VERSIONS:
            # KIP-511: an ApiVersions version the broker does not know gets the v0 form of the
            # answer, UNSUPPORTED_VERSION and the supported ranges, on an open connection.
            resp = c.read_response(K.API_VERSIONS, 0)
            assert resp.error_code == E.UNSUPPORTED_VERSION
            assert sorted((k.api_key, k.min_version, k.max_version) for k in resp.api_keys) == ADVERTISED
            assert _call(c, K.API_VERSIONS, 3, client_software_name="t", client_software_version="1").error_code == 0
            return
        assert c.is_closed_by_peer(), "the broker kept the connection"
    finally:
        c.close()
    deadline = time.monotonic() + 5
    line = f"unsupported version {version} of {K(api_key).name}"
    while line not in broker.new_log():
        assert time.monotonic() < deadline, f"no log line saying {line!r}"
        time.sleep(0.05)


def _transaction(broker: BrokerProcess, c: RawClient, versions: dict[int, int]) -> None:
    """One whole transaction: a record and a group's offset, committed; each API at the version
    ``versions`` names (3 otherwise). Afterwards the record is below the last stable offset and
    the offset is committed."""
    topic = _topic(broker, "txv")
    group = _name("txg")
    txn_id, pid = _transactional_id(c)
    v = {k: versions.get(k, 3) for k in (K.ADD_PARTITIONS_TO_TXN, K.ADD_OFFSETS_TO_TXN, K.TXN_OFFSET_COMMIT, K.END_TXN)}
    A = _req(K.ADD_PARTITIONS_TO_TXN)
    added = c.request(K.ADD_PARTITIONS_TO_TXN, v[K.ADD_PARTITIONS_TO_TXN], A(
        v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=0,
        v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=topic, partitions=[0])]))
    assert [(t.name, [(r.partition_index, r.partition_error_code) for r in t.results_by_partition])
            for t in added.results_by_topic_v3_and_below] == [(topic, [(0, 0)])]
    batch = build_batch([Record(0, 0, None, b"in-txn", [])], producer_id=pid, producer_epoch=0, base_sequence=0,
                        is_transactional=True)
    P = _req(K.PRODUCE)
    assert c.request(K.PRODUCE, 7, P(transactional_id=txn_id, acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[P.TopicProduceData.PartitionProduceData(
            index=0, records=batch)])])).responses[0].partition_responses[0].error_code == 0
    assert _call(c, K.ADD_OFFSETS_TO_TXN, v[K.ADD_OFFSETS_TO_TXN], transactional_id=txn_id, producer_id=pid,
                 producer_epoch=0, group_id=group).error_code == 0
    T = _req(K.TXN_OFFSET_COMMIT)
    commit = T(transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=0, generation_id=-1,
               member_id="", group_instance_id=None, topics=[T.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                   T.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                       partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="tx")])])
    deadline = time.monotonic() + 30
    while True:
        code = c.request(K.TXN_OFFSET_COMMIT, v[K.TXN_OFFSET_COMMIT], commit).topics[0].partitions[0].error_code
        if code not in (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR):
            break
        assert time.monotonic() < deadline, "no group coordinator"
        _call(c, K.FIND_COORDINATOR, 3, key=group, key_type=0)
        time.sleep(0.1)
    assert code == 0
    assert _call(c, K.END_TXN, v[K.END_TXN], transactional_id=txn_id, producer_id=pid, producer_epoch=0,
                 committed=True).error_code == 0
    # The markers land: the committed record becomes stable and the offset visible.
    L = _req(K.LIST_OFFSETS)
    while True:
        lso = c.request(K.LIST_OFFSETS, 5, L(replica_id=-1, isolation_level=1, topics=[L.ListOffsetsTopic(
            name=topic, partitions=[L.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=-1)])])).topics[0].partitions[0].offset
        F = _req(K.OFFSET_FETCH)
        fetched = c.request(K.OFFSET_FETCH, 7, F(group_id=group, require_stable=True, topics=[
            F.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])])).topics[0].partitions[0]
        if lso == 2 and (fetched.error_code, fetched.committed_offset) == (0, 1):
            break
        assert time.monotonic() < deadline, f"transaction not complete: LSO {lso}, offset {fetched}"
        time.sleep(0.05)


@check(K.ADD_PARTITIONS_TO_TXN, range(0, 4))
def _add_partitions_to_txn_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    _transaction(broker, c, {K.ADD_PARTITIONS_TO_TXN: v})


@check(K.ADD_OFFSETS_TO_TXN, range(0, 4))
def _add_offsets_to_txn_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    _transaction(broker, c, {K.ADD_OFFSETS_TO_TXN: v})


@check(K.TXN_OFFSET_COMMIT, range(0, 4))
def _txn_offset_commit_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    _transaction(broker, c, {K.TXN_OFFSET_COMMIT: v})


@check(K.END_TXN, range(0, 4))
def _end_txn_check(broker: BrokerProcess, c: RawClient, v: int) -> None:
    _transaction(broker, c, {K.END_TXN: v})
