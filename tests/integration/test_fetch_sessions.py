"""Incremental fetch sessions (KIP-227) and Fetch v13+ by topic id, over real sockets.

Raw requests check the protocol exactly (session ids and epochs, which partitions an incremental
response carries, session errors, cache slot eviction); real clients check that consumers of
1,000 partitions work: librdkafka (sessionless, Fetch v16 by topic id) and kafka-python
(incremental sessions, Fetch v12).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kaflet.protocol import codec
from kaflet.protocol.records import Record, build_batch, decode_records
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic

F = codec.request_class(1)
ZERO = uuid.UUID(int=0)
FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, UNKNOWN_TOPIC_ID = 70, 71, 100


def produce(client: RawClient, topic: str, partition: int, *values: bytes) -> None:
    P = codec.request_class(0)
    batch = build_batch([Record(i, 0, None, v, []) for i, v in enumerate(values)])
    req = P(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name=topic, partition_data=[P.TopicProduceData.PartitionProduceData(index=partition, records=batch)])])
    part = client.request(0, 9, req).responses[0].partition_responses[0]
    assert part.error_code == 0


def topic_id(client: RawClient, topic: str) -> uuid.UUID:
    M = codec.request_class(3)
    req = M(topics=[M.MetadataRequestTopic(name=topic, topic_id=ZERO)], allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    return client.request(3, 12, req).topics[0].topic_id


def fetch(client: RawClient, version: int, session: tuple[int, int], topics: list[tuple[Any, list[tuple[int, int]]]],
          forgotten: list[tuple[Any, list[int]]] = (), max_wait_ms: int = 0, replica_id: int = -1) -> Any:
    """A Fetch request; each topic is a name (v<13) or a UUID (v13+) with (partition, offset)s."""
    def name_and_id(t: Any) -> dict[str, Any]:
        return {"topic": "", "topic_id": t} if isinstance(t, uuid.UUID) else {"topic": t, "topic_id": ZERO}

    req = F(replica_id=replica_id, replica_state=F.ReplicaState(replica_id=replica_id, replica_epoch=-1),
            max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            session_id=session[0], session_epoch=session[1],
            topics=[F.FetchTopic(**name_and_id(t), partitions=[F.FetchTopic.FetchPartition(
                partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 20) for p, o in ps]) for t, ps in topics],
            forgotten_topics_data=[F.ForgottenTopic(**name_and_id(t), partitions=ps) for t, ps in forgotten],
            rack_id="", cluster_id=None)
    return client.request(1, version, req)


def partitions(resp: Any) -> dict[tuple[Any, int], Any]:
    """The response's partitions by (topic name or id, partition)."""
    return {(t.topic_id if t.topic_id not in (None, ZERO) else t.topic, p.partition_index): p
            for t in resp.responses for p in t.partitions}


def values(part: Any) -> list[bytes]:
    return [r.value for r in decode_records(bytes(part.records))] if part.records else []


@pytest.fixture
def client(kaflet_broker: BrokerProcess) -> Iterator[RawClient]:
    c = RawClient(kaflet_broker.bootstrap)
    yield c
    c.close()


@pytest.mark.parametrize("version", [7, 12, 13, 16])
def test_incremental_fetch_session(kaflet_broker: BrokerProcess, client: RawClient, version: int) -> None:
    topic = f"sess{version}-{uuid.uuid4().hex[:6]}"
    create_topic(kaflet_broker.bootstrap, topic, 3)
    for p in range(3):
        produce(client, topic, p, b"first-%d" % p)
    t = topic_id(client, topic) if version >= 13 else topic

    # A full fetch with epoch 0 opens a session and answers every partition.
    full = fetch(client, version, (0, 0), [(t, [(0, 0), (1, 0), (2, 0)])])
    assert full.error_code == 0 and full.session_id > 0
    sid = full.session_id
    got = partitions(full)
    assert sorted(got) == [(t, 0), (t, 1), (t, 2)]
    assert [values(got[(t, p)]) for p in range(3)] == [[b"first-0"], [b"first-1"], [b"first-2"]]

    # The client moves its positions: nothing new, so the incremental answer has no partitions.
    inc = fetch(client, version, (sid, 1), [(t, [(0, 1), (1, 1), (2, 1)])])
    assert (inc.error_code, inc.session_id, partitions(inc)) == (0, sid, {})
    # Nothing changed at all: the request names no partition either.
    inc = fetch(client, version, (sid, 2), [])
    assert (inc.error_code, inc.session_id, partitions(inc)) == (0, sid, {})

    # New records on partition 1: only partition 1 comes back, with them and its new high watermark.
    produce(client, topic, 1, b"second-1")
    inc = fetch(client, version, (sid, 3), [])
    got = partitions(inc)
    assert list(got) == [(t, 1)] and values(got[(t, 1)]) == [b"second-1"] and got[(t, 1)].high_watermark == 2

    # A repeated epoch, and an unknown session id, are refused without data.
    again = fetch(client, version, (sid, 3), [])
    assert (again.error_code, again.session_id, partitions(again)) == (INVALID_FETCH_SESSION_EPOCH, 0, {})
    unknown = fetch(client, version, (sid ^ 0x5A5A, 1), [])
    assert unknown.error_code == FETCH_SESSION_ID_NOT_FOUND

    # Forgetting partition 0 (and moving on past partition 1's record): nothing to send, though
    # partition 0 has new records.
    produce(client, topic, 0, b"second-0")
    inc = fetch(client, version, (sid, 4), [(t, [(1, 2)])], forgotten=[(t, [0])])
    assert (inc.error_code, partitions(inc)) == (0, {})
    # Partition 0 back in the session (a consumer resuming it): answered at once from the offset
    # given, as a partition the session had never seen.
    inc = fetch(client, version, (sid, 5), [(t, [(0, 1)])], max_wait_ms=10_000)
    got = partitions(inc)
    assert list(got) == [(t, 0)] and values(got[(t, 0)]) == [b"second-0"]

    # Epoch -1 closes the session (a sessionless full fetch); the id is gone afterwards.
    closing = fetch(client, version, (sid, -1), [(t, [(0, 1)])])
    assert closing.session_id == 0 and values(partitions(closing)[(t, 0)]) == [b"second-0"]
    assert fetch(client, version, (sid, 6), []).error_code == FETCH_SESSION_ID_NOT_FOUND


def test_incremental_fetch_long_polls_on_the_session_partitions(kaflet_broker: BrokerProcess,
                                                                client: RawClient) -> None:
    topic = f"poll-{uuid.uuid4().hex[:6]}"
    create_topic(kaflet_broker.bootstrap, topic, 2)
    full = fetch(client, 12, (0, 0), [(topic, [(0, 0), (1, 0)])])
    sid = full.session_id

    def produce_later() -> None:
        time.sleep(0.5)
        other = RawClient(kaflet_broker.bootstrap)
        produce(other, topic, 1, b"late")
        other.close()

    producer = threading.Thread(target=produce_later)
    producer.start()
    # The request names no partition; it waits on the session's, and ends with the new record.
    inc = fetch(client, 12, (sid, 1), [], max_wait_ms=20_000)
    producer.join()
    got = partitions(inc)
    assert list(got) == [(topic, 1)] and values(got[(topic, 1)]) == [b"late"]


def test_long_poll_ends_when_its_topic_is_deleted(kaflet_broker: BrokerProcess, client: RawClient) -> None:
    topic = f"gone-{uuid.uuid4().hex[:6]}"
    create_topic(kaflet_broker.bootstrap, topic, 2)

    def delete_later() -> None:
        time.sleep(0.5)
        admin = AdminClient({"bootstrap.servers": kaflet_broker.bootstrap})
        admin.delete_topics([topic])[topic].result(30)

    deleter = threading.Thread(target=delete_later)
    deleter.start()
    resp = fetch(client, 12, (0, -1), [(topic, [(0, 0), (1, 0)])], max_wait_ms=60_000)
    deleter.join()
    assert {p.error_code for p in partitions(resp).values()} == {3}  # UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("version", [13, 14, 15, 16])
def test_fetch_by_topic_id_with_an_unknown_id(kaflet_broker: BrokerProcess, client: RawClient, version: int) -> None:
    topic = f"ids{version}-{uuid.uuid4().hex[:6]}"
    create_topic(kaflet_broker.bootstrap, topic, 1)
    produce(client, topic, 0, b"by-id")
    tid, missing = topic_id(client, topic), uuid.uuid4()
    resp = fetch(client, version, (0, -1), [(missing, [(0, 0)]), (tid, [(0, 0)])])
    assert resp.error_code == 0 and resp.session_id == 0
    got = partitions(resp)
    assert got[(missing, 0)].error_code == UNKNOWN_TOPIC_ID
    assert got[(tid, 0)].error_code == 0 and values(got[(tid, 0)]) == [b"by-id"]
    # Kafka answers the partitions it read first, the ones refused at once after them.
    assert [t.topic_id for t in resp.responses] == [tid, missing]


def test_sessions_by_name_and_by_id_do_not_mix(kaflet_broker: BrokerProcess, client: RawClient) -> None:
    topic = f"mix-{uuid.uuid4().hex[:6]}"
    create_topic(kaflet_broker.bootstrap, topic, 1)
    sid = fetch(client, 12, (0, 0), [(topic, [(0, 0)])]).session_id
    assert fetch(client, 13, (sid, 1), []).error_code == 106  # FETCH_SESSION_TOPIC_ID_ERROR


@pytest.fixture(scope="module")
def one_slot_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("one-slot") / "data",
                        {"max.incremental.fetch.session.cache.slots": "1"}) as b:
        yield b


def test_cache_slots_and_eviction(one_slot_broker: BrokerProcess) -> None:
    topic = f"slots-{uuid.uuid4().hex[:6]}"
    create_topic(one_slot_broker.bootstrap, topic, 2)
    a, b, follower = (RawClient(one_slot_broker.bootstrap) for _ in range(3))
    try:
        sid_a = fetch(a, 12, (0, 0), [(topic, [(0, 0), (1, 0)])]).session_id
        assert sid_a > 0
        # The only slot holds a's fresh session: b is answered in full but gets no session.
        full_b = fetch(b, 12, (0, 0), [(topic, [(0, 0), (1, 0)])])
        assert full_b.error_code == 0 and full_b.session_id == 0 and len(partitions(full_b)) == 2
        assert fetch(a, 12, (sid_a, 1), []).error_code == 0
        # A follower's session is privileged: it takes the slot from a consumer's at once.
        sid_f = fetch(follower, 12, (0, 0), [(topic, [(0, 0)])], replica_id=7).session_id
        assert sid_f > 0
        assert fetch(a, 12, (sid_a, 2), []).error_code == FETCH_SESSION_ID_NOT_FOUND
        # ... and a consumer cannot take it back for 2 minutes.
        assert fetch(a, 12, (0, 0), [(topic, [(0, 0), (1, 0)])]).session_id == 0
    finally:
        for c in (a, b, follower):
            c.close()


MANY = 1000


@pytest.fixture(scope="module")
def many_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker of its own: creating and closing 1,000 partitions' files takes it a while."""
    broker = BrokerProcess(tmp_path_factory.mktemp("many") / "data")
    broker.start()
    try:
        yield broker
        broker.stop(timeout=180)
    finally:
        broker.kill()


@pytest.fixture(scope="module")
def many_partitions(many_broker: BrokerProcess) -> str:
    """A topic of 1,000 partitions with one record in each (value: the partition number)."""
    topic = f"many-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": many_broker.bootstrap})
    admin.create_topics([NewTopic(topic, MANY, 1)], request_timeout=180)[topic].result(180)
    producer = Producer({"bootstrap.servers": many_broker.bootstrap, "linger.ms": 20})
    for p in range(MANY):
        producer.produce(topic, b"%d" % p, partition=p)
    assert producer.flush(60) == 0
    return topic


def test_librdkafka_consumes_from_1000_partitions(many_broker: BrokerProcess, many_partitions: str) -> None:
    consumer = Consumer({"bootstrap.servers": many_broker.bootstrap, "group.id": "many-rdkafka",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(many_partitions, p, 0) for p in range(MANY)])
        seen: dict[int, bytes] = {}
        deadline = time.monotonic() + 90
        while len(seen) < MANY and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                assert msg.error() is None, msg.error()
                seen[msg.partition()] = msg.value()
        assert seen == {p: b"%d" % p for p in range(MANY)}
    finally:
        consumer.close()


def test_kafka_python_consumes_from_1000_partitions_with_a_session(many_broker: BrokerProcess,
                                                                   many_partitions: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=many_broker.bootstrap, enable_auto_commit=False)
    try:
        consumer.assign([KTP(many_partitions, p) for p in range(MANY)])
        consumer.seek_to_beginning()
        seen: dict[int, bytes] = {}
        deadline = time.monotonic() + 90
        while len(seen) < MANY and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=1000).items():
                for m in msgs:
                    seen[tp.partition] = m.value
        assert seen == {p: b"%d" % p for p in range(MANY)}
        # Later records on a few partitions arrive through the incremental session.
        producer = KafkaProducer(bootstrap_servers=many_broker.bootstrap)
        for p in (3, 500, 999):
            producer.send(many_partitions, b"later-%d" % p, partition=p)
        producer.flush()
        producer.close()
        later: dict[int, bytes] = {}
        deadline = time.monotonic() + 30
        while len(later) < 3 and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=1000).items():
                for m in msgs:
                    later[tp.partition] = m.value
        assert later == {p: b"later-%d" % p for p in (3, 500, 999)}
        handlers = consumer._fetcher._session_handlers
        metadata = next(iter(handlers.values())).next_metadata
        assert metadata.session_id > 0 and metadata.epoch > 1, "kafka-python did not keep a fetch session"
    finally:
        consumer.close()
