"""The metadata tree: one interface with ZooKeeper's semantics, two backends.

Everything in the broker that reads or writes cluster state (brokers, topics, partition state,
configs, ACLs, ...) goes through :class:`MetadataTree`. The two implementations are
:class:`kaflet.metadata.embedded.EmbeddedTree` (a single broker, persisted in its data dir) and
:class:`kaflet.metadata.zookeeper.ZooKeeperTree` (a cluster, through kazoo).

Semantics follow ZooKeeper so code written against one backend behaves the same on the other:

* paths are absolute, ``/``-separated, without a trailing slash (except the root ``/``);
* every node has data (bytes, or ``None`` for "null" data as Kafka writes for containers) and a
  :class:`Stat`; ``version`` counts data changes and is used for compare-and-set;
* ephemeral nodes disappear with the session that created them and cannot have children;
* sequential nodes get a 10-digit zero-padded counter appended, taken from the parent's
  child-change counter (``cversion``), exactly like ZooKeeper;
* watches are one-shot. A data watch (set by :meth:`MetadataTree.get`, or by
  :meth:`MetadataTree.exists`, which also fires on creation) fires on change or deletion of the
  node; a child watch (set by :meth:`MetadataTree.children`) fires when the child list changes
  or the node is deleted. Callbacks run on the event loop of the tree's owner. A callback may be a
  coroutine function: the coroutine is scheduled as a task.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

__all__ = [
    "BadArgumentsError",
    "BadVersionError",
    "CheckOp",
    "CreateOp",
    "DeleteOp",
    "EventType",
    "MetadataError",
    "MetadataTree",
    "NoChildrenForEphemeralsError",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "Op",
    "SessionLostError",
    "SetOp",
    "Stat",
    "WatchCallback",
    "WatchEvent",
    "join_path",
    "parent_of",
    "validate_path",
]


# --------------------------------------------------------------------------------------------
# Errors


class MetadataError(Exception):
    """Base class of metadata tree errors. ``path`` names the node concerned (when known)."""

    def __init__(self, path: str | None = None, message: str | None = None) -> None:
        self.path = path
        # Index of the failing operation when raised by multi(); None otherwise.
        self.op_index: int | None = None
        super().__init__(message or (f"{type(self).__name__}: {path}" if path else type(self).__name__))


class NoNodeError(MetadataError):
    """The node (or, for create, its parent) does not exist."""


class NodeExistsError(MetadataError):
    """A node with that path already exists."""


class BadVersionError(MetadataError):
    """The expected version did not match the node's version (compare-and-set failed)."""


class NotEmptyError(MetadataError):
    """The node has children and cannot be deleted without ``recursive=True``."""


class NoChildrenForEphemeralsError(MetadataError):
    """Ephemeral nodes cannot have children."""


class BadArgumentsError(MetadataError):
    """The path (or another argument) is malformed."""


class SessionLostError(MetadataError):
    """The session or connection to the backend is gone (ZooKeeper session expiry, closed tree)."""


# --------------------------------------------------------------------------------------------
# Values


@dataclass(frozen=True, slots=True)
class Stat:
    """ZooKeeper's node statistics (the fields Kafka uses, plus a few for completeness)."""

    version: int
    czxid: int
    mzxid: int
    ctime: int
    mtime: int
    ephemeral_owner: int
    num_children: int
    cversion: int = 0
    data_length: int = 0
    pzxid: int = 0


class EventType(enum.Enum):
    """What a watch event reports (ZooKeeper's event types)."""

    CREATED = "CREATED"
    DELETED = "DELETED"
    CHANGED = "CHANGED"
    CHILD = "CHILD"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A fired watch: what happened to which path."""

    type: EventType
    path: str


WatchCallback = Callable[[WatchEvent], Any]


@dataclass(frozen=True, slots=True)
class CheckOp:
    """multi(): require ``path`` to exist with ``version`` (-1: any version)."""

    path: str
    version: int = -1


@dataclass(frozen=True, slots=True)
class CreateOp:
    """multi(): create a node (parents must exist or be created earlier in the same multi)."""

    path: str
    data: bytes | None = b""
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True, slots=True)
class SetOp:
    """multi(): set data, conditional on ``version`` (-1: any)."""

    path: str
    data: bytes | None
    version: int = -1


@dataclass(frozen=True, slots=True)
class DeleteOp:
    """multi(): delete a childless node, conditional on ``version`` (-1: any)."""

    path: str
    version: int = -1


Op = CheckOp | CreateOp | SetOp | DeleteOp


# --------------------------------------------------------------------------------------------
# Path helpers


def validate_path(path: str, *, sequential: bool = False) -> None:
    """Raise :class:`BadArgumentsError` unless ``path`` is a valid absolute node path.

    A sequential create may end with a prefix (even an empty one after ``/``), as ZooKeeper allows.
    """
    if not isinstance(path, str) or not path.startswith("/"):
        raise BadArgumentsError(
            path if isinstance(path, str) else None, f"path must start with '/': {path!r}"
        )
    if path == "/":
        return
    check = path + "x" if sequential and path.endswith("/") else path
    if check.endswith("/"):
        raise BadArgumentsError(path, f"path must not end with '/': {path!r}")
    for part in check[1:].split("/"):
        if part in ("", ".", ".."):
            raise BadArgumentsError(path, f"invalid path component in {path!r}")
    if "\x00" in path:
        raise BadArgumentsError(path, "path must not contain NUL")


def parent_of(path: str) -> str:
    """The parent path of ``path`` ("/" for top-level nodes)."""
    idx = path.rfind("/")
    return "/" if idx <= 0 else path[:idx]


def join_path(parent: str, child: str) -> str:
    """``parent`` + "/" + ``child`` without doubling the root slash."""
    return ("/" if parent == "/" else parent + "/") + child


def sequential_name(path: str, counter: int) -> str:
    """Append ZooKeeper's 10-digit sequence suffix (negative counters wrap like Java's %010d)."""
    return f"{path}{counter:010d}"


# --------------------------------------------------------------------------------------------
# The interface


class MetadataTree(ABC):
    """The cluster metadata tree with ZooKeeper semantics, used from one asyncio loop."""

    #: A short name of the backend ("embedded", "zookeeper") for logs and metrics.
    backend: str = "abstract"

    @abstractmethod
    async def create(
        self,
        path: str,
        data: bytes | None = b"",
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        """Create a node and return its actual path (different from ``path`` if sequential).

        ``make_parents`` creates missing ancestors as persistent nodes with null data (Kafka's
        container nodes). Raises NodeExistsError, NoNodeError (missing parent),
        NoChildrenForEphemeralsError.
        """

    @abstractmethod
    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes | None, Stat]:
        """Return the data and stat of a node; optionally leave a one-shot data watch on it."""

    @abstractmethod
    async def set(self, path: str, data: bytes | None, version: int = -1) -> Stat:
        """Replace a node's data if its version matches (``-1`` matches any); return the new stat."""

    @abstractmethod
    async def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        """Delete a node (``recursive``: with all its descendants; ``version`` checks the node itself)."""

    @abstractmethod
    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None:
        """Return the stat of a node or None; the watch (if any) is left even when it is missing."""

    @abstractmethod
    async def children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        """Return the names of a node's children (unsorted, as ZooKeeper); optional child watch."""

    @abstractmethod
    async def multi(self, ops: Sequence[Op]) -> list[Any]:
        """Apply the operations atomically: all or none.

        Returns one result per op: the created path for CreateOp, the new Stat for SetOp, None
        for DeleteOp and CheckOp. On failure raises the first failing op's error, with its
        ``op_index`` set, and nothing is applied.
        """

    @abstractmethod
    async def close(self) -> None:
        """End the session (its ephemeral nodes go away) and release resources."""

    # ---------------------------------------------------------------- conveniences (shared)

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its ancestors as persistent null-data nodes if missing."""
        if path == "/":
            return
        if await self.exists(path) is not None:
            return
        try:
            await self.create(path, None, make_parents=True)
        except NodeExistsError:
            pass

    async def get_or_none(self, path: str) -> tuple[bytes | None, Stat] | None:
        """Like :meth:`get` but return None when the node does not exist."""
        try:
            return await self.get(path)
        except NoNodeError:
            return None

    async def get_many(self, paths: Sequence[str]) -> list[tuple[bytes | None, Stat] | None]:
        """:meth:`get_or_none` of every path, in order; a backend may read them in fewer
        round trips."""
        return list(await asyncio.gather(*(self.get_or_none(p) for p in paths)))

    async def __aenter__(self) -> MetadataTree:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def deliver_watch(callback: WatchCallback, event: WatchEvent) -> None:
    """Run a watch callback on the current loop; schedule it as a task if it returns a coroutine."""
    try:
        result = callback(event)
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            task.add_done_callback(_log_task_error)
    except Exception:  # a faulty watcher must not break the tree or other watchers
        log.exception("metadata watch callback %r failed for %s", callback, event)


def _log_task_error(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("metadata watch task failed", exc_info=task.exception())
