"""Two broker processes replicate a partition, driven by controller requests sent from the test.

There is no controller here (each broker runs alone on its own metadata tree), so the test plays
it: UpdateMetadata and LeaderAndIsr go to each broker over a real socket (BrokerClient) with a
controller epoch newer than the brokers' own. A real client (confluent-kafka) produces to the
leader; the follower's log files must end up holding the very same batches. Then the follower is
stopped, the leader takes writes alone (acks=1), and leadership moves to the stopped broker at a
newer leader epoch: the old leader, now a follower, must truncate what only it had and copy the
new leader's log.

The leaders' ISR znode writes fail here (the state znode is in no broker's tree): the partition
keeps the change pending as Kafka does after a failed conditional write, which is harmless for
what is tested. A cluster test with a shared ZooKeeper comes with the controller.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from kaflet.network.client import BrokerClient
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode as E
from kaflet.protocol.records import iter_batches
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.hostile import HUGE, HugeFramePeer, peak_rss_bytes
from tests.support.raw_client import RawClient
from tests.support.replication import leader_and_isr, update_metadata

TOPIC = "replicated"
CONTROLLER_EPOCH = 100  # newer than the brokers' own (each starts its own single-broker controller)


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[dict[int, BrokerProcess]]:
    overrides = {"min.insync.replicas": "2", "auto.create.topics.enable": "false",
                 "replica.fetch.backoff.ms": "200"}
    with running_broker(tmp_path / "b1", {**overrides, "broker.id": "1"}) as b1, \
            running_broker(tmp_path / "b2", {**overrides, "broker.id": "2"}) as b2:
        yield {1: b1, 2: b2}


def _segment_batches(broker: BrokerProcess) -> list[tuple[int, bytes]]:
    """Every whole batch in the partition's segment files, as (base offset, bytes)."""
    out = []
    for seg in sorted((broker.data_dir / f"{TOPIC}-0").glob("*.log")):
        data = seg.read_bytes()
        out += [(h.base_offset, data[pos:pos + h.size]) for pos, h in iter_batches(data)]
    return out


async def _control(broker: BrokerProcess, api_key: ApiKey, version: int, request: Any) -> Any:
    async with await BrokerClient.connect("127.0.0.1", broker.port, client_id="test-controller") as client:
        return await client.send(api_key, version, request)


async def _elect(brokers: dict[int, BrokerProcess], to: list[int], leader: int, epoch: int, isr: list[int]) -> None:
    """The controller's UpdateMetadata (to both) and LeaderAndIsr (to ``to``) for the partition."""
    live = [(b, "127.0.0.1", p.port) for b, p in brokers.items() if p.alive]
    state = {"index": 0, "leader": leader, "leader_epoch": epoch, "isr": isr, "replicas": [1, 2],
             "offline": [b for b in (1, 2) if not brokers[b].alive]}
    for b, proc in brokers.items():
        if not proc.alive:
            continue
        resp = await _control(proc, ApiKey.UPDATE_METADATA, 7, update_metadata(
            CONTROLLER_EPOCH, live, TOPIC, [state], controller_id=leader))
        assert resp.error_code == 0, (b, resp)
    leader_port = brokers[leader].port
    for b in to:
        resp = await _control(brokers[b], ApiKey.LEADER_AND_ISR, 5, leader_and_isr(
            CONTROLLER_EPOCH, TOPIC, [state], controller_id=leader, live_leaders=[(leader, "127.0.0.1", leader_port)]))
        assert resp.error_code == 0 and resp.topics[0].partition_errors[0].error_code == 0, (b, resp)


def _produce(bootstrap: str, values: list[bytes], acks: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.num.messages": 7,
                  "enable.idempotence": acks == "all", "message.timeout.ms": 20000})
    errors: list[Any] = []
    for v in values:
        p.produce(TOPIC, value=v, partition=0, on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert p.flush(30) == 0
    assert errors == []


def _consume(bootstrap: str, count: int) -> list[bytes]:
    """Read the partition from the start with kafka-python (no consumer group: no
    __consumer_offsets, which each broker would create alone on its own tree)."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = KafkaTopicPartition(TOPIC, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(out) < count and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=500).values():
                out += [r.value for r in records]
        return out
    finally:
        c.close()


def _fetch_error(broker: BrokerProcess, replica_id: int) -> int:
    F = codec.request_class(ApiKey.FETCH)
    c = RawClient(broker.bootstrap)
    try:
        resp = c.request(ApiKey.FETCH, 12, F(
            replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, topics=[F.FetchTopic(topic=TOPIC, partitions=[F.FetchTopic.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=0,
                partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id=""))
        return int(resp.responses[0].partitions[0].error_code)
    finally:
        c.close()


def _latest_offset(broker: BrokerProcess, replica_id: int) -> int:
    L = codec.request_class(ApiKey.LIST_OFFSETS)
    c = RawClient(broker.bootstrap)
    try:
        part = c.request(ApiKey.LIST_OFFSETS, 6, L(replica_id=replica_id, isolation_level=0, topics=[
            L.ListOffsetsTopic(name=TOPIC, partitions=[L.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=-1)])])).topics[0].partitions[0]
        assert part.error_code == 0
        return int(part.offset)
    finally:
        c.close()


async def _eventually(check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not reached in time"
        await asyncio.sleep(0.1)


async def test_follower_copies_the_leader_and_a_new_leader_truncates_the_old(brokers: dict[int, BrokerProcess]) -> None:
    b1, b2 = brokers[1], brokers[2]
    await _elect(brokers, [1, 2], leader=1, epoch=0, isr=[1, 2])

    # acks=all with min.insync.replicas=2: each produce waits until broker 2 has fetched it.
    first = [b"first-%03d" % i for i in range(60)]
    _produce(b1.bootstrap, first, acks="all")
    await _eventually(lambda: _segment_batches(b2) == _segment_batches(b1))
    batches = _segment_batches(b1)
    assert len(batches) > 1 and batches[-1][0] < 60
    assert _consume(b1.bootstrap, 60) == first

    # Consumers are served by the leader only; a replica fetch needs a replica id of the partition.
    assert _fetch_error(b2, replica_id=-1) == E.NOT_LEADER_OR_FOLLOWER
    assert _fetch_error(b1, replica_id=7) == E.NOT_LEADER_OR_FOLLOWER
    assert _fetch_error(b1, replica_id=-1) == E.NONE

    # Broker 2 goes away; broker 1 takes writes alone (acks=1): only it has them. Broker 2 is
    # still in the ISR, so they stay above the high watermark: consumers do not see them, a
    # replica's ListOffsets does.
    b2.stop()
    _produce(b1.bootstrap, [b"only-on-1-%d" % i for i in range(5)], acks="1")
    assert len(_segment_batches(b1)) > len(batches)
    assert (_latest_offset(b1, replica_id=-1), _latest_offset(b1, replica_id=2)) == (60, 65)

    # Broker 2 comes back and leads at epoch 1 (an unclean choice, as a controller would make
    # with unclean.leader.election.enable); it takes new writes from offset 60.
    b2.start()
    await _elect(brokers, [2], leader=2, epoch=1, isr=[2])
    second = [b"second-%d" % i for i in range(8)]
    _produce(b2.bootstrap, second, acks="1")
    # Broker 1 follows at epoch 1: it asks where epoch 0 ends on broker 2 (offset 60),
    # truncates its own 5 records there and copies broker 2's.
    await _elect(brokers, [1], leader=2, epoch=1, isr=[2])
    await _eventually(lambda: _segment_batches(b1) == _segment_batches(b2))
    final = _segment_batches(b1)
    assert final[: len(batches)] == batches
    assert b"only-on-1" not in b"".join(data for _, data in final)
    assert _consume(b2.bootstrap, 68) == first + second
    # Broker 1's log says who wrote what: epoch 0 from offset 0, epoch 1 from 60 (the file is
    # written just after the append, off the event loop).
    checkpoint = b1.data_dir / f"{TOPIC}-0" / "leader-epoch-checkpoint"
    await _eventually(lambda: checkpoint.read_text().split() == ["0", "2", "0", "0", "1", "60"])
    log1 = b1.new_log()
    assert "truncating replicated-0 to offset 60" in log1


async def test_a_leader_announcing_two_gigabytes_is_dropped_and_replication_resumes(
        brokers: dict[int, BrokerProcess]) -> None:
    """A hostile peer on the leader's address answers the follower's fetches with a 2 GiB size:
    the follower closes each such connection before allocating anything for it, says so in one
    log line, backs off and reconnects; once the real leader is back, replication resumes
    without the follower being told anything."""
    b1, b2 = brokers[1], brokers[2]
    await _elect(brokers, [1, 2], leader=1, epoch=0, isr=[1, 2])
    before = [b"before-%d" % i for i in range(20)]
    _produce(b1.bootstrap, before, acks="all")
    await _eventually(lambda: _segment_batches(b2) == _segment_batches(b1))

    # Both stop; the peer takes the leader's address and the follower starts again, following
    # broker 1 there: the hostile answers are the first failures its fetcher meets.
    b2.stop()
    b1.stop()
    peer = HugeFramePeer()
    await peer.start(b1.port or 0)
    try:
        b2.start()
        assert b2.pid is not None
        await _elect(brokers, [2], leader=1, epoch=0, isr=[1, 2])
        peak_before = peak_rss_bytes(b2.pid)
        await peer.wait_answered(3)  # each connection closed by the follower, which came back
        peak_after = peak_rss_bytes(b2.pid)
    finally:
        await peer.close()
    print(f"follower peak RSS {peak_before / 2**20:.1f} MiB before, {peak_after / 2**20:.1f} MiB after "
          f"{peer.answered} answers of {HUGE} bytes")
    # A 2 GiB buffer is zero-filled when made: it would be in the peak RSS.
    assert peak_after - peak_before < 32 * 2**20
    refused = [line for line in b2.new_log().splitlines() if f"announced a response of {HUGE} bytes" in line]
    assert len(refused) == 1 and "WARNING" in refused[0], refused  # then DEBUG while it lasts

    # The leader comes back on its address (told it leads again); the follower's fetcher
    # reconnects by itself and copies what the leader takes now. (acks=1, not idempotent: each
    # broker here hands out producer ids from its own tree, so a new producer may get one from
    # broker 2 that broker 1's log already holds.)
    b1.start()
    await _elect(brokers, [1], leader=1, epoch=0, isr=[1, 2])
    after = [b"after-%d" % i for i in range(20)]
    _produce(b1.bootstrap, after, acks="1")
    await _eventually(lambda: _segment_batches(b2) == _segment_batches(b1))
    assert _consume(b1.bootstrap, 40) == before + after
