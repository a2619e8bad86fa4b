"""The log side of transactions against a real broker: raw transactional Produce and
WriteTxnMarkers requests, read back by confluent-kafka read_committed / read_uncommitted
consumers, raw read_committed Fetch (aborted_transactions) and ListOffsets (LSO)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.fetch import decode_fetch_response
from kaflet.protocol.records import Record, build_batch
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic
from tests.support.transactions import consume_all as _consume
from tests.support.transactions import init_producer_id as _producer_id
from tests.support.transactions import latest_offset as _latest


def _produce(client: RawClient, topic: str, values: list[bytes], *, pid: int = -1, epoch: int = -1, seq: int = -1,
             txn_id: str | None = None, transactional: bool = False, key: bytes | None = None) -> tuple[int, int]:
    batch = build_batch([Record(i, 0, key, v) for i, v in enumerate(values)], producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)
    R = codec.request_class(ApiKey.PRODUCE)
    P = R.TopicProduceData
    req = R(transactional_id=txn_id, acks=-1, timeout_ms=10000,
            topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])])
    resp = client.request(ApiKey.PRODUCE, 8, req)
    part = resp.responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def _markers(client: RawClient, topic: str, pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0,
             partitions: tuple[int, ...] = (0,), version: int = 1) -> list[int]:
    R = codec.request_class(ApiKey.WRITE_TXN_MARKERS)
    M = R.WritableTxnMarker
    req = R(markers=[M(producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=coordinator_epoch,
                       topics=[M.WritableTxnMarkerTopic(name=topic, partition_indexes=list(partitions))])])
    resp = client.request(ApiKey.WRITE_TXN_MARKERS, version, req)
    [marker] = resp.markers
    assert marker.producer_id == pid
    return [p.error_code for p in marker.topics[0].partitions]


def _raw_fetch(client: RawClient, topic: str, isolation: int, version: int) -> Any:
    R = codec.request_class(ApiKey.FETCH)
    T = R.FetchTopic
    req = R(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=isolation, session_id=0,
            session_epoch=-1, topics=[T(topic=topic, partitions=[T.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
    client.send_raw(client.frame(ApiKey.FETCH, version, bytes(req.encode(version=version))))
    frame = client.read_frame()
    return decode_fetch_response(memoryview(frame)[5 if version >= 12 else 4:], version).topics[0][1][0]


@pytest.fixture
def raw(kaflet_broker: BrokerProcess) -> Iterator[tuple[RawClient, str]]:
    """A raw client and a new single-partition topic."""
    topic = f"txlog-{uuid.uuid4().hex[:8]}"
    create_topic(kaflet_broker.bootstrap, topic)
    client = RawClient(kaflet_broker.bootstrap)
    try:
        yield client, topic
    finally:
        client.close()


def test_markers_lso_and_read_committed(kaflet_broker: BrokerProcess, raw: tuple[RawClient, str]) -> None:
    bootstrap = kaflet_broker.bootstrap
    client, topic = raw
    a_pid, a_epoch = _producer_id(client)
    b_pid, b_epoch = _producer_id(client)
    assert _produce(client, topic, [b"a0"]) == (0, 0)
    assert _produce(client, topic, [b"A1", b"A2"], pid=a_pid, epoch=a_epoch, seq=0, txn_id="ta",
                    transactional=True) == (0, 1)
    assert _produce(client, topic, [b"B1"], pid=b_pid, epoch=b_epoch, seq=0, txn_id="tb",
                    transactional=True) == (0, 3)
    # Open transactions: read_committed stops at the first one.
    assert _latest(client, topic, 1) == 1 and _latest(client, topic, 0) == 4
    assert _consume(bootstrap, topic, "read_committed", 1) == [b"a0"]
    assert _raw_fetch(client, topic, 1, 11).last_stable_offset == 1

    assert _markers(client, topic, a_pid, a_epoch, commit=False) == [0]
    assert _markers(client, topic, b_pid, b_epoch, commit=True, version=0) == [0]
    assert _produce(client, topic, [b"a3"]) == (0, 6)
    assert _latest(client, topic, 1) == _latest(client, topic, 0) == 7

    assert _consume(bootstrap, topic, "read_committed", 3) == [b"a0", b"B1", b"a3"]
    assert _consume(bootstrap, topic, "read_uncommitted", 5) == [b"a0", b"A1", b"A2", b"B1", b"a3"]
    for version in (11, 12):
        part = _raw_fetch(client, topic, 1, version)
        assert part.error_code == 0 and part.last_stable_offset == 7
        assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [(a_pid, 1)]
        uncommitted = _raw_fetch(client, topic, 0, version)
        assert not uncommitted.aborted_transactions and uncommitted.high_watermark == 7


def test_marker_and_produce_errors(raw: tuple[RawClient, str]) -> None:
    client, topic = raw
    pid, epoch = _producer_id(client)
    assert _produce(client, topic, [b"x"], pid=pid, epoch=epoch, seq=0, txn_id="tx", transactional=True)[0] == 0
    assert _markers(client, topic, pid, epoch, commit=True, coordinator_epoch=3) == [0]
    # A stale coordinator epoch, a stale producer epoch, a partition the broker does not have.
    assert _markers(client, topic, pid, epoch, commit=True, coordinator_epoch=2) == [
        ErrorCode.TRANSACTION_COORDINATOR_FENCED]
    assert _markers(client, topic, pid, epoch + 1, commit=False, coordinator_epoch=3) == [0]
    assert _markers(client, topic, pid, epoch, commit=True, coordinator_epoch=3) == [
        ErrorCode.INVALID_PRODUCER_EPOCH]
    assert _markers(client, topic, pid, epoch + 1, commit=True, coordinator_epoch=3, partitions=(7,)) == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    # The old epoch is fenced for data too; transactional data needs a transactional id.
    assert _produce(client, topic, [b"y"], pid=pid, epoch=epoch, seq=1, txn_id="tx",
                    transactional=True)[0] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert _produce(client, topic, [b"y"], pid=pid, epoch=epoch + 1, seq=0,
                    transactional=True)[0] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # Non-transactional data during an open transaction of the same producer.
    assert _produce(client, topic, [b"z"], pid=pid, epoch=epoch + 1, seq=0, txn_id="tx", transactional=True)[0] == 0
    assert _produce(client, topic, [b"w"], pid=pid, epoch=epoch + 1, seq=1)[0] == ErrorCode.INVALID_TXN_STATE


@pytest.mark.parametrize("version", [0, 1])
def test_write_txn_markers_is_advertised(kaflet_broker: BrokerProcess, version: int) -> None:
    client = RawClient(kaflet_broker.bootstrap)
    try:
        R = codec.request_class(ApiKey.API_VERSIONS)
        resp = client.request(ApiKey.API_VERSIONS, 2, R())
        keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert keys[ApiKey.WRITE_TXN_MARKERS] == (0, 1)
        assert _markers(client, "no-such-topic", 1, 0, commit=True, version=version) == [
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    finally:
        client.close()


@pytest.mark.parametrize("hard", [True, False], ids=["kill-9", "clean"])
def test_restart_rebuilds_lso_and_aborted_index(fresh_broker: BrokerProcess, hard: bool) -> None:
    fresh_broker.start()
    topic = f"txrs-{uuid.uuid4().hex[:8]}"
    # Small segments: the transactions span several, with producer snapshots at each roll.
    create_topic(fresh_broker.bootstrap, topic, config={"segment.bytes": "1024"})
    client = RawClient(fresh_broker.bootstrap)
    a_pid, a_epoch = _producer_id(client)
    c_pid, c_epoch = _producer_id(client)
    filler = [b"f" * 100] * 3
    assert _produce(client, topic, [b"A0"], pid=a_pid, epoch=a_epoch, seq=0, txn_id="ta", transactional=True)[0] == 0
    for _ in range(8):
        assert _produce(client, topic, filler)[0] == 0
    assert _produce(client, topic, [b"A1"], pid=a_pid, epoch=a_epoch, seq=1, txn_id="ta", transactional=True)[0] == 0
    assert _markers(client, topic, a_pid, a_epoch, commit=False) == [0]
    assert _produce(client, topic, [b"p"])[0] == 0
    err, c_first = _produce(client, topic, [b"C0"], pid=c_pid, epoch=c_epoch, seq=0, txn_id="tc", transactional=True)
    assert err == 0
    assert _produce(client, topic, filler)[0] == 0
    before = _raw_fetch(client, topic, 1, 12)
    assert before.last_stable_offset == c_first and _latest(client, topic, 1) == c_first
    client.close()

    fresh_broker.restart(hard=hard)
    client = RawClient(fresh_broker.bootstrap)
    try:
        deadline = time.monotonic() + 20
        while (lso := _latest(client, topic, 1)) != c_first and time.monotonic() < deadline:
            time.sleep(0.2)
        # The open transaction of C holds the LSO back after the restart as before it.
        assert lso == c_first
        assert _consume(fresh_broker.bootstrap, topic, "read_committed", 25) == [*filler * 8, b"p"]
        assert _markers(client, topic, c_pid, c_epoch, commit=True) == [0]
        expected = [*filler * 8, b"p", b"C0", *filler]
        assert _consume(fresh_broker.bootstrap, topic, "read_committed", len(expected)) == expected
        assert _latest(client, topic, 1) == _latest(client, topic, 0)
    finally:
        client.close()


def _describe_producers(client: RawClient, topic: str, partitions: list[int]) -> Any:
    R = codec.request_class(ApiKey.DESCRIBE_PRODUCERS)
    resp = client.request(ApiKey.DESCRIBE_PRODUCERS, 0, R(topics=[R.TopicRequest(name=topic,
                                                                                  partition_indexes=partitions)]))
    [t] = resp.topics
    assert t.name == topic
    return t.partitions


def test_describe_producers(raw: tuple[RawClient, str]) -> None:
    client, topic = raw
    a_pid, a_epoch = _producer_id(client)
    i_pid, i_epoch = _producer_id(client)
    assert _produce(client, topic, [b"x", b"y"], pid=a_pid, epoch=a_epoch, seq=0, txn_id="ta", transactional=True) \
        == (0, 0)
    assert _produce(client, topic, [b"i"], pid=i_pid, epoch=i_epoch, seq=0) == (0, 2)
    [p0, p5] = _describe_producers(client, topic, [0, 5])
    assert (p0.partition_index, p0.error_code, p5.error_code) == (0, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    got = {p.producer_id: (p.producer_epoch, p.last_sequence, p.coordinator_epoch, p.current_txn_start_offset)
           for p in p0.active_producers}
    assert got == {a_pid: (a_epoch, 1, -1, 0), i_pid: (i_epoch, 0, -1, -1)}
    assert all(p.last_timestamp > 0 for p in p0.active_producers)
    assert _markers(client, topic, a_pid, a_epoch, commit=True, coordinator_epoch=4) == [0]
    [p0] = _describe_producers(client, topic, [0])
    assert {p.producer_id: (p.coordinator_epoch, p.current_txn_start_offset) for p in p0.active_producers}[a_pid] \
        == (4, -1)
    [unknown] = _describe_producers(client, "no-such-topic-dp", [0])
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_cleaner_removes_aborted_records(tmp_path: Path) -> None:
    overrides = {"log.cleaner.backoff.ms": "100", "log.segment.delete.delay.ms": "200"}
    with running_broker(tmp_path / "data", overrides) as broker:
        topic = f"txcl-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, config={"cleanup.policy": "compact", "segment.bytes": "1024",
                                                      "min.cleanable.dirty.ratio": "0.01"})
        client = RawClient(broker.bootstrap)
        try:
            pid, epoch = _producer_id(client)
            assert _produce(client, topic, [b"before"], key=b"k0")[0] == 0
            assert _produce(client, topic, [b"aborted"], key=b"k0", pid=pid, epoch=epoch, seq=0, txn_id="tc",
                            transactional=True)[0] == 0
            assert _markers(client, topic, pid, epoch, commit=False) == [0]
            assert _produce(client, topic, [b"kept"], key=b"k9", pid=pid, epoch=epoch, seq=1, txn_id="tc",
                            transactional=True)[0] == 0
            assert _markers(client, topic, pid, epoch, commit=True) == [0]
            for i in range(40):
                assert _produce(client, topic, [b"f" * 60], key=b"f%d" % (i % 4))[0] == 0
        finally:
            client.close()
        # The cleaner (in its worker process) removes the aborted record: read_uncommitted stops seeing it.
        deadline = time.monotonic() + 60
        while True:
            seen = _consume(broker.bootstrap, topic, "read_uncommitted", 7, settle_s=0.5)
            if b"aborted" not in seen or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert b"aborted" not in seen
        committed = _consume(broker.bootstrap, topic, "read_committed", 7, settle_s=0.5)
        assert committed[:2] == [b"before", b"kept"] and b"aborted" not in committed
