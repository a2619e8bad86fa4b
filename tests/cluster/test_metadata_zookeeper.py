"""The ZooKeeper backend and the topic lifecycle against a real ZooKeeper server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kazoo.client import KazooClient

from kaflet.controller import topics as ct
from kaflet.metadata import zkdata as zk
from kaflet.metadata.zk_testing import ZooKeeperServer
from kaflet.metadata.zookeeper import ZooKeeperTree, split_chroot

BROKERS = [(1, None), (2, None), (3, None)]


def test_split_chroot() -> None:
    assert split_chroot("h1:2181,h2:2181/kafka/prod") == ("h1:2181,h2:2181", "/kafka/prod")
    assert split_chroot("h1:2181") == ("h1:2181", "")
    assert split_chroot("h1:2181/") == ("h1:2181", "")


async def test_chroot_is_created_and_used(zk_server: ZooKeeperServer, zk_connect: str) -> None:
    tree = await ZooKeeperTree.connect(zk_connect)
    try:
        await tree.create("/inside", b"x")
    finally:
        await tree.close()
    chroot = split_chroot(zk_connect)[1]
    raw = KazooClient(zk_server.connect_string)
    raw.start(10)
    try:
        assert raw.get(f"{chroot}/inside")[0] == b"x"
    finally:
        raw.stop()
        raw.close()


async def test_topic_layout_on_zookeeper(zk_tree: ZooKeeperTree, monkeypatch: pytest.MonkeyPatch) -> None:
    await ct.ensure_persistent_paths(zk_tree)
    for path in zk.PERSISTENT_PATHS:
        data, _ = await zk_tree.get(path)
        assert data is None  # Kafka's containers have null data
    # A 1,000-partition topic is one multi of two nodes, well within ZooKeeper's request size.
    multis: list[int] = []
    real_multi = zk_tree.multi

    async def counted(ops: Any) -> Any:
        multis.append(len(ops))
        return await real_multi(ops)

    monkeypatch.setattr(zk_tree, "multi", counted)
    res = await ct.create_topic(zk_tree, "wide", 1000, 3, {"cleanup.policy": "compact"}, BROKERS)
    assert multis == [2]
    k = zk_tree.kazoo
    data, _ = await asyncio.to_thread(k.get, "/brokers/topics/wide")
    obj = json.loads(data)
    assert obj["topic_id"] == res.topic_id and len(obj["partitions"]) == 1000
    assert obj["partitions"]["999"] == res.assignment[999]
    assert (await asyncio.to_thread(k.get, "/config/topics/wide"))[0] == (
        b'{"version":1,"config":{"cleanup.policy":"compact"}}'
    )
    # The controller, not the admin path, creates the partition state nodes.
    assert await asyncio.to_thread(k.exists, "/brokers/topics/wide/partitions") is None
    grown = await ct.add_partitions(zk_tree, "wide", 1002, BROKERS)
    obj = json.loads((await asyncio.to_thread(k.get, "/brokers/topics/wide"))[0])
    assert len(obj["partitions"]) == 1002 and obj["partitions"]["1001"] == grown[1001]
    await ct.delete_topic(zk_tree, "wide")
    assert await asyncio.to_thread(k.exists, "/admin/delete_topics/wide") is not None


async def test_session_expiry_calls_hook_and_drops_ephemerals(
    zk_server: ZooKeeperServer, zk_connect: str
) -> None:
    lost = asyncio.Event()
    tree = await ZooKeeperTree.connect(zk_connect, session_timeout=4.0, on_session_lost=lost.set)
    observer = await ZooKeeperTree.connect(zk_connect)
    try:
        await tree.create("/brokers/ids/1", b"{}", ephemeral=True, make_parents=True)
        assert (await observer.exists("/brokers/ids/1")) is not None
        # The classic way to expire a session: open a second connection with the same session
        # id and password, then close it.
        sid, passwd = tree.kazoo.client_id
        other = KazooClient(zk_server.connect_string, client_id=(sid, passwd))
        await asyncio.to_thread(other.start, 10)
        await asyncio.to_thread(other.stop)
        other.close()
        await asyncio.wait_for(lost.wait(), 20)
        assert await observer.exists("/brokers/ids/1") is None
    finally:
        await tree.close()
        await observer.close()
