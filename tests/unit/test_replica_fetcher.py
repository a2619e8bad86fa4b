"""Followers: the truncation rule, and the fetcher's state machine against an in-process leader
(a real ReplicaManager answering through the real codecs; see tests/support/replication.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from kaflet.log.log_manager import LogManager
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode as E
from kaflet.protocol.records import Record, build_batch
from kaflet.replication.config import ReplicationConfig
from kaflet.replication.delayed_produce import wait_for_acks
from kaflet.replication.fetcher import (
    BrokerEndpoint,
    LeaderConnection,
    OffsetTruncationState,
    ReplicaState,
    fetcher_id,
    offset_truncation_state,
)
from kaflet.replication.replica_manager import ReplicaManager
from tests.support.replication import LoopbackLeader, leader_and_isr

FAST = ReplicationConfig(fetch_wait_max_ms=50, fetch_backoff_ms=20, replica_lag_time_max_ms=10_000)
T = "orders"


def _batch(n: int = 5, epoch: int = -1, base_offset: int = 0) -> bytes:
    return build_batch([Record(i, 0, b"k", b"v%d" % i) for i in range(n)], base_timestamp=1000,
                       base_offset=base_offset, partition_leader_epoch=epoch)


async def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


# ---------------------------------------------------------------- the truncation rule


def _follower_epochs(entries: dict[int, int]) -> Callable[[int], tuple[int, int]]:
    """A follower whose epochs end at these offsets: epoch -> end offset (Kafka's endOffsetFor)."""
    def end_for(epoch: int) -> tuple[int, int]:
        known = [e for e in entries if e <= epoch]
        return (max(known), entries[max(known)]) if known else (-1, -1)
    return end_for


def test_truncation_follows_kafkas_get_offset_truncation_state() -> None:
    follower = _follower_epochs({1: 50, 3: 80})
    # The leader has the follower's epoch, ending earlier: truncate to the leader's end.
    assert offset_truncation_state(3, 70, follower, 80, 40) == OffsetTruncationState(70, True)
    # ... or later: the follower's own end of the epoch (and never past its log end).
    assert offset_truncation_state(3, 95, follower, 80, 40) == OffsetTruncationState(80, True)
    assert offset_truncation_state(3, 95, follower, 75, 40) == OffsetTruncationState(75, True)
    # The leader answers with an epoch the follower lacks (2): truncate to the end of the
    # follower's largest epoch below it (1 ends at 50) and ask again.
    assert offset_truncation_state(2, 60, follower, 80, 40) == OffsetTruncationState(50, False)
    # The leader knows nothing of the epoch: the follower's high watermark.
    assert offset_truncation_state(-1, -1, follower, 80, 40) == OffsetTruncationState(40, True)
    # An answer without epoch (v0): the leader's offset.
    assert offset_truncation_state(-1, 60, follower, 80, 40) == OffsetTruncationState(60, True)
    # The leader's epoch is below every epoch the follower tracks: the leader's offset.
    assert offset_truncation_state(0, 30, follower, 80, 40) == OffsetTruncationState(30, True)


def test_fetcher_id_spreads_partitions_deterministically() -> None:
    assert fetcher_id(T, 0, 1) == 0
    ids = {fetcher_id(T, p, 3) for p in range(30)}
    assert ids == {0, 1, 2}
    assert fetcher_id(T, 7, 3) == fetcher_id(T, 7, 3)


# ---------------------------------------------------------------- fetchers against a leader


class Pair:
    """Brokers 1 and 2, each a replica manager over real logs that fetches from the other;
    broker 1 leads at first (``leader``), broker 2 follows (``follower``)."""

    def __init__(self, tmp_path: Path, config: ReplicationConfig = FAST) -> None:
        self.logs = {b: LogManager([str(tmp_path / f"b{b}")]) for b in (1, 2)}
        for lm in self.logs.values():
            lm.startup()
        self.unreachable = False
        self.connections: list[LoopbackLeader] = []
        self.rms = {b: ReplicaManager(b, self.logs[b], config=config, connector=self._connect,
                                      leader_endpoint=lambda b: ("127.0.0.1", 9000 + b)) for b in (1, 2)}
        self.leader_id, self.follower_id = 1, 2
        self.controller_epoch = 1

    async def _connect(self, endpoint: BrokerEndpoint) -> LeaderConnection:
        assert (endpoint.host, endpoint.port) == ("127.0.0.1", 9000 + endpoint.broker_id)
        conn = LoopbackLeader(self.rms[endpoint.broker_id], fail=lambda: self.unreachable)
        conn._check()
        self.connections.append(conn)
        return conn

    @property
    def leader(self) -> ReplicaManager:
        return self.rms[self.leader_id]

    @property
    def follower(self) -> ReplicaManager:
        return self.rms[self.follower_id]

    def elect(self, leader: int, epoch: int, isr: list[int], replicas: tuple[int, ...] = (1, 2)) -> None:
        """The controller's LeaderAndIsr to both brokers."""
        state = [{"index": 0, "leader": leader, "leader_epoch": epoch, "isr": isr, "replicas": list(replicas)}]
        for rm in self.rms.values():
            resp = rm.become_leader_or_follower(leader_and_isr(self.controller_epoch, T, state), broker_epoch=-1)
            assert resp.error_code == 0 and resp.topics[0].partition_errors[0].error_code == 0
        self.leader_id, self.follower_id = leader, 3 - leader

    def lead(self, epoch: int, isr: list[int]) -> None:
        state = [{"index": 0, "leader": 1, "leader_epoch": epoch, "isr": isr, "replicas": [1, 2]}]
        self.rms[1].become_leader_or_follower(leader_and_isr(self.controller_epoch, T, state), broker_epoch=-1)

    def follow(self, epoch: int) -> None:
        state = [{"index": 0, "leader": 1, "leader_epoch": epoch, "isr": [1, 2], "replicas": [1, 2]}]
        self.rms[2].become_leader_or_follower(leader_and_isr(self.controller_epoch, T, state), broker_epoch=-1)

    @property
    def leader_log(self):  # type: ignore[no-untyped-def]
        return self.logs[self.leader_id].get_log(T, 0)

    @property
    def follower_log(self):  # type: ignore[no-untyped-def]
        return self.logs[self.follower_id].get_log(T, 0)

    def fetch_state(self):  # type: ignore[no-untyped-def]
        return self.follower.fetcher_manager.fetch_state(T, 0)

    async def close(self) -> None:
        for rm in self.rms.values():
            await rm.stop()
        for lm in self.logs.values():
            lm.shutdown()


def _bytes(log) -> bytes:  # type: ignore[no-untyped-def]
    return b"".join(log.read_batches(seg.base_offset) for seg in log.segments)


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[Pair]:
    p = Pair(tmp_path)
    yield p
    await p.close()


async def test_follower_copies_the_leader_and_moves_its_high_watermark(pair: Pair) -> None:
    pair.elect(leader=1, epoch=0, isr=[1, 2])
    leader = pair.leader.get(T, 0)
    assert leader is not None and leader.is_leader
    results = [leader.append(memoryview(_batch(5)), required_acks=-1) for _ in range(20)]
    acks = asyncio.create_task(wait_for_acks([(leader, results[-1].last_offset + 1)], 10_000))
    assert await asyncio.wait_for(acks, 10) == [E.NONE]  # the follower's fetches moved the HW
    await eventually(lambda: pair.follower_log.high_watermark == 100)
    assert _bytes(pair.follower_log) == _bytes(pair.leader_log)
    assert pair.follower_log.leader_epoch_cache.entries == [(0, 0)]
    st = pair.fetch_state()
    assert st is not None and st.state is ReplicaState.FETCHING and st.fetch_offset == 100
    # The leader knows where the follower is.
    assert leader.remote_replicas[2].log_end_offset == 100
    # Each fetch named the follower and its epoch.
    fetch = next(r for k, r in pair.connections[0].requests if k == ApiKey.FETCH)
    assert fetch.replica_id == 2 and fetch.topics[0].partitions[0].current_leader_epoch == 0
    assert fetch.max_wait_ms == FAST.fetch_wait_max_ms and fetch.max_bytes == FAST.fetch_response_max_bytes


async def test_new_leader_truncates_the_old_leaders_divergent_suffix(pair: Pair) -> None:
    # Broker 1 leads at epoch 0; the follower (2) copies 10 records.
    pair.elect(leader=1, epoch=0, isr=[1, 2])
    old = pair.leader.get(T, 0)
    assert old is not None
    old.append(memoryview(_batch(10)), required_acks=-1)
    await eventually(lambda: pair.follower_log.log_end_offset == 10)
    # Broker 1 (out of touch) takes 5 more it alone has; then broker 2 leads at epoch 1.
    pair.follower.fetcher_manager.remove_fetcher_for_partitions([(T, 0)])
    old.append(memoryview(_batch(5)), required_acks=1)
    assert pair.leader_log.log_end_offset == 15
    pair.rms[2].become_leader_or_follower(leader_and_isr(1, T, [
        {"index": 0, "leader": 2, "leader_epoch": 1, "isr": [2], "replicas": [1, 2]}]), broker_epoch=-1)
    pair.leader_id, pair.follower_id = 2, 1
    new = pair.leader.get(T, 0)
    assert new is not None and new.is_leader
    new.append(memoryview(_batch(3)), required_acks=1)  # epoch 1 starts at 10 on the new leader
    pair.rms[1].become_leader_or_follower(leader_and_isr(1, T, [
        {"index": 0, "leader": 2, "leader_epoch": 1, "isr": [2], "replicas": [1, 2]}]), broker_epoch=-1)
    await eventually(lambda: pair.follower_log.log_end_offset == 13
                     and pair.follower_log.leader_epoch_cache.latest_epoch == 1)
    assert _bytes(pair.follower_log) == _bytes(pair.leader_log)
    assert pair.follower_log.leader_epoch_cache.entries == [(0, 0), (1, 10)]
    epochs = [r for k, r in pair.connections[-1].requests if k == ApiKey.OFFSET_FOR_LEADER_EPOCH]
    assert epochs and epochs[0].replica_id == 1
    asked = epochs[0].topics[0].partitions[0]
    assert (asked.leader_epoch, asked.current_leader_epoch) == (0, 1)


async def test_follower_without_epochs_truncates_to_its_high_watermark(pair: Pair) -> None:
    pair.lead(0, [1, 2])
    leader = pair.leader.get(T, 0)
    assert leader is not None
    leader.append(memoryview(_batch(4)), required_acks=1)
    # The follower's log holds 9 records without leader epochs, 4 of them committed.
    lg = pair.logs[2].get_or_create_log(T, 0, None, pair.logs[2].config_for(T))
    lg.append_as_follower(_batch(9, epoch=-1))
    lg.update_high_watermark(4)
    pair.follow(0)
    await eventually(lambda: pair.fetch_state() is not None and pair.fetch_state().state is ReplicaState.FETCHING)
    assert lg.log_end_offset == 4
    assert not any(k == ApiKey.OFFSET_FOR_LEADER_EPOCH for c in pair.connections for k, _ in c.requests)


async def test_out_of_range_behind_the_leaders_log_start_restarts_the_log(pair: Pair) -> None:
    pair.lead(0, [1])
    leader = pair.leader.get(T, 0)
    assert leader is not None
    for _ in range(4):
        leader.append(memoryview(_batch(5)), required_acks=1)
    leader.log.roll()
    leader.append(memoryview(_batch(5)), required_acks=1)
    leader.delete_records(20)  # the leader's log now starts at 20
    leader.log.delete_log_start_offset_breached()
    pair.follow(0)
    await eventually(lambda: pair.follower_log.log_end_offset == 25)
    assert pair.follower_log.log_start_offset == 20
    assert _bytes(pair.follower_log) == _bytes(pair.leader_log)
    assert any(k == ApiKey.LIST_OFFSETS and r.replica_id == 2 for c in pair.connections for k, r in c.requests)


async def test_follower_ahead_of_the_leader_truncates_to_the_leaders_end(pair: Pair) -> None:
    # An unclean election: the new leader has less than the follower's high watermark.
    pair.lead(0, [1])
    leader = pair.leader.get(T, 0)
    assert leader is not None
    leader.append(memoryview(_batch(10)), required_acks=1)
    lg = pair.logs[2].get_or_create_log(T, 0, None, pair.logs[2].config_for(T))
    lg.append_as_follower(_batch(20, epoch=-1))
    lg.update_high_watermark(20)
    pair.follow(0)
    await eventually(lambda: pair.fetch_state() is not None and pair.fetch_state().fetch_offset == 10
                     and pair.follower_log.log_end_offset == 10)
    leader.append(memoryview(_batch(2)), required_acks=1)
    await eventually(lambda: pair.follower_log.log_end_offset == 12)


async def test_fenced_partition_waits_for_the_next_leader_and_isr(pair: Pair) -> None:
    pair.lead(3, [1, 2])
    pair.follow(2)  # the follower was told an older epoch than the leader's
    await eventually(lambda: pair.fetch_state() is None)
    fetcher = next(iter(pair.follower.fetcher_manager.fetchers.values()))
    assert (T, 0) in fetcher.failed
    pair.follow(3)
    await eventually(lambda: pair.fetch_state() is not None and pair.fetch_state().state is ReplicaState.FETCHING)
    assert (T, 0) not in fetcher.failed


async def test_unknown_leader_epoch_is_retried_until_the_leader_catches_up(pair: Pair) -> None:
    pair.lead(0, [1, 2])
    leader = pair.leader.get(T, 0)
    assert leader is not None
    leader.append(memoryview(_batch(3)), required_acks=1)
    pair.follow(1)  # the follower heard of epoch 1 first
    await asyncio.sleep(0.2)
    assert pair.follower_log.log_end_offset == 0
    st = pair.fetch_state()
    assert st is not None and st.current_leader_epoch == 1  # still trying
    pair.lead(1, [1, 2])
    await eventually(lambda: pair.follower_log.log_end_offset == 3)


async def test_unreachable_leader_is_retried_with_back_off(pair: Pair) -> None:
    pair.unreachable = True
    pair.elect(leader=1, epoch=0, isr=[1, 2])
    leader = pair.leader.get(T, 0)
    assert leader is not None
    leader.append(memoryview(_batch(3)), required_acks=1)
    await asyncio.sleep(0.2)
    assert pair.follower_log.log_end_offset == 0
    assert pair.fetch_state() is not None and not pair.connections
    pair.unreachable = False
    await eventually(lambda: pair.follower_log.log_end_offset == 3)
    # A connection lost mid-way is replaced.
    pair.unreachable = True
    leader.append(memoryview(_batch(3)), required_acks=1)
    await asyncio.sleep(0.1)
    pair.unreachable = False
    await eventually(lambda: pair.follower_log.log_end_offset == 6)
    assert len(pair.connections) >= 2


async def test_becoming_leader_stops_fetching_and_idle_fetchers_go(pair: Pair) -> None:
    pair.elect(leader=1, epoch=0, isr=[1, 2])
    assert len(pair.follower.fetcher_manager.fetchers) == 1
    pair.rms[2].become_leader_or_follower(leader_and_isr(1, T, [
        {"index": 0, "leader": 2, "leader_epoch": 1, "isr": [2], "replicas": [1, 2]}]), broker_epoch=-1)
    assert pair.rms[2].fetcher_manager.fetch_state(T, 0) is None and pair.rms[2].fetcher_manager.fetchers == {}
    part = pair.rms[2].get(T, 0)
    assert part is not None and part.is_leader and part.leader_epoch == 1


async def test_offset_for_leader_epoch_unknown_to_the_leader_is_retried_in_one_line(
        pair: Pair, caplog: pytest.LogCaptureFixture) -> None:
    pair.elect(leader=1, epoch=0, isr=[1, 2])
    leader = pair.leader.get(T, 0)
    assert leader is not None
    leader.append(memoryview(_batch(3, epoch=0)), required_acks=1)
    await eventually(lambda: pair.follower_log.log_end_offset == 3)
    caplog.set_level("INFO", logger="kaflet.fetcher")
    pair.follow(1)  # the follower has epochs now, so it asks the leader, which is still at epoch 0
    await eventually(lambda: any("retrying OffsetForLeaderEpoch" in r.getMessage() for r in caplog.records))
    lines = [r.getMessage() for r in caplog.records if "retrying OffsetForLeaderEpoch" in r.getMessage()]
    assert lines[0].endswith("of 1 partitions, the leader answered UNKNOWN_LEADER_EPOCH: orders-0")
    pair.lead(1, [1, 2])
    leader.append(memoryview(_batch(2, epoch=1)), required_acks=1)
    await eventually(lambda: pair.follower_log.log_end_offset == 5)
