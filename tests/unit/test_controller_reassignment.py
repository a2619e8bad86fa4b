"""Partition reassignment in the controller (KIP-455 and /admin/reassign_partitions), on the
embedded tree with a recording channel: what it writes to the topic and state znodes and what
it sends, as the leader (simulated here) brings the new replicas into the ISR."""

from __future__ import annotations

from dataclasses import replace

from kaflet.controller.context import ReplicaAssignment, TopicPartition
from kaflet.metadata import zkdata as zk
from kaflet.metadata.embedded import EmbeddedTree
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode as E
from tests.support.controller import controller_config, register_broker, until
from tests.unit.test_controller import Harness, cluster, create, start, state, tree

__all__ = ["cluster", "tree"]  # fixtures

LAI, UM, SR = ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA, ApiKey.STOP_REPLICA
TP = TopicPartition("moving", 0)


async def _assignment(tree: EmbeddedTree, topic: str = "moving") -> zk.TopicAssignment:
    return zk.parse_topic(topic, (await tree.get(zk.topic_path(topic)))[0])


async def _leader_sets_isr(tree: EmbeddedTree, isr: list[int], topic: str = "moving") -> None:
    """What a leader does when a follower catches up: a conditional write of the state znode."""
    st = await state(tree, topic, 0)
    await tree.set(zk.partition_state_path(topic, 0), zk.partition_state_json(replace(st, isr=isr)), st.zk_version)


def _lai(h: Harness, broker: int) -> list[object]:
    return [p for s in h.channel.requests(LAI, broker) for t in s.request.topic_states for p in t.partition_states]


def _stop(h: Harness, broker: int) -> list[tuple[int, bool]]:
    return [(p.partition_index, p.delete_partition) for s in h.channel.requests(SR, broker)
            for t in s.request.topic_states for p in t.partition_states]


async def test_assignment_algebra() -> None:
    a = ReplicaAssignment.of([1, 2, 3])
    moving = a.reassign_to([3, 4, 2])
    # Kafka's encoding: targets first, then the rest of the original replicas.
    assert moving == ReplicaAssignment.of([3, 4, 2, 1], [4], [1])
    assert (moving.origin_replicas, moving.target_replicas) == ([3, 2, 1], [3, 4, 2])
    assert moving.reassign_to(moving.origin_replicas) == ReplicaAssignment.of([3, 2, 1])
    assert a.reassign_to([1, 2, 3]) == a


async def test_move_completes_when_targets_join_the_isr(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    c = h.controller
    await create(tree, h, "moving", {0: [1, 2]})
    await _leader_sets_isr(tree, [1, 2])
    await h.idle()
    h.channel.clear()
    assert await c.alter_partition_reassignments({("moving", 0): [2, 3]}) == (E.NONE, None, {TP: (E.NONE, None)})
    # U: RS = TRS + ORS with adding and removing, in the topic znode.
    ta = await _assignment(tree)
    assert (ta.partitions, ta.adding_replicas, ta.removing_replicas) == ({0: [2, 3, 1]}, {0: [3]}, {0: [1]})
    # A: leader epoch bumped, LeaderAndIsr to all of RS (is_new for the added replica only).
    st = await state(tree, "moving", 0)
    assert (st.leader, st.isr, st.leader_epoch) == (1, [1, 2], 1)
    for b in (1, 2, 3):
        got = _lai(h, b)
        assert got, f"no LeaderAndIsr to {b}"
        p = got[0]
        assert (p.leader, p.leader_epoch, p.replicas, p.adding_replicas, p.removing_replicas) == (
            1, 1, [2, 3, 1], [3], [1])
        assert p.is_new == (b == 3)
    um = h.channel.requests(UM)[-1].request
    assert [p.replicas for t in um.topic_states for p in t.partition_states] == [[2, 3, 1]]
    assert await c.list_partition_reassignments(None) == (E.NONE, {TP: ReplicaAssignment.of([2, 3, 1], [3], [1])})
    assert await c.list_partition_reassignments([("moving", 0), ("other", 1)]) == (
        E.NONE, {TP: ReplicaAssignment.of([2, 3, 1], [3], [1])})
    assert _stop(h, 1) == []
    h.channel.clear()
    # Broker 3 caught up: the leader adds it to the ISR, the state znode's watch fires.
    await _leader_sets_isr(tree, [1, 2, 3])
    await until(lambda: not c.context.partitions_being_reassigned, what="reassignment complete")
    await h.idle()
    st = await state(tree, "moving", 0)
    # B: the leader moved into TRS (first in-sync target), RR out of the ISR, RS = TRS.
    assert (st.leader, st.isr) == (2, [2, 3])
    ta = await _assignment(tree)
    assert (ta.partitions, ta.adding_replicas, ta.removing_replicas) == ({0: [2, 3]}, {}, {})
    assert (0, True) in _stop(h, 1)
    assert _stop(h, 2) == [] and _stop(h, 3) == []
    assert c.context.partition_full_replica_assignment(TP) == ReplicaAssignment.of([2, 3])
    assert await c.list_partition_reassignments(None) == (E.NONE, {})
    um = h.channel.requests(UM)[-1].request
    assert [(p.leader, p.replicas) for t in um.topic_states for p in t.partition_states] == [(2, [2, 3])]


async def test_cancel_returns_to_the_original_replicas(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    c = h.controller
    await create(tree, h, "moving", {0: [1, 2]})
    assert (await c.alter_partition_reassignments({("moving", 0): [2, 3]}))[2] == {TP: (E.NONE, None)}
    h.channel.clear()
    assert await c.alter_partition_reassignments({("moving", 0): None}) == (E.NONE, None, {TP: (E.NONE, None)})
    ta = await _assignment(tree)
    assert (ta.partitions, ta.adding_replicas, ta.removing_replicas) == ({0: [2, 1]}, {}, {})
    # The replica being added is stopped and deleted.
    assert (0, True) in _stop(h, 3)
    assert not c.context.partitions_being_reassigned
    st = await state(tree, "moving", 0)
    assert st.leader == 1
    # Nothing left to cancel.
    assert (await c.alter_partition_reassignments({("moving", 0): None}))[2] == {
        TP: (E.NO_REASSIGNMENT_IN_PROGRESS, None)}


async def test_bad_requests_get_kafkas_errors(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    c = h.controller
    await create(tree, h, "moving", {0: [1, 2]})
    err, _msg, results = await c.alter_partition_reassignments({
        ("moving", 0): [], ("moving", 1): [1, 1], ("moving", 2): [-1], ("moving", 3): [1, 9],
        ("nosuch", 0): [1, 2]})
    assert err == E.NONE
    codes = {(tp.topic, tp.partition): code for tp, (code, _m) in results.items()}
    assert codes == {("moving", 0): E.INVALID_REPLICA_ASSIGNMENT, ("moving", 1): E.INVALID_REPLICA_ASSIGNMENT,
                     ("moving", 2): E.INVALID_REPLICA_ASSIGNMENT, ("moving", 3): E.INVALID_REPLICA_ASSIGNMENT,
                     ("nosuch", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert "not alive" in (results[TopicPartition("moving", 3)][1] or "")
    assert (await _assignment(tree)).partitions == {0: [1, 2]}
    assert not c.context.partitions_being_reassigned


async def test_zookeeper_reassignment_runs_and_its_node_is_deleted(cluster: tuple[EmbeddedTree, Harness]) -> None:
    tree, h = cluster
    c = h.controller
    await create(tree, h, "moving", {0: [1, 2]})
    await tree.create(zk.REASSIGN_PARTITIONS_PATH, zk.reassign_partitions_json(
        {("moving", 0): [3, 2], ("nosuch", 0): [1]}))
    await until(lambda: TP in c.context.partitions_being_reassigned, what="reassignment started")
    await h.idle()
    # The unknown partition failed and left the node; ours stays until it is done.
    assert zk.parse_reassign_partitions((await tree.get(zk.REASSIGN_PARTITIONS_PATH))[0]) == {("moving", 0): [3, 2]}
    assert (await _assignment(tree)).partitions == {0: [3, 2, 1]}
    await _leader_sets_isr(tree, [1, 2, 3])
    await until(lambda: not c.context.partitions_being_reassigned, what="reassignment complete")
    await h.idle()
    assert await tree.exists(zk.REASSIGN_PARTITIONS_PATH) is None
    assert (await _assignment(tree)).partitions == {0: [3, 2]}
    st = await state(tree, "moving", 0)
    assert (st.leader, st.isr) == (3, [2, 3])
    # The watch is back: a second reassignment through ZooKeeper runs too.
    await tree.create(zk.REASSIGN_PARTITIONS_PATH, zk.reassign_partitions_json({("moving", 0): [3, 2]}))

    async def gone() -> bool:
        return await tree.exists(zk.REASSIGN_PARTITIONS_PATH) is None

    await until(gone, what="no-op reassignment removed")


async def test_new_controller_resumes_a_reassignment(tree: EmbeddedTree) -> None:
    for b in (1, 2, 3):
        await register_broker(tree, b)
    h1 = await start(tree, 1)
    await create(tree, h1, "moving", {0: [1, 2]})
    assert (await h1.controller.alter_partition_reassignments({("moving", 0): [2, 3]}))[2] == {TP: (E.NONE, None)}
    await h1.controller.shutdown()
    h2 = await Harness(tree, 2, controller_config()).start()
    try:
        await until(lambda: h2.controller.is_active, what="takeover")
        await h2.idle()
        c = h2.controller
        assert c.context.partitions_being_reassigned == {TP}
        # Resumed: LeaderAndIsr with the reassignment's replica set to all of RS.
        assert [p.adding_replicas for p in _lai(h2, 3)][-1] == [3]
        await _leader_sets_isr(tree, [1, 2, 3])
        await until(lambda: not c.context.partitions_being_reassigned, what="reassignment complete")
        await h2.idle()
        assert (await _assignment(tree)).partitions == {0: [2, 3]}
        assert (0, True) in _stop(h2, 1)
    finally:
        await h2.controller.shutdown()
