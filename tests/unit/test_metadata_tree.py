"""The MetadataTree interface suite, run on both backends.

The embedded backend always runs. The ZooKeeper backend runs against a real server started for
the session (see kaflet.metadata.zk_testing); without Java or the ZooKeeper jars (CI installs
both) it fails, saying which is missing.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kaflet.metadata.embedded import EmbeddedTree
from kaflet.metadata.tree import (
    BadArgumentsError,
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    MetadataTree,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SetOp,
    WatchEvent,
)
from kaflet.metadata.zk_testing import ZooKeeperServer

_chroot = itertools.count(1)


@pytest.fixture(scope="session")
def zk_server_for_tree() -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer().start()  # fails, saying what is missing, without Java or the jars
    try:
        yield server
    finally:
        server.stop()


class Backend:
    """Opens sessions on one store: a data dir (embedded) or a chroot (ZooKeeper)."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.connect = ""
        if kind == "zookeeper":
            server = request.getfixturevalue("zk_server_for_tree")
            self.connect = f"{server.connect_string}/tree-suite-{next(_chroot)}"
        self.open_trees: list[MetadataTree] = []

    async def open(self) -> MetadataTree:
        if self.kind == "embedded":
            tree: MetadataTree = await EmbeddedTree.open(self.tmp_path / "meta")
        else:
            from kaflet.metadata.zookeeper import ZooKeeperTree

            tree = await ZooKeeperTree.connect(self.connect, session_timeout=6.0)
        self.open_trees.append(tree)
        return tree


@pytest.fixture(params=["embedded", "zookeeper"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    b = Backend(request.param, tmp_path, request)
    yield b
    for t in b.open_trees:
        await t.close()


@pytest.fixture
async def tree(backend: Backend) -> MetadataTree:
    return await backend.open()


class Recorder:
    """A watch callback that records events and lets the test await them."""

    def __init__(self) -> None:
        self.events: list[WatchEvent] = []
        self.threads: list[int] = []
        self._cond = asyncio.Condition()

    def __call__(self, ev: WatchEvent) -> None:
        self.events.append(ev)
        self.threads.append(threading.get_ident())
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._cond:
            self._cond.notify_all()

    async def wait(self, n: int = 1, timeout: float = 5.0) -> list[WatchEvent]:
        async def until() -> None:
            async with self._cond:
                await self._cond.wait_for(lambda: len(self.events) >= n)

        await asyncio.wait_for(until(), timeout)
        return self.events


async def settle() -> None:
    """Give stray watch events time to arrive (to check they did not)."""
    await asyncio.sleep(0.2)


# ------------------------------------------------------------------------------------------ basics


async def test_create_get_set_roundtrip(tree: MetadataTree) -> None:
    assert await tree.create("/a", b"hello") == "/a"
    data, stat = await tree.get("/a")
    assert data == b"hello"
    assert stat.version == 0
    assert stat.czxid > 0 and stat.mzxid == stat.czxid
    assert stat.ctime > 0 and stat.mtime == stat.ctime
    assert stat.ephemeral_owner == 0
    assert stat.num_children == 0
    assert stat.data_length == 5

    new = await tree.set("/a", b"world")
    assert new.version == 1
    assert new.mzxid > stat.mzxid and new.czxid == stat.czxid
    assert (await tree.get("/a"))[0] == b"world"


async def test_null_and_empty_data(tree: MetadataTree) -> None:
    await tree.create("/null", None)
    await tree.create("/empty", b"")
    assert (await tree.get("/null"))[0] is None
    assert (await tree.get("/empty"))[0] == b""
    await tree.set("/empty", None)
    assert (await tree.get("/empty"))[0] is None


async def test_create_errors(tree: MetadataTree) -> None:
    await tree.create("/x")
    with pytest.raises(NodeExistsError):
        await tree.create("/x")
    with pytest.raises(NoNodeError):
        await tree.create("/missing/child")
    for bad in ("relative", "/trailing/", "/double//slash", "/dot/./x", ""):
        with pytest.raises(BadArgumentsError):
            await tree.create(bad)


async def test_make_parents_creates_null_containers(tree: MetadataTree) -> None:
    assert await tree.create("/p1/p2/leaf", b"v", make_parents=True) == "/p1/p2/leaf"
    assert (await tree.get("/p1"))[0] is None
    assert (await tree.get("/p1/p2"))[0] is None
    assert (await tree.get("/p1/p2/leaf"))[0] == b"v"
    await tree.ensure_path("/p1/p2/other/deeper")
    assert await tree.exists("/p1/p2/other/deeper") is not None
    await tree.ensure_path("/p1/p2/other/deeper")  # idempotent


async def test_get_missing(tree: MetadataTree) -> None:
    with pytest.raises(NoNodeError):
        await tree.get("/nope")
    assert await tree.get_or_none("/nope") is None
    assert await tree.exists("/nope") is None


async def test_get_many(tree: MetadataTree, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many nodes at once, in order, None for the missing ones (on ZooKeeper by multiRead, in
    several requests when there are more paths than one holds)."""
    from kaflet.metadata import zookeeper

    monkeypatch.setattr(zookeeper, "MULTI_READ_PATHS", 7)
    await tree.create("/many")
    await tree.create("/many/null", None)
    paths = []
    for i in range(20):
        await tree.create(f"/many/{i}", f"v{i}".encode())
        paths.append(f"/many/{i}")
    await tree.set("/many/3", b"again")
    want = [await tree.get_or_none(p) for p in paths]
    asked = ["/many/gone", *paths[:10], "/many/null", "/many/10/gone", *paths[10:], "/many"]
    got = await tree.get_many(asked)
    assert got[0] is None and got[12] is None
    assert got[1:11] + got[13:-1] == want
    assert got[3] is not None and got[3][0] == b"v2" and got[4] is not None and got[4] == (b"again", want[3][1])
    assert got[11] is not None and got[11][0] is None
    assert got[-1] is not None and got[-1][1].num_children == 21
    assert await tree.get_many([]) == []
    assert getattr(tree, "_multi_read", True), "multiRead fell back to one request per node"


async def test_get_many_without_multi_read(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ZooKeeper server that does not know the request (before 3.6) answers UNIMPLEMENTED;
    the tree then reads node by node, and keeps doing so."""
    if backend.kind != "zookeeper":
        pytest.skip("ZooKeeper's multiRead")
    from kaflet.metadata import zookeeper

    tree = await backend.open()
    await tree.create("/old", b"x")
    monkeypatch.setattr(zookeeper._MultiRead, "type", 999)  # an opcode no server knows
    got = await tree.get_many(["/old", "/missing"])
    assert got[0] is not None and got[0][0] == b"x" and got[1] is None
    assert tree._multi_read is False  # type: ignore[attr-defined]
    assert (await tree.get_many(["/old"]))[0] is not None


async def test_set_compare_and_set(tree: MetadataTree) -> None:
    await tree.create("/cas", b"0")
    s1 = await tree.set("/cas", b"1", version=0)
    assert s1.version == 1
    with pytest.raises(BadVersionError):
        await tree.set("/cas", b"x", version=0)
    assert (await tree.get("/cas"))[0] == b"1"
    s2 = await tree.set("/cas", b"2", version=-1)
    assert s2.version == 2
    with pytest.raises(NoNodeError):
        await tree.set("/nope", b"x")


async def test_delete(tree: MetadataTree) -> None:
    await tree.create("/d", b"")
    await tree.create("/d/c1", b"")
    await tree.create("/d/c1/g", b"")
    await tree.create("/d/c2", b"")
    with pytest.raises(NotEmptyError):
        await tree.delete("/d")
    with pytest.raises(BadVersionError):
        await tree.delete("/d/c2", version=3)
    await tree.delete("/d/c2", version=0)
    assert await tree.exists("/d/c2") is None
    with pytest.raises(NoNodeError):
        await tree.delete("/d/c2")
    await tree.delete("/d", recursive=True)
    assert await tree.exists("/d") is None
    assert await tree.exists("/d/c1/g") is None
    with pytest.raises(NoNodeError):
        await tree.delete("/d", recursive=True)


async def test_exists_and_children(tree: MetadataTree) -> None:
    await tree.create("/parent", None)
    for name in ("b", "a", "c"):
        await tree.create(f"/parent/{name}", b"")
    stat = await tree.exists("/parent")
    assert stat is not None and stat.num_children == 3
    assert sorted(await tree.children("/parent")) == ["a", "b", "c"]
    assert await tree.children("/parent/a") == []
    with pytest.raises(NoNodeError):
        await tree.children("/nope")
    assert "parent" in await tree.children("/")


async def test_zxids_increase(tree: MetadataTree) -> None:
    await tree.create("/z1")
    await tree.create("/z2")
    s1 = await tree.exists("/z1")
    s2 = await tree.exists("/z2")
    assert s1 is not None and s2 is not None
    assert s2.czxid > s1.czxid
    s3 = await tree.set("/z1", b"x")
    assert s3.mzxid > s2.czxid


# ---------------------------------------------------------------------- ephemeral and sequential


async def test_ephemeral_nodes_go_with_the_session(backend: Backend) -> None:
    t1 = await backend.open()
    await t1.create("/brokers", None)
    await t1.create("/brokers/1", b"reg", ephemeral=True)
    stat = await t1.exists("/brokers/1")
    assert stat is not None and stat.ephemeral_owner != 0
    with pytest.raises(NoChildrenForEphemeralsError):
        await t1.create("/brokers/1/child")
    await t1.close()

    t2 = await backend.open()
    assert await t2.exists("/brokers") is not None
    assert await t2.exists("/brokers/1") is None


async def test_sequential_nodes(tree: MetadataTree) -> None:
    await tree.create("/seq", None)
    p0 = await tree.create("/seq/item_", b"a", sequential=True)
    p1 = await tree.create("/seq/item_", b"b", sequential=True)
    assert p0 == "/seq/item_0000000000"
    assert p1 == "/seq/item_0000000001"
    # The counter counts the children ever created under the parent (any kind; deletes do
    # not count), as ZooKeeper's does.
    await tree.create("/seq/plain")
    await tree.delete("/seq/plain")
    await tree.delete(p0)
    p3 = await tree.create("/seq/other_", b"", sequential=True)
    assert p3 == "/seq/other_0000000003"
    assert (await tree.get(p1))[0] == b"b"
    # Sequential ephemeral
    pe = await tree.create("/seq/e_", b"", ephemeral=True, sequential=True)
    assert pe == "/seq/e_0000000004"


# ----------------------------------------------------------------------------------- watches


async def test_data_watch_fires_once_on_change(tree: MetadataTree) -> None:
    await tree.create("/w", b"0")
    rec = Recorder()
    await tree.get("/w", watch=rec)
    await tree.set("/w", b"1")
    events = await rec.wait(1)
    assert events == [WatchEvent(EventType.CHANGED, "/w")]
    assert rec.threads == [threading.get_ident()]  # delivered on the loop's thread
    await tree.set("/w", b"2")  # one-shot: no second event
    await settle()
    assert len(rec.events) == 1


async def test_data_watch_fires_on_delete(tree: MetadataTree) -> None:
    await tree.create("/wd", b"0")
    rec = Recorder()
    await tree.get("/wd", watch=rec)
    await tree.delete("/wd")
    assert await rec.wait(1) == [WatchEvent(EventType.DELETED, "/wd")]


async def test_exists_watch_fires_on_create(tree: MetadataTree) -> None:
    rec = Recorder()
    assert await tree.exists("/later", watch=rec) is None
    await tree.create("/later", b"")
    assert await rec.wait(1) == [WatchEvent(EventType.CREATED, "/later")]


async def test_child_watch(tree: MetadataTree) -> None:
    await tree.create("/cw", None)
    rec = Recorder()
    await tree.children("/cw", watch=rec)
    await tree.create("/cw/a")
    assert await rec.wait(1) == [WatchEvent(EventType.CHILD, "/cw")]
    await tree.children("/cw", watch=rec)
    await tree.set("/cw/a", b"data change is not a child change")
    await tree.delete("/cw/a")
    events = await rec.wait(2)
    assert events[1] == WatchEvent(EventType.CHILD, "/cw")
    # Setting data on the parent does not fire a child watch.
    await tree.children("/cw", watch=rec)
    await tree.set("/cw", b"x")
    await settle()
    assert len(rec.events) == 2


async def test_same_callback_registered_twice_fires_once(tree: MetadataTree) -> None:
    await tree.create("/dup", b"")
    rec = Recorder()
    await tree.get("/dup", watch=rec)
    await tree.exists("/dup", watch=rec)
    await tree.set("/dup", b"x")
    await rec.wait(1)
    await settle()
    assert len(rec.events) == 1


async def test_async_watch_callback(tree: MetadataTree) -> None:
    await tree.create("/aw", b"")
    seen: asyncio.Future[WatchEvent] = asyncio.get_running_loop().create_future()

    async def cb(ev: WatchEvent) -> None:
        await asyncio.sleep(0)
        seen.set_result(ev)

    await tree.get("/aw", watch=cb)
    await tree.set("/aw", b"1")
    assert (await asyncio.wait_for(seen, 5)).type is EventType.CHANGED


async def test_watch_sees_committed_state(tree: MetadataTree) -> None:
    await tree.create("/ws", b"old")
    got: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()

    async def cb(ev: WatchEvent) -> None:
        got.set_result((await tree.get("/ws"))[0])

    await tree.get("/ws", watch=cb)
    await tree.set("/ws", b"new")
    assert await asyncio.wait_for(got, 5) == b"new"


# ------------------------------------------------------------------------------------- multi


async def test_multi_success(tree: MetadataTree) -> None:
    await tree.create("/m", None)
    await tree.create("/m/old", b"o")
    results = await tree.multi(
        [
            CheckOp("/m", 0),
            CreateOp("/m/new", b"n"),
            CreateOp("/m/new/child", None),
            CreateOp("/m/s_", b"", sequential=True),
            SetOp("/m/old", b"o2", 0),
            DeleteOp("/m/old", 1),
        ]
    )
    assert results[0] is None
    assert results[1] == "/m/new"
    assert results[2] == "/m/new/child"
    assert results[3].startswith("/m/s_") and len(results[3]) == len("/m/s_") + 10
    assert results[4].version == 1
    assert results[5] is None
    assert await tree.exists("/m/old") is None
    assert (await tree.get("/m/new"))[0] == b"n"
    assert await tree.multi([]) == []


async def test_multi_is_atomic(tree: MetadataTree) -> None:
    await tree.create("/atom", b"v")
    rec = Recorder()
    await tree.get("/atom", watch=rec)
    with pytest.raises(BadVersionError) as ei:
        await tree.multi(
            [
                CreateOp("/atom/a", b""),
                SetOp("/atom", b"changed", 5),
                CreateOp("/atom/b", b""),
            ]
        )
    assert ei.value.op_index == 1
    assert await tree.exists("/atom/a") is None
    assert (await tree.get("/atom"))[0] == b"v"
    with pytest.raises(NodeExistsError) as ei2:
        await tree.multi([CreateOp("/atom/x", b""), CreateOp("/atom/x", b"")])
    assert ei2.value.op_index == 1
    with pytest.raises(NoNodeError):
        await tree.multi([CheckOp("/nothing", -1)])
    await settle()
    assert rec.events == []  # nothing changed, nothing fired


async def test_multi_fires_watches_after_commit(tree: MetadataTree) -> None:
    await tree.create("/mw", None)
    rec = Recorder()
    await tree.children("/mw", watch=rec)
    await tree.multi([CreateOp(f"/mw/{i}", b"") for i in range(20)])
    events = await rec.wait(1)
    await settle()
    assert events == [WatchEvent(EventType.CHILD, "/mw")]
    assert len(await tree.children("/mw")) == 20
