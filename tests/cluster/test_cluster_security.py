"""A cluster whose brokers talk to each other over SASL_SSL, under an ACL authorizer.

The controller's requests and the followers' fetches go over the inter-broker listener
(`inter.broker.listener.name`, PLAIN over TLS with the listener's JAAS credentials); clients use
a plain listener. Replication, failover and config changes must work through it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.support.certs import make_pki
from tests.support.cluster import Cluster
from tests.support.secured import JAAS

pytestmark = pytest.mark.timeout(240)


def _overrides(tmp_path: Path) -> dict[str, str]:
    pki = make_pki(tmp_path / "pki")
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,BROKERS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,BROKERS:SASL_SSL",
        "inter.broker.listener.name": "BROKERS",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        # The same JAAS entry holds the users the listener accepts and the broker's own login.
        "listener.name.brokers.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        # The brokers' own principal may do everything (ClusterAction for the controller's
        # requests and replica fetches); anonymous clients only what no ACL restricts.
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "true",
        "replica.lag.time.max.ms": "5000",
    }


def _produce(bootstrap: str, topic: str, values: range) -> list[int]:
    acked: list[int] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 60000})
    for i in values:
        p.produce(topic, str(i).encode(), on_delivery=lambda err, msg: acked.append(int(msg.value()))
                  if err is None else None)
    assert p.flush(90) == 0
    return acked


def _consume(bootstrap: str, topic: str, partitions: int, expected: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[int] = []
    try:
        for _ in range(600):
            msgs = c.consume(500, 0.5)
            got.extend(int(m.value()) for m in msgs if m.error() is None)
            if len(got) >= expected:
                break
    finally:
        c.close()
    return got


def test_replication_and_failover_over_sasl_ssl(cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    cluster = cluster_factory(3, overrides=_overrides(tmp_path))
    cluster.wait_for_registered([1, 2, 3])
    reg = cluster.broker_registration(1)
    assert reg is not None and reg.endpoint("BROKERS") is not None
    topic = f"sec-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})])[topic].result(60)
    for p in range(3):
        cluster.wait_for_isr(topic, p, [1, 2, 3], timeout=60)

    acked = _produce(cluster.bootstrap, topic, range(0, 600))
    assert sorted(acked) == list(range(600))

    # A topic config altered through one broker reaches the others (/config/changes).
    res = ConfigResource("TOPIC", topic, set_config={"retention.ms": "3600000"})
    admin.alter_configs([res])[res].result(30)
    for bid in (2, 3):
        broker_admin = AdminClient({"bootstrap.servers": cluster.broker(bid).bootstrap})
        cfg = broker_admin.describe_configs([ConfigResource("TOPIC", topic)])
        entries = next(iter(cfg.values())).result(30)
        assert entries["retention.ms"].value == "3600000"

    # Kill the leader of partition 0: a follower (fed over SASL_SSL) takes over with all of it.
    leader = cluster.wait_for_leader(topic, 0)
    cluster.kill(leader)
    cluster.wait_for_leader(topic, 0, timeout=60, exclude=(leader,))
    acked += _produce(cluster.bootstrap, topic, range(600, 900))
    got = _consume(cluster.bootstrap, topic, 3, len(acked))
    assert sorted(got) == sorted(acked) == list(range(900))

    # Back again, it catches up and rejoins every ISR.
    cluster.start_broker(leader)
    for p in range(3):
        cluster.wait_for_isr(topic, p, [1, 2, 3], timeout=90)
