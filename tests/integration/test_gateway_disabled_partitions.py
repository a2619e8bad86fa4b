"""Disabled partitions with real clients: hidden from Metadata, the others renumbered, and
Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, OffsetCommit and OffsetFetch mapped back to the real partitions.

The broker runs in this process (kaflet.embedded_broker) so the test can hand it the
PartitionView the gateway's partition cache provides, and look at its real partitions.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

from kaflet.embedded_broker import embedded_broker
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.records import Record, build_batch
from kaflet.server.broker import Broker
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic


class View:
    """A PartitionView the test sets (the gateway's cache does this from the service's rows)."""

    def __init__(self) -> None:
        self.by_topic: dict[str, frozenset[int]] = {}

    def disabled(self, topic: str) -> frozenset[int]:
        return self.by_topic.get(topic, frozenset())


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Broker, asyncio.AbstractEventLoop, View]]:
    view = View()
    with embedded_broker({"log.dirs": str(tmp_path_factory.mktemp("disabled") / "data")}) as (broker, loop):
        loop.call_soon_threadsafe(broker.use_partition_view, view)
        yield broker, loop, view


def on_loop(loop: asyncio.AbstractEventLoop, fn: Any) -> Any:
    async def call() -> Any:
        return fn()
    return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=10)


def test_disabled_partitions_are_hidden_and_mapped(running: tuple[Broker, asyncio.AbstractEventLoop, View]) -> None:
    broker, loop, view = running
    b = broker.bootstrap
    topic = f"dis-{uuid.uuid4().hex[:6]}"
    create_topic(b, topic, partitions=4)
    on_loop(loop, lambda: view.by_topic.__setitem__(topic, frozenset({1, 2})))

    meta = AdminClient({"bootstrap.servers": b}).list_topics(topic, timeout=10).topics[topic]
    assert sorted(meta.partitions) == [0, 1]

    producer = Producer({"bootstrap.servers": b, "linger.ms": 0})
    for i in range(5):
        producer.produce(topic, f"zero-{i}".encode(), partition=0)
    for i in range(7):
        producer.produce(topic, f"one-{i}".encode(), partition=1)
    assert producer.flush(10) == 0
    # The client's partition 1 is the real partition 3; the disabled ones stay empty.
    ends = on_loop(loop, lambda: {i: broker.replica_manager.get(topic, i).log.log_end_offset for i in range(4)})
    assert ends == {0: 5, 1: 0, 2: 0, 3: 7}
    # OffsetForLeaderEpoch as a consumer (replica id -1) asks it: the client's 1 is the real 3.
    E = codec.request_class(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    rc = RawClient(b)
    try:
        answer = rc.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, E(replica_id=-1, topics=[E.OffsetForLeaderTopic(
            topic=topic, partitions=[E.OffsetForLeaderTopic.OffsetForLeaderPartition(
                partition=i, current_leader_epoch=-1, leader_epoch=0) for i in (0, 1, 2)])]))
    finally:
        rc.close()
    assert [(p.partition, p.error_code, p.end_offset) for p in answer.topics[0].partitions] == [
        (0, 0, 5), (1, 0, 7), (2, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), -1)]
    with pytest.raises(KafkaException):
        producer.produce(topic, b"x", partition=2)  # librdkafka knows only 2 partitions
        producer.flush(5)

    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": b, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 1), timeout=10) == (0, 7)  # ListOffsets
        consumer.subscribe([topic])
        got: dict[int, list[str]] = {}
        for _ in range(200):
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.setdefault(msg.partition(), []).append(msg.value().decode())
            if sum(map(len, got.values())) == 12:
                break
        assert got == {0: [f"zero-{i}" for i in range(5)], 1: [f"one-{i}" for i in range(7)]}
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 5), (1, 7)]  # OffsetFetch
    finally:
        consumer.close()
    # Stored under the real partitions.
    err, stored = on_loop(loop, lambda: broker.group_coordinator.fetch_offsets(group, None))
    assert {tp: v.offset for tp, v in stored.items() if v is not None} == {(topic, 0): 5, (topic, 3): 7}

    # Enabled again: clients see all 4 partitions under their real numbers.
    on_loop(loop, lambda: view.by_topic.pop(topic))
    meta = AdminClient({"bootstrap.servers": b}).list_topics(topic, timeout=10).topics[topic]
    assert sorted(meta.partitions) == [0, 1, 2, 3]


@pytest.mark.parametrize("api_version", [(0, 9), (0, 10, 1)])
def test_old_clients_are_mapped_too(running: tuple[Broker, asyncio.AbstractEventLoop, View],
                                    api_version: tuple[int, ...]) -> None:
    """A 0.9 / 0.10.1 client (Produce v1/v2 message sets, Fetch v1/v3) names the client's
    partitions as well: its partition 1 is the real partition 3."""
    broker, loop, view = running
    b = broker.bootstrap
    topic = f"disold-{uuid.uuid4().hex[:6]}"
    create_topic(b, topic, partitions=4)
    on_loop(loop, lambda: view.by_topic.__setitem__(topic, frozenset({1, 2})))
    producer = KafkaProducer(bootstrap_servers=b, api_version=api_version)
    for i in range(3):
        producer.send(topic, b"old-%d" % i, partition=1)
    producer.flush(30)
    producer.close()
    ends = on_loop(loop, lambda: {i: broker.replica_manager.get(topic, i).log.log_end_offset for i in range(4)})
    assert ends == {0: 0, 1: 0, 2: 0, 3: 3}
    consumer = KafkaConsumer(bootstrap_servers=b, api_version=api_version, consumer_timeout_ms=10000,
                             auto_offset_reset="earliest")
    try:
        consumer.assign([KafkaTopicPartition(topic, 1)])
        got = []
        for m in consumer:
            got.append((m.partition, m.offset, m.value))
            if len(got) == 3:
                break
    finally:
        consumer.close()
    assert got == [(1, i, b"old-%d" % i) for i in range(3)]


def test_partition_numbers_no_client_may_see_name_no_partition(
        running: tuple[Broker, asyncio.AbstractEventLoop, View]) -> None:
    """Negative and too-large client numbers get UNKNOWN_TOPIC_OR_PARTITION under the number sent,
    and write nothing anywhere: -2 once reached the hidden real partition 1."""
    broker, loop, view = running
    topic = f"neg-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, partitions=4)
    on_loop(loop, lambda: view.by_topic.__setitem__(topic, frozenset({1, 2})))
    P = codec.request_class(ApiKey.PRODUCE)
    batch = build_batch([Record(0, 0, None, b"v")], base_timestamp=1000)
    sent = (-1, -2, -3, 2, 3)
    rc = RawClient(broker.bootstrap)
    try:
        answer = rc.request(ApiKey.PRODUCE, 9, P(acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
            name=topic, partition_data=[P.TopicProduceData.PartitionProduceData(index=i, records=batch)
                                        for i in sent])]))
    finally:
        rc.close()
    assert [(p.index, p.error_code) for p in answer.responses[0].partition_responses] == [
        (i, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)) for i in sent]
    ends = on_loop(loop, lambda: {i: broker.replica_manager.get(topic, i).log.log_end_offset for i in range(4)})
    assert ends == {0: 0, 1: 0, 2: 0, 3: 0}


def test_a_client_that_claims_to_be_a_broker_still_sees_the_renumbered_view(
        running: tuple[Broker, asyncio.AbstractEventLoop, View]) -> None:
    """A broker alone has no other broker to serve in real partitions: a client naming itself
    like one (client id ``broker-1-metrics``) and asking as a follower (replica id 1) is still
    renumbered; Kafka checks no ClusterAction for a follower's ListOffsets."""
    broker, loop, view = running
    b = broker.bootstrap
    topic = f"claim-{uuid.uuid4().hex[:6]}"
    create_topic(b, topic, partitions=4)
    on_loop(loop, lambda: view.by_topic.__setitem__(topic, frozenset({1, 2})))
    producer = Producer({"bootstrap.servers": b, "linger.ms": 0})
    for i in range(7):
        producer.produce(topic, f"one-{i}".encode(), partition=1)  # the real partition 3
    assert producer.flush(10) == 0
    R = codec.request_class(ApiKey.LIST_OFFSETS)
    T = R.ListOffsetsTopic
    request = R(replica_id=1, isolation_level=0, topics=[T(name=topic, partitions=[
        T.ListOffsetsPartition(partition_index=i, current_leader_epoch=-1, timestamp=-1) for i in (0, 1)])])
    rc = RawClient(b)
    try:
        rc.send_raw(rc.frame(ApiKey.LIST_OFFSETS, 6, bytes(request.encode(version=6)), client_id="broker-1-metrics"))
        answer = rc.read_response(ApiKey.LIST_OFFSETS, 6)
    finally:
        rc.close()
    assert [(p.partition_index, p.error_code, p.offset) for p in answer.topics[0].partitions] == [(0, 0, 0), (1, 0, 7)]
