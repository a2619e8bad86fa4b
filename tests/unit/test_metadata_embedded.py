"""What only the embedded backend has: persistence in the data dir, crash durability, locking."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kaflet.metadata.embedded import DB_FILE_NAME, EmbeddedTree
from kaflet.metadata.tree import CreateOp, EventType, MetadataError, SessionLostError, WatchEvent


async def test_persists_across_reopen(tmp_path: Path) -> None:
    t = await EmbeddedTree.open(tmp_path)
    await t.create("/a/b/c", b"1", make_parents=True)
    await t.set("/a/b/c", b"2")
    await t.create("/a/s_", b"", sequential=True)
    await t.create("/a/eph", b"", ephemeral=True)
    s_before = await t.exists("/a/b/c")
    zxid = t.last_zxid
    await t.close()
    assert (tmp_path / DB_FILE_NAME).exists()

    t2 = await EmbeddedTree.open(tmp_path)
    try:
        data, stat = await t2.get("/a/b/c")
        assert data == b"2" and stat == s_before
        assert t2.last_zxid == zxid
        assert await t2.exists("/a/eph") is None  # ephemeral: gone with the session
        assert sorted(await t2.children("/a")) == ["b", "s_0000000001"]
        # Counters and zxids continue where they were.
        assert await t2.create("/a/s_", b"", sequential=True) == "/a/s_0000000003"
        s = await t2.exists("/a/s_0000000003")
        assert s is not None and s.czxid > zxid
    finally:
        await t2.close()


async def test_second_open_is_refused(tmp_path: Path) -> None:
    t = await EmbeddedTree.open(tmp_path)
    try:
        with pytest.raises(MetadataError, match="in use"):
            EmbeddedTree(tmp_path)
    finally:
        await t.close()
    t3 = EmbeddedTree(tmp_path)
    await t3.close()


async def test_closed_tree_refuses_calls(tmp_path: Path) -> None:
    t = await EmbeddedTree.open(tmp_path)
    await t.close()
    await t.close()  # idempotent
    with pytest.raises(SessionLostError):
        await t.get("/")
    with pytest.raises(SessionLostError):
        await t.create("/x")


async def test_acknowledged_writes_survive_kill_9(tmp_path: Path) -> None:
    script = (
        "import asyncio, os, signal, sys\n"
        "from kaflet.metadata.embedded import EmbeddedTree\n"
        "async def main():\n"
        "    t = await EmbeddedTree.open(sys.argv[1])\n"
        "    for i in range(50):\n"
        "        await t.create(f'/n{i}', str(i).encode())\n"
        "    print('acked', flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "asyncio.run(main())\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, timeout=60)
    assert proc.stdout.strip() == b"acked", proc.stderr
    assert proc.returncode == -9
    t = await EmbeddedTree.open(tmp_path)
    try:
        assert len(await t.children("/")) == 50
        assert (await t.get("/n49"))[0] == b"49"
    finally:
        await t.close()


async def test_expire_session_drops_ephemerals_and_fires(tmp_path: Path) -> None:
    t = await EmbeddedTree.open(tmp_path)
    lost = asyncio.Event()
    t.on_session_lost = lost.set
    try:
        await t.create("/ids", None)
        await t.create("/ids/1", b"", ephemeral=True)
        events: list[WatchEvent] = []
        await t.children("/ids", watch=events.append)
        old = t.session_id
        await t.expire_session()
        await asyncio.wait_for(lost.wait(), 2)
        assert await t.children("/ids") == []
        assert events == [WatchEvent(EventType.CHILD, "/ids")]
        assert t.session_id != old
    finally:
        await t.close()


async def test_large_multi_is_one_transaction(tmp_path: Path) -> None:
    t = await EmbeddedTree.open(tmp_path)
    try:
        await t.create("/big", None)
        ops = [CreateOp(f"/big/{i}", b"x" * 100) for i in range(3000)]
        start = time.perf_counter()
        await t.multi(ops)
        # Measured ~0.05 s; the bound, 60 times that, only catches gross regressions (work
        # quadratic in the batch). The single zxid below is what shows it is one transaction.
        assert time.perf_counter() - start < 3
        assert len(await t.children("/big")) == 3000
        stats = [await t.exists(f"/big/{i}") for i in range(3000)]
        assert len({s.czxid for s in stats if s is not None}) == 1  # one zxid: one transaction
    finally:
        await t.close()


def test_db_is_wal_mode(tmp_path: Path) -> None:
    t = EmbeddedTree(tmp_path)
    try:
        mode = t._conn.execute("PRAGMA journal_mode").fetchone()[0]
        sync = t._conn.execute("PRAGMA synchronous").fetchone()[0]
        assert mode == "wal" and sync == 2  # FULL
    finally:
        asyncio.run(t.close())
    assert os.path.exists(tmp_path / DB_FILE_NAME)
