"""ISR shrink and expand by the leader, written to the partition state znode (Kafka 2.8's
ZooKeeper mode), and the ISR change notifications, on the embedded metadata tree."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kaflet.log.config import LogConfig
from kaflet.log.log import Log
from kaflet.metadata import zkdata
from kaflet.metadata.embedded import EmbeddedTree
from kaflet.metadata.tree import MetadataTree
from kaflet.protocol.records import Record, build_batch
from kaflet.replication.isr import IsrChangePropagationConfig, ZkIsrManager
from kaflet.replication.partition import Partition
from tests.support.replication import Clock

LAG = 30_000
STATE = zkdata.partition_state_path("t", 0)


def _batch(n: int = 5) -> memoryview:
    return memoryview(build_batch([Record(i, 0, None, b"v%d" % i) for i in range(n)], base_timestamp=1000))


@pytest.fixture
async def tree(tmp_path: Path) -> AsyncIterator[MetadataTree]:
    t = await EmbeddedTree.open(tmp_path / "meta")
    yield t
    await t.close()


async def _state_node(tree: MetadataTree, isr: list[int], leader_epoch: int = 0) -> int:
    """The controller's write of the partition state; returns its version (the zk_version)."""
    await tree.create(STATE, zkdata.partition_state_json(zkdata.LeaderAndIsr(1, leader_epoch, isr, 3)),
                      make_parents=True)
    return (await tree.get(STATE))[1].version


async def _settle(manager: ZkIsrManager) -> None:
    for _ in range(50):
        await asyncio.sleep(0)
        if not manager._writes:
            return
    await asyncio.gather(*manager._writes)


def _leader(tmp_path: Path, manager: ZkIsrManager, clock: Clock, replicas: list[int], isr: list[int],
            zk_version: int) -> Partition:
    log = Log(str(tmp_path / "t-0"), LogConfig.from_props({}))
    part = Partition("t", 0, "AAAAAAAAAAAAAAAAAAAAAA", log, broker_id=1, replica_lag_time_max_ms=LAG, now_ms=clock,
                     isr_writer=manager)
    part.make_leader(0, replicas, isr, zk_version=zk_version, controller_epoch=3)
    return part


async def test_lagging_follower_leaves_the_isr_and_the_change_is_written(tmp_path: Path, tree: MetadataTree) -> None:
    clock = Clock()
    manager = ZkIsrManager(tree, now_ms=clock)
    version = await _state_node(tree, [1, 2, 3])
    part = _leader(tmp_path, manager, clock, [1, 2, 3], [1, 2, 3], version)
    part.append(_batch(10), required_acks=1)
    part.update_follower_fetch_state(2, 10, 0, now_ms=clock.now)
    part.update_follower_fetch_state(3, 4, 0, now_ms=clock.now)
    assert part.log.high_watermark == 4
    assert part.out_of_sync_replicas(LAG) == set()  # 3 is behind, but not for long
    clock.now += LAG + 1
    part.update_follower_fetch_state(2, 10, 0, now_ms=clock.now)  # 2 keeps up
    assert part.out_of_sync_replicas(LAG) == {3}
    assert part.maybe_shrink_isr()
    # Pending: the high watermark still counts 3 until the write is answered (maximal ISR).
    assert part.pending_isr is not None and part.isr == [1, 2, 3] and part.log.high_watermark == 4
    assert not part.maybe_shrink_isr()  # one change at a time
    await _settle(manager)
    assert part.isr == [1, 2] and part.pending_isr is None and part.zk_version == version + 1
    assert part.log.high_watermark == 10  # no longer held back by 3
    data, stat = await tree.get(STATE)
    assert json.loads(data) == {"controller_epoch": 3, "leader": 1, "version": 1, "leader_epoch": 0, "isr": [1, 2]}
    assert stat.version == version + 1
    assert manager.isr_change_set == {("t", 0)}


async def test_follower_joins_the_isr_once_at_the_high_watermark_in_this_epoch(tmp_path: Path,
                                                                              tree: MetadataTree) -> None:
    clock = Clock()
    manager = ZkIsrManager(tree, now_ms=clock)
    part = _leader(tmp_path, manager, clock, [1, 2], [1], await _state_node(tree, [1]))
    part.append(_batch(10), required_acks=1)
    part.make_leader(1, [1, 2], [1], zk_version=part.zk_version, controller_epoch=3)  # epoch 1 starts at 10
    part.append(_batch(5), required_acks=1)
    assert part.log.high_watermark == 15  # 2 is not in the ISR and not caught up
    part.update_follower_fetch_state(2, 8, 0, now_ms=clock.now)
    assert part.pending_isr is None  # below the high watermark
    # Reaching the high watermark: added. (Its epoch-1 data starts at 10 <= 15.)
    part.update_follower_fetch_state(2, 15, 0, now_ms=clock.now)
    assert part.pending_isr is not None and part.pending_isr.expand
    assert part.maximal_isr == {1, 2} and part.isr == [1]
    part.append(_batch(5), required_acks=1)
    assert part.log.high_watermark == 15  # a pending expansion already holds the high watermark
    await _settle(manager)
    assert part.isr == [1, 2] and part.pending_isr is None
    assert json.loads((await tree.get(STATE))[0])["isr"] == [1, 2]


async def test_follower_behind_the_epoch_start_does_not_join(tmp_path: Path, tree: MetadataTree) -> None:
    clock = Clock()
    manager = ZkIsrManager(tree, now_ms=clock)
    part = _leader(tmp_path, manager, clock, [1, 2], [1], await _state_node(tree, [1]))
    part.append(_batch(10), required_acks=1)
    part.make_leader(1, [1, 2], [1], zk_version=part.zk_version)  # epoch 1 starts at 10
    part.log.update_high_watermark(4)  # as if the new leader's high watermark lagged
    part.update_follower_fetch_state(2, 6, 0, now_ms=clock.now)  # >= HW, but not in epoch 1 yet
    assert part.pending_isr is None and part.isr == [1]


async def test_version_conflict_gives_the_change_up_until_the_next_leader_and_isr(tmp_path: Path,
                                                                                   tree: MetadataTree) -> None:
    clock = Clock()
    manager = ZkIsrManager(tree, now_ms=clock)
    version = await _state_node(tree, [1, 2])
    part = _leader(tmp_path, manager, clock, [1, 2], [1, 2], version)
    # The controller changed the state meanwhile (say a reassignment): the leader's version is old.
    await tree.set(STATE, zkdata.partition_state_json(zkdata.LeaderAndIsr(1, 0, [1, 2], 4)), version)
    part.append(_batch(5), required_acks=1)
    clock.now += LAG + 1
    assert part.maybe_shrink_isr()
    await _settle(manager)
    assert part.isr == [1, 2] and part.pending_isr is not None  # given up, still pending
    assert not part.maybe_shrink_isr()
    assert manager.isr_change_set == set()
    assert json.loads((await tree.get(STATE))[0])["isr"] == [1, 2]
    # The controller's next LeaderAndIsr settles the state; the shrink can then happen.
    part.make_leader(0, [1, 2], [1, 2], zk_version=version + 1, controller_epoch=4)
    assert part.pending_isr is None
    clock.now += LAG + 1
    assert part.maybe_shrink_isr()
    await _settle(manager)
    assert part.isr == [1] and json.loads((await tree.get(STATE))[0])["isr"] == [1]


async def test_missing_state_znode_is_harmless(tmp_path: Path, tree: MetadataTree) -> None:
    clock = Clock()
    manager = ZkIsrManager(tree, now_ms=clock)
    part = _leader(tmp_path, manager, clock, [1, 2], [1, 2], 0)  # no state node at all
    part.append(_batch(5), required_acks=1)
    clock.now += LAG + 1
    assert part.maybe_shrink_isr()
    await _settle(manager)
    assert part.isr == [1, 2] and part.is_leader
    assert await tree.exists(STATE) is None


async def test_repeated_write_that_went_through_counts_as_success(tree: MetadataTree) -> None:
    manager = ZkIsrManager(tree)
    version = await _state_node(tree, [1, 2])
    state = zkdata.LeaderAndIsr(1, 0, [1], 3, zk_version=version)
    assert await manager.update_leader_and_isr("t", 0, state) == version + 1
    # The same write again at the old version (a retry after a lost answer): Kafka's checker
    # reads the node back, finds what was written, and reports its version.
    assert await manager.update_leader_and_isr("t", 0, state) == version + 1
    other = zkdata.LeaderAndIsr(1, 0, [1, 2], 3, zk_version=version)
    assert await manager.update_leader_and_isr("t", 0, other) is None


async def test_isr_change_notifications_linger_and_batch(tree: MetadataTree) -> None:
    clock = Clock()
    cfg = IsrChangePropagationConfig(check_interval_ms=10, linger_ms=5000, max_delay_ms=60000)
    manager = ZkIsrManager(tree, cfg, now_ms=clock)
    for p in (0, 1):
        await tree.create(zkdata.partition_state_path("t", p),
                          zkdata.partition_state_json(zkdata.LeaderAndIsr(1, 0, [1, 2], 3)), make_parents=True)
    await tree.ensure_path(zkdata.ISR_CHANGE_NOTIFICATION_PATH)
    done: list[int | None] = []
    manager.submit("t", 0, zkdata.LeaderAndIsr(1, 0, [1], 3, zk_version=0), done.append)
    await _settle(manager)
    assert done == [1]
    assert not await manager.maybe_propagate_isr_changes()  # a change came in less than 5 s ago
    clock.now += 3000
    manager.submit("t", 1, zkdata.LeaderAndIsr(1, 0, [1], 3, zk_version=0), done.append)
    await _settle(manager)
    clock.now += 4000
    assert not await manager.maybe_propagate_isr_changes()  # the second change restarted the linger
    clock.now += 1001
    assert await manager.maybe_propagate_isr_changes()
    children = await tree.children(zkdata.ISR_CHANGE_NOTIFICATION_PATH)
    assert children == ["isr_change_0000000000"]
    data, _ = await tree.get(f"{zkdata.ISR_CHANGE_NOTIFICATION_PATH}/{children[0]}")
    assert json.loads(data) == {"version": 1, "partitions": [{"topic": "t", "partition": 0},
                                                             {"topic": "t", "partition": 1}]}
    assert zkdata.parse_partition_list(data) == {("t", 0), ("t", 1)}
    assert not await manager.maybe_propagate_isr_changes()  # nothing new


async def test_steady_changes_are_propagated_after_the_max_delay(tree: MetadataTree) -> None:
    clock = Clock()
    start = clock.now
    manager = ZkIsrManager(tree, now_ms=clock)
    await tree.create(STATE, zkdata.partition_state_json(zkdata.LeaderAndIsr(1, 0, [1, 2], 3)), make_parents=True)
    versions: list[int | None] = [0]
    for i in range(20):  # a change every 4.9 s never lingers 5 s ...
        clock.now += 4900
        manager.submit("t", 0, zkdata.LeaderAndIsr(1, 0, [1] if i % 2 == 0 else [1, 2], 3,
                                                   zk_version=versions[-1] or 0), versions.append)
        await _settle(manager)
        if await manager.maybe_propagate_isr_changes():
            break
    # ... but 60 s after the last notification one goes out anyway.
    assert None not in versions
    assert 60_000 < clock.now - start <= 65_000
    assert len(await tree.children(zkdata.ISR_CHANGE_NOTIFICATION_PATH)) == 1


async def test_propagation_task_runs_every_check_interval(tree: MetadataTree) -> None:
    manager = ZkIsrManager(tree, IsrChangePropagationConfig(check_interval_ms=20, linger_ms=0, max_delay_ms=0))
    await tree.create(STATE, zkdata.partition_state_json(zkdata.LeaderAndIsr(1, 0, [1, 2], 3)), make_parents=True)
    manager.start()
    try:
        done: list[int | None] = []
        manager.submit("t", 0, zkdata.LeaderAndIsr(1, 0, [1], 3, zk_version=0), done.append)
        for _ in range(200):
            await asyncio.sleep(0.01)
            if await tree.exists(zkdata.ISR_CHANGE_NOTIFICATION_PATH) is not None and \
                    await tree.children(zkdata.ISR_CHANGE_NOTIFICATION_PATH):
                break
        assert done == [1]
        assert len(await tree.children(zkdata.ISR_CHANGE_NOTIFICATION_PATH)) == 1
    finally:
        await manager.stop()
