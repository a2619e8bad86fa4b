"""The Java client 4.3 over more of kaflet: Admin's security and state calls, transactions, static members.

Programs of ours (tests/java) drive the client and print what the broker answered; the
assertions are here. The Admin programs run against a broker with a SASL_PLAINTEXT listener
(PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512) and Kafka's AclAuthorizer, logged in as its super user.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.java import JavaPrograms, check_transactional_copy

ADMIN = ("admin", "admin-secret")
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("java-secured") / "data", {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "1"}) as b:
        yield b


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("java-plain") / "data", {
            "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3",
            "transaction.state.log.num.partitions": "3"}) as b:
        yield b


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _facts(lines: list[list[str]]) -> dict[str, list[str]]:
    """The program's lines by their first word (each key printed once)."""
    facts: dict[str, list[str]] = {}
    for words in lines:
        assert words[0] not in facts, f"{words[0]} printed twice"
        facts[words[0]] = words[1:]
    return facts


def test_acls_quotas_and_scram_credentials_a_producer_then_logs_in_with(java: JavaPrograms,
                                                                        secured: BrokerProcess) -> None:
    p = unique_name("jsec")
    lines = java.run("AdminSecurity", secured.bootstrap, p, login=ADMIN)
    scram = {w[1]: w[2] for w in lines if w[0] in ("scramDescribed", "scramProduce")}
    facts = _facts([w for w in lines if w[0] not in ("scramDescribed", "scramProduce")])
    alice, bob = f"User:{p}-alice", f"User:{p}-bob"
    literal = f"TOPIC:LITERAL:{p}-t:{alice}:*:READ:ALLOW"
    prefixed = f"TOPIC:PREFIXED:{p}-:{alice}:*:DESCRIBE:ALLOW"
    deny = f"GROUP:LITERAL:{p}-g:{bob}:10.0.0.1:READ:DENY"
    assert facts["aclMatch"] == [",".join(sorted([literal, prefixed]))]
    assert facts["aclPrefixed"] == [prefixed]
    assert facts["aclDeny"] == [deny]
    assert facts["aclDeleted"] == [",".join(sorted([literal, prefixed]))]
    assert facts["aclLeftForAlice"] == ["none"]
    assert facts["aclLeftForBob"] == [deny]

    both = f"client-id:{p}-client/user:{p}-quser"
    assert facts["quotas"] == [";".join(sorted([f"{both}=consumer_byte_rate=2097152",
                                                 f"{both}=producer_byte_rate=1048576",
                                                 f"user:{p}-quser=request_percentage=50"]))]
    assert facts["quotasUserOnly"] == [f"user:{p}-quser=request_percentage=50"]
    assert facts["quotasAfterRemoval"] == [f"{both}=consumer_byte_rate=2097152"]
    assert facts["badQuota"] == ["InvalidRequestException"]

    assert scram[f"{p}-s256"] == "SCRAM_SHA_256:8192" and scram[f"{p}-s512"] == "SCRAM_SHA_512:4096"
    assert facts["scramUsers"] == [f"{p}-s256"]
    assert facts["scramUnknown"] == ["ResourceNotFoundException"]
    assert scram["SCRAM-SHA-256"] == "ok" and scram["SCRAM-SHA-512"] == "ok"
    assert facts["scramWrongPassword"] == ["SaslAuthenticationException"]
    assert facts["scramWrongMechanism"] == ["SaslAuthenticationException"]
    assert facts["scramAfterDeletion"] == ["SaslAuthenticationException"]
    assert facts["scramRead"] == [f"{p}-s256=SCRAM-SHA-256,{p}-s512=SCRAM-SHA-512"]


def test_log_dirs_producers_transactions_group_offsets_elections_and_configs(java: JavaPrograms,
                                                                              secured: BrokerProcess) -> None:
    p = unique_name("jstate")
    lines = java.run("AdminState", secured.bootstrap, p, login=ADMIN)
    many = {key: [w[1:] for w in lines if w[0] == key] for key in ("replica", "elect", "configRefused")}
    facts = _facts([w for w in lines if w[0] not in many])
    t, txn = f"{p}-state", f"{p}-txn"
    assert facts["logDirs"] == ["1"] and facts["logDir"] == ["error=none", "total=true", "usable=true"]
    replicas = {w[0]: w[1:] for w in many["replica"]}
    # Five records written to partition 0 before the call, none yet to partition 1.
    assert int(replicas[f"{t}-0"][0].removeprefix("size=")) > 0 and replicas[f"{t}-1"][0] == "size=0"
    assert replicas[f"{t}-0"][1:] == replicas[f"{t}-1"][1:] == ["lag=0", "future=false"]
    assert facts["producer"] == [f"{t}-0", "id=true", "epoch=0", "lastSequence=4", "inTransaction=false"]

    assert facts["listed"] == [txn, "Ongoing"]
    assert facts["described"] == ["Ongoing", "sameProducer=true", "timeoutMs=60000", "started=true",
                                  f"partitions={t}-1"]
    assert facts["txnProducer"] == ["sameProducer=true", "txnStart=0"]
    assert facts["committed"] == ["CompleteCommit", "partitions=0", "stillOngoing=false"]
    assert facts["byProducerId"] == [txn]

    assert facts["groupOffsets"] == [f"{t}-0=2:two,{t}-1=1:one"]
    assert facts["groupOffsetsAfterDelete"] == [f"{t}-1=1:one"]
    assert facts["memberSees"] == [f"{t}-1=1:one", "assigned=2"]
    assert facts["deleteWhileSubscribed"] == ["GroupSubscribedToTopicException"]
    # Kafka lets an admin (generation -1) commit only to an empty group; to a live one the
    # committer is not a member.
    assert facts["alterWhileActive"] == ["UnknownMemberIdException"]

    assert sorted(many["elect"]) == [[f"{p}-missing-0", "UnknownTopicOrPartitionException"],
                                     [f"{t}-0", "ElectionNotNeededException"]]

    dynamic = "DYNAMIC_TOPIC_CONFIG"
    assert facts["configSet"] == [f"cleanup.policy=delete,compact:{dynamic},max.message.bytes=200000:{dynamic},"
                                  f"retention.ms=7200000:{dynamic}"]
    changed = [f"cleanup.policy=compact:{dynamic},max.message.bytes=200000:{dynamic},retention.ms=604800000:DEFAULT_CONFIG"]
    assert facts["configChanged"] == changed
    assert many["configRefused"] == [["no.such.config:SET", "InvalidConfigurationException"],
                                     ["retention.ms:APPEND", "InvalidRequestException"],
                                     ["retention.ms:SET", "InvalidConfigurationException"]]
    assert facts["configAfterRefusals"] == changed


def test_transactions_commit_abort_offsets_and_fencing_read_committed_sees_only_commits(
        java: JavaPrograms, plain: BrokerProcess) -> None:
    check_transactional_copy(java, plain.bootstrap, 1)


def test_a_static_member_restarted_within_its_session_gets_its_partitions_back_without_a_rebalance(
        java: JavaPrograms, plain: BrokerProcess) -> None:
    p = unique_name("jstatic")
    lines = java.run("StaticMembers", plain.bootstrap, p)
    owned = {int(w[1]): w[2] for w in lines if w[0] == "owned"}
    facts = _facts([w for w in lines if w[0] != "owned"])
    # Range orders static members by instance id.
    assert owned == {0: "0,1", 1: "2,3", 2: "4,5"}
    assert facts["restarted"] == ["sameAssignment=true", "newMemberId=true", "sameGeneration=true"]
    assert facts["others"] == ["callbacks=0,0", "sameGeneration=true"]
    assert facts["describedAfterRestart"] == ["state=Stable", f"members={p}-i0:0,1;{p}-i1:2,3;{p}-i2:4,5"]
    assert facts["dynamicJoined"] == ["rebalanced=true", "ownedCounts=1,1,2,2"]
    assert facts["twin"] == ["sameAssignment=true", "first=FencedInstanceIdException"]
