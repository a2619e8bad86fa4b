"""Topic lifecycle writes (kaflet.controller.topics) on the embedded backend."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kaflet.controller import topics as ct
from kaflet.metadata import zkdata as zk
from kaflet.metadata.embedded import EmbeddedTree
from kaflet.metadata.tree import BadVersionError, CheckOp, MetadataTree

BROKERS = [(1, None), (2, None), (3, None)]


@pytest.fixture
async def tree(tmp_path: Path) -> AsyncIterator[MetadataTree]:
    t = await EmbeddedTree.open(tmp_path)
    await ct.ensure_persistent_paths(t)
    yield t
    await t.close()


async def test_create_topic_writes_kafka_layout(tree: MetadataTree) -> None:
    res = await ct.create_topic(
        tree, "orders", 3, 2, {"retention.ms": "1000"}, BROKERS, controller_epoch=4, rng=random.Random(1)
    )
    assert len(res.topic_id) == 22 and res.topic_id != zk.ZERO_UUID
    assert sorted(res.assignment) == [0, 1, 2]
    cfg, _ = await tree.get("/config/topics/orders")
    assert cfg == b'{"version":1,"config":{"retention.ms":"1000"}}'
    raw, _ = await tree.get("/brokers/topics/orders")
    obj = json.loads(raw)
    assert obj["version"] == 3 and obj["topic_id"] == res.topic_id
    assert obj["partitions"] == {str(p): r for p, r in res.assignment.items()}
    assert obj["adding_replicas"] == {} and obj["removing_replicas"] == {}
    # As Kafka's AdminZkClient: no partition nodes; the controller creates them.
    assert await tree.exists("/brokers/topics/orders/partitions") is None
    # Both nodes were written in one transaction.
    zx = {(await tree.exists(p)).czxid for p in ("/config/topics/orders", "/brokers/topics/orders")}  # type: ignore[union-attr]
    assert len(zx) == 1


async def test_create_topic_with_partition_states(tree: MetadataTree) -> None:
    """The broker's mode until it runs the controller: the state nodes are written too."""
    res = await ct.create_topic(
        tree, "orders", 3, 2, {}, BROKERS, controller_epoch=4, rng=random.Random(1), write_partition_states=True
    )
    assert (await tree.get("/brokers/topics/orders/partitions"))[0] is None
    assert (await tree.get("/brokers/topics/orders/partitions/0"))[0] is None
    for p, reps in res.assignment.items():
        data, stat = await tree.get(f"/brokers/topics/orders/partitions/{p}/state")
        assert data == zk.partition_state_json(zk.LeaderAndIsr(reps[0], 0, reps, 4))
        assert stat.version == 0
    zx = {(await tree.exists(p)).czxid  # type: ignore[union-attr]
          for p in ("/brokers/topics/orders", "/brokers/topics/orders/partitions/2/state")}
    assert len(zx) == 1


async def test_create_topic_leader_is_first_live_replica(tree: MetadataTree) -> None:
    res = await ct.create_topic(
        tree, "t", None, None, {}, [(2, None), (3, None)], assignment={0: [1, 2, 3], 1: [1, 4, 5]},
        write_partition_states=True,
    )
    meta = (await ct.list_topics(tree))["t"]
    assert res.assignment == {0: [1, 2, 3], 1: [1, 4, 5]}
    assert meta.partition_states[0].leader == 2 and meta.partition_states[0].isr == [2, 3]
    # No live replica: no leader, every (empty) replica counts as in sync.
    assert meta.partition_states[1].leader == -1 and meta.partition_states[1].isr == [1, 4, 5]


async def test_create_topic_errors(tree: MetadataTree) -> None:
    await ct.create_topic(tree, "a_b", 1, 1, {}, BROKERS)
    with pytest.raises(ct.TopicExistsError) as ei:
        await ct.create_topic(tree, "a_b", 1, 1, {}, BROKERS)
    assert ei.value.error_code == 36 and ei.value.message == "Topic 'a_b' already exists."
    with pytest.raises(ct.TopicCollisionError) as ec:
        await ct.create_topic(tree, "a.b", 1, 1, {}, BROKERS)
    assert ec.value.error_code == 17 and "collides with existing topics: a_b" in ec.value.message
    with pytest.raises(ct.InvalidTopicError):
        await ct.create_topic(tree, "bad name", 1, 1, {}, BROKERS)
    with pytest.raises(ct.InvalidReplicationFactorError) as er:
        await ct.create_topic(tree, "big", 1, 4, {}, BROKERS)
    assert er.value.error_code == 38
    with pytest.raises(ct.InvalidPartitionsError) as ep:
        await ct.create_topic(tree, "zero", 0, 1, {}, BROKERS)
    assert ep.value.error_code == 37
    with pytest.raises(ct.InvalidReplicaAssignmentError) as ea:
        await ct.create_topic(tree, "dup", None, None, {}, BROKERS, assignment={0: [1, 1]})
    assert ea.value.error_code == 39
    assert set(await tree.children("/brokers/topics")) == {"a_b"}


async def test_validate_only_writes_nothing(tree: MetadataTree) -> None:
    res = await ct.create_topic(tree, "v", 4, 3, {}, BROKERS, validate_only=True)
    assert res.topic_id == zk.ZERO_UUID and len(res.assignment) == 4
    assert await tree.exists("/brokers/topics/v") is None
    assert await tree.exists("/config/topics/v") is None


async def test_fence_check_blocks_deposed_controller(tree: MetadataTree) -> None:
    await tree.create("/controller_epoch", b"1")
    await tree.set("/controller_epoch", b"2")
    with pytest.raises(BadVersionError):
        await ct.create_topic(tree, "f", 1, 1, {}, BROKERS, fence=[CheckOp("/controller_epoch", 0)])
    assert await tree.exists("/brokers/topics/f") is None
    await ct.create_topic(tree, "f", 1, 1, {}, BROKERS, fence=[CheckOp("/controller_epoch", 1)])


async def test_thousand_partitions_in_one_multi(tree: MetadataTree, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every node of the topic is written by one multi (one transaction), never node by node.
    writes: list[tuple[str, int]] = []
    for name in ("create", "set", "delete", "multi"):
        real = getattr(tree, name)

        async def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            writes.append((_name, len(args[0]) if _name == "multi" else 1))
            return await _real(*args, **kwargs)

        monkeypatch.setattr(tree, name, counted)
    res = await ct.create_topic(tree, "wide", 1000, 3, {}, BROKERS, write_partition_states=True)
    assert writes == [("multi", 3 + 2 * 1000)]  # config, topic, partitions, then partition + state each
    assert len(res.assignment) == 1000
    assert len(await tree.children("/brokers/topics/wide/partitions")) == 1000


async def test_add_partitions(tree: MetadataTree) -> None:
    res = await ct.create_topic(tree, "g", 2, 2, {}, BROKERS, assignment=None, rng=random.Random(3),
                                write_partition_states=True)
    full = await ct.add_partitions(tree, "g", 5, BROKERS, write_partition_states=True)
    assert len(full) == 5 and {p: full[p] for p in (0, 1)} == res.assignment
    assert all(len(r) == 2 and len(set(r)) == 2 for r in full.values())
    meta = await ct.get_topic(tree, "g")
    assert meta is not None and meta.topic_id == res.topic_id and meta.assignment == full
    assert sorted(meta.partition_states) == [0, 1, 2, 3, 4]

    stat = await tree.exists("/brokers/topics/g")
    manual = await ct.add_partitions(tree, "g", 7, BROKERS, assignment=[[1, 2], [3, 1]])
    assert manual[5] == [1, 2] and manual[6] == [3, 1]
    # Without write_partition_states only the assignment changes (Kafka's AdminZkClient).
    assert (await tree.exists("/brokers/topics/g")).version == stat.version + 1  # type: ignore[union-attr]
    assert await tree.exists("/brokers/topics/g/partitions/5") is None
    with pytest.raises(ct.InvalidPartitionsError, match="Topic already has 7 partitions."):
        await ct.add_partitions(tree, "g", 7, BROKERS)
    with pytest.raises(ct.InvalidPartitionsError, match="which is higher than the requested 3"):
        await ct.add_partitions(tree, "g", 3, BROKERS)
    with pytest.raises(ct.InvalidReplicaAssignmentError, match="Unknown broker"):
        await ct.add_partitions(tree, "g", 8, BROKERS, assignment=[[1, 9]])
    with pytest.raises(ct.InvalidReplicaAssignmentError, match="but 2 assignments provided"):
        await ct.add_partitions(tree, "g", 8, BROKERS, assignment=[[1, 2], [2, 3]])
    with pytest.raises(ct.InvalidReplicaAssignmentError, match="Inconsistent replication factor"):
        await ct.add_partitions(tree, "g", 8, BROKERS, assignment=[[1, 2, 3]])
    with pytest.raises(ct.UnknownTopicOrPartitionError) as eu:
        await ct.add_partitions(tree, "nope", 8, BROKERS)
    assert eu.value.error_code == 3
    v = await ct.add_partitions(tree, "g", 9, BROKERS, validate_only=True)
    assert len(v) == 9 and len((await ct.get_topic(tree, "g")).assignment) == 7  # type: ignore[union-attr]


async def test_add_partitions_refused_during_reassignment(tree: MetadataTree) -> None:
    await ct.create_topic(tree, "r", None, None, {}, BROKERS, assignment={0: [1, 2]})
    raw = zk.topic_json({0: [1, 2, 3]}, zk.random_uuid(), adding_replicas={0: [3]})
    await tree.set("/brokers/topics/r", raw)
    with pytest.raises(ct.ReassignmentInProgressError):
        await ct.add_partitions(tree, "r", 2, BROKERS)


async def test_delete_flow(tree: MetadataTree) -> None:
    await ct.create_topic(tree, "d", 2, 1, {"a": "b"}, BROKERS)
    await ct.delete_topic(tree, "d")
    await ct.delete_topic(tree, "d")  # already marked: fine
    assert (await tree.get("/admin/delete_topics/d"))[0] is None
    assert (await ct.list_topics(tree))["d"].marked_for_deletion
    with pytest.raises(ct.UnknownTopicOrPartitionError, match="Topic `x` to delete does not exist"):
        await ct.delete_topic(tree, "x")
    await ct.complete_topic_deletion(tree, "d")
    await ct.complete_topic_deletion(tree, "d")  # idempotent
    for p in ("/brokers/topics/d", "/config/topics/d", "/admin/delete_topics/d"):
        assert await tree.exists(p) is None
    assert await ct.list_topics(tree) == {}
    # The name can be used again, with a new id.
    await ct.create_topic(tree, "d", 1, 1, {}, BROKERS)


async def test_leftover_config_is_overwritten(tree: MetadataTree) -> None:
    await tree.create("/config/topics/left", zk.entity_config_json({"old": "1"}))
    await ct.create_topic(tree, "left", 1, 1, {"new": "2"}, BROKERS)
    assert zk.parse_entity_config((await tree.get("/config/topics/left"))[0]) == {"new": "2"}


class Events:
    def __init__(self) -> None:
        self.log: list[tuple[str, str, object]] = []

    async def changed(self, name: str, meta: ct.TopicMeta) -> None:
        self.log.append(("changed", name, meta))

    async def deleted(self, name: str) -> None:
        self.log.append(("deleted", name, None))

    def kinds(self) -> list[tuple[str, str]]:
        return [(k, n) for k, n, _ in self.log]


async def test_topic_watcher(tree: MetadataTree) -> None:
    await ct.create_topic(tree, "pre", 1, 1, {}, BROKERS)
    await ct.create_topic(tree, "doomed", 1, 1, {}, BROKERS)
    await ct.delete_topic(tree, "doomed")
    ev = Events()
    w = ct.TopicWatcher(tree, ev.changed, ev.deleted)
    await w.start()
    try:
        # Start: deletions first, then existing topics.
        assert ev.kinds() == [("deleted", "doomed"), ("changed", "pre")]
        ev.log.clear()

        created = await ct.create_topic(tree, "new", 2, 2, {}, BROKERS, write_partition_states=True)
        await w.wait_idle()
        assert ev.kinds() == [("changed", "new")]
        meta = ev.log[0][2]
        assert isinstance(meta, ct.TopicMeta)
        assert meta.topic_id == created.topic_id and sorted(meta.partition_states) == [0, 1]
        ev.log.clear()

        await ct.add_partitions(tree, "new", 4, BROKERS)
        await w.wait_idle()
        assert ev.kinds() == [("changed", "new")]
        assert len(ev.log[0][2].assignment) == 4  # type: ignore[union-attr]
        ev.log.clear()

        await ct.delete_topic(tree, "new")
        await w.wait_idle()
        assert ev.kinds() == [("deleted", "new")]
        ev.log.clear()
        await ct.complete_topic_deletion(tree, "new")
        await ct.complete_topic_deletion(tree, "doomed")
        await w.wait_idle()
        assert ev.log == []  # no second deletion report

        # Recreated under the same name: reported as a new topic.
        again = await ct.create_topic(tree, "new", 1, 1, {}, BROKERS)
        await w.wait_idle()
        assert ev.kinds() == [("changed", "new")]
        assert ev.log[0][2].topic_id == again.topic_id  # type: ignore[union-attr]
        ev.log.clear()

        # Removed without a deletion mark (e.g. by an operator): still reported.
        await tree.delete("/brokers/topics/pre", recursive=True)
        await w.wait_idle()
        assert ev.kinds() == [("deleted", "pre")]
    finally:
        await w.stop()


async def test_topic_watcher_without_paths(tmp_path: Path) -> None:
    t = await EmbeddedTree.open(tmp_path)
    ev = Events()
    w = ct.TopicWatcher(t, ev.changed, ev.deleted)
    try:
        await w.start()
        assert ev.log == []
        await ct.create_topic(t, "late", 1, 1, {}, BROKERS)
        await w.wait_idle()
        await asyncio.sleep(0.05)
        await w.wait_idle()
        assert ev.kinds() == [("changed", "late")]
    finally:
        await w.stop()
        await t.close()
