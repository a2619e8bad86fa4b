"""The embedded metadata backend: a single broker's tree, persisted in its data directory.

The whole tree lives in memory (as ZooKeeper keeps it); persistent nodes are written through to
a SQLite file ``<dir>/kaflet-metadata.db`` in WAL mode with ``synchronous=FULL``, so a change is
durable when the call returns. Each write (a single operation or a whole :meth:`multi`) is one
SQLite transaction and one zxid. Ephemeral nodes are kept in memory only: the session is the
process (or this object), so they vanish on :meth:`close` or a restart.

Writes are serialized by an asyncio lock; the SQLite commit (and its fsync) runs on a dedicated
worker thread so the event loop is not blocked, and the in-memory tree is updated, and watches
fired, only after the commit succeeded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import os
import random
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kaflet.metadata.tree import (
    BadArgumentsError,
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    MetadataError,
    MetadataTree,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionLostError,
    SetOp,
    Stat,
    WatchCallback,
    WatchEvent,
    deliver_watch,
    join_path,
    parent_of,
    sequential_name,
    validate_path,
)

__all__ = ["DB_FILE_NAME", "EmbeddedTree"]

DB_FILE_NAME = "kaflet-metadata.db"
LOCK_FILE_NAME = "kaflet-metadata.lock"
_SCHEMA_VERSION = 1


@dataclasses.dataclass(slots=True)
class _Node:
    data: bytes | None
    version: int
    cversion: int
    czxid: int
    mzxid: int
    pzxid: int
    ctime: int
    mtime: int
    ephemeral_owner: int
    children: set[str]
    # Children ever created here: ZooKeeper's sequential-node counter (deletes do not count,
    # although they do bump cversion).
    seq: int = 0

    def stat(self) -> Stat:
        return Stat(
            version=self.version,
            czxid=self.czxid,
            mzxid=self.mzxid,
            ctime=self.ctime,
            mtime=self.mtime,
            ephemeral_owner=self.ephemeral_owner,
            num_children=len(self.children),
            cversion=self.cversion,
            data_length=0 if self.data is None else len(self.data),
            pzxid=self.pzxid,
        )


def _now_ms() -> int:
    return int(time.time() * 1000)


class _Txn:
    """A staged set of changes over the committed tree (copy-on-write per node)."""

    def __init__(self, base: dict[str, _Node], zxid: int, session_id: int) -> None:
        self.base = base
        self.zxid = zxid
        self.now = _now_ms()
        self.session_id = session_id
        self.changed: dict[str, _Node | None] = {}
        self.events: list[WatchEvent] = []

    def get(self, path: str) -> _Node | None:
        if path in self.changed:
            return self.changed[path]
        return self.base.get(path)

    def writable(self, path: str) -> _Node:
        if path in self.changed:
            node = self.changed[path]
            assert node is not None
            return node
        node = dataclasses.replace(self.base[path])
        node.children = set(node.children)
        self.changed[path] = node
        return node

    # ----------------------------------------------------------------- operations

    def create(self, path: str, data: bytes | None, ephemeral: bool, sequential: bool) -> str:
        validate_path(path, sequential=sequential)
        if path == "/":
            raise NodeExistsError(path)
        parent = parent_of(path)
        pnode = self.get(parent)
        if pnode is None:
            raise NoNodeError(path, f"parent of {path} does not exist")
        if pnode.ephemeral_owner:
            raise NoChildrenForEphemeralsError(path)
        if sequential:
            path = sequential_name(path, pnode.seq)
        if self.get(path) is not None:
            raise NodeExistsError(path)
        if data is not None and not isinstance(data, bytes | bytearray | memoryview):
            raise BadArgumentsError(path, "node data must be bytes or None")
        p = self.writable(parent)
        p.children.add(path[len(parent) + 1 :] if parent != "/" else path[1:])
        p.cversion += 1
        p.seq += 1
        p.pzxid = self.zxid
        self.changed[path] = _Node(
            data=None if data is None else bytes(data),
            version=0,
            cversion=0,
            czxid=self.zxid,
            mzxid=self.zxid,
            pzxid=self.zxid,
            ctime=self.now,
            mtime=self.now,
            ephemeral_owner=self.session_id if ephemeral else 0,
            children=set(),
        )
        self.events.append(WatchEvent(EventType.CREATED, path))
        self.events.append(WatchEvent(EventType.CHILD, parent))
        return path

    def _existing(self, path: str, version: int) -> _Node:
        validate_path(path)
        node = self.get(path)
        if node is None:
            raise NoNodeError(path)
        if version != -1 and node.version != version:
            raise BadVersionError(path, f"{path}: expected version {version}, node has {node.version}")
        return node

    def set(self, path: str, data: bytes | None, version: int) -> Stat:
        self._existing(path, version)
        if data is not None and not isinstance(data, bytes | bytearray | memoryview):
            raise BadArgumentsError(path, "node data must be bytes or None")
        node = self.writable(path)
        node.data = None if data is None else bytes(data)
        node.version += 1
        node.mzxid = self.zxid
        node.mtime = self.now
        self.events.append(WatchEvent(EventType.CHANGED, path))
        return node.stat()

    def delete(self, path: str, version: int) -> None:
        if path == "/":
            raise BadArgumentsError(path, "cannot delete the root")
        node = self._existing(path, version)
        if node.children:
            raise NotEmptyError(path)
        parent = parent_of(path)
        p = self.writable(parent)
        p.children.discard(path[len(parent) + 1 :] if parent != "/" else path[1:])
        p.cversion += 1
        p.pzxid = self.zxid
        self.changed[path] = None
        self.events.append(WatchEvent(EventType.DELETED, path))
        self.events.append(WatchEvent(EventType.CHILD, parent))

    def delete_recursive(self, path: str, version: int) -> None:
        node = self._existing(path, version)
        # Depth-first, children before parents: the whole subtree goes in this one transaction.
        for child in sorted(node.children):
            self.delete_recursive(join_path(path, child), -1)
        self.delete(path, -1)

    def check(self, path: str, version: int) -> None:
        self._existing(path, version)


class EmbeddedTree(MetadataTree):
    """The metadata tree of a single broker, stored in ``<data_dir>/kaflet-metadata.db``."""

    backend = "embedded"

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.db_path = self.data_dir / DB_FILE_NAME
        # One process, one session: refuse a second opener of the same directory.
        self._lock_fd = os.open(self.data_dir / LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(self._lock_fd)
            raise MetadataError(
                str(self.db_path), f"metadata store {self.db_path} is in use by another process"
            ) from e
        # A 63-bit random session id: the owner of this process's ephemeral nodes.
        self.session_id = random.getrandbits(63) | 1
        #: Called (on the loop) when the session ends without close(): see expire_session().
        self.on_session_lost: Callable[[], Any] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kaflet-metadata-db")
        self._write_lock = asyncio.Lock()
        self._closed = False
        self._data_watches: dict[str, dict[WatchCallback, None]] = {}
        self._child_watches: dict[str, dict[WatchCallback, None]] = {}
        try:
            self._conn = sqlite3.connect(self.db_path, check_same_thread=False, isolation_level=None)
            self._nodes, self._zxid = self._load()
        except BaseException:
            self._executor.shutdown(wait=False)
            os.close(self._lock_fd)
            raise

    @classmethod
    async def open(cls, data_dir: str | os.PathLike[str]) -> EmbeddedTree:
        """Open (or create) the store without blocking the loop on the initial load."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, cls, data_dir)

    # ----------------------------------------------------------------- storage

    def _load(self) -> tuple[dict[str, _Node], int]:
        c = self._conn
        c.execute("PRAGMA journal_mode=WAL")
        # FULL: a commit is on disk (WAL fsynced) before the call returns, so acknowledged admin
        # changes survive a crash or power loss.
        c.execute("PRAGMA synchronous=FULL")
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
            c.execute(
                "CREATE TABLE IF NOT EXISTS nodes (path TEXT PRIMARY KEY, data BLOB, version INTEGER NOT NULL,"
                " cversion INTEGER NOT NULL, czxid INTEGER NOT NULL, mzxid INTEGER NOT NULL,"
                " pzxid INTEGER NOT NULL, ctime INTEGER NOT NULL, mtime INTEGER NOT NULL, seq INTEGER NOT NULL)"
                " WITHOUT ROWID"
            )
            c.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('zxid', 0)")
            c.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?)", (_SCHEMA_VERSION,))
            schema = c.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0]
            if schema != _SCHEMA_VERSION:
                raise MetadataError(str(self.db_path), f"unsupported metadata schema version {schema}")
            c.execute(
                "INSERT OR IGNORE INTO nodes VALUES ('/', NULL, 0, 0, 0, 0, 0, 0, 0, 0)",
            )
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        zxid = c.execute("SELECT value FROM meta WHERE key='zxid'").fetchone()[0]
        nodes: dict[str, _Node] = {}
        # Sorting by path is not enough for parent-before-child order ("/a-b" < "/a/b"), so
        # attach children in a second pass.
        for path, data, version, cversion, czxid, mzxid, pzxid, ctime, mtime, seq in c.execute(
            "SELECT path, data, version, cversion, czxid, mzxid, pzxid, ctime, mtime, seq FROM nodes"
        ):
            nodes[path] = _Node(data, version, cversion, czxid, mzxid, pzxid, ctime, mtime, 0, set(), seq)
        orphans = []
        for path in nodes:
            if path == "/":
                continue
            parent = nodes.get(parent_of(path))
            if parent is None:
                orphans.append(path)  # cannot happen with our writes; keep the tree consistent
            else:
                parent.children.add(path.rsplit("/", 1)[1])
        for path in orphans:
            del nodes[path]
        return nodes, zxid

    def _persist(self, changed: dict[str, _Node | None], zxid: int) -> None:
        """Write one transaction's changes (runs on the DB thread)."""
        c = self._conn
        upserts = []
        deletes = []
        for path, node in changed.items():
            if node is None or node.ephemeral_owner:
                deletes.append((path,))
            else:
                upserts.append(
                    (
                        path,
                        node.data,
                        node.version,
                        node.cversion,
                        node.czxid,
                        node.mzxid,
                        node.pzxid,
                        node.ctime,
                        node.mtime,
                        node.seq,
                    )
                )
        c.execute("BEGIN IMMEDIATE")
        try:
            if deletes:
                c.executemany("DELETE FROM nodes WHERE path=?", deletes)
            if upserts:
                c.executemany("INSERT OR REPLACE INTO nodes VALUES (?,?,?,?,?,?,?,?,?,?)", upserts)
            c.execute("UPDATE meta SET value=? WHERE key='zxid'", (zxid,))
            c.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                c.execute("ROLLBACK")
            raise

    async def _write(self, stage: Callable[[_Txn], Any]) -> Any:
        """Stage changes with ``stage``, commit them to disk, then apply and fire watches."""
        self._check_open()
        async with self._write_lock:
            self._check_open()
            txn = _Txn(self._nodes, self._zxid + 1, self.session_id)
            result = stage(txn)
            if not txn.changed:
                return result
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, self._persist, txn.changed, txn.zxid)
            self._apply(txn)
            return result

    def _apply(self, txn: _Txn) -> None:
        self._zxid = txn.zxid
        for path, node in txn.changed.items():
            if node is None:
                self._nodes.pop(path, None)
            else:
                self._nodes[path] = node
        self._fire(txn.events)

    def _fire(self, events: list[WatchEvent]) -> None:
        loop = asyncio.get_running_loop()
        for ev in events:
            if ev.type is EventType.CHILD:
                watchers = list(self._child_watches.pop(ev.path, {}))
            elif ev.type is EventType.DELETED:
                watchers = list(self._data_watches.pop(ev.path, {}))
                watchers += [w for w in self._child_watches.pop(ev.path, {}) if w not in watchers]
            else:
                watchers = list(self._data_watches.pop(ev.path, {}))
            for w in watchers:
                loop.call_soon(deliver_watch, w, ev)

    def _check_open(self) -> None:
        if self._closed:
            raise SessionLostError(None, "the metadata tree is closed")

    # ----------------------------------------------------------------- MetadataTree

    async def create(
        self,
        path: str,
        data: bytes | None = b"",
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        def stage(txn: _Txn) -> str:
            if make_parents:
                validate_path(path, sequential=sequential)
                missing = []
                p = parent_of(path)
                while p != "/" and txn.get(p) is None:
                    missing.append(p)
                    p = parent_of(p)
                for anc in reversed(missing):
                    txn.create(anc, None, False, False)
            return txn.create(path, data, ephemeral, sequential)

        return await self._write(stage)

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes | None, Stat]:
        self._check_open()
        validate_path(path)
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        if watch is not None:
            self._data_watches.setdefault(path, {})[watch] = None
        return node.data, node.stat()

    async def set(self, path: str, data: bytes | None, version: int = -1) -> Stat:
        return await self._write(lambda txn: txn.set(path, data, version))

    async def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        if recursive:
            await self._write(lambda txn: txn.delete_recursive(path, version))
        else:
            await self._write(lambda txn: txn.delete(path, version))

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None:
        self._check_open()
        validate_path(path)
        node = self._nodes.get(path)
        if watch is not None:
            self._data_watches.setdefault(path, {})[watch] = None
        return None if node is None else node.stat()

    async def children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        self._check_open()
        validate_path(path)
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        if watch is not None:
            self._child_watches.setdefault(path, {})[watch] = None
        return list(node.children)

    async def multi(self, ops: Sequence[Op]) -> list[Any]:
        def stage(txn: _Txn) -> list[Any]:
            results: list[Any] = []
            for i, op in enumerate(ops):
                try:
                    if isinstance(op, CreateOp):
                        results.append(txn.create(op.path, op.data, op.ephemeral, op.sequential))
                    elif isinstance(op, SetOp):
                        results.append(txn.set(op.path, op.data, op.version))
                    elif isinstance(op, DeleteOp):
                        txn.delete(op.path, op.version)
                        results.append(None)
                    elif isinstance(op, CheckOp):
                        txn.check(op.path, op.version)
                        results.append(None)
                    else:
                        raise BadArgumentsError(None, f"unknown multi op {op!r}")
                except MetadataError as e:
                    e.op_index = i
                    raise
            return results

        return await self._write(stage)

    async def close(self) -> None:
        if self._closed:
            return
        async with self._write_lock:
            self._closed = True
            self._data_watches.clear()
            self._child_watches.clear()
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, self._conn.close)
            self._executor.shutdown(wait=True)
            os.close(self._lock_fd)

    # ----------------------------------------------------------------- embedded-only extras

    async def expire_session(self) -> None:
        """Simulate a session expiry: drop this session's ephemeral nodes, fire their watches and
        call ``on_session_lost``; a new session id is used from then on. For tests of failure
        handling that must run on both backends."""

        def stage(txn: _Txn) -> None:
            owned = [p for p, n in self._nodes.items() if n.ephemeral_owner == self.session_id]
            for p in sorted(owned, reverse=True):
                txn.delete(p, -1)

        await self._write(stage)
        self.session_id = random.getrandbits(63) | 1
        if self.on_session_lost is not None:
            asyncio.get_running_loop().call_soon(self.on_session_lost)

    @property
    def last_zxid(self) -> int:
        """The zxid of the last committed change."""
        return self._zxid
