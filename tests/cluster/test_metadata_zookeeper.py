"""The ZooKeeper backend and the topic lifecycle against a real ZooKeeper server."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from typing import Any

import pytest
from kazoo.client import KazooClient

from kaflet.controller import topics as ct
from kaflet.metadata import zkdata as zk
from kaflet.metadata.zk_testing import ZooKeeperServer
from kaflet.metadata.zookeeper import ZooKeeperTree, split_chroot
from tests.support.controller import until

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


async def test_an_outage_of_zookeeper_is_one_warning_and_one_recovery(caplog: pytest.LogCaptureFixture) -> None:
    """kazoo logs two lines at every attempt to reach a server; while the server is down the
    tree turns them into one warning, DEBUG lines, and one line when it is back. It tries at
    least once a second or so, as Kafka's client does, so the session outlives the outage: a
    restarted ensemble gives each session its timeout anew. (kazoo's default doubles the pause up
    to an hour: its twelfth attempt came after 400 s, and a 100 s outage cost the session.)"""
    caplog.set_level(logging.DEBUG)
    with ZooKeeperServer() as server:
        tree = await ZooKeeperTree.connect(server.connect_string, session_timeout=10.0)
        try:
            await tree.create("/before", b"1", ephemeral=True)
            await asyncio.to_thread(server.terminate)
            await until(lambda: tree.outage.attempts >= 12, timeout=120, what="twelve failed attempts")
            attempts = tree.outage.attempts
            await asyncio.to_thread(server.restart)
            await until(lambda: not tree.outage.failing, timeout=60, what="the reconnection")
            assert (await tree.get("/before"))[0] == b"1"  # the same session, back: its ephemeral node is there
        finally:
            await tree.close()
    target = f"ZooKeeper connection to {server.connect_string}"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len([w for w in warnings if target in w]) == 1, warnings
    kazoo_lines = ("Connection dropped", "Connection time-out", "Transition to CONNECTING")
    assert not [w for w in warnings if target not in w and w.startswith(kazoo_lines)], warnings
    [recovered] = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and target in r.getMessage()]
    assert "recovered after" in recovered
    assert int(recovered.split("recovered after ")[1].split(" ")[0]) >= attempts


def test_a_process_out_of_descriptors_keeps_its_session(zk_connect: str) -> None:
    """Waiting on its connection to ZooKeeper needs no new descriptor: a broker that has run out
    of them keeps its session (and with it its registration and leaderships) and still reads,
    as Kafka's client on one long-lived selector does. kazoo's own wait opened an epoll
    descriptor each time; starved, it dropped the connection and the session expired."""
    session_s = 3.0
    done = subprocess.run([sys.executable, "-m", "tests.support.zk_starved", zk_connect, str(session_s)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    assert seen["held"] > 0, seen  # it did run out
    assert seen["states"] == [] and seen["reads"] == ["x"] * 6, (seen, done.stderr[-3000:])
    assert seen["after"] == seen["before"] == seen["owner"], seen
