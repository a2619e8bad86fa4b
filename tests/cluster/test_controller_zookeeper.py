"""The controller's election, hand-over and fencing against a real ZooKeeper server.

Each controller has its own ZooKeeper session (its own ZooKeeperTree), as brokers do, so
ephemeral nodes and watches behave as in a real cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from kaflet.controller import topics as ct
from kaflet.controller.context import TopicPartition
from kaflet.controller.controller import KafkaController
from kaflet.metadata import zkdata as zk
from kaflet.metadata.zookeeper import ZooKeeperTree
from kaflet.protocol.api_keys import ApiKey
from tests.support.controller import (
    RecordingChannel,
    controller_config,
    partition_states,
    register_broker,
    until,
)


class Member:
    """One broker's session, registration and controller."""

    def __init__(self, tree: ZooKeeperTree, broker_id: int) -> None:
        self.tree = tree
        self.channels: list[RecordingChannel] = []
        self.controller = KafkaController(broker_id, tree, self._channel, controller_config(candidate_wait_seconds=0.5))

    def _channel(self, _cfg: object) -> RecordingChannel:
        ch = RecordingChannel()
        self.channels.append(ch)
        return ch


@pytest.fixture
async def members(zk_connect: str) -> AsyncIterator[list[Member]]:
    out: list[Member] = []
    try:
        for b in (1, 2):
            tree = await ZooKeeperTree.connect(zk_connect, session_timeout=6.0)
            await ct.ensure_persistent_paths(tree)
            await register_broker(tree, b)
            out.append(Member(tree, b))
        yield out
    finally:
        for m in out:
            await m.controller.shutdown()
            await m.tree.close()


async def test_election_and_takeover(members: list[Member]) -> None:
    m1, m2 = members
    await m1.controller.startup()
    await until(lambda: m1.controller.is_active, what="broker 1 elected")
    await m2.controller.startup()
    await until(lambda: m2.controller.active_controller_id == 1, what="broker 2 sees broker 1")
    assert not m2.controller.is_active
    data, stat = await m1.tree.get(zk.CONTROLLER_EPOCH_PATH)
    assert data == b"1" and stat.version == 1
    assert zk.parse_controller((await m2.tree.get(zk.CONTROLLER_PATH))[0]) == 1
    ctl_stat = await m2.tree.exists(zk.CONTROLLER_PATH)
    assert ctl_stat is not None and ctl_stat.ephemeral_owner == m1.tree.session_id
    await m1.controller.wait_idle()
    assert sorted(m1.channels[0].brokers) == [1, 2]
    assert {s.broker_id for s in m1.channels[0].requests(ApiKey.UPDATE_METADATA)} == {1, 2}

    # Broker 1's session ends (the broker died): its ephemeral nodes go, broker 2 takes over
    # with the next epoch and handles broker 1's failure.
    await m1.tree.close()
    await until(lambda: m2.controller.is_active, timeout=15, what="takeover")
    await until(lambda: 1 not in m2.controller.context.live_or_shutting_down_broker_ids, timeout=15,
                what="broker 1 gone")
    assert m2.controller.epoch == 2
    assert (await m2.tree.get(zk.CONTROLLER_EPOCH_PATH))[0] == b"2"
    await m1.controller.shutdown()


async def test_fenced_controller_resigns(members: list[Member]) -> None:
    m1, m2 = members
    await m1.controller.startup()
    await until(lambda: m1.controller.is_active, what="broker 1 elected")
    await m2.controller.startup()
    await until(lambda: m2.controller.active_controller_id == 1, what="broker 2 sees broker 1")
    await m1.controller.wait_idle()
    # The epoch moves on behind broker 1's back; its next write must fail.
    await m2.tree.set(zk.CONTROLLER_EPOCH_PATH, b"20")
    await ct.create_topic(m2.tree, "fenced", None, None, {}, [(1, None), (2, None)], assignment={0: [2, 1]})
    await until(lambda: m2.tree.exists(zk.partition_state_path("fenced", 0)), timeout=15, what="state")
    data, _ = await m2.tree.get(zk.partition_state_path("fenced", 0))
    st = zk.parse_partition_state(data)
    # Written by the controller elected after broker 1 gave up (epoch 21), never with epoch 1.
    assert (st.leader, st.isr, st.controller_epoch) == (2, [2, 1], 21)
    assert m1.channels[0].closed
    winner = m1 if m1.controller.is_active else m2
    assert winner.controller.epoch == 21
    await winner.controller.wait_idle()
    lai = partition_states(winner.channels[-1].requests(ApiKey.LEADER_AND_ISR, broker=2)[0].request)
    assert lai[("fenced", 0)].controller_epoch == 21 and lai[("fenced", 0)].is_new
    assert TopicPartition("fenced", 0) in winner.controller.context.partitions_with_leaders


async def test_preferred_candidate_wins_on_zookeeper(members: list[Member]) -> None:
    m1, m2 = members
    await m1.tree.create(f"{zk.CONTROLLER_CANDIDATES_PATH}/2", None, make_parents=True)
    await m1.controller.startup()
    await m1.controller.wait_idle()
    assert await m1.tree.exists(zk.CONTROLLER_PATH) is None  # broker 1 lets the live candidate go first
    await m2.controller.startup()
    await until(lambda: m2.controller.is_active, what="candidate elected")
    await until(lambda: m1.controller.active_controller_id == 2, timeout=5, what="broker 1 sees broker 2")
    assert m1.channels == []
    # The candidate's session ends: broker 1 takes over after its wait.
    await m2.tree.close()
    await until(lambda: m1.controller.is_active, timeout=15, what="takeover by broker 1")
    assert m1.controller.epoch == 2
    await m2.controller.shutdown()
