"""Three brokers on ZooKeeper configured as the seed's Logi-Kafka server.properties: SASL_PLAINTEXT
between brokers with PLAIN and the JAAS credentials of Logi-Kafka's login module, DidiAuthorizer.

The brokers log in to each other as the JAAS username (no cluster id prefix) and replicate under
the gateway authorizer; applications log in as ``<clusterId>.<appId>`` on any broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import Cluster

pytestmark = pytest.mark.timeout(240)

JAAS = ('com.didichuxing.datachannel.kafka.security.sasl.plain.PlainLoginModule required '
        'username="admin" password="admin-secret";')


def _overrides() -> dict[str, str]:
    return {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "com.didichuxing.datachannel.kafka.security.authorizer.DidiAuthorizer",
        "cluster.id": "0",
        "max.sessions.per.user": "2000",
        "gateway.default.users": "test_user:12345:false",
        "gateway.default.acls": "test_0:test_user:Read:Allow,test_0:test_user:Write:Allow",
        "replica.lag.time.max.ms": "5000",
    }


def test_replication_between_gateway_brokers(cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    cluster = cluster_factory(3, overrides=_overrides())
    cluster.wait_for_registered([1, 2, 3])
    plaintext = ",".join(cluster.broker(b).bootstrap_for("PLAINTEXT") for b in (1, 2, 3))
    sasl = ",".join(cluster.broker(b).bootstrap_for("SASL_PLAINTEXT") for b in (1, 2, 3))
    admin = AdminClient({"bootstrap.servers": plaintext})  # ANONYMOUS: a super user, as in Logi-Kafka
    for name in ("test_0", "other"):
        admin.create_topics([NewTopic(name, 2, 3)])[name].result(30)
    for p in (0, 1):
        cluster.wait_for_isr("test_0", p, [1, 2, 3], timeout=60)

    app = {"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
           "sasl.username": "0.test_user", "sasl.password": "12345"}
    results: list[KafkaError | None] = []
    producer = Producer({**app, "acks": "all", "enable.idempotence": True, "message.timeout.ms": 60000})
    for i in range(20):
        producer.produce("test_0", str(i).encode(), partition=i % 2, on_delivery=lambda err, msg: results.append(err))
    assert producer.flush(90) == 0
    assert results == [None] * 20
    denied: list[KafkaError | None] = []
    producer.produce("other", b"x", on_delivery=lambda err, msg: denied.append(err))
    producer.flush(30)
    assert [e.code() for e in denied if e is not None] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    # Every replica got the records over the brokers' SASL links: the ISR stayed whole.
    for p in (0, 1):
        assert sorted(cluster.isr("test_0", p)) == [1, 2, 3]
    consumer = Consumer({**app, "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    consumer.assign([TopicPartition("test_0", p, 0) for p in (0, 1)])
    got: list[int] = []
    try:
        for _ in range(120):
            got.extend(int(m.value()) for m in consumer.consume(100, 0.5) if m.error() is None)
            if len(got) >= 20:
                break
    finally:
        consumer.close()
    assert sorted(got) == list(range(20))
