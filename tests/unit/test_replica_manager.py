"""ReplicaManager: the controller's LeaderAndIsr, StopReplica and UpdateMetadata with Kafka's
epoch rules and error codes, the leadership callbacks, and OffsetForLeaderEpoch answers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kaflet.log.log_manager import LogManager
from kaflet.metadata.metadata_cache import MetadataCache
from kaflet.metadata.zkdata import uuid_to_str
from kaflet.protocol.errors import ErrorCode as E
from kaflet.protocol.records import Record, build_batch
from kaflet.replication.config import ReplicationConfig
from kaflet.replication.delayed_produce import wait_for_acks
from kaflet.replication.partition import Partition
from kaflet.replication.replica_manager import ReplicaManager
from tests.support.replication import TOPIC_ID, leader_and_isr, stop_replica, update_metadata

T = "orders"


def _batch(n: int = 5) -> memoryview:
    return memoryview(build_batch([Record(i, 0, None, b"v") for i in range(n)], base_timestamp=1000))


def _errors(resp: Any) -> dict[int, int]:
    return {p.partition_index: p.error_code for t in resp.topics for p in t.partition_errors}


def _state(index: int, leader: int, epoch: int, isr: list[int] | None = None,
           replicas: list[int] | None = None, zk_version: int = 0) -> dict[str, Any]:
    return {"index": index, "leader": leader, "leader_epoch": epoch, "isr": isr or [1],
            "replicas": replicas or [1, 2], "zk_version": zk_version}


class Broker1:
    """Broker 1's replica manager with a metadata cache, recording its callbacks."""

    def __init__(self, tmp_path: Path) -> None:
        self.logs = LogManager([str(tmp_path)], high_watermark_checkpoints=False)
        self.logs.startup()
        self.cache = MetadataCache()
        self.rm = ReplicaManager(1, self.logs, config=ReplicationConfig(fetch_backoff_ms=20),
                                 leader_endpoint=lambda b: ("127.0.0.1", 9000 + b),
                                 partition_known=lambda t, p: self.cache.partition(t, p) is not None)
        self.rm.metadata_updater = self.cache.update_metadata
        self.changes: list[tuple[list[str], list[str]]] = []
        self.stopped: list[tuple[str, int, bool]] = []
        self.rm.on_leadership_change = lambda leaders, followers: self.changes.append(
            ([f"{p.topic}-{p.index}" for p in leaders], [f"{p.topic}-{p.index}" for p in followers]))
        self.rm.on_replicas_stopped = self.stopped.extend

    def apply(self, controller_epoch: int, states: list[dict[str, Any]], **kw: Any) -> dict[int, int]:
        resp = self.rm.become_leader_or_follower(leader_and_isr(controller_epoch, T, states, **kw), broker_epoch=50)
        assert resp.error_code == 0
        return _errors(resp)

    def part(self, index: int = 0) -> Partition:
        p = self.rm.get(T, index)
        assert p is not None
        return p


@pytest.fixture
async def b1(tmp_path: Path) -> AsyncIterator[Broker1]:
    b = Broker1(tmp_path)
    yield b
    await b.rm.stop()
    b.logs.shutdown()


async def test_leader_and_isr_creates_leads_and_follows(b1: Broker1) -> None:
    assert not b1.logs.high_watermark_checkpoints
    errors = b1.apply(3, [_state(0, 1, 5, [1, 2], zk_version=7), _state(1, 2, 2, [2, 1])])
    assert errors == {0: E.NONE, 1: E.NONE}
    lead, follow = b1.part(0), b1.part(1)
    assert lead.is_leader and (lead.leader_epoch, lead.isr, lead.zk_version, lead.controller_epoch) == (5, [1, 2], 7, 3)
    assert set(lead.remote_replicas) == {2} and lead.log.latest_epoch() == 5
    assert not follow.is_leader and (follow.leader, follow.leader_epoch) == (2, 2)
    assert lead.log.topic_id == uuid_to_str(TOPIC_ID.bytes)
    st = b1.rm.fetcher_manager.fetch_state(T, 1)
    assert st is not None and st.current_leader_epoch == 2 and st.fetch_offset == 0
    assert b1.rm.fetcher_manager.fetch_state(T, 0) is None
    assert b1.changes == [([f"{T}-0"], [f"{T}-1"])]
    assert b1.logs.high_watermark_checkpoints  # the first LeaderAndIsr started them
    assert b1.rm.controller_epoch == 3


async def test_logs_of_a_leader_and_isr_are_created_before_it_is_applied(b1: Broker1) -> None:
    states = [_state(0, 1, 1), _state(1, 2, 1), _state(2, 2, 1, replicas=[2, 3])]
    await b1.rm.create_logs(leader_and_isr(3, T, states, broker_epoch=49), broker_epoch=50)  # stale: nothing
    assert b1.logs.all_logs() == {}
    await b1.rm.create_logs(leader_and_isr(3, "../escape", [_state(0, 1, 1)]), broker_epoch=50)
    await b1.rm.create_logs(leader_and_isr(3, T, states), broker_epoch=50)
    made = b1.logs.all_logs()
    assert set(made) == {(T, 0), (T, 1)}  # not partition 2: broker 1 is not among its replicas
    assert b1.rm.get(T, 0) is None  # only the logs: the request is applied next
    assert b1.apply(3, states) == {0: E.NONE, 1: E.NONE, 2: E.UNKNOWN_TOPIC_OR_PARTITION}
    assert b1.part(0).log is made[(T, 0)] and b1.part(1).log is made[(T, 1)]
    assert made[(T, 0)].topic_id == uuid_to_str(TOPIC_ID.bytes)


async def test_stale_and_foreign_partition_states_get_kafkas_errors(b1: Broker1) -> None:
    b1.apply(3, [_state(0, 1, 5)])
    errors = b1.apply(3, [_state(0, 1, 5), _state(1, 1, 0, replicas=[2, 3])])
    # The same epoch again and an older one: STALE_CONTROLLER_EPOCH (Kafka's code for both).
    assert errors == {0: E.STALE_CONTROLLER_EPOCH, 1: E.UNKNOWN_TOPIC_OR_PARTITION}
    assert b1.apply(3, [_state(0, 1, 4)]) == {0: E.STALE_CONTROLLER_EPOCH}
    assert b1.rm.get(T, 1) is None and b1.logs.get_log(T, 1) is None
    assert b1.part().leader_epoch == 5
    # Names no topic can have never become directories.
    bad = b1.rm.become_leader_or_follower(leader_and_isr(3, "../escape", [_state(0, 1, 1), _state(-1, 1, 1)]),
                                          broker_epoch=50)
    assert _errors(bad) == {0: E.UNKNOWN_TOPIC_OR_PARTITION, -1: E.UNKNOWN_TOPIC_OR_PARTITION}
    assert b1.apply(3, [_state(-1, 1, 1)]) == {-1: E.UNKNOWN_TOPIC_OR_PARTITION}
    assert b1.logs.all_logs().keys() == {(T, 0)}
    # A topic id other than the log's.
    assert b1.apply(3, [_state(0, 1, 6)], topic_id=uuid.UUID(int=42)) == {0: E.INCONSISTENT_TOPIC_ID}
    assert b1.changes == [([f"{T}-0"], [])]  # nothing changed after the first


async def test_stale_controller_and_broker_epochs_are_refused_whole(b1: Broker1) -> None:
    b1.apply(4, [_state(0, 1, 1)])
    old = b1.rm.become_leader_or_follower(leader_and_isr(3, T, [_state(0, 2, 9)]), broker_epoch=50)
    assert old.error_code == E.STALE_CONTROLLER_EPOCH and _errors(old) == {0: E.STALE_CONTROLLER_EPOCH}
    stale = b1.rm.become_leader_or_follower(leader_and_isr(5, T, [_state(0, 2, 9)], broker_epoch=49), broker_epoch=50)
    assert stale.error_code == E.STALE_BROKER_EPOCH and _errors(stale) == {0: E.STALE_BROKER_EPOCH}
    assert b1.part().is_leader and b1.rm.controller_epoch == 4
    # A newer broker epoch than this broker knows is accepted (the controller saw it first).
    newer = b1.rm.become_leader_or_follower(leader_and_isr(5, T, [_state(0, 1, 2)], broker_epoch=51), broker_epoch=50)
    assert newer.error_code == E.NONE and b1.part().leader_epoch == 2
    um = b1.rm.maybe_update_metadata_cache(update_metadata(4, [(1, "h", 1)]), broker_epoch=50)
    assert um.error_code == E.STALE_CONTROLLER_EPOCH
    um = b1.rm.maybe_update_metadata_cache(update_metadata(5, [(1, "h", 1)], broker_epoch=10), broker_epoch=50)
    assert um.error_code == E.STALE_BROKER_EPOCH
    sr = b1.rm.stop_replicas(stop_replica(4, T, [(0, 9, True)]), broker_epoch=50)
    assert sr.error_code == E.STALE_CONTROLLER_EPOCH and sr.partition_errors == []
    sr = b1.rm.stop_replicas(stop_replica(5, T, [(0, 9, True)], broker_epoch=3), broker_epoch=50)
    assert sr.error_code == E.STALE_BROKER_EPOCH
    assert b1.rm.get(T, 0) is not None and b1.cache.brokers == {}


async def test_update_metadata_fills_the_cache_and_records_the_epoch(b1: Broker1) -> None:
    um = b1.rm.maybe_update_metadata_cache(update_metadata(7, [(1, "h1", 1), (2, "h2", 2)], T, [
        _state(0, 1, 1, [1, 2])]), broker_epoch=50)
    assert um.error_code == E.NONE and b1.rm.controller_epoch == 7
    assert set(b1.cache.brokers) == {1, 2} and b1.cache.partition(T, 0).isr == [1, 2]  # type: ignore[union-attr]
    late = b1.rm.become_leader_or_follower(leader_and_isr(6, T, [_state(0, 1, 1)]), broker_epoch=50)
    assert late.error_code == E.STALE_CONTROLLER_EPOCH and b1.rm.get(T, 0) is None


async def test_follower_waits_when_its_leader_is_unknown(b1: Broker1) -> None:
    b1.rm._leader_endpoint = lambda b: None
    assert b1.apply(1, [_state(0, 2, 1, [2])]) == {0: E.NONE}
    # The log exists (its high watermark is checkpointed) but it follows no one yet.
    assert b1.logs.get_log(T, 0) is not None and b1.rm.fetcher_manager.fetch_state(T, 0) is None
    assert b1.changes == []
    # The request's live leaders name it: that is enough.
    assert b1.apply(1, [_state(0, 2, 2, [2])], live_leaders=[(2, "127.0.0.1", 9002)]) == {0: E.NONE}
    assert b1.rm.fetcher_manager.fetch_state(T, 0) is not None


async def test_losing_leadership_answers_waiting_acks(b1: Broker1) -> None:
    b1.apply(1, [_state(0, 1, 1, [1, 2])])
    r = b1.part().append(_batch(), required_acks=-1)
    waiting = asyncio.create_task(wait_for_acks([(b1.part(), r.last_offset + 1)], 10_000))
    await asyncio.sleep(0)
    b1.apply(1, [_state(0, 2, 2, [2])])
    assert await asyncio.wait_for(waiting, 5) == [E.NOT_LEADER_OR_FOLLOWER]
    assert b1.changes[-1] == ([], [f"{T}-0"])


async def test_stop_replica_epoch_rules_and_deletion(b1: Broker1) -> None:
    b1.apply(1, [_state(0, 1, 3), _state(1, 1, 3), _state(2, 2, 3, [2])])
    resp = b1.rm.stop_replicas(stop_replica(1, T, [(0, 2, True), (1, 2, True), (2, 4, False), (3, -1, True)]),
                               broker_epoch=50)
    errors = {p.partition_index: p.error_code for p in resp.partition_errors}
    # An older leader epoch: FENCED_LEADER_EPOCH; the same (Kafka 3.4+), newer, none (-1) or not
    # hosted: stopped.
    assert resp.error_code == E.NONE
    assert errors == {0: E.FENCED_LEADER_EPOCH, 1: E.FENCED_LEADER_EPOCH, 2: E.NONE, 3: E.NONE}
    same = b1.rm.stop_replicas(stop_replica(1, T, [(2, 3, False)]), broker_epoch=50)
    assert [p.error_code for p in same.partition_errors] == [E.NONE]
    assert b1.rm.fetcher_manager.fetch_state(T, 2) is None  # stopped, not deleted
    assert b1.rm.get(T, 2) is not None and b1.logs.get_log(T, 2) is not None
    # Deletion during topic deletion (-2) overrides any epoch.
    lg_dir = b1.part(0).log.dir
    resp = b1.rm.stop_replicas(stop_replica(2, T, [(0, -2, True), (1, -2, True)]), broker_epoch=50)
    assert {p.partition_index: p.error_code for p in resp.partition_errors} == {0: E.NONE, 1: E.NONE}
    assert b1.rm.get(T, 0) is None and b1.logs.get_log(T, 0) is None and not Path(lg_dir).exists()
    assert (T, 0, True) in b1.stopped and (T, 2, False) in b1.stopped


async def test_stop_replica_delete_answers_waiters_from_the_metadata_cache(b1: Broker1) -> None:
    b1.apply(1, [_state(0, 1, 1, [1, 2])])
    r = b1.part().append(_batch(), required_acks=-1)
    waiting = asyncio.create_task(wait_for_acks([(b1.part(), r.last_offset + 1)], 10_000))
    await asyncio.sleep(0)
    b1.rm.stop_replicas(stop_replica(1, T, [(0, -2, True)]), broker_epoch=50)
    assert await asyncio.wait_for(waiting, 5) == [E.UNKNOWN_TOPIC_OR_PARTITION]


async def test_offset_for_leader_epoch_is_answered_by_the_leader(b1: Broker1) -> None:
    b1.apply(1, [_state(0, 1, 2), _state(1, 2, 2, [2])])
    part = b1.part()
    part.append(_batch(5), required_acks=1)
    b1.apply(1, [_state(0, 1, 4)])  # epoch 4 starts at 5
    part.append(_batch(3), required_acks=1)
    rm = b1.rm
    assert rm.last_offset_for_leader_epoch(T, 0, -1, 2) == (E.NONE, 2, 5)
    assert rm.last_offset_for_leader_epoch(T, 0, 4, 3) == (E.NONE, 2, 5)  # largest epoch <= 3 is 2
    assert rm.last_offset_for_leader_epoch(T, 0, 4, 4) == (E.NONE, 4, 8)  # current epoch: the LEO
    assert rm.last_offset_for_leader_epoch(T, 0, -1, 1) == (E.NONE, 1, 0)  # below all: first epoch's start
    assert rm.last_offset_for_leader_epoch(T, 0, -1, -1) == (E.NONE, -1, -1)
    assert rm.last_offset_for_leader_epoch(T, 0, 3, 2)[0] == E.FENCED_LEADER_EPOCH
    assert rm.last_offset_for_leader_epoch(T, 0, 5, 2)[0] == E.UNKNOWN_LEADER_EPOCH
    assert rm.last_offset_for_leader_epoch(T, 1, -1, 2)[0] == E.NOT_LEADER_OR_FOLLOWER  # a follower here
    assert rm.last_offset_for_leader_epoch(T, 9, -1, 2)[0] == E.UNKNOWN_TOPIC_OR_PARTITION
    b1.rm.maybe_update_metadata_cache(update_metadata(1, [(1, "h", 1)], T, [_state(9, 2, 1)]), broker_epoch=50)
    assert rm.last_offset_for_leader_epoch(T, 9, -1, 2)[0] == E.NOT_LEADER_OR_FOLLOWER  # known, not hosted


async def test_periodic_isr_shrink_only_touches_led_partitions(tmp_path: Path) -> None:
    from kaflet.metadata import zkdata
    from kaflet.metadata.embedded import EmbeddedTree
    from kaflet.replication.isr import ZkIsrManager

    tree = await EmbeddedTree.open(tmp_path / "meta")
    logs = LogManager([str(tmp_path / "logs")])
    logs.startup()
    clock = [1_000_000]
    rm = ReplicaManager(1, logs, isr_writer=ZkIsrManager(tree), now_ms=lambda: clock[0],
                        config=ReplicationConfig(replica_lag_time_max_ms=100, fetch_wait_max_ms=50))
    try:
        for p in (0, 1):
            await tree.create(zkdata.partition_state_path(T, p), zkdata.partition_state_json(
                zkdata.LeaderAndIsr(1 if p == 0 else 2, 1, [1, 2], 1)), make_parents=True)
        rm.become_leader_or_follower(leader_and_isr(1, T, [_state(0, 1, 1, [1, 2]), _state(1, 2, 1, [2, 1])]),
                                     broker_epoch=-1)
        lead = rm.get(T, 0)
        assert lead is not None
        lead.append(_batch(), required_acks=1)
        rm.start()  # every replica.lag.time.max.ms / 2
        clock[0] += 101
        for _ in range(100):
            await asyncio.sleep(0.02)
            if lead.isr == [1]:
                break
        assert lead.isr == [1] and lead.zk_version == 1
        assert zkdata.parse_partition_state((await tree.get(zkdata.partition_state_path(T, 0)))[0]).isr == [1]
        follower = rm.get(T, 1)
        assert follower is not None and follower.pending_isr is None
        assert zkdata.parse_partition_state((await tree.get(zkdata.partition_state_path(T, 1)))[0]).isr == [1, 2]
    finally:
        await rm.stop()
        logs.shutdown()
        await tree.close()
