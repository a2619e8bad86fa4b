"""kafka-python's and aiokafka's transactional producers: a committed and an aborted transaction
each, read back by a read_committed consumer that sees only the committed records, in order."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.topics import create_topic
from tests.support.transactions import consume_all


def _read_committed(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    return consume_all(bootstrap, topic, "read_committed", expected)


def test_kafka_python_transactions(kaflet_broker: BrokerProcess) -> None:
    topic = f"txkp-{uuid.uuid4().hex[:6]}"
    create_topic(kaflet_broker.bootstrap, topic, 1)
    p = KafkaProducer(bootstrap_servers=kaflet_broker.bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:6]}")
    try:
        p.init_transactions()
        for i in range(3):
            p.begin_transaction()
            p.send(topic, b"commit-%d" % i, partition=0)
            p.commit_transaction()
            p.begin_transaction()
            p.send(topic, b"abort-%d" % i, partition=0)
            p.flush()
            p.abort_transaction()
    finally:
        p.close()
    assert _read_committed(kaflet_broker.bootstrap, topic, 3) == [b"commit-0", b"commit-1", b"commit-2"]


def test_aiokafka_transactions(kaflet_broker: BrokerProcess) -> None:
    topic = f"txaio-{uuid.uuid4().hex[:6]}"
    create_topic(kaflet_broker.bootstrap, topic, 1)

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=kaflet_broker.bootstrap, transactional_id=f"aio-{uuid.uuid4().hex[:6]}")
        await p.start()
        try:
            for i in range(3):
                async with p.transaction():
                    await p.send_and_wait(topic, b"commit-%d" % i, partition=0)
                await p.begin_transaction()
                await p.send_and_wait(topic, b"abort-%d" % i, partition=0)
                await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(run())
    assert _read_committed(kaflet_broker.bootstrap, topic, 3) == [b"commit-0", b"commit-1", b"commit-2"]


def test_transactions_on_a_lone_sasl_broker(tmp_path: Path) -> None:
    """A broker whose only listener needs credentials it has none of: its coordinator writes the
    markers for its own partitions in-process, so transactions still complete."""
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'user_alice="alice-secret";')
    overrides = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
                 "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas}
    auth = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
            "sasl.password": "alice-secret"}
    with running_broker(tmp_path / "data", overrides) as broker:
        topic = "txsasl"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **auth})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "sasl-tx", **auth})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, b"committed", partition=0)
        p.commit_transaction(30)
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "r", "isolation.level": "read_committed",
                      **auth})
        try:
            c.assign([TopicPartition(topic, 0, 0)])
            deadline = time.monotonic() + 30
            got = None
            while got is None and time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is not None and not m.error():
                    got = m.value()
            assert got == b"committed"
        finally:
            c.close()
