"""Topic lifecycle writes (kaflet.controller.topics) on the embedded backend."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kaflet.controller import topics as ct
from kaflet.metadata import zkdata as zk
from kaflet.metadata.embedded import EmbeddedTree
from kaflet.metadata.tree import MetadataTree

BROKERS = [(1, None), (2, None), (3, None)]


@pytest.fixture
async def tree(tmp_path: Path) -> AsyncIterator[MetadataTree]:
    t = await EmbeddedTree.open(tmp_path)
    await ct.ensure_persistent_paths(t)
    yield t
    await t.close()


async def test_create_topic_writes_kafka_layout(tree: MetadataTree) -> None:
    res = await ct.create_topic(tree, "orders", 3, 2, {"retention.ms": "1000"}, BROKERS, rng=random.Random(1))
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


async def test_thousand_partitions_in_one_multi(tree: MetadataTree, monkeypatch: pytest.MonkeyPatch) -> None:
    # However many partitions, the topic is one multi of two nodes (the assignment is one node).
    writes: list[tuple[str, int]] = []
    for name in ("create", "set", "delete", "multi"):
        real = getattr(tree, name)

        async def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            writes.append((_name, len(args[0]) if _name == "multi" else 1))
            return await _real(*args, **kwargs)

        monkeypatch.setattr(tree, name, counted)
    res = await ct.create_topic(tree, "wide", 1000, 3, {}, BROKERS)
    assert writes == [("multi", 2)]  # config, topic
    assert len(res.assignment) == 1000
    assert len(await _assignment(tree, "wide")) == 1000


async def _assignment(tree: MetadataTree, name: str) -> dict[int, list[int]]:
    return zk.parse_topic(name, (await tree.get(zk.topic_path(name)))[0]).partitions


async def test_add_partitions(tree: MetadataTree) -> None:
    res = await ct.create_topic(tree, "g", 2, 2, {}, BROKERS, assignment=None, rng=random.Random(3))
    stat = await tree.exists("/brokers/topics/g")
    full = await ct.add_partitions(tree, "g", 5, BROKERS)
    assert len(full) == 5 and {p: full[p] for p in (0, 1)} == res.assignment
    assert all(len(r) == 2 and len(set(r)) == 2 for r in full.values())
    raw = await tree.get("/brokers/topics/g")
    assert zk.parse_topic("g", raw[0]).topic_id == res.topic_id and await _assignment(tree, "g") == full
    # Only the assignment changes, conditionally on its version (Kafka's AdminZkClient); the
    # controller creates the partition state nodes.
    assert stat is not None and raw[1].version == stat.version + 1
    assert await tree.exists("/brokers/topics/g/partitions") is None

    manual = await ct.add_partitions(tree, "g", 7, BROKERS, assignment=[[1, 2], [3, 1]])
    assert manual[5] == [1, 2] and manual[6] == [3, 1]
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
    assert len(v) == 9 and len(await _assignment(tree, "g")) == 7


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
    # Only marked: the controller deletes the replicas, then the topic's nodes.
    assert await tree.exists("/brokers/topics/d") is not None and await tree.exists("/config/topics/d") is not None
    with pytest.raises(ct.UnknownTopicOrPartitionError, match="Topic `x` to delete does not exist"):
        await ct.delete_topic(tree, "x")


async def test_leftover_config_is_overwritten(tree: MetadataTree) -> None:
    await tree.create("/config/topics/left", zk.entity_config_json({"old": "1"}))
    await ct.create_topic(tree, "left", 1, 1, {"new": "2"}, BROKERS)
    assert zk.parse_entity_config((await tree.get("/config/topics/left"))[0]) == {"new": "2"}
