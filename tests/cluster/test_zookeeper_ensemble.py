"""The ZooKeeper test servers themselves: a standalone server and a 3-node ensemble on loopback,
killed, stopped and restarted by PID, with readiness and leadership read from ``srvr``."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from kaflet.metadata.zk_testing import ZooKeeperEnsemble, ZooKeeperServer

pytestmark = pytest.mark.timeout(120)


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def kazoo(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=10.0)
    client.start(timeout=15)
    return client


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[ZooKeeperEnsemble]:
    ens = ZooKeeperEnsemble(3, tick_time_ms=500, base_dir=tmp_path / "zk")
    ens.start()
    try:
        yield ens
    finally:
        ens.stop()


def test_standalone_server_restarts_on_its_data(tmp_path: Path) -> None:
    server = ZooKeeperServer(data_dir=tmp_path / "zk").start()
    try:
        assert server.mode() == "standalone"
        client = kazoo(server.connect_string)
        client.create("/kept", b"v1")
        client.stop()
        client.close()
        first_pid = server.pid
        assert first_pid is not None
        assert server.restart(hard=True) == "standalone"
        assert pid_gone(first_pid) and server.pid != first_pid
        client = kazoo(server.connect_string)
        try:
            assert client.get("/kept")[0] == b"v1"
        finally:
            client.stop()
            client.close()
    finally:
        pid = server.pid
        server.stop()
    assert pid is not None and pid_gone(pid)
    assert (tmp_path / "zk" / "data").is_dir()  # a caller's directory is the caller's to remove


def test_ensemble_forms_with_one_leader(ensemble: ZooKeeperEnsemble) -> None:
    modes = ensemble.modes()
    assert sorted(m or "down" for m in modes.values()) == ["follower", "follower", "leader"], modes
    leader = ensemble.leader_id()
    assert leader is not None and modes[leader] == "leader"
    for myid, server in ensemble.servers.items():
        assert (server.base_dir / "data" / "myid").read_text().strip() == str(myid)
        assert server.base_dir.parent == ensemble.base_dir
    assert len(set(ensemble.pids().values())) == 3
    # Every node serves the same tree: write through one, read through each.
    writer = kazoo(ensemble.servers[1].connect_string)
    try:
        writer.create("/shared", b"x")
    finally:
        writer.stop()
        writer.close()
    for server in ensemble.servers.values():
        reader = kazoo(server.connect_string)
        try:
            reader.sync("/shared")
            assert reader.get("/shared")[0] == b"x"
        finally:
            reader.stop()
            reader.close()


def test_leader_killed_then_restarted(ensemble: ZooKeeperEnsemble) -> None:
    client = kazoo(ensemble.connect_string)
    try:
        client.create("/before", b"1")
        old = ensemble.leader_id()
        assert old is not None
        old_pid = ensemble.pids()[old]
        ensemble.kill(old)
        assert pid_gone(old_pid) and not ensemble.servers[old].alive
        new = ensemble.wait_for_leader(timeout=30, exclude=(old,))
        assert new != old
        assert ensemble.modes()[old] is None
        # The session survives the failover and the quorum of two accepts writes.
        deadline = time.monotonic() + 20
        while True:
            try:
                client.create("/after", b"2")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert ensemble.restart(old) == "follower"
        assert ensemble.leader_id() == new
        rejoined = kazoo(ensemble.servers[old].connect_string)
        try:
            rejoined.sync("/after")
            assert rejoined.get("/before")[0] == b"1" and rejoined.get("/after")[0] == b"2"
        finally:
            rejoined.stop()
            rejoined.close()
    finally:
        client.stop()
        client.close()


def test_follower_stopped_and_quorum_loss(ensemble: ZooKeeperEnsemble) -> None:
    leader = ensemble.leader_id()
    followers = [myid for myid in ensemble.servers if myid != leader]
    ensemble.stop_server(followers[0])  # SIGTERM
    assert ensemble.leader_id() == leader  # two of three still make a quorum
    ensemble.kill(followers[1])
    # Alone, the last server stops serving; srvr says so while ruok still answers imok.
    survivor = ensemble.servers[leader] if leader is not None else ensemble.servers[1]
    deadline = time.monotonic() + 30
    while survivor.mode() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert survivor.mode() is None
    assert survivor.four_letter("ruok") == "imok"
    assert "not currently serving" in (survivor.four_letter("srvr") or "")
    # Bring both back: the quorum forms again with one leader.
    for myid in followers:
        ensemble.restart(myid, timeout=30)
    ensemble.wait_for_leader(timeout=30)
    assert sorted(m or "down" for m in ensemble.modes().values()) == ["follower", "follower", "leader"]


def test_stop_leaves_no_process(tmp_path: Path) -> None:
    ens = ZooKeeperEnsemble(3, base_dir=tmp_path / "zk").start()
    pids = list(ens.pids().values())
    assert len(pids) == 3
    ens.stop()
    assert all(pid_gone(pid) for pid in pids)
    assert ens.pids() == {}


async def test_tree_watches_survive_losing_the_server(ensemble: ZooKeeperEnsemble) -> None:
    """kazoo drops its watches when the connection to a server breaks; the metadata tree sets
    them again once reconnected and fires each for what happened meanwhile, as ZooKeeper's own
    client does: a deletion as a deletion (the controller elects on it), a creation as a
    creation, a change as a change, and nothing for a node left alone (its watch still set)."""
    import asyncio

    from kaflet.metadata.tree import CreateOp, DeleteOp, EventType, WatchEvent
    from kaflet.metadata.zookeeper import ZooKeeperTree

    watched = await ZooKeeperTree.connect(ensemble.connect_string, session_timeout=10)
    writer = await ZooKeeperTree.connect(ensemble.connect_string, session_timeout=10)
    loop = asyncio.get_running_loop()

    async def until(what: str, predicate: Callable[[], bool]) -> None:
        deadline = loop.time() + 30
        while not predicate():
            assert loop.time() < deadline, f"{what} never fired"
            await asyncio.sleep(0.05)

    try:
        await watched.ensure_path("/w")
        for path in ("/deleted", "/changed", "/untouched"):
            await watched.create(path, b"0")
        fired: dict[str, list[WatchEvent]] = {p: [] for p in ("/w", "/deleted", "/created", "/changed", "/untouched")}
        await watched.children("/w", watch=fired["/w"].append)
        await watched.get("/deleted", watch=fired["/deleted"].append)
        assert await watched.exists("/created", watch=fired["/created"].append) is None
        await watched.exists("/changed", watch=fired["/changed"].append)
        await watched.get("/untouched", watch=fired["/untouched"].append)
        # More watches than are set again at once: every one still gets its own answer.
        many = [f"/many/n{i}" for i in range(250)]
        await watched.multi([CreateOp("/many", None), *(CreateOp(path, b"0") for path in many)])
        for path in many:
            fired[path] = []
            await watched.exists(path, watch=fired[path].append)

        port = watched.kazoo._connection._socket.getpeername()[1]
        ensemble.kill(next(i for i in (1, 2, 3) if ensemble.server(i).port == port))
        await writer.create("/w/child", b"")
        await writer.delete("/deleted")
        await writer.create("/created", b"")
        await writer.set("/changed", b"1")
        await writer.multi([DeleteOp(path) for path in many[::2]])

        for path in ("/w", "/deleted", "/created", "/changed", *many[::2]):
            await until(f"the watch on {path}", lambda p=path: bool(fired[p]))  # type: ignore[misc]
        assert fired["/w"] == [WatchEvent(EventType.CHILD, "/w")]
        assert fired["/deleted"] == [WatchEvent(EventType.DELETED, "/deleted")]
        assert fired["/created"] == [WatchEvent(EventType.CREATED, "/created")]
        assert fired["/changed"] == [WatchEvent(EventType.CHANGED, "/changed")]
        assert await watched.children("/w") == ["child"]
        assert all(fired[path] == [WatchEvent(EventType.DELETED, path)] for path in many[::2])

        # The untouched node's watch was set again without firing: its first event is this change.
        await writer.set("/untouched", b"1")
        await until("the watch on /untouched", lambda: bool(fired["/untouched"]))
        assert fired["/untouched"] == [WatchEvent(EventType.CHANGED, "/untouched")]
        assert all(fired[path] == [] for path in many[1::2])
    finally:
        await watched.close()
        await writer.close()


async def test_a_child_watch_set_again_fires_once_for_a_change_right_after(ensemble: ZooKeeperEnsemble) -> None:
    """A child created just after the tree sets a dropped child watch again fires that watch,
    and the tree's check for what was missed while disconnected does not report it a second
    time (it reads the parent's pzxid in the same request that sets the watch)."""
    import asyncio

    from kaflet.metadata.tree import EventType, WatchEvent
    from kaflet.metadata.zookeeper import ZooKeeperTree

    watched = await ZooKeeperTree.connect(ensemble.connect_string, session_timeout=10)
    writer = await ZooKeeperTree.connect(ensemble.connect_string, session_timeout=10)
    try:
        await watched.ensure_path("/v")
        fired: list[WatchEvent] = []
        await watched.children("/v", watch=fired.append)
        set_again = watched._children_and_stat

        async def then_a_child(path: str, watch: Callable[[WatchEvent], None]) -> tuple[list[str], object]:
            answer = await set_again(path, watch)
            await writer.create("/v/late", b"")  # after the watch is set again, before anything else
            return answer

        watched._children_and_stat = then_a_child  # type: ignore[assignment,method-assign]
        port = watched.kazoo._connection._socket.getpeername()[1]
        ensemble.kill(next(i for i in (1, 2, 3) if ensemble.server(i).port == port))
        deadline = asyncio.get_running_loop().time() + 30
        while not fired:
            assert asyncio.get_running_loop().time() < deadline, "the child watch never fired"
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # a second event would come within the replay's own round trips
        assert fired == [WatchEvent(EventType.CHILD, "/v")]
        assert await writer.children("/v") == ["late"]
    finally:
        await watched.close()
        await writer.close()
