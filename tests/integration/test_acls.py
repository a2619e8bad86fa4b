"""Authorization with real clients: the ACL matrix, every refused API's error code, the acls CLI.

One broker with a SASL_PLAINTEXT listener, PLAIN users and Kafka's AclAuthorizer; `admin` is a
super user and grants the others what each test needs. Every test uses its own topics and groups.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from kaflet.protocol import codec
from kaflet.protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret",
         "dave": "dave-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" ' + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
_ADMINS: dict[tuple[str, str], AdminClient] = {}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("acls") / "data", {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "1",
    })
    b.start()
    try:
        yield b
    finally:
        _ADMINS.clear()  # before the broker goes, so they do not retry against a dead port
        try:
            b.stop(timeout=20)
        finally:
            b.kill()


def conf(broker: BrokerProcess, user: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user], **extra}


def admin(broker: BrokerProcess, user: str = "admin") -> AdminClient:
    """One admin client per user, kept alive: a collected client fails its pending futures."""
    key = (broker.bootstrap, user)
    if key not in _ADMINS:
        _ADMINS[key] = AdminClient(conf(broker, user))
    return _ADMINS[key]


def grant(broker: BrokerProcess, *bindings: AclBinding) -> None:
    for f in admin(broker).create_acls(list(bindings), request_timeout=10).values():
        f.result(15)


def allow(restype: ResourceType, name: str, user: str, op: AclOperation,
          pattern: ResourcePatternType = ResourcePatternType.LITERAL,
          perm: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(restype, name, pattern, f"User:{user}", "*", op, perm)


def new_topics(broker: BrokerProcess, *names: str, partitions: int = 1) -> None:
    for f in admin(broker).create_topics([NewTopic(n, partitions, 1) for n in names], request_timeout=15).values():
        f.result(20)


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def sasl_raw(broker: BrokerProcess, user: str) -> RawClient:
    """A raw protocol client authenticated with SASL/PLAIN, for exact error codes."""
    c = RawClient(broker.bootstrap)
    assert c.request(17, 1, codec.request_class(17)(mechanism="PLAIN")).error_code == 0
    token = b"\0" + user.encode() + b"\0" + USERS[user].encode()
    assert c.request(36, 2, codec.request_class(36)(auth_bytes=token)).error_code == 0
    return c


def produce_one(broker: BrokerProcess, user: str, topic: str, **extra: Any) -> KafkaError | None:
    """Produce one record; the delivery error (None: delivered)."""
    p = Producer(conf(broker, user, **{"message.timeout.ms": 8000, **extra}))
    errors: list[KafkaError | None] = []
    p.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(15)
    return errors[0] if errors else KafkaError(KafkaError._TIMED_OUT)


# ------------------------------------------------------------------------------------------ the matrix


def test_write_only_user_produces_but_cannot_consume_or_see_other_topics(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import TopicAuthorizationFailedError

    t, other = uniq("wo"), uniq("wo-other")
    new_topics(broker, t, other)
    grant(broker, allow(ResourceType.TOPIC, t, "alice", AclOperation.WRITE))
    # confluent-kafka, idempotent: InitProducerId passes because Write on a topic implies it.
    assert produce_one(broker, "alice", t, **{"enable.idempotence": True}) is None
    err = produce_one(broker, "alice", other)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Metadata shows the writable topic (Write implies Describe), and nothing else.
    topics = admin(broker, "alice").list_topics(timeout=10).topics
    assert t in topics and other not in topics
    # kafka-python: the same with its producer, and it cannot fetch.
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                       sasl_plain_username="alice", sasl_plain_password=USERS["alice"], max_block_ms=5000,
                       request_timeout_ms=5000)
    try:
        kp.send(t, b"kafka-python").get(10)
        with pytest.raises(TopicAuthorizationFailedError):
            kp.send(other, b"no").get(10)
    finally:
        kp.close(5)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password=USERS["alice"],
                             group_id=None, auto_offset_reset="earliest", consumer_timeout_ms=5000)
    try:
        consumer.assign([TopicPartition(t, 0)])
        with pytest.raises(TopicAuthorizationFailedError):
            for _ in range(10):
                consumer.poll(timeout_ms=500)
    finally:
        consumer.close()
    c = sasl_raw(broker, "alice")
    try:
        F = codec.request_class(1)
        resp = c.request(1, 12, F(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                                  session_id=0, session_epoch=-1, topics=[F.FetchTopic(topic=t, partitions=[
                                      F.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1,
                                                                  fetch_offset=0, last_fetched_epoch=-1,
                                                                  log_start_offset=-1, partition_max_bytes=1 << 20)])],
                                  forgotten_topics_data=[], rack_id=""))
        assert resp.responses[0].partitions[0].error_code == TOPIC_DENIED
    finally:
        c.close()


def test_consumer_needs_group_read_to_commit(broker: BrokerProcess) -> None:
    t, g = uniq("cons"), uniq("cons-g")
    new_topics(broker, t)
    assert produce_one(broker, "admin", t) is None
    grant(broker, allow(ResourceType.TOPIC, t, "bob", AclOperation.READ))

    def consume_and_commit() -> None:
        c = Consumer(conf(broker, "bob", **{"group.id": g, "auto.offset.reset": "earliest",
                                            "enable.auto.commit": False}))
        try:
            c.subscribe([t])
            msg = None
            for _ in range(30):
                msg = c.poll(0.5)
                if msg is not None:
                    break
            assert msg is not None
            if msg.error():
                raise KafkaException(msg.error())
            c.commit(msg, asynchronous=False)
        finally:
            c.close()

    with pytest.raises(KafkaException) as info:
        consume_and_commit()
    assert info.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    # Granted at run time: the very next attempt works, no restart.
    grant(broker, allow(ResourceType.GROUP, g, "bob", AclOperation.READ))
    consume_and_commit()


def test_prefixed_acls_and_deny_overrides_allow(broker: BrokerProcess) -> None:
    base = uniq("pre")
    new_topics(broker, f"{base}-a", f"{base}-secret", f"x{base}")
    grant(broker, allow(ResourceType.TOPIC, f"{base}-", "carol", AclOperation.WRITE, ResourcePatternType.PREFIXED),
          allow(ResourceType.TOPIC, f"{base}-secret", "carol", AclOperation.WRITE, perm=AclPermissionType.DENY))
    assert produce_one(broker, "carol", f"{base}-a") is None
    for denied in (f"{base}-secret", f"x{base}"):
        err = produce_one(broker, "carol", denied)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, denied
    # Removing the deny lets the prefixed allow through, again without a restart.
    deleted = admin(broker).delete_acls([AclBindingFilter(ResourceType.TOPIC, f"{base}-secret",
                                                          ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
                                                          AclPermissionType.DENY)], request_timeout=10)
    for f in deleted.values():
        assert len(f.result(15)) == 1
    assert produce_one(broker, "carol", f"{base}-secret") is None
    # MATCH finds every ACL that applies to a name.
    found = admin(broker).describe_acls(AclBindingFilter(ResourceType.TOPIC, f"{base}-a", ResourcePatternType.MATCH,
                                                         None, None, AclOperation.ANY, AclPermissionType.ANY),
                                        request_timeout=10).result(15)
    assert [(b.name, b.resource_pattern_type) for b in found] == [(f"{base}-", ResourcePatternType.PREFIXED)]


def test_super_user_passes_everything(broker: BrokerProcess) -> None:
    t = uniq("su")
    new_topics(broker, t)  # CreateTopics without any ACL
    assert produce_one(broker, "admin", t, **{"enable.idempotence": True}) is None
    assert t in admin(broker).list_topics(timeout=10).topics
    c = sasl_raw(broker, "admin")
    try:
        DC = codec.request_class(60)
        resp = c.request(60, 1, DC(include_cluster_authorized_operations=True, endpoint_type=1))
        assert resp.error_code == 0 and 7 in resp.authorized_operations  # ALTER
    finally:
        c.close()


def test_acl_apis_need_cluster_permissions_and_validate(broker: BrokerProcess) -> None:
    bad = AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL, "User:x", "*",
                     AclOperation.ALTER, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as info:
        for f in admin(broker).create_acls([bad], request_timeout=10).values():
            f.result(15)
    assert info.value.args[0].code() == KafkaError.INVALID_REQUEST
    with pytest.raises(KafkaException) as info:
        grant_as_dave = admin(broker, "dave").create_acls(
            [allow(ResourceType.TOPIC, "t", "dave", AclOperation.ALL)], request_timeout=10)
        for f in grant_as_dave.values():
            f.result(15)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_every_refused_call_gets_its_error_code(broker: BrokerProcess) -> None:
    """dave has no ACLs at all: each API refuses with the code Kafka uses."""
    t, g = uniq("deny"), uniq("deny-g")
    new_topics(broker, t)
    c = sasl_raw(broker, "dave")
    try:
        M = codec.request_class(3)
        md = c.request(3, 12, M(topics=[M.MetadataRequestTopic(name=t, topic_id=uuid.UUID(int=0))],
                                allow_auto_topic_creation=True, include_topic_authorized_operations=False))
        assert md.topics[0].error_code == TOPIC_DENIED and md.topics[0].name == t
        assert all(x.name != t for x in c.request(3, 12, M(topics=None, allow_auto_topic_creation=False,
                                                            include_topic_authorized_operations=False)).topics)

        L = codec.request_class(2)
        lo = c.request(2, 7, L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name=t, partitions=[
            L.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])]))
        assert lo.topics[0].partitions[0].error_code == TOPIC_DENIED

        CT = codec.request_class(19)
        ct = c.request(19, 7, CT(topics=[CT.CreatableTopic(name=uniq("new"), num_partitions=1, replication_factor=1,
                                                            assignments=[], configs=[])],
                                 timeout_ms=5000, validate_only=False))
        assert ct.topics[0].error_code == TOPIC_DENIED
        DT = codec.request_class(20)
        assert c.request(20, 5, DT(topic_names=[t], timeout_ms=5000)).responses[0].error_code == TOPIC_DENIED
        CP = codec.request_class(37)
        cp = c.request(37, 3, CP(topics=[CP.CreatePartitionsTopic(name=t, count=2, assignments=None)],
                                 timeout_ms=5000, validate_only=False))
        assert cp.results[0].error_code == TOPIC_DENIED
        DR = codec.request_class(21)
        dr = c.request(21, 2, DR(topics=[DR.DeleteRecordsTopic(name=t, partitions=[
            DR.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=0)])], timeout_ms=5000))
        assert dr.topics[0].partitions[0].error_code == TOPIC_DENIED
        IP = codec.request_class(22)
        ip = c.request(22, 4, IP(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                 producer_epoch=-1))
        assert ip.error_code == CLUSTER_DENIED

        FC = codec.request_class(10)
        assert c.request(10, 3, FC(key=g, key_type=0)).error_code == GROUP_DENIED
        J = codec.request_class(11)
        join = c.request(11, 7, J(group_id=g, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                                  group_instance_id=None, protocol_type="consumer",
                                  protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"")]))
        assert join.error_code == GROUP_DENIED
        S = codec.request_class(14)
        assert c.request(14, 5, S(group_id=g, generation_id=1, member_id="m", group_instance_id=None,
                                  protocol_type="consumer", protocol_name="range",
                                  assignments=[])).error_code == GROUP_DENIED
        H = codec.request_class(12)
        assert c.request(12, 4, H(group_id=g, generation_id=1, member_id="m",
                                  group_instance_id=None)).error_code == GROUP_DENIED
        LG = codec.request_class(13)
        assert c.request(13, 4, LG(group_id=g, members=[LG.MemberIdentity(member_id="m", group_instance_id=None)])
                         ).error_code == GROUP_DENIED
        OC = codec.request_class(8)
        T = OC.OffsetCommitRequestTopic
        oc = c.request(8, 8, OC(group_id=g, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                                topics=[T(name=t, partitions=[T.OffsetCommitRequestPartition(
                                    partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                                    committed_metadata="")])]))
        assert oc.topics[0].partitions[0].error_code == GROUP_DENIED
        OF = codec.request_class(9)
        of = c.request(9, 8, OF(groups=[OF.OffsetFetchRequestGroup(group_id=g, topics=None)], require_stable=False))
        assert of.groups[0].error_code == GROUP_DENIED
        of1 = c.request(9, 1, OF(group_id=g, topics=[OF.OffsetFetchRequestTopic(name=t, partition_indexes=[0])]))
        assert of1.topics[0].partitions[0].error_code == GROUP_DENIED
        DG = codec.request_class(15)
        assert c.request(15, 5, DG(groups=[g], include_authorized_operations=True)).groups[0].error_code == GROUP_DENIED
        DL = codec.request_class(42)
        assert c.request(42, 2, DL(groups_names=[g])).results[0].error_code == GROUP_DENIED
        OD = codec.request_class(47)
        od = c.request(47, 0, OD(group_id=g, topics=[OD.OffsetDeleteRequestTopic(name=t, partitions=[
            OD.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=0)])]))
        assert od.error_code == GROUP_DENIED

        DC = codec.request_class(32)
        dc = c.request(32, 4, DC(resources=[DC.DescribeConfigsResource(resource_type=2, resource_name=t,
                                                                       configuration_keys=None),
                                            DC.DescribeConfigsResource(resource_type=4, resource_name="",
                                                                       configuration_keys=None)],
                                 include_synonyms=False, include_documentation=False))
        assert [r.error_code for r in dc.results] == [TOPIC_DENIED, CLUSTER_DENIED]
        AC = codec.request_class(33)
        R = AC.AlterConfigsResource
        ac = c.request(33, 2, AC(resources=[
            R(resource_type=2, resource_name=t, configs=[R.AlterableConfig(name="retention.ms", value="1000")]),
            R(resource_type=4, resource_name="", configs=[])], validate_only=True))
        assert [r.error_code for r in ac.responses] == [TOPIC_DENIED, CLUSTER_DENIED]
        IA = codec.request_class(44)
        IR = IA.AlterConfigsResource
        ia = c.request(44, 1, IA(resources=[IR(resource_type=2, resource_name=t, configs=[
            IR.AlterableConfig(name="retention.ms", config_operation=0, value="1000")])], validate_only=True))
        assert ia.responses[0].error_code == TOPIC_DENIED

        DS = codec.request_class(50)
        assert c.request(50, 0, DS(users=None)).error_code == CLUSTER_DENIED
        LD = codec.request_class(35)
        ld = c.request(35, 4, LD(topics=None))
        assert ld.error_code == CLUSTER_DENIED and ld.results == []
        AS = codec.request_class(51)
        asc = c.request(51, 0, AS(deletions=[AS.ScramCredentialDeletion(name="x", mechanism=1)], upsertions=[]))
        assert asc.results[0].error_code == CLUSTER_DENIED
        DA = codec.request_class(29)
        da = c.request(29, 3, DA(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                 principal_filter=None, host_filter=None, operation=1, permission_type=1))
        assert da.error_code == CLUSTER_DENIED
        CA = codec.request_class(30)
        ca = c.request(30, 3, CA(creations=[CA.AclCreation(resource_type=2, resource_name="t", resource_pattern_type=3,
                                                           principal="User:dave", host="*", operation=2,
                                                           permission_type=3)]))
        assert ca.results[0].error_code == CLUSTER_DENIED
        DE = codec.request_class(31)
        de = c.request(31, 3, DE(filters=[DE.DeleteAclsFilter(resource_type_filter=1, resource_name_filter=None,
                                                             pattern_type_filter=1, principal_filter=None,
                                                             host_filter=None, operation=1, permission_type=1)]))
        assert de.filter_results[0].error_code == CLUSTER_DENIED
        CL = codec.request_class(60)
        cl = c.request(60, 1, CL(include_cluster_authorized_operations=True, endpoint_type=1))
        assert cl.error_code == 0 and not cl.authorized_operations  # no Describe on the cluster
        LS = codec.request_class(16)
        assert c.request(16, 4, LS(states_filter=[])).groups == []
    finally:
        c.close()


def test_group_and_topic_permissions_split(broker: BrokerProcess) -> None:
    """Read on the group but not the topic: commits fail per topic; OffsetFetch hides or refuses it."""
    t, g = uniq("split"), uniq("split-g")
    new_topics(broker, t)
    grant(broker, allow(ResourceType.GROUP, g, "dave", AclOperation.READ))
    c = sasl_raw(broker, "dave")
    try:
        # As a client does, find the coordinator first: the first FindCoordinator of the broker
        # creates __consumer_offsets (this test may be the module's first under pytest-xdist).
        FC = codec.request_class(10)
        deadline = time.monotonic() + 30
        while c.request(10, 3, FC(key=g, key_type=0)).error_code != 0:
            assert time.monotonic() < deadline, "no group coordinator"
            time.sleep(0.1)
        OC = codec.request_class(8)
        T = OC.OffsetCommitRequestTopic
        oc = c.request(8, 8, OC(group_id=g, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                                topics=[T(name=t, partitions=[T.OffsetCommitRequestPartition(
                                    partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                                    committed_metadata="")])]))
        assert oc.topics[0].partitions[0].error_code == TOPIC_DENIED
        OF = codec.request_class(9)
        of = c.request(9, 8, OF(groups=[OF.OffsetFetchRequestGroup(group_id=g, topics=[
            OF.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name=t, partition_indexes=[0])])], require_stable=False))
        assert of.groups[0].error_code == 0
        assert of.groups[0].topics[0].partitions[0].error_code == TOPIC_DENIED
        # Read on the group implies Describe: the group is listed and described.
        DG = codec.request_class(15)
        assert c.request(15, 5, DG(groups=[g], include_authorized_operations=True)).groups[0].error_code == 0
    finally:
        c.close()


def test_metadata_authorized_operations_and_auto_create(broker: BrokerProcess) -> None:
    t, auto = uniq("ops"), uniq("auto")
    new_topics(broker, t)
    grant(broker, allow(ResourceType.TOPIC, t, "dave", AclOperation.READ),
          allow(ResourceType.TOPIC, auto, "dave", AclOperation.DESCRIBE))
    c = sasl_raw(broker, "dave")
    try:
        M = codec.request_class(3)
        md = c.request(3, 12, M(topics=[M.MetadataRequestTopic(name=t, topic_id=None)],
                                allow_auto_topic_creation=False, include_topic_authorized_operations=True))
        assert md.topics[0].error_code == 0
        assert md.topics[0].authorized_operations == {3, 8}  # READ, DESCRIBE
        # Auto-creation needs Create: Describe alone is refused.
        md = c.request(3, 12, M(topics=[M.MetadataRequestTopic(name=auto, topic_id=None)],
                                allow_auto_topic_creation=True, include_topic_authorized_operations=False))
        assert md.topics[0].error_code == TOPIC_DENIED
        grant(broker, allow(ResourceType.TOPIC, auto, "dave", AclOperation.CREATE))
        md = c.request(3, 12, M(topics=[M.MetadataRequestTopic(name=auto, topic_id=None)],
                                allow_auto_topic_creation=True, include_topic_authorized_operations=False))
        assert md.topics[0].error_code in (0, ErrorCode.LEADER_NOT_AVAILABLE)
    finally:
        c.close()


def test_topics_by_id_and_describe_topic_partitions_need_describe(broker: BrokerProcess) -> None:
    seen, hidden = uniq("seen"), uniq("hidden")
    new_topics(broker, seen, hidden, partitions=2)
    grant(broker, allow(ResourceType.TOPIC, seen, "carol", AclOperation.DESCRIBE))
    admin_c, c = sasl_raw(broker, "admin"), sasl_raw(broker, "carol")
    try:
        M, D = codec.request_class(3), codec.request_class(75)
        ids = {t.name: t.topic_id for t in admin_c.request(3, 12, M(
            topics=[M.MetadataRequestTopic(name=n, topic_id=None) for n in (seen, hidden)],
            allow_auto_topic_creation=False)).topics}
        # By id: the undescribable topic's id comes back refused, its name withheld.
        md = c.request(3, 12, M(topics=[M.MetadataRequestTopic(name="", topic_id=ids[n]) for n in (seen, hidden)],
                                allow_auto_topic_creation=False))
        assert {t.topic_id: (t.error_code, t.name) for t in md.topics} == {
            ids[seen]: (0, seen), ids[hidden]: (TOPIC_DENIED, None)}
        dtp = c.request(75, 0, D(topics=[D.TopicRequest(name=hidden), D.TopicRequest(name=seen)],
                                 response_partition_limit=100, cursor=None))
        assert [(t.name, t.error_code, len(t.partitions), t.topic_id) for t in dtp.topics] == [
            (seen, 0, 2, ids[seen]), (hidden, TOPIC_DENIED, 0, None)]
        assert dtp.topics[0].topic_authorized_operations == 1 << 8  # DESCRIBE only
        # All topics: only what carol may describe is listed.
        every = c.request(75, 0, D(topics=[], response_partition_limit=2000, cursor=None))
        assert seen in {t.name for t in every.topics} and hidden not in {t.name for t in every.topics}
    finally:
        admin_c.close()
        c.close()


def test_security_disabled_without_authorizer(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data")
    b.start()
    try:
        # librdkafka drops DescribeAcls' top-level error (it answers an empty list), so ask raw.
        c = RawClient(b.bootstrap)
        DA = codec.request_class(29)
        da = c.request(29, 3, DA(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                 principal_filter=None, host_filter=None, operation=1, permission_type=1))
        c.close()
        assert da.error_code == ErrorCode.SECURITY_DISABLED
        client = AdminClient({"bootstrap.servers": b.bootstrap})
        with pytest.raises(KafkaException) as info:
            for f in client.create_acls([allow(ResourceType.TOPIC, "t", "x", AclOperation.READ)],
                                        request_timeout=10).values():
                f.result(15)
        assert info.value.args[0].code() == KafkaError.SECURITY_DISABLED
        r = kaflet_cli("acls", "--bootstrap-server", b.bootstrap, "--list")
        assert r.returncode == 1 and "SECURITY_DISABLED" in r.stderr
    finally:
        b.stop()


def test_unknown_authorizer_class_is_a_start_up_error(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", {"authorizer.class.name": "com.example.NoSuchAuthorizer"})
    with pytest.raises(RuntimeError, match="authorizer.class.name com.example.NoSuchAuthorizer is not available"):
        b.start()


# ------------------------------------------------------------------------------------------ the CLI


def kaflet_cli(*args: str, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kaflet.cli", *args], capture_output=True, text=True, timeout=60,
                          input=input_text)


def test_acls_cli(broker: BrokerProcess, tmp_path: Path) -> None:
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                     'username="admin" password="admin-secret";\n')
    base = ["acls", "--bootstrap-server", broker.bootstrap, "--command-config", str(props)]
    t, g = uniq("cli"), uniq("cli-g")

    r = kaflet_cli(*base, "--add", "--allow-principal", "User:erin", "--operation", "Read", "--operation", "Write",
                   "--topic", t)
    assert r.returncode == 0, r.stderr
    assert f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={t}, patternType=LITERAL)`" in r.stdout
    assert "(principal=User:erin, host=*, operation=WRITE, permissionType=ALLOW)" in r.stdout

    r = kaflet_cli(*base, "--add", "--allow-principal", "User:erin", "--consumer", "--topic", f"{t}-",
                   "--group", g, "--resource-pattern-type", "prefixed")
    assert r.returncode == 0, r.stderr
    r = kaflet_cli(*base, "--add", "--allow-principal", "User:frank", "--producer", "--topic", t, "--idempotent")
    assert r.returncode == 0, r.stderr

    r = kaflet_cli(*base, "--list", "--principal", "User:erin")
    assert r.returncode == 0, r.stderr
    assert f"name={t}-, patternType=PREFIXED" in r.stdout and f"name={g}, patternType=PREFIXED" in r.stdout
    assert "User:frank" not in r.stdout
    r = kaflet_cli(*base, "--list", "--topic", t)
    ops = {line.split("operation=")[1].split(",")[0] for line in r.stdout.splitlines() if "User:frank" in line}
    assert ops == {"WRITE", "DESCRIBE", "CREATE"}
    r = kaflet_cli(*base, "--list", "--cluster")
    assert "(principal=User:frank, host=*, operation=IDEMPOTENT_WRITE, permissionType=ALLOW)" in r.stdout

    # Without --force, removing asks first; "n" keeps the ACLs.
    r = kaflet_cli(*base, "--remove", "--allow-principal", "User:erin", "--operation", "Read", "--topic", t,
                   input_text="n\n")
    assert r.returncode == 0 and "Are you sure" in r.stdout
    r = kaflet_cli(*base, "--remove", "--force", "--allow-principal", "User:erin", "--operation", "Read", "--topic", t)
    assert r.returncode == 0, r.stderr
    assert "Removed 1 ACL" in r.stdout
    r = kaflet_cli(*base, "--remove", "--force", "--topic", t)
    assert "Removed 4 ACLs" in r.stdout  # erin's Write and frank's three
    r = kaflet_cli(*base, "--list", "--topic", t)
    assert r.stdout.strip() == ""

    # Errors are one line.
    r = kaflet_cli(*base, "--add", "--allow-principal", "erin", "--topic", t)
    assert r.returncode != 0 and "Type:name" in r.stderr
    r = kaflet_cli(*base, "--add", "--topic", t)
    assert r.returncode != 0 and "--allow-principal" in r.stderr
    r = kaflet_cli("acls", "--bootstrap-server", broker.bootstrap, "--command-config", str(props), "--list",
                   "--topic", t, "--resource-pattern-type", "match")
    assert r.returncode == 0
    no_rights = tmp_path / "dave.properties"
    no_rights.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=dave\n"
                         "sasl.password=dave-secret\n")
    r = kaflet_cli("acls", "--bootstrap-server", broker.bootstrap, "--command-config", str(no_rights), "--list")
    assert r.returncode == 1
    assert r.stderr.startswith("Error: ") and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
