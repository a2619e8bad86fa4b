"""The leader's side of replication without sockets: replica tracking, the high watermark rule,
and the delayed produce (acks=all) completed by the high watermark."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kaflet.log.config import LogConfig
from kaflet.log.log import Log
from kaflet.protocol.errors import ErrorCode as E
from kaflet.protocol.errors import KafkaError
from kaflet.protocol.records import Record, build_batch
from kaflet.replication.delayed_produce import HighWatermarkWaiters, wait_for_acks
from kaflet.replication.partition import UNKNOWN_OFFSET, Partition, Replica
from tests.support.replication import Clock

LAG = 30_000


def _batch(n: int = 5) -> memoryview:
    return memoryview(build_batch([Record(i, 0, None, b"v%d" % i) for i in range(n)], base_timestamp=1000))


def _partition(tmp_path: Path, replicas: list[int], isr: list[int], clock: Clock | None = None,
               **config: str) -> Partition:
    log = Log(str(tmp_path / "t-0"), LogConfig.from_props(config))
    part = Partition("t", 0, "AAAAAAAAAAAAAAAAAAAAAA", log, broker_id=1, replica_lag_time_max_ms=LAG,
                     now_ms=clock or Clock())
    part.make_leader(0, replicas, isr)
    return part


# ---------------------------------------------------------------- replica state


def test_replica_last_caught_up_time_follows_kafkas_rule() -> None:
    r = Replica(2)
    assert (r.log_end_offset, r.log_start_offset) == (UNKNOWN_OFFSET, UNKNOWN_OFFSET)
    r.update_fetch_state(10, 0, fetch_time_ms=100, leader_end_offset=10)  # has all the leader has
    assert (r.log_end_offset, r.last_caught_up_time_ms, r.last_fetch_time_ms) == (10, 100, 100)
    # Behind the leader's end now, but it has what the leader had at its previous fetch (10):
    # caught up as of that previous fetch.
    r.update_fetch_state(12, 3, fetch_time_ms=200, leader_end_offset=20)
    assert (r.log_end_offset, r.log_start_offset, r.last_caught_up_time_ms) == (12, 3, 100)
    r.update_fetch_state(20, 3, fetch_time_ms=300, leader_end_offset=30)
    assert r.last_caught_up_time_ms == 200
    r.update_fetch_state(25, 3, fetch_time_ms=400, leader_end_offset=40)  # below 30: no progress
    assert r.last_caught_up_time_ms == 200
    assert r.is_caught_up(40, 200 + LAG, LAG) and not r.is_caught_up(40, 201 + LAG, LAG)
    assert r.is_caught_up(25, 10**9, LAG)  # same end offset as the leader

    r.reset(now_ms=500, leader_end_offset=40, is_new_leader=False, in_sync=True)
    assert (r.log_end_offset, r.last_fetch_leader_log_end_offset, r.last_fetch_time_ms,
            r.last_caught_up_time_ms) == (25, 40, 500, 500)
    r.reset(now_ms=600, leader_end_offset=40, is_new_leader=True, in_sync=False)
    assert (r.log_end_offset, r.log_start_offset, r.last_caught_up_time_ms) == (UNKNOWN_OFFSET, UNKNOWN_OFFSET, 0)


# ---------------------------------------------------------------- high watermark


def test_leader_alone_in_the_isr_commits_each_append(tmp_path: Path) -> None:
    part = _partition(tmp_path, [1], [1])
    r = part.append(_batch(), required_acks=-1)
    assert (r.last_offset, part.log.high_watermark) == (4, 5)
    part.append(_batch(3), required_acks=1)
    assert part.log.high_watermark == part.log.log_end_offset == 8


def test_high_watermark_is_the_smallest_end_offset_in_the_isr(tmp_path: Path) -> None:
    part = _partition(tmp_path, [1, 2, 3], [1, 2, 3])
    assert set(part.remote_replicas) == {2, 3}
    part.append(_batch(10), required_acks=-1)
    assert part.log.high_watermark == 0  # followers' offsets unknown until they fetch
    assert not part.update_follower_fetch_state(2, 6, 0, now_ms=1_000_100)
    assert part.log.high_watermark == 0  # replica 3 has not fetched yet
    assert part.update_follower_fetch_state(3, 10, 0, now_ms=1_000_100)
    assert part.log.high_watermark == 6
    assert part.update_follower_fetch_state(2, 10, 0, now_ms=1_000_200)
    assert part.log.high_watermark == 10
    # A follower that went back (it truncated) never moves the high watermark down.
    assert not part.update_follower_fetch_state(2, 4, 0, now_ms=1_000_300)
    assert part.log.high_watermark == 10
    assert part.remote_replicas[2].log_end_offset == 4


def test_waiting_fetches_are_woken_by_what_they_read_up_to(tmp_path: Path) -> None:
    part = _partition(tmp_path, [1, 2, 3], [1, 2, 3])
    woken: list[str] = []

    def waiter(name: str, follower: bool) -> None:
        part.data_waiter(lambda p: woken.append(name), follower)

    waiter("follower", True)
    waiter("consumer", False)
    # An append grows what followers read (the log end), not what consumers read (the HW).
    part.append(_batch(10), required_acks=-1)
    assert woken == ["follower"]
    waiter("follower", True)
    part.update_follower_fetch_state(2, 10, 0, now_ms=1_000_100)
    assert woken == ["follower"]  # the HW waits for replica 3
    part.update_follower_fetch_state(3, 10, 0, now_ms=1_000_100)
    assert part.log.high_watermark == 10 and woken == ["follower", "consumer"]
    # A leadership change wakes everyone, once.
    waiter("consumer", False)
    part.make_follower(2, 1, [1, 2, 3])
    assert sorted(woken[2:]) == ["consumer", "follower"]
    part.close(E.NOT_LEADER_OR_FOLLOWER)
    assert len(woken) == 4


def test_a_follower_log_start_wakes_deletes_not_fetches(tmp_path: Path) -> None:
    part = _partition(tmp_path, [1, 2], [1, 2])
    woken: list[str] = []
    part.data_waiter(lambda p: woken.append("follower"), True)
    part.data_waiter(lambda p: woken.append("consumer"), False)
    part.log_start_waiter(lambda p: woken.append("delete"))
    part.update_follower_fetch_state(2, 0, 0, now_ms=1_000_100)  # first report of its log start
    assert woken == ["delete"]
    part.log_start_waiter(lambda p: woken.append("delete"))
    part.update_follower_fetch_state(2, 0, 0, now_ms=1_000_200)  # unchanged: nobody
    assert woken == ["delete"]
    part.close(E.NOT_LEADER_OR_FOLLOWER)
    assert sorted(woken) == ["consumer", "delete", "delete", "follower"]


def test_caught_up_follower_outside_the_isr_is_waited_for(tmp_path: Path) -> None:
    clock = Clock()
    part = _partition(tmp_path, [1, 2], [1], clock)
    part.append(_batch(10), required_acks=-1)
    assert part.log.high_watermark == 10  # replica 2 is not in sync: not waited for
    part.update_follower_fetch_state(2, 10, 0, now_ms=clock.now)  # now caught up
    part.append(_batch(5), required_acks=-1)
    assert part.log.high_watermark == 10  # it is about to join the ISR: wait for it
    assert part.update_follower_fetch_state(2, 15, 0, now_ms=clock.now + 10)
    assert part.log.high_watermark == 15
    part.append(_batch(5), required_acks=-1)
    clock.now += LAG + 11  # it fell behind for longer than replica.lag.time.max.ms
    assert part.maybe_increment_high_watermark()
    assert part.log.high_watermark == 20


def test_follower_fetch_errors(tmp_path: Path) -> None:
    part = _partition(tmp_path, [1, 2], [1, 2])
    with pytest.raises(KafkaError) as err:
        part.update_follower_fetch_state(7, 0, 0, now_ms=0)  # not an assigned replica
    assert err.value.code == E.NOT_LEADER_OR_FOLLOWER
    assert part.make_follower(2, 1, [1, 2])
    assert not part.is_leader and part.remote_replicas == {} and part.isr == []
    with pytest.raises(KafkaError) as err:
        part.update_follower_fetch_state(2, 0, 0, now_ms=0)
    assert err.value.code == E.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(KafkaError):
        part.append(_batch(), required_acks=1)


def test_new_leader_epoch_resets_followers_and_stale_epochs_are_ignored(tmp_path: Path) -> None:
    clock = Clock()
    part = _partition(tmp_path, [1, 2], [1, 2], clock)
    part.append(_batch(10), required_acks=-1)
    part.update_follower_fetch_state(2, 10, 0, now_ms=clock.now)
    assert part.log.high_watermark == 10
    clock.now += 5
    part.make_leader(1, [1, 2], [1, 2])  # re-elected: the follower's position is kept
    assert part.leader_epoch == 1 and part.remote_replicas[2].log_end_offset == 10
    assert part.remote_replicas[2].last_caught_up_time_ms == clock.now
    assert part.log.latest_epoch() == 1
    assert not part.make_leader(0, [1], [1])  # an older epoch changes nothing
    assert part.leader_epoch == 1 and part.isr == [1, 2]
    part.make_follower(2, 2, [1, 2])
    part.make_leader(3, [1, 2], [1, 2])  # leader again after following: positions unknown
    assert part.remote_replicas[2].log_end_offset == UNKNOWN_OFFSET
    part.append(_batch(), required_acks=-1)
    assert part.log.high_watermark == 10  # held by the ISR follower until it fetches


# ---------------------------------------------------------------- delayed produce


async def test_acks_all_answered_at_once_when_the_leader_is_the_isr(tmp_path: Path) -> None:
    part = _partition(tmp_path, [1], [1])
    r = part.append(_batch(), required_acks=-1)
    assert await wait_for_acks([(part, r.last_offset + 1)], 0) == [E.NONE]
    assert part.waiting_for_acks == 0


async def test_acks_all_completes_when_the_follower_catches_up(tmp_path: Path) -> None:
    part = _partition(tmp_path, [1, 2], [1, 2])
    r1 = part.append(_batch(), required_acks=-1)
    r2 = part.append(_batch(), required_acks=-1)
    first = asyncio.create_task(wait_for_acks([(part, r1.last_offset + 1)], 10_000))
    second = asyncio.create_task(wait_for_acks([(part, r2.last_offset + 1)], 10_000))
    await asyncio.sleep(0)
    assert part.waiting_for_acks == 2 and not first.done()
    part.update_follower_fetch_state(2, r1.last_offset + 1, 0, now_ms=1_000_100)  # covers the first only
    assert await first == [E.NONE]
    await asyncio.sleep(0)
    assert not second.done() and part.waiting_for_acks == 1
    part.update_follower_fetch_state(2, r2.last_offset + 1, 0, now_ms=1_000_200)
    assert await second == [E.NONE]
    assert part.waiting_for_acks == 0


async def test_acks_all_times_out_per_partition(tmp_path: Path) -> None:
    lone = _partition(tmp_path / "a", [1], [1])
    stuck = _partition(tmp_path / "b", [1, 2], [1, 2])
    ra = lone.append(_batch(), required_acks=-1)
    rb = stuck.append(_batch(), required_acks=-1)
    got = await wait_for_acks([(lone, ra.last_offset + 1), (stuck, rb.last_offset + 1)], 50)
    assert got == [E.NONE, E.REQUEST_TIMED_OUT]
    assert stuck.waiting_for_acks == 0  # the timed-out waiter left the partition
    assert await wait_for_acks([(stuck, rb.last_offset + 1)], 0) == [E.REQUEST_TIMED_OUT]


async def test_leadership_lost_while_waiting(tmp_path: Path) -> None:
    part = _partition(tmp_path, [1, 2], [1, 2])
    r = part.append(_batch(), required_acks=-1)
    task = asyncio.create_task(wait_for_acks([(part, r.last_offset + 1)], 10_000))
    await asyncio.sleep(0)
    part.make_follower(2, 1, [1, 2])
    assert await asyncio.wait_for(task, 5) == [E.NOT_LEADER_OR_FOLLOWER]
    assert part.waiting_for_acks == 0
    assert await wait_for_acks([(part, r.last_offset + 1)], 10_000) == [E.NOT_LEADER_OR_FOLLOWER]


async def test_isr_below_min_insync_replicas_when_the_high_watermark_arrives(tmp_path: Path) -> None:
    clock = Clock()
    part = _partition(tmp_path, [1, 2], [1, 2], clock, **{"min.insync.replicas": "2"})
    r = part.append(_batch(), required_acks=-1)
    task = asyncio.create_task(wait_for_acks([(part, r.last_offset + 1)], 10_000))
    await asyncio.sleep(0)
    # The follower stopped fetching; the controller shrinks the ISR to the leader.
    clock.now += LAG + 1
    assert part.make_leader(0, [1, 2], [1])
    assert await asyncio.wait_for(task, 5) == [E.NOT_ENOUGH_REPLICAS_AFTER_APPEND]
    with pytest.raises(KafkaError) as err:  # and new acks=all appends are refused up front
        part.append(_batch(), required_acks=-1)
    assert err.value.code == E.NOT_ENOUGH_REPLICAS


async def test_cancelled_request_leaves_no_waiter(tmp_path: Path) -> None:
    part = _partition(tmp_path, [1, 2], [1, 2])
    r = part.append(_batch(), required_acks=-1)
    task = asyncio.create_task(wait_for_acks([(part, r.last_offset + 1)], 10_000))
    await asyncio.sleep(0)
    assert part.waiting_for_acks == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert part.waiting_for_acks == 0


async def test_waiters_complete_in_offset_order_and_stay_bounded() -> None:
    w = HighWatermarkWaiters()
    late, early = w.add(10), w.add(5)
    w.complete_up_to(7, E.NONE)
    assert early.result() == E.NONE and not late.done() and len(w) == 1
    # A partition whose high watermark is stuck: timed-out waiters do not pile up.
    stale = [w.add(100 + i) for i in range(500)]
    for fut in stale:
        w.drop(fut)
    assert len(w) == 1 and len(w._heap) < 64
    w.complete_all(E.NOT_LEADER_OR_FOLLOWER)
    assert late.result() == E.NOT_LEADER_OR_FOLLOWER and len(w) == 0 and w._heap == []
