"""The controller (kaflet.controller) on the embedded tree, with a recording channel.

Brokers are simulated by their /brokers/ids/<id> registrations; the tests answer (or do not
answer) the requests the controller sends, and check both what it writes to the tree and what
it sends."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kaflet.controller import election as el
from kaflet.controller import topics as ct
from kaflet.controller.config import ControllerConfig
from kaflet.controller.context import TopicPartition
from kaflet.controller.controller import ElectionType, KafkaController
from kaflet.controller.zk_client import ControllerMovedError, ControllerZkClient
from kaflet.metadata import zkdata as zk
from kaflet.metadata.embedded import EmbeddedTree
from kaflet.metadata.tree import CreateOp, DeleteOp, MetadataTree, SessionLostError, SetOp
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from tests.support.controller import (
    RecordingChannel,
    controller_config,
    partition_states,
    register_broker,
    success_response,
    until,
)

LAI, UM, SR = ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA, ApiKey.STOP_REPLICA


class Harness:
    """A controller for one broker id, with the channels it created."""

    def __init__(self, tree: MetadataTree, broker_id: int, config: ControllerConfig) -> None:
        self.channels: list[RecordingChannel] = []
        self.configs_seen: list[ControllerConfig] = []
        self.controller = KafkaController(broker_id, tree, self._factory, config)

    def _factory(self, cfg: ControllerConfig) -> RecordingChannel:
        self.configs_seen.append(cfg)
        ch = RecordingChannel()
        self.channels.append(ch)
        return ch

    @property
    def channel(self) -> RecordingChannel:
        return self.channels[-1]

    async def start(self) -> Harness:
        await self.controller.startup()
        return self

    async def idle(self) -> None:
        await self.controller.wait_idle()


@pytest.fixture
async def tree(tmp_path: Path) -> AsyncIterator[EmbeddedTree]:
    t = await EmbeddedTree.open(tmp_path)
    await ct.ensure_persistent_paths(t)
    yield t
    await t.close()


async def start(tree: MetadataTree, broker_id: int = 1, **cfg: Any) -> Harness:
    h = await Harness(tree, broker_id, controller_config(**cfg)).start()
    await until(lambda: h.controller.is_active, what=f"controller {broker_id} active")
    await h.idle()
    return h


async def state(tree: MetadataTree, topic: str, p: int) -> zk.LeaderAndIsr:
    data, stat = await tree.get(zk.partition_state_path(topic, p))
    return zk.parse_partition_state(data, stat.version)


async def create(tree: MetadataTree, h: Harness, topic: str, assignment: dict[int, list[int]],
                 configs: dict[str, str] | None = None) -> ct.TopicCreated:
    live = [(b, None) for b in h.controller.context.live_broker_ids]
    created = await ct.create_topic(tree, topic, None, None, configs or {}, live, assignment=assignment)
    await until(lambda: all(TopicPartition(topic, p) in h.controller.context.partitions_with_leaders
                            for p in assignment), what=f"topic {topic} online")
    await h.idle()
    return created


@pytest.fixture
async def cluster(tree: EmbeddedTree) -> AsyncIterator[tuple[EmbeddedTree, Harness]]:
    for b in (1, 2, 3):
        await register_broker(tree, b)
    h = await start(tree, 1)
    try:
        yield tree, h
    finally:
        await h.controller.shutdown()


# ================================================================================ election


async def test_election_creates_epoch_and_sends_update_metadata(tree: EmbeddedTree) -> None:
    e1 = await register_broker(tree, 1)
    e2 = await register_broker(tree, 2, rack="r2")
    h = await start(tree, 1)
    try:
        c = h.controller
        data, _ = await tree.get(zk.CONTROLLER_PATH)
        assert zk.parse_controller(data) == 1
        data, stat = await tree.get(zk.CONTROLLER_EPOCH_PATH)
        # Created as 0, then bumped to 1 together with /controller.
        assert data == b"1" and stat.version == 1
        assert (c.epoch, c.epoch_zk_version) == (1, 1)
        assert c.context.live_broker_id_and_epochs == {1: e1, 2: e2}
        ch = h.channel
        assert sorted(ch.brokers) == [1, 2]
        assert h.configs_seen[0] is c.config
        ums = ch.requests(UM)
        assert sorted(s.broker_id for s in ums) == [1, 2]
        req = ums[0].request
        assert (req.controller_id, req.controller_epoch) == (1, 1)
        assert {s.broker_id: s.request.broker_epoch for s in ums} == {1: e1, 2: e2}
        brokers = {b.id: b for b in req.live_brokers}
        assert sorted(brokers) == [1, 2]
        eps = {(e.listener, e.host, e.port, e.security_protocol) for e in brokers[2].endpoints}
        assert eps == {("PLAINTEXT", "127.0.0.1", 19092, 0), ("SECURE", "127.0.0.1", 19192, 3)}
        assert (brokers[1].rack, brokers[2].rack) == (None, "r2")
        assert req.topic_states == []
        assert (await tree.get(zk.FEATURE_PATH))[0] == b'{"features":{},"version":1,"status":1}'
    finally:
        await h.controller.shutdown()
    assert h.channel.closed
    assert await tree.exists(zk.CONTROLLER_PATH) is None


async def test_epoch_bumps_from_existing_value(tree: EmbeddedTree) -> None:
    await tree.create(zk.CONTROLLER_EPOCH_PATH, b"41")
    await tree.create(zk.FEATURE_PATH, b'{"features":{},"version":1,"status":0}')
    await register_broker(tree, 1)
    h = await start(tree, 1)
    try:
        assert h.controller.epoch == 42
        assert (await tree.get(zk.CONTROLLER_EPOCH_PATH))[0] == b"42"
        # Kafka 2.8 enables feature versioning.
        assert (await tree.get(zk.FEATURE_PATH))[0] == b'{"features":{},"version":1,"status":1}'
    finally:
        await h.controller.shutdown()


async def test_second_controller_loses_then_takes_over(tree: EmbeddedTree) -> None:
    for b in (1, 2):
        await register_broker(tree, b)
    h1 = await start(tree, 1)
    h2 = await Harness(tree, 2, controller_config()).start()
    await h2.idle()
    assert not h2.controller.is_active and h2.controller.active_controller_id == 1
    assert h2.channels == []  # a standby controller opens no channel
    await h1.controller.shutdown()
    await until(lambda: h2.controller.is_active, what="takeover")
    await h2.idle()
    assert h2.controller.epoch == 2
    assert zk.parse_controller((await tree.get(zk.CONTROLLER_PATH))[0]) == 2
    assert h1.channels[0].closed and not h2.channel.closed
    await h2.controller.shutdown()


#: (leader, ISR, leader epoch) of t-0, t-1 (replicas [2, 3, 1] and [3, 2, 1]) and single-0 ([2])
#: once broker 2 is gone. Led by 2: elected elsewhere (the next live in-sync replica), ISR
#: without 2. Followed by 2: the ISR shrinks, the leader stays, the epoch moves. Only replica on
#: 2: no leader, and Kafka keeps the last ISR member.
WITHOUT_BROKER_2 = [(3, [3, 1], 1), (3, [3, 1], 1), (-1, [2], 1)]


async def states_without_broker_2(tree: MetadataTree) -> list[tuple[int, list[int], int]]:
    states = [await state(tree, "t", 0), await state(tree, "t", 1), await state(tree, "single", 0)]
    return [(st.leader, st.isr, st.leader_epoch) for st in states]


async def test_takeover_with_a_dead_broker_elects_first(tree: EmbeddedTree) -> None:
    """A controller that takes over while a broker is dead elects leaders for that broker's
    partitions before anything else (one write each), then takes it out of the other ISRs."""
    for b in (1, 2, 3):
        await register_broker(tree, b)
    h1 = await start(tree, 1)
    await create(tree, h1, "t", {0: [2, 3, 1], 1: [3, 2, 1]})
    await create(tree, h1, "single", {0: [2]})
    await h1.controller.shutdown()
    await tree.delete(zk.broker_path(2))
    h3 = await start(tree, 3)
    try:
        c = h3.controller
        # As after broker 2's failure under a running controller: one write each.
        assert await states_without_broker_2(tree) == WITHOUT_BROKER_2
        st0 = await state(tree, "t", 0)
        lai = [(s.broker_id, partition_states(s.request)) for s in h3.channel.requests(LAI)]
        first = next(states[("t", 0)] for broker, states in lai if broker == 3 and ("t", 0) in states)
        assert (first.leader, first.leader_epoch) == (3, 1)
        assert all(s.broker_id != 2 for s in h3.channel.requests())
        assert c.context.partition_leadership_info(TopicPartition("t", 0)).zk_version == st0.zk_version
        assert c.context.offline_partition_count == 1
        assert c.unclean_leader_elections == 0
    finally:
        await h3.controller.shutdown()


async def test_losing_the_controller_znode_resigns(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    ch = h.channel
    # Another broker is now named in /controller, and the epoch moved: this one resigns.
    await tree.multi([SetOp(zk.CONTROLLER_EPOCH_PATH, b"5"), SetOp(zk.CONTROLLER_PATH, zk.controller_json(3, 0))])
    await until(lambda: not h.controller.is_active, what="resignation")
    await h.idle()
    assert h.controller.active_controller_id == 3
    assert ch.closed and h.controller.context.all_topics == set() and h.controller.epoch == 0


async def test_fenced_write_makes_a_deposed_controller_resign(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    first = h.channel
    # The epoch moves on behind this controller's back (/controller still names it).
    await tree.set(zk.CONTROLLER_EPOCH_PATH, b"7")
    await ct.create_topic(tree, "fenced", None, None, {}, [(1, None)], assignment={0: [1]})
    # Its write of the partition state fails the epoch check: it resigns, gives up /controller,
    # wins the new election (epoch 8) and creates the state as the new controller.
    await until(lambda: len(h.channels) == 2 and h.controller.is_active, what="re-election")
    await until(lambda: tree.exists(zk.partition_state_path("fenced", 0)), what="state")
    await h.idle()
    assert first.closed
    assert h.controller.epoch == 8
    st = await state(tree, "fenced", 0)
    assert (st.leader, st.isr, st.controller_epoch) == (1, [1], 8)


async def test_zk_client_fence_raises_controller_moved(tree: EmbeddedTree) -> None:
    client = ControllerZkClient(tree)
    await register_broker(tree, 1)
    epoch, zkv = await client.register_controller_and_increment_controller_epoch(1)
    assert (epoch, zkv) == (1, 1)
    with pytest.raises(ControllerMovedError):
        await client.register_controller_and_increment_controller_epoch(2)
    await client.fenced([CreateOp("/x", b"1")], zkv)
    await tree.set(zk.CONTROLLER_EPOCH_PATH, b"9")
    with pytest.raises(ControllerMovedError):
        await client.fenced([CreateOp("/y", b"1")], zkv)
    with pytest.raises(ControllerMovedError):
        await client.fenced_each([CreateOp("/y", b"1"), DeleteOp("/x")], zkv)
    assert await tree.exists("/y") is None and await tree.exists("/x") is not None
    # One op failing does not stop the others.
    res = await client.fenced_each([CreateOp("/x", b"2"), CreateOp("/z", b"3")], zkv + 1)
    assert type(res[0]).__name__ == "NodeExistsError" and res[1] == "/z"


async def test_session_expiry_resigns_and_reelects(tree: EmbeddedTree) -> None:
    await register_broker(tree, 1)
    h = await start(tree, 1)
    tree.on_session_lost = h.controller.on_session_lost
    await tree.expire_session()
    await until(lambda: not h.controller.is_active, what="resignation after expiry")
    assert h.channels[0].closed
    # The broker re-registers in its new session, then the controller competes again.
    await register_broker(tree, 1)
    h.controller.on_session_reestablished()
    # Elected first, then its failover opens the new channel: wait for both.
    await until(lambda: h.controller.is_active and len(h.channels) == 2, what="re-election")
    assert h.controller.epoch == 2
    await h.controller.shutdown()


async def test_preferred_candidate_wins(tree: EmbeddedTree) -> None:
    for b in (1, 2):
        await register_broker(tree, b)
    await tree.create(f"{zk.CONTROLLER_CANDIDATES_PATH}/2", None, make_parents=True)
    h1 = await Harness(tree, 1, controller_config(candidate_wait_seconds=0.5)).start()
    await h1.idle()
    assert await tree.exists(zk.CONTROLLER_PATH) is None  # broker 1 waits for the candidate
    h2 = await Harness(tree, 2, controller_config(candidate_wait_seconds=0.5)).start()
    await until(lambda: h2.controller.is_active, what="candidate elected")
    await h1.idle()
    await until(lambda: h1.controller.active_controller_id == 2, timeout=3, what="broker 1 sees the candidate")
    assert not h1.controller.is_active and h1.channels == []
    await h2.controller.shutdown()
    # The candidate is gone: broker 1 takes over after its wait.
    await tree.delete(zk.broker_path(2))
    await until(lambda: h1.controller.is_active, timeout=2, what="non-candidate takes over")
    await h1.controller.shutdown()


async def test_non_candidate_competes_after_waiting(tree: EmbeddedTree) -> None:
    for b in (1, 2):
        await register_broker(tree, b)
    await tree.create(f"{zk.CONTROLLER_CANDIDATES_PATH}/2", None, make_parents=True)
    # Broker 2 is a live candidate but never competes (its controller is not running).
    h1 = await Harness(tree, 1, controller_config(candidate_wait_seconds=0.3)).start()
    await h1.idle()
    assert not h1.controller.is_active
    await until(lambda: h1.controller.is_active, timeout=3, what="election after the wait")
    await h1.controller.shutdown()


# ================================================================================ topics


async def test_topic_creation_end_to_end(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    ch = h.channel
    ch.clear()
    created = await create(tree, h, "orders", {0: [1, 2], 1: [2, 3], 2: [3, 1]})
    tid = uuid.UUID(bytes=zk.uuid_from_str(created.topic_id))
    for p, reps in {0: [1, 2], 1: [2, 3], 2: [3, 1]}.items():
        st = await state(tree, "orders", p)
        assert (st.leader, st.isr, st.leader_epoch, st.controller_epoch, st.zk_version) == (reps[0], reps, 0, 1, 0)
    lais = ch.requests(LAI)
    assert sorted(s.broker_id for s in lais) == [1, 2, 3]  # one request per broker for the whole topic
    for s in lais:
        req = s.request
        assert (req.controller_id, req.controller_epoch, req.type) == (1, 1, 0)
        assert req.broker_epoch == h.controller.context.broker_epoch(s.broker_id)
        assert [t.topic_id for t in req.topic_states] == [tid]
        ps = partition_states(req)
        assert all(p.is_new for p in ps.values())
        assert all(s.broker_id in p.replicas for p in ps.values())
        leaders = {ll.broker_id: (ll.host_name, ll.port) for ll in req.live_leaders}
        assert leaders == {p.leader: ("127.0.0.1", 19090 + p.leader) for p in ps.values()}
    p0 = partition_states(ch.requests(LAI, broker=1)[0].request)[("orders", 0)]
    assert (p0.leader, p0.isr, p0.replicas, p0.zk_version, p0.leader_epoch) == (1, [1, 2], [1, 2], 0, 0)
    # Every broker learns the new partitions through UpdateMetadata.
    ums = [s for s in ch.requests(UM) if s.request.topic_states]
    assert {s.broker_id for s in ums} == {1, 2, 3}
    um_states = {}
    for s in ums:
        um_states.update(partition_states(s.request))
        assert all(t.topic_id == tid for t in s.request.topic_states)
    assert sorted(um_states) == [("orders", 0), ("orders", 1), ("orders", 2)]
    assert um_states[("orders", 1)].offline_replicas == []
    assert ch.answer_all() > 0
    await h.idle()
    assert h.controller.context.replicas_on_offline_dirs.get(2, set()) == set()


async def test_topic_without_live_replica_waits_for_a_broker(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    await ct.create_topic(tree, "later", None, None, {}, [(1, None)], assignment={0: [4]})
    await until(lambda: TopicPartition("later", 0) in h.controller.context.all_partitions, what="seen")
    await h.idle()
    # No live replica: as Kafka, no state node yet; the partition stays New.
    assert await tree.exists(zk.partition_state_path("later", 0)) is None
    await register_broker(tree, 4)
    await until(lambda: tree.exists(zk.partition_state_path("later", 0)), what="state after broker 4 came")
    st = await state(tree, "later", 0)
    assert (st.leader, st.isr) == (4, [4])


async def test_topic_id_added_to_old_topics(tree: EmbeddedTree) -> None:
    await register_broker(tree, 1)
    await tree.create(zk.topic_path("legacy"), b'{"version":1,"partitions":{"0":[1]}}')
    h = await start(tree, 1)
    try:
        ta = zk.parse_topic("legacy", (await tree.get(zk.topic_path("legacy")))[0])
        assert ta.topic_id is not None and ta.partitions == {0: [1]}
        assert h.controller.context.topic_ids["legacy"] == uuid.UUID(bytes=zk.uuid_from_str(ta.topic_id))
        assert (await state(tree, "legacy", 0)).leader == 1
    finally:
        await h.controller.shutdown()


async def test_partition_expansion(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    await create(tree, h, "grow", {0: [1, 2]})
    h.channel.clear()
    await ct.add_partitions(tree, "grow", 3, [(1, None), (2, None), (3, None)], assignment=[[2, 3], [3, 1]])
    await until(lambda: TopicPartition("grow", 2) in h.controller.context.partitions_with_leaders, what="expansion")
    await h.idle()
    assert ((await state(tree, "grow", 1)).leader, (await state(tree, "grow", 2)).leader) == (2, 3)
    sent = {}
    for s in h.channel.requests(LAI):
        for k, p in partition_states(s.request).items():
            sent.setdefault(k, set()).add(s.broker_id)
            assert p.is_new
    assert sent == {("grow", 1): {2, 3}, ("grow", 2): {3, 1}}


async def test_replicas_offline_on_storage_error(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    await create(tree, h, "disk", {0: [2, 3]})
    h.channel.answer_all(fail=lambda s, t, p: ErrorCode.KAFKA_STORAGE_ERROR if s.broker_id == 2 else 0)
    await until(lambda: h.controller.context.partition_leadership_info(TopicPartition("disk", 0)).leader == 3,
                what="leader moved off the failed log dir")
    st = await state(tree, "disk", 0)
    assert (st.leader, st.isr, st.leader_epoch) == (3, [3], 1)
    assert h.controller.context.replicas_on_offline_dirs[2] == {TopicPartition("disk", 0)}


async def test_log_dir_event_notification(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    await create(tree, h, "logdir", {0: [1, 2], 1: [3, 1]})
    h.channel.clear()
    path = await tree.create(f"{zk.LOG_DIR_EVENT_NOTIFICATION_PATH}/{zk.LOG_DIR_EVENT_PREFIX}",
                             zk.log_dir_event_json(2), sequential=True)
    await until(lambda: h.channel.requests(LAI, broker=2), what="LeaderAndIsr to broker 2")
    await until(lambda: _gone(tree, path), what="notification deleted")
    assert set(partition_states(h.channel.requests(LAI, broker=2)[0].request)) == {("logdir", 0)}


async def _gone(tree: MetadataTree, path: str) -> bool:
    return await tree.exists(path) is None


# ================================================================================ brokers


async def test_broker_failure_and_return(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    c = h.controller
    await create(tree, h, "t", {0: [2, 3, 1], 1: [3, 2, 1]})
    await create(tree, h, "single", {0: [2]})
    h.channel.clear()
    await tree.delete(zk.broker_path(2))
    await until(lambda: 2 not in c.context.live_or_shutting_down_broker_ids, what="broker 2 dead")
    await h.idle()
    assert ("remove", 2) in h.channel.membership
    assert await states_without_broker_2(tree) == WITHOUT_BROKER_2
    st0 = await state(tree, "t", 0)
    lai = {k: (s.broker_id, p) for s in h.channel.requests(LAI) for k, p in partition_states(s.request).items()}
    assert lai[("t", 0)][1].leader == 3 and lai[("t", 0)][1].zk_version == st0.zk_version
    assert all(s.broker_id != 2 for s in h.channel.requests())  # nothing to the dead broker
    um = [s for s in h.channel.requests(UM) if s.request.topic_states]
    assert um and {s.broker_id for s in um} == {1, 3}
    last = partition_states(um[-1].request)
    assert last[("t", 1)].offline_replicas == [2]
    assert {b.id for b in um[-1].request.live_brokers} == {1, 3}
    assert c.context.partition_state(TopicPartition("single", 0)).value == "OfflinePartition"
    assert c.context.offline_partition_count == 1

    h.channel.clear()
    epoch2 = await register_broker(tree, 2)
    await until(lambda: c.context.broker_epoch(2) == epoch2, what="broker 2 back")
    await h.idle()
    assert ("add", 2) in h.channel.membership[-1:]
    # The returning broker gets every partition state, then its replicas via LeaderAndIsr.
    um2 = h.channel.requests(UM, broker=2)
    assert um2 and set(partition_states(um2[0].request)) >= {("t", 0), ("t", 1)}
    lai2 = [s for s in h.channel.requests(LAI, broker=2)]
    got = {}
    for s in lai2:
        got.update(partition_states(s.request))
    assert set(got) == {("t", 0), ("t", 1), ("single", 0)}
    # Its only-replica partition is led by it again (it was the last ISR member: clean).
    st2 = await state(tree, "single", 0)
    assert (st2.leader, st2.isr, st2.leader_epoch) == (2, [2], 2)
    assert c.context.offline_partition_count == 0
    assert c.unclean_leader_elections == 0


async def test_bounced_broker(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    c = h.controller
    await create(tree, h, "b", {0: [2, 3]})
    old_epoch = c.context.broker_epoch(2)
    h.channel.clear()
    # Broker 2 restarts between two watch firings: same id, new registration (new czxid).
    await tree.multi([DeleteOp(zk.broker_path(2)),
                      CreateOp(zk.broker_path(2), zk.broker_json(zk.BrokerInfo(2, ())), ephemeral=True)])
    await until(lambda: (c.context.broker_epoch(2) or 0) > (old_epoch or 0), what="new epoch")
    await h.idle()
    assert ("remove", 2) in h.channel.membership and h.channel.membership[-1] == ("add", 2)
    st = await state(tree, "b", 0)
    # Handled as a failure (leadership moved) followed by a start-up.
    assert (st.leader, st.isr, st.leader_epoch) == (3, [3], 1)
    lai = h.channel.requests(LAI, broker=2)
    assert lai and lai[-1].request.broker_epoch == c.context.broker_epoch(2)


async def test_broker_endpoint_change(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    h.channel.clear()
    moved = zk.BrokerInfo(3, (zk.EndPoint("PLAINTEXT", "10.0.0.3", 9999, "PLAINTEXT"),))
    await tree.set(zk.broker_path(3), zk.broker_json(moved))
    await until(lambda: h.channel.requests(UM), what="UpdateMetadata")
    assert h.channel.brokers[3].endpoints == moved.endpoints
    b3 = [b for b in h.channel.requests(UM)[0].request.live_brokers if b.id == 3][0]
    assert [(e.host, e.port) for e in b3.endpoints] == [("10.0.0.3", 9999)]


# ================================================================================ unclean elections


async def _isr_only_leader(tree: MetadataTree, h: Harness, topic: str, configs: dict[str, str] | None = None) -> None:
    await create(tree, h, topic, {0: [2, 3]}, configs)
    st = await state(tree, topic, 0)
    # The follower fell out of sync (as its leader would write it).
    await tree.set(zk.partition_state_path(topic, 0),
                   zk.partition_state_json(zk.LeaderAndIsr(2, st.leader_epoch, [2], st.controller_epoch)),
                   st.zk_version)
    await tree.create(zk.isr_change_prefix(), zk.partition_list_json([(topic, 0)]), sequential=True)
    await until(lambda: h.controller.context.partition_leadership_info(TopicPartition(topic, 0)).isr == [2],
                what="ISR change seen")
    await h.idle()


async def test_unclean_election_disabled(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    await _isr_only_leader(tree, h, "clean")
    await tree.delete(zk.broker_path(2))
    await until(lambda: 2 not in h.controller.context.live_broker_ids, what="broker 2 dead")
    await h.idle()
    st = await state(tree, "clean", 0)
    assert (st.leader, st.isr) == (-1, [2])  # offline: 3 is alive but not in sync
    assert h.controller.unclean_leader_elections == 0
    # An administrator may still ask for an unclean election.
    res = await h.controller.elect_leaders(ElectionType.UNCLEAN, [("clean", 0)])
    assert res == {("clean", 0): (0, None)}
    st = await state(tree, "clean", 0)
    assert (st.leader, st.isr) == (3, [3])
    assert h.controller.unclean_leader_elections == 1


async def test_unclean_election_topic_override(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    await _isr_only_leader(tree, h, "dirty")
    await tree.delete(zk.broker_path(2))
    await until(lambda: 2 not in h.controller.context.live_broker_ids, what="broker 2 dead")
    await h.idle()
    assert (await state(tree, "dirty", 0)).leader == -1
    # The topic override turns it on (as AlterConfigs would), and the controller is told.
    await tree.set(zk.topic_config_path("dirty"), zk.entity_config_json({"unclean.leader.election.enable": "true"}))
    h.controller.enable_topic_unclean_leader_election("dirty")
    await until(lambda: h.controller.unclean_leader_elections == 1, what="unclean election")
    await h.idle()  # counted when decided, before the new state is written to ZooKeeper
    st = await state(tree, "dirty", 0)
    assert (st.leader, st.isr) == (3, [3])


async def test_unclean_election_broker_default(tree: EmbeddedTree) -> None:
    for b in (1, 2, 3):
        await register_broker(tree, b)
    h = await start(tree, 1, unclean_leader_election_enable=True)
    try:
        await _isr_only_leader(tree, h, "default")
        await tree.delete(zk.broker_path(2))
        await until(lambda: h.controller.unclean_leader_elections == 1, what="unclean election")
        await h.idle()  # counted when decided, before the new state is written to ZooKeeper
        st = await state(tree, "default", 0)
        assert (st.leader, st.isr) == (3, [3])
        # A topic may turn it off again.
        await register_broker(tree, 2)
        await until(lambda: 2 in h.controller.context.live_broker_ids, what="broker 2 back")
        await _isr_only_leader(tree, h, "strict", {"unclean.leader.election.enable": "false"})
        await tree.delete(zk.broker_path(2))
        await until(lambda: 2 not in h.controller.context.live_broker_ids, what="broker 2 dead again")
        await h.idle()
        st = await state(tree, "strict", 0)
        assert (st.leader, st.isr) == (-1, [2])
        assert h.controller.unclean_leader_elections == 1
    finally:
        await h.controller.shutdown()


# ================================================================================ controlled shutdown


async def test_controlled_shutdown(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    c = h.controller
    await create(tree, h, "cs", {0: [2, 1, 3], 1: [1, 2, 3]})
    await create(tree, h, "cs1", {0: [2]})
    epoch = c.context.broker_epoch(2)
    assert epoch is not None
    assert await c.controlled_shutdown(2, epoch - 1) == (ErrorCode.STALE_BROKER_EPOCH, [])
    assert await c.controlled_shutdown(9, 5) == (ErrorCode.BROKER_NOT_AVAILABLE, [])
    h.channel.clear()
    code, remaining = await c.controlled_shutdown(2, epoch)
    # cs1-0 has one replica: Kafka does not count it (nothing to move it to).
    assert (code, remaining) == (0, [])
    assert 2 in c.context.shutting_down_broker_ids and 2 not in c.context.live_broker_ids
    st0 = await state(tree, "cs", 0)
    assert (st0.leader, st0.isr) == (1, [1, 3])  # led by 2: moved to the next ISR member
    st1 = await state(tree, "cs", 1)
    assert (st1.leader, st1.isr) == (1, [1, 3])  # followed by 2: out of the ISR
    stops = h.channel.requests(SR, broker=2)
    assert stops
    stopped = {(t.topic_name, p.partition_index): p for s in stops for t in s.request.topic_states
               for p in t.partition_states}
    assert set(stopped) == {("cs", 1)} and not stopped[("cs", 1)].delete_partition
    assert stopped[("cs", 1)].leader_epoch == st1.leader_epoch - 1  # the epoch it knew
    # The shutting-down broker still gets the news about what it followed (it is live).
    assert h.channel.requests(LAI, broker=1)
    # When it finally goes, it leaves the shutting-down set.
    await tree.delete(zk.broker_path(2))
    await until(lambda: 2 not in c.context.live_or_shutting_down_broker_ids, what="broker 2 gone")
    assert 2 not in c.context.shutting_down_broker_ids


async def test_controlled_shutdown_reports_partitions_it_still_leads(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    await create(tree, h, "stuck", {0: [3, 2]})
    st = await state(tree, "stuck", 0)
    await tree.set(zk.partition_state_path("stuck", 0),
                   zk.partition_state_json(zk.LeaderAndIsr(3, st.leader_epoch, [3], 1)), st.zk_version)
    await tree.create(zk.isr_change_prefix(), zk.partition_list_json([("stuck", 0)]), sequential=True)
    await until(lambda: h.controller.context.partition_leadership_info(TopicPartition("stuck", 0)).isr == [3],
                what="ISR change")
    code, remaining = await h.controller.controlled_shutdown(3, h.controller.context.broker_epoch(3) or 0)
    assert (code, remaining) == (0, [("stuck", 0)])  # nobody else in sync to take over


async def test_controlled_shutdown_not_controller(tree: EmbeddedTree) -> None:
    await register_broker(tree, 1)
    await register_broker(tree, 2)
    h1 = await start(tree, 1)
    h2 = await Harness(tree, 2, controller_config()).start()
    await h2.idle()
    try:
        assert await h2.controller.controlled_shutdown(1, 0) == (ErrorCode.NOT_CONTROLLER, [])
        res = await h2.controller.elect_leaders(ElectionType.PREFERRED, [("x", 0)])
        assert res == {("x", 0): (ErrorCode.NOT_CONTROLLER, None)}
    finally:
        await h2.controller.shutdown()
        await h1.controller.shutdown()
    # A stopped controller answers at once.
    assert await h1.controller.controlled_shutdown(1, 0) == (ErrorCode.NOT_CONTROLLER, [])
    assert await h1.controller.elect_leaders(ElectionType.UNCLEAN, [("x", 1)]) == {
        ("x", 1): (ErrorCode.NOT_CONTROLLER, None)}


# ================================================================================ preferred elections


async def _set_leader(tree: MetadataTree, h: Harness, topic: str, p: int, leader: int, isr: list[int]) -> None:
    """Write a partition state as another controller's election would have left it, and make
    this controller re-read it (through an ISR change notification)."""
    st = await state(tree, topic, p)
    await tree.set(zk.partition_state_path(topic, p),
                   zk.partition_state_json(zk.LeaderAndIsr(leader, st.leader_epoch + 1, isr, st.controller_epoch)),
                   st.zk_version)
    path = await tree.create(zk.isr_change_prefix(), zk.partition_list_json([(topic, p)]), sequential=True)
    # Processed once the controller deleted it (an auto rebalance may change the leader again).
    await until(lambda: _gone(tree, path), what=f"{topic}-{p} led by {leader}")


def _leader_of(h: Harness, topic: str, p: int) -> int:
    st = h.controller.context.partition_leadership_info(TopicPartition(topic, p))
    return -1 if st is None else st.leader


async def test_preferred_leader_election(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    c = h.controller
    await create(tree, h, "solo", {0: [1]})
    await create(tree, h, "pref", {0: [2, 3]})
    await tree.delete(zk.broker_path(2))
    await until(lambda: c.context.partition_leadership_info(TopicPartition("pref", 0)).leader == 3,
                what="leader moved")
    await register_broker(tree, 2)
    await until(lambda: 2 in c.context.live_broker_ids, what="broker 2 back")
    await h.idle()
    # Broker 2 is back but not in sync yet: the preferred leader is not available.
    res = await c.elect_leaders(ElectionType.PREFERRED, [("pref", 0)])
    assert res[("pref", 0)][0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    st = await state(tree, "pref", 0)
    await tree.set(zk.partition_state_path("pref", 0),
                   zk.partition_state_json(zk.LeaderAndIsr(3, st.leader_epoch, [3, 2], st.controller_epoch)),
                   st.zk_version)
    await tree.create(zk.isr_change_prefix(), zk.partition_list_json([("pref", 0)]), sequential=True)
    await until(lambda: c.context.partition_leadership_info(TopicPartition("pref", 0)).isr == [3, 2],
                what="ISR expansion seen")
    h.channel.clear()
    res = await c.elect_leaders(ElectionType.PREFERRED, [("pref", 0), ("solo", 0), ("nope", 0)])
    assert res == {
        ("pref", 0): (0, None),
        ("solo", 0): (ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
        ("nope", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."),
    }
    st = await state(tree, "pref", 0)
    assert (st.leader, st.isr) == (2, [3, 2])
    assert {s.broker_id for s in h.channel.requests(LAI)} == {2, 3}
    # An unclean election where the leader is alive is not needed either; None means all.
    res = await c.elect_leaders(ElectionType.UNCLEAN, None)
    assert set(res) == {("pref", 0), ("solo", 0)}
    assert all(code == ErrorCode.ELECTION_NOT_NEEDED for code, _ in res.values())


async def test_auto_leader_rebalance(tree: EmbeddedTree) -> None:
    for b in (1, 2, 3):
        await register_broker(tree, b)
    h = await start(tree, 1, auto_leader_rebalance_enable=True, leader_imbalance_check_interval_seconds=0.05,
                    auto_leader_rebalance_initial_delay_seconds=0.05, leader_imbalance_per_broker_percentage=30)
    try:
        await create(tree, h, "bal", {p: [2, 3] for p in range(4)})
        # 1 of the 4 partitions broker 2 prefers is led elsewhere: 25% is within 30%.
        await _set_leader(tree, h, "bal", 0, 3, [3, 2])
        await asyncio.sleep(0.5)  # ten checks
        await h.idle()
        assert _leader_of(h, "bal", 0) == 3
        # 2 of 4 (50%): the auto rebalance moves both back to their preferred leader.
        await _set_leader(tree, h, "bal", 1, 3, [3, 2])
        await until(lambda: _leader_of(h, "bal", 0) == 2 and _leader_of(h, "bal", 1) == 2, what="auto rebalance")
        st = await state(tree, "bal", 1)
        assert (st.leader, st.isr) == (2, [3, 2])
        # A preferred replica out of the ISR cannot lead: that partition is left alone.
        await _set_leader(tree, h, "bal", 2, 3, [3])
        await _set_leader(tree, h, "bal", 3, 3, [3, 2])
        await until(lambda: _leader_of(h, "bal", 3) == 2, what="rebalance of partition 3")
        assert _leader_of(h, "bal", 2) == 3
    finally:
        await h.controller.shutdown()


async def test_preferred_replica_election_znode(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    await create(tree, h, "znode", {0: [2, 3], 1: [3, 2]})
    await _set_leader(tree, h, "znode", 0, 3, [3, 2])
    await tree.create(zk.PREFERRED_REPLICA_ELECTION_PATH, zk.partition_list_json([("znode", 0)]))
    await until(lambda: _leader_of(h, "znode", 0) == 2, what="preferred election from the admin node")
    await until(lambda: _gone(tree, zk.PREFERRED_REPLICA_ELECTION_PATH), what="admin node removed")
    # The watch is armed again: a second request is acted on too.
    await _set_leader(tree, h, "znode", 1, 2, [2, 3])
    await tree.create(zk.PREFERRED_REPLICA_ELECTION_PATH, zk.partition_list_json([("znode", 1)]))
    await until(lambda: _leader_of(h, "znode", 1) == 3, what="second preferred election")
    await until(lambda: _gone(tree, zk.PREFERRED_REPLICA_ELECTION_PATH), what="admin node removed again")


# ================================================================================ ISR changes


async def test_isr_change_notification(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    await create(tree, h, "isr", {0: [1, 2, 3], 1: [2, 3, 1]})
    h.channel.clear()
    st = await state(tree, "isr", 0)
    await tree.set(zk.partition_state_path("isr", 0),
                   zk.partition_state_json(zk.LeaderAndIsr(1, st.leader_epoch, [1, 3], st.controller_epoch)),
                   st.zk_version)
    path = await tree.create(zk.isr_change_prefix(), zk.partition_list_json([("isr", 0), ("gone", 7)]),
                             sequential=True)
    assert path.endswith("isr_change_0000000000")
    await until(lambda: _gone(tree, path), what="notification deleted")
    await h.idle()
    ums = h.channel.requests(UM)
    assert {s.broker_id for s in ums} == {1, 2, 3}
    ps = partition_states(ums[0].request)
    assert set(ps) == {("isr", 0)}  # only the named, known partition
    assert ps[("isr", 0)].isr == [1, 3] and ps[("isr", 0)].zk_version == st.zk_version + 1
    assert h.controller.context.partition_leadership_info(TopicPartition("isr", 0)).isr == [1, 3]


async def test_failover_clears_stale_notifications(tree: EmbeddedTree) -> None:
    await register_broker(tree, 1)
    stale = await tree.create(zk.isr_change_prefix(), zk.partition_list_json([("x", 0)]), sequential=True)
    h = await start(tree, 1)
    try:
        assert await tree.exists(stale) is None
    finally:
        await h.controller.shutdown()


# ================================================================================ deletion


def _stop_replicas(ch: RecordingChannel, broker: int) -> list[tuple[str, int, bool, int]]:
    return [(t.topic_name, p.partition_index, p.delete_partition, p.leader_epoch)
            for s in ch.requests(SR, broker=broker) for t in s.request.topic_states for p in t.partition_states]


async def test_topic_deletion(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    c = h.controller
    await create(tree, h, "doomed", {0: [1, 2], 1: [2, 3]}, {"retention.ms": "5"})
    h.channel.answer_all()
    h.channel.clear()
    await ct.delete_topic(tree, "doomed")
    await until(lambda: h.channel.requests(SR), what="StopReplica")
    await h.idle()
    # Brokers first learn the topic is going (leader -2), then every replica is stopped...
    um = [s for s in h.channel.requests(UM) if s.request.topic_states]
    assert um and all(p.leader == -2 for p in partition_states(um[0].request).values())
    assert sorted(_stop_replicas(h.channel, 2)) == [
        ("doomed", 0, False, -2), ("doomed", 0, True, -2), ("doomed", 1, False, -2), ("doomed", 1, True, -2)]
    assert sorted(_stop_replicas(h.channel, 1)) == [("doomed", 0, False, -2), ("doomed", 0, True, -2)]
    # ... and the topic stays until every replica confirmed its deletion.
    assert await tree.exists(zk.topic_path("doomed")) is not None
    for s in h.channel.pending(SR, broker=1) + h.channel.pending(SR, broker=3):
        s.answer(success_response(s))
    await h.idle()
    assert await tree.exists(zk.topic_path("doomed")) is not None
    h.channel.answer_all()
    # Removed in Kafka's order: the topic, its config, then the deletion marker.
    await until(lambda: _gone(tree, zk.delete_topic_path("doomed")), what="deletion marker removed")
    for p in (zk.topic_path("doomed"), zk.topic_config_path("doomed")):
        assert await tree.exists(p) is None
    await h.idle()
    assert "doomed" not in c.context.all_topics and not c.context.topics_to_be_deleted
    # The name can be used again.
    await create(tree, h, "doomed", {0: [3]})


async def test_topic_deletion_waits_for_a_dead_replica(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    c = h.controller
    await create(tree, h, "zombie", {0: [1, 2]})
    await tree.delete(zk.broker_path(2))
    await until(lambda: 2 not in c.context.live_broker_ids, what="broker 2 dead")
    await h.idle()
    h.channel.clear()
    await ct.delete_topic(tree, "zombie")
    await until(lambda: h.channel.requests(SR), what="StopReplica")
    await h.idle()
    assert "zombie" in c.context.topics_ineligible_for_deletion
    h.channel.answer_all()
    await h.idle()
    # Broker 2's replica is not deleted: the topic stays.
    assert await tree.exists(zk.topic_path("zombie")) is not None
    h.channel.clear()
    await register_broker(tree, 2)
    await until(lambda: h.channel.requests(SR, broker=2), what="deletion resumed on broker 2")
    await h.idle()
    assert ("zombie", 0, True, -2) in _stop_replicas(h.channel, 2)
    h.channel.answer_all()
    await until(lambda: _gone(tree, zk.topic_path("zombie")), what="topic removed")


async def test_failed_replica_deletion_is_retried(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    c = h.controller
    await create(tree, h, "sticky", {0: [2]})
    h.channel.clear()
    await ct.delete_topic(tree, "sticky")
    await until(lambda: h.channel.pending(SR), what="StopReplica")
    await h.idle()
    h.channel.answer_all(fail=lambda s, t, p: ErrorCode.KAFKA_STORAGE_ERROR)
    await until(lambda: "sticky" in c.context.topics_ineligible_for_deletion, what="ineligible")
    await h.idle()
    assert await tree.exists(zk.topic_path("sticky")) is not None
    # The broker restarting resumes the deletion (and this time it works).
    h.channel.clear()
    await tree.multi([DeleteOp(zk.broker_path(2)),
                      CreateOp(zk.broker_path(2), zk.broker_json(zk.BrokerInfo(2, ())), ephemeral=True)])
    await until(lambda: any(d for _t, _p, d, _e in _stop_replicas(h.channel, 2)), what="retried")
    await h.idle()
    h.channel.answer_all()
    await until(lambda: _gone(tree, zk.topic_path("sticky")), what="topic removed")


async def test_delete_topic_disabled(tree: EmbeddedTree) -> None:
    await register_broker(tree, 1)
    h = await start(tree, 1, delete_topic_enable=False)
    try:
        await create(tree, h, "kept", {0: [1]})
        h.channel.clear()
        await ct.delete_topic(tree, "kept")
        await until(lambda: _gone(tree, zk.delete_topic_path("kept")), what="marker removed")
        assert await tree.exists(zk.topic_path("kept")) is not None
        assert h.channel.requests(SR) == []
    finally:
        await h.controller.shutdown()


async def test_deletion_of_unknown_topic_removes_marker(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, _h = cluster
    await tree.create(zk.delete_topic_path("ghost"), None)
    await until(lambda: _gone(tree, zk.delete_topic_path("ghost")), what="marker removed")


async def test_deletion_resumes_after_failover(tree: EmbeddedTree) -> None:
    for b in (1, 2):
        await register_broker(tree, b)
    h = await start(tree, 1)
    await create(tree, h, "half", {0: [1, 2]})
    await ct.delete_topic(tree, "half")
    await until(lambda: h.channel.requests(SR), what="StopReplica")
    await h.controller.shutdown()  # nothing answered: the next controller must finish the job
    h2 = await start(tree, 2)
    try:
        await until(lambda: any(d for _t, _p, d, _e in _stop_replicas(h2.channel, 1)), what="restarted")
        await h2.idle()
        h2.channel.answer_all()
        await until(lambda: _gone(tree, zk.topic_path("half")), what="topic removed")
    finally:
        await h2.controller.shutdown()


async def test_partitions_not_added_while_deleting(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    await create(tree, h, "frozen", {0: [2]})
    await ct.delete_topic(tree, "frozen")
    await until(lambda: h.channel.requests(SR), what="deletion started")
    await h.idle()
    data, stat = await tree.get(zk.topic_path("frozen"))
    ta = zk.parse_topic("frozen", data)
    await tree.set(zk.topic_path("frozen"), zk.topic_json({0: [2], 1: [3]}, ta.topic_id), stat.version)
    await h.idle()

    async def restored() -> bool:
        return zk.parse_topic("frozen", (await tree.get(zk.topic_path("frozen")))[0]).partitions == {0: [2]}

    await until(restored, what="assignment restored")
    assert await tree.exists(zk.partition_path("frozen", 1)) is None


async def test_topic_removed_by_hand_and_created_again(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    await create(tree, h, "manual", {0: [2, 3]})
    await tree.delete(zk.topic_path("manual"), recursive=True)
    await until(lambda: "manual" not in h.controller.context.all_topics, what="topic forgotten")
    h.channel.clear()
    await create(tree, h, "manual", {0: [3, 2]})
    lai = [p for s in h.channel.requests(LAI) for p in partition_states(s.request).values()]
    assert lai and all(p.is_new and p.leader == 3 for p in lai)


# ================================================================================ pieces


def test_election_algorithms() -> None:
    assert el.offline_partition_leader_election([1, 2, 3], [3, 2], {2, 3}, False) == (2, False)
    assert el.offline_partition_leader_election([1, 2, 3], [1], {2, 3}, False) == (None, False)
    assert el.offline_partition_leader_election([1, 2, 3], [1], {3, 2}, True) == (2, True)
    assert el.preferred_replica_partition_leader_election([1, 2], [2, 1], {1, 2}) == 1
    assert el.preferred_replica_partition_leader_election([1, 2], [2], {1, 2}) is None
    assert el.preferred_replica_partition_leader_election([1, 2], [1, 2], {2}) is None
    assert el.controlled_shutdown_partition_leader_election([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1}) == 2
    assert el.controlled_shutdown_partition_leader_election([1, 2], [1], {1, 2}, {1}) is None
    assert el.reassign_partition_leader_election([4, 5], [5, 1], {4, 5}) == 5


def test_config_from_broker_config() -> None:
    cfg = ControllerConfig.from_broker_config({
        "auto.leader.rebalance.enable": "false", "leader.imbalance.check.interval.seconds": 30,
        "leader.imbalance.per.broker.percentage": 25, "unclean.leader.election.enable": True,
        "delete.topic.enable": False, "controller.socket.timeout.ms": 1000,
    }, "INTERNAL")
    assert (cfg.inter_broker_listener_name, cfg.auto_leader_rebalance_enable, cfg.leader_imbalance_check_interval_seconds,
            cfg.leader_imbalance_per_broker_percentage, cfg.unclean_leader_election_enable, cfg.delete_topic_enable,
            cfg.controller_socket_timeout_ms) == ("INTERNAL", False, 30.0, 25, True, False, 1000)
    d = ControllerConfig.from_broker_config({}, "PLAINTEXT")
    assert (d.auto_leader_rebalance_enable, d.leader_imbalance_check_interval_seconds,
            d.leader_imbalance_per_broker_percentage, d.unclean_leader_election_enable, d.delete_topic_enable,
            d.controller_socket_timeout_ms, d.candidate_wait_seconds) == (True, 300.0, 10, False, True, 30000, 3.0)
    with pytest.raises(ValueError):
        ControllerConfig.from_broker_config({"delete.topic.enable": "yes"}, "PLAINTEXT")


async def test_event_retried_after_a_lost_connection(cluster: tuple[EmbeddedTree, Harness],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    tree, h = cluster
    real_children = tree.children
    failures = []

    async def flaky_children(path: str, watch: Any = None) -> list[str]:
        if path == zk.BROKER_IDS_PATH and not failures:
            failures.append(path)
            await real_children(path, watch)  # the watch is armed, the answer is lost
            raise SessionLostError(path, "connection loss")
        return await real_children(path, watch)

    monkeypatch.setattr(tree, "children", flaky_children)
    await register_broker(tree, 4)
    await until(lambda: 4 in h.controller.context.live_broker_ids, what="broker 4 seen after the retry")
    assert failures == [zk.BROKER_IDS_PATH] and h.controller.is_active
