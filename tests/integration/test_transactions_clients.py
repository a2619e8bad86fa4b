"""kafka-python's and aiokafka's transactional producers: a committed and an aborted transaction
each, read back by a read_committed consumer that sees only the committed records, in order."""

from __future__ import annotations

import asyncio
import uuid

from aiokafka import AIOKafkaProducer
from kafka import KafkaProducer

from tests.support.broker_process import BrokerProcess
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
