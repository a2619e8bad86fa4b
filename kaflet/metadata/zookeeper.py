"""The ZooKeeper metadata backend, on kazoo.

kazoo runs its own threads; every call here uses kazoo's ``*_async`` API and hands the result
back to the asyncio loop with ``loop.call_soon_threadsafe``. Watches are bridged the same way,
so callbacks always run on the broker's loop.

The connect string may carry a chroot (``host1:2181,host2:2181/kafka``), as Kafka's
``zookeeper.connect`` does; the chroot path is created if it is missing, like Kafka does.

kazoo writes a few lines at every attempt to reach the ensemble; while it cannot, those go to
the tree's outage log instead (kaflet/util/outage_log.py): one warning when the connection is
lost, a summary every minute, one line when it is back.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import select
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo import exceptions as kz
from kazoo.client import KazooClient, TransactionRequest
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.protocol.serialization import (
    Create,
    GetData,
    SetData,
    int_struct,
    multiheader_struct,
    read_buffer,
    stat_struct,
)
from kazoo.protocol.states import EventType as KzEventType
from kazoo.protocol.states import KazooState, WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE

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
    validate_path,
)
from kaflet.util.outage_log import OutageLog

__all__ = ["ZooKeeperTree", "split_chroot"]

log = logging.getLogger(__name__)

_ERROR_MAP: dict[type[Exception], type[MetadataError]] = {
    kz.NoNodeError: NoNodeError,
    kz.NodeExistsError: NodeExistsError,
    kz.BadVersionError: BadVersionError,
    kz.NotEmptyError: NotEmptyError,
    kz.NoChildrenForEphemeralsError: NoChildrenForEphemeralsError,
    kz.BadArgumentsError: BadArgumentsError,
    kz.SessionExpiredError: SessionLostError,
    kz.ConnectionClosedError: SessionLostError,
    kz.ConnectionLoss: SessionLostError,
}

#: The longest pause between two attempts to reach the ensemble (kazoo adds up to 40% jitter).
_RECONNECT_MAX_DELAY_S = 1.0

#: Dropped watches set again at once after a reconnection (see _replay_lost_watches).
_REPLAY_CHUNK = 100

_EVENT_MAP = {
    KzEventType.CREATED: EventType.CREATED,
    KzEventType.DELETED: EventType.DELETED,
    KzEventType.CHANGED: EventType.CHANGED,
    KzEventType.CHILD: EventType.CHILD,
}


# kazoo's lines (kazoo/protocol/connection.py) for one failed attempt to reach a server, and
# those it writes at every attempt, which say nothing the outage log does not.
_KAZOO_ATTEMPT_FAILED = frozenset({"Connection dropped: %s", "Connection time-out: %s"})
_KAZOO_ATTEMPT_NOISE = frozenset({"Connecting to %s(%s):%s, use_ssl: %r", "Transition to CONNECTING"})


class _KazooLog(logging.LoggerAdapter[logging.Logger]):
    """kazoo's logger, with its lines per connection attempt turned into an outage log."""

    def __init__(self, logger: logging.Logger, outage: OutageLog) -> None:
        super().__init__(logger, {})
        self.outage = outage

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if msg in _KAZOO_ATTEMPT_FAILED:
            self.outage.failed(str(msg) % args)
            return
        if msg in _KAZOO_ATTEMPT_NOISE and (self.outage.failing or msg == "Transition to CONNECTING"):
            level = logging.DEBUG
        super().log(level, msg, *args, **kwargs)


class _PollingHandler(SequentialThreadingHandler):
    """kazoo's threading handler, waiting on its connection with poll(2).

    kazoo's own ``select`` makes a new epoll selector, a new descriptor, for every wait on the
    connection. A broker that has run out of descriptors would then drop a healthy connection to
    ZooKeeper, fail to open another, and lose its session, its registration and its
    leaderships, while Kafka's ZooKeeper client, on one long-lived selector, keeps them. A
    poll object holds no descriptor, and poll, unlike select(2), has no FD_SETSIZE bound (the
    reason kazoo uses a selector).
    """

    def select(self, rlist: Sequence[Any], wlist: Sequence[Any], xlist: Sequence[Any],
               timeout: float | None = None) -> tuple[list[Any], list[Any], list[Any]]:
        if timeout is not None and timeout < 0:
            raise ValueError("timeout must be non-negative")
        wanted: dict[int, int] = {}
        entries: dict[int, list[tuple[Any, int]]] = {}
        for objs, flag in ((rlist, select.POLLIN), (wlist, select.POLLOUT), (xlist, select.POLLPRI)):
            for obj in objs:
                fd = obj if isinstance(obj, int) else obj.fileno()
                if fd < 0:
                    raise ValueError("Invalid event mask or fd")
                wanted[fd] = wanted.get(fd, 0) | flag
                entries.setdefault(fd, []).append((obj, flag))
        poller = select.poll()
        for fd, flags in wanted.items():
            poller.register(fd, flags)
        ready = poller.poll(None if timeout is None else timeout * 1000)
        lists: dict[int, list[Any]] = {select.POLLIN: [], select.POLLOUT: [], select.POLLPRI: []}
        for fd, events in ready:
            if events & select.POLLNVAL:
                raise OSError(errno.EBADF, "Bad file descriptor")
            # As with select(2), a hung-up or failed descriptor is ready to read and to write:
            # the call that follows reports what happened.
            if events & (select.POLLHUP | select.POLLERR):
                events |= select.POLLIN | select.POLLOUT
            for obj, flag in entries[fd]:
                if events & flag:
                    lists[flag].append(obj)
        return lists[select.POLLIN], lists[select.POLLOUT], lists[select.POLLPRI]


def _map_error(exc: BaseException, path: str | None) -> BaseException:
    for kz_type, ours in _ERROR_MAP.items():
        if isinstance(exc, kz_type):
            err = ours(path)
            err.__cause__ = exc
            return err
    return exc


class _MultiRead:
    """ZooKeeper's multiRead request (3.6 and later, opcode 22): the data and stat of many nodes
    in one round trip. Unlike a multi of writes each read stands alone: a missing node answers
    its own NoNode error. (kazoo has no such request; it sends any object with ``type``,
    ``serialize`` and ``deserialize``.)"""

    type = 22
    _GET_DATA = GetData.type

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = paths

    def serialize(self) -> bytearray:
        out = bytearray()
        for path in self.paths:
            out += multiheader_struct.pack(self._GET_DATA, False, -1)
            out += GetData(path, None).serialize()
        return out + multiheader_struct.pack(-1, True, -1)

    @classmethod
    def deserialize(cls, buf: bytes, offset: int) -> list[tuple[bytes | None, ZnodeStat] | kz.KazooException]:
        results: list[tuple[bytes | None, ZnodeStat] | kz.KazooException] = []
        while True:
            op_type, done, _err = multiheader_struct.unpack_from(buf, offset)
            offset += multiheader_struct.size
            if done:
                return results
            if op_type == cls._GET_DATA:
                data, offset = read_buffer(buf, offset)
                results.append((data, ZnodeStat._make(stat_struct.unpack_from(buf, offset))))
                offset += stat_struct.size
            else:  # an error result: its code follows
                code = int_struct.unpack_from(buf, offset)[0]
                offset += int_struct.size
                results.append(kz.EXCEPTIONS[code]())


#: Paths per multiRead: a response of about 200 KB for partition state nodes, well below the
#: 1 MiB jute.maxbuffer of ZooKeeper's clients.
MULTI_READ_PATHS = 1000


def _stat(s: ZnodeStat) -> Stat:
    return Stat(
        version=s.version,
        czxid=s.czxid,
        mzxid=s.mzxid,
        ctime=s.ctime,
        mtime=s.mtime,
        ephemeral_owner=s.ephemeralOwner,
        num_children=s.numChildren,
        cversion=s.cversion,
        data_length=s.dataLength,
        pzxid=s.pzxid,
    )


@dataclass(slots=True, eq=False)
class _Watch:
    """One callback's watch on one path, as handed to kazoo (``bridge``)."""

    kind: str  # "data" (get, exists) or "child" (children)
    path: str
    callback: WatchCallback
    bridge: Callable[[WatchedEvent], None]
    #: Whether the node existed when the watch was set (False: an exists() watch that waits
    #: for the node's creation).
    existed: bool = True


def split_chroot(connect: str) -> tuple[str, str]:
    """Split Kafka's ``zookeeper.connect`` into (hosts, chroot); chroot is "" when absent."""
    idx = connect.find("/")
    if idx < 0:
        return connect, ""
    chroot = connect[idx:].rstrip("/")
    if chroot:
        validate_path(chroot)
    return connect[:idx], chroot


# kazoo's TransactionRequest.create/set_data refuse None data, but Kafka writes null data into
# container nodes inside multis (the partitions nodes of a new topic). These add the same wire
# requests kazoo would, with the data allowed to be null.
def _tx_create(
    tx: TransactionRequest, path: str, data: bytes | None, ephemeral: bool, sequential: bool
) -> None:
    flags = (1 if ephemeral else 0) | (2 if sequential else 0)
    tx._add(Create(path, data, OPEN_ACL_UNSAFE, flags), None)


def _tx_set(tx: TransactionRequest, path: str, data: bytes | None, version: int) -> None:
    tx._add(SetData(path, data, version))


class ZooKeeperTree(MetadataTree):
    """The metadata tree on a ZooKeeper ensemble. Create with :meth:`connect`."""

    backend = "zookeeper"

    def __init__(
        self,
        connect: str,
        *,
        session_timeout: float = 18.0,
        connection_timeout: float = 18.0,
        on_session_lost: Callable[[], Any] | None = None,
    ) -> None:
        """Prepare a client; call :meth:`start` (or use :meth:`connect`) on the event loop.

        ``session_timeout`` and ``connection_timeout`` are in seconds (Kafka's
        ``zookeeper.session.timeout.ms`` and ``zookeeper.connection.timeout.ms`` default to 18 s).
        """
        self.connect_string = connect
        self.hosts, self.chroot = split_chroot(connect)
        self.session_timeout = session_timeout
        self.connection_timeout = connection_timeout
        #: Called on the loop when the ZooKeeper session expires (ephemeral nodes are gone and
        #: all watches are lost): the broker must re-register and re-read its state.
        self.on_session_lost = on_session_lost
        #: Called on the loop with "CONNECTED", "SUSPENDED" or "LOST" on every state change.
        self.on_state_change: Callable[[str], Any] | None = None
        #: The connection's failed attempts while the ensemble cannot be reached.
        self.outage = OutageLog(log, f"ZooKeeper connection to {self.hosts}")
        handler = _PollingHandler()
        # kazoo's default doubles the pause between attempts up to an hour: after a two-minute
        # outage it came back 40 s after the ensemble did, its session expired by then. Kafka's
        # client tries again within a second, so a session outlives an outage of the whole
        # ensemble; the outage log keeps the frequent attempts out of the broker's log.
        reconnect = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=_RECONNECT_MAX_DELAY_S,
                               sleep_func=handler.sleep_func)
        self._client = KazooClient(hosts=self.hosts, timeout=session_timeout, handler=handler,
                                   connection_retry=reconnect,
                                   logger=_KazooLog(logging.getLogger("kazoo.client"), self.outage))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._started = False
        # (kind, path, callback) -> the watch kazoo holds for it; see _watch.
        self._watches: dict[tuple[str, str, WatchCallback], _Watch] = {}
        # Watches kazoo dropped when the connection to a server was lost, with the last zxid
        # this client had seen then; set again and fired as needed by _replay_lost_watches.
        # Appended on kazoo's threads, under the lock.
        self._lost_watches: list[tuple[_Watch, int]] = []
        self._lost_lock = threading.Lock()
        self._zxid_at_loss = 0
        self._replay_task: asyncio.Task[None] | None = None
        # Whether the server answers multiRead (False once one answered UNIMPLEMENTED).
        self._multi_read = True

    @classmethod
    async def connect(cls, connect: str, **kwargs: Any) -> ZooKeeperTree:
        """Connect to ZooKeeper (``host:port[,host:port...][/chroot]``) and return the tree."""
        tree = cls(connect, **kwargs)
        await tree.start()
        return tree

    async def start(self) -> None:
        """Open the session, and create the chroot path if it is missing."""
        self._loop = asyncio.get_running_loop()
        try:
            await self._loop.run_in_executor(None, self._client.start, self.connection_timeout)
        except Exception as e:
            await self._loop.run_in_executor(None, self._client.close)
            raise SessionLostError(None, f"cannot connect to ZooKeeper at {self.connect_string}: {e}") from e
        self._started = True
        self.outage.succeeded()  # the listener below missed this first connection
        if self.chroot:
            # Kafka creates its chroot when it is missing; do it before switching into it.
            await self.ensure_path(self.chroot)
            self._client.chroot = self.chroot
        self._client.add_listener(self._state_listener)

    @property
    def session_id(self) -> int:
        """The ZooKeeper session id (the ephemeral owner of this broker's nodes)."""
        cid = self._client.client_id
        return cid[0] if cid else 0

    @property
    def kazoo(self) -> KazooClient:
        """The underlying kazoo client (for tools and tests; the broker uses the interface only)."""
        return self._client

    # ----------------------------------------------------------------- bridging

    def _state_listener(self, state: str) -> None:
        # Runs on a kazoo thread; must not block.
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if self.on_state_change is not None:
            loop.call_soon_threadsafe(self.on_state_change, str(state))
        if state == KazooState.CONNECTED:
            self.outage.succeeded()
            loop.call_soon_threadsafe(self._replay_lost_watches_soon)
        else:
            # kazoo calls this before it drops the watches (and, on expiry, before it forgets
            # the zxid): what changed after this zxid is what the dropped watches missed.
            self._zxid_at_loss = self._client.last_zxid
        if state == KazooState.LOST and not self._closed and self.on_session_lost is not None:
            loop.call_soon_threadsafe(self.on_session_lost)

    async def _await(self, issue: Callable[[], Any], path: str | None) -> Any:
        """Run one kazoo request (``issue()`` returns its async result) and return its value.

        A request that fails because the connection to the server broke is sent again once the
        client is connected to a server again (Kafka's retryRequestsUntilConnected), so that a
        lost ZooKeeper server is no error to the broker; only an expired session is.
        """
        loop = self._loop
        assert loop is not None, "ZooKeeperTree.start() was not called"
        deadline = loop.time() + self.session_timeout
        while True:
            try:
                return await self._await_once(issue(), path)
            except SessionLostError as exc:
                if self._closed or not isinstance(exc.__cause__, kz.ConnectionLoss):
                    raise
                if not await self._wait_connected(deadline):
                    raise

    async def _wait_connected(self, deadline: float) -> bool:
        loop = self._loop
        assert loop is not None
        while not self._client.connected:
            if self._closed or self._client.state == KazooState.LOST or loop.time() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def _await_once(self, async_result: Any, path: str | None) -> Any:
        loop = self._loop
        assert loop is not None
        fut: asyncio.Future[Any] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if fut.cancelled():
                return
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(_map_error(value, path))

        def done(ar: Any) -> None:
            # kazoo thread
            ok = ar.successful()
            value = ar.value if ok else ar.exception
            if not loop.is_closed():
                loop.call_soon_threadsafe(settle, ok, value)

        async_result.rawlink(done)
        return await fut

    def _watch(self, callback: WatchCallback | None, path: str, kind: str) -> _Watch | None:
        """The watch to hand kazoo for ``callback`` on ``path`` (None for no watch)."""
        if callback is None:
            return None
        loop = self._loop
        assert loop is not None
        watches = self._watches
        key = (kind, path, callback)
        # The same callback on the same path must map to the same kazoo watcher, so that
        # ZooKeeper-style de-duplication (one firing per registered callback) holds.
        w = watches.get(key)
        if w is not None:
            return w

        def bridge(ev: WatchedEvent) -> None:
            # kazoo thread
            if watches.get(key) is record:
                del watches[key]
            event_type = _EVENT_MAP.get(ev.type)
            if event_type is None:
                # A NONE event: kazoo dropped every watch on a lost connection.
                with self._lost_lock:
                    self._lost_watches.append((record, self._zxid_at_loss))
                if not loop.is_closed():
                    loop.call_soon_threadsafe(self._replay_lost_watches_soon)
                return
            if not loop.is_closed():
                loop.call_soon_threadsafe(deliver_watch, callback, WatchEvent(event_type, ev.path or path))

        record = _Watch(kind, path, callback, bridge)
        watches[key] = record
        return record

    def _replay_lost_watches_soon(self) -> None:
        if self._replay_task is None and not self._closed:
            self._replay_task = asyncio.ensure_future(self._replay_lost_watches())

    async def _replay_lost_watches(self) -> None:
        """Set the dropped watches again and fire those whose node changed meanwhile.

        ZooKeeper's Java client sends its watches to the next server (SetWatches, with the last
        zxid it saw), and the server fires each one whose node was created, deleted or changed
        since; kazoo drops them instead. Without this, a deletion made while the connection was
        down went unnoticed: the controller's watch on /controller must see it as a deletion to
        start an election, and a watch for a node's creation must see a creation.
        """
        try:
            while True:
                with self._lost_lock:
                    lost, self._lost_watches = self._lost_watches, []
                if not lost:
                    return
                # A controller holds a watch per topic: set them again a chunk at a time, not
                # one round trip after another.
                for i in range(0, len(lost), _REPLAY_CHUNK):
                    chunk = lost[i:i + _REPLAY_CHUNK]
                    answers = await asyncio.gather(*(self._set_again(w, zxid) for w, zxid in chunk),
                                                   return_exceptions=True)
                    failed = [lost_watch for lost_watch, answer in zip(chunk, answers, strict=True)
                              if isinstance(answer, SessionLostError)]
                    for (w, _), answer in zip(chunk, answers, strict=True):
                        if isinstance(answer, EventType):
                            deliver_watch(w.callback, WatchEvent(answer, w.path))
                        elif isinstance(answer, BaseException) and not isinstance(answer, SessionLostError):
                            # Not the connection: trying again would fail again. Its owner
                            # re-reads at its next event or session.
                            log.error("could not set the watch on %s again", w.path, exc_info=answer)
                    if failed:
                        with self._lost_lock:
                            self._lost_watches[:0] = failed + lost[i + _REPLAY_CHUNK:]
                        if self._closed or not self._client.connected:
                            return  # the next connection replays them
                        break
        finally:
            self._replay_task = None

    async def _set_again(self, w: _Watch, zxid: int) -> EventType | None:
        """Set ``w`` again; the event it missed after ``zxid`` (ZooKeeper's SetWatches rules)."""
        if w.kind == "child":
            try:
                _, parent = await self._children_and_stat(w.path, w.callback)
            except NoNodeError:
                return EventType.DELETED
            # The stat comes with the watch, from the same request: a change before it shows in
            # pzxid, a change after it fires the watch, and none does both (a stat read later
            # would also show a change that fires the watch: two events for one change).
            return EventType.CHILD if parent.pzxid > zxid else None
        stat = await self.exists(w.path, w.callback)
        if not w.existed:
            return EventType.CREATED if stat is not None else None
        if stat is None:
            return EventType.DELETED
        return EventType.CHANGED if stat.mzxid > zxid else None

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
        self._check_open()
        validate_path(path, sequential=sequential)
        if make_parents:
            # Create ancestors ourselves: kazoo's makepath would give them b"" instead of the
            # null data Kafka (and the embedded backend) use for container nodes.
            missing = []
            p = parent_of(path)
            while p != "/" and await self.exists(p) is None:
                missing.append(p)
                p = parent_of(p)
            for anc in reversed(missing):
                try:
                    await self._await(lambda a=anc: self._client.create_async(a, None), anc)  # type: ignore[misc]
                except NodeExistsError:
                    pass
        return await self._await(
            lambda: self._client.create_async(path, data, ephemeral=ephemeral, sequence=sequential), path)

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes | None, Stat]:
        self._check_open()
        validate_path(path)
        w = self._watch(watch, path, "data")
        data, stat = await self._await(lambda: self._client.get_async(path, watch=w and w.bridge), path)
        return data, _stat(stat)

    async def get_many(self, paths: Sequence[str]) -> list[tuple[bytes | None, Stat] | None]:
        """Every path's data and stat (None when missing), by multiRead requests of
        :data:`MULTI_READ_PATHS` paths sent together; one request per path on servers before
        ZooKeeper 3.6. Reading 10,000 partition states took seconds one by one (kazoo's cost per
        request), a few hundredths of a second this way."""
        self._check_open()
        for path in paths:
            validate_path(path)
        if self._multi_read and paths:
            try:
                chunks = [paths[i:i + MULTI_READ_PATHS] for i in range(0, len(paths), MULTI_READ_PATHS)]
                answers = await asyncio.gather(*(self._multi_read_once(chunk) for chunk in chunks))
                return [got for answer in answers for got in answer]
            except kz.UnimplementedError:
                self._multi_read = False
                log.info("the ZooKeeper server has no multiRead (before 3.6): reading nodes one by one")
        return await super().get_many(paths)

    async def _multi_read_once(self, paths: Sequence[str]) -> list[tuple[bytes | None, Stat] | None]:
        root = self._client.chroot or ""

        def issue() -> Any:
            result = self._client.handler.async_result()
            self._client._call(_MultiRead([(root + p).rstrip("/") or "/" for p in paths]), result)
            return result

        answer = await self._await(issue, paths[0])
        out: list[tuple[bytes | None, Stat] | None] = []
        for path, got in zip(paths, answer, strict=True):
            if isinstance(got, kz.NoNodeError):
                out.append(None)
            elif isinstance(got, BaseException):
                raise _map_error(got, path)
            else:
                out.append((got[0], _stat(got[1])))
        return out

    async def set(self, path: str, data: bytes | None, version: int = -1) -> Stat:
        self._check_open()
        validate_path(path)
        return _stat(await self._await(lambda: self._client.set_async(path, data, version), path))

    async def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        self._check_open()
        validate_path(path)
        if path == "/":
            raise BadArgumentsError(path, "cannot delete the root")
        if not recursive:
            await self._await(lambda: self._client.delete_async(path, version), path)
            return
        if version != -1:
            stat = await self.exists(path)
            if stat is None:
                raise NoNodeError(path)
            if stat.version != version:
                raise BadVersionError(path)
        elif await self.exists(path) is None:
            raise NoNodeError(path)
        await self._delete_subtree(path)

    async def _delete_subtree(self, path: str) -> None:
        # Not atomic on ZooKeeper (like Kafka's own recursive delete): children first, tolerate
        # nodes that vanish meanwhile; retry if a child appears while we work.
        for _ in range(10):
            try:
                kids = await self.children(path)
            except NoNodeError:
                return
            for kid in kids:
                await self._delete_subtree(join_path(path, kid))
            try:
                await self._await(lambda: self._client.delete_async(path, -1), path)
                return
            except NoNodeError:
                return
            except NotEmptyError:
                continue
        raise NotEmptyError(path, f"{path} kept getting new children during recursive delete")

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Stat | None:
        self._check_open()
        validate_path(path)
        w = self._watch(watch, path, "data")
        stat = await self._await(lambda: self._client.exists_async(path, watch=w and w.bridge), path)
        if w is not None:
            w.existed = stat is not None  # a watch on a missing node waits for its creation
        return None if stat is None else _stat(stat)

    async def children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        self._check_open()
        validate_path(path)
        w = self._watch(watch, path, "child")
        return list(await self._await(lambda: self._client.get_children_async(path, watch=w and w.bridge), path))

    async def _children_and_stat(self, path: str, watch: WatchCallback) -> tuple[list[str], Stat]:
        """``children`` with the node's stat as of the same read (ZooKeeper's GetChildren2)."""
        self._check_open()
        w = self._watch(watch, path, "child")
        assert w is not None
        names, stat = await self._await(
            lambda: self._client.get_children_async(path, watch=w.bridge, include_data=True), path)
        return list(names), _stat(stat)

    async def multi(self, ops: Sequence[Op]) -> list[Any]:
        self._check_open()
        for op in ops:
            if isinstance(op, CreateOp):
                validate_path(op.path, sequential=op.sequential)
            elif isinstance(op, SetOp | DeleteOp | CheckOp):
                validate_path(op.path)
            else:
                raise BadArgumentsError(None, f"unknown multi op {op!r}")
        if not ops:
            return []

        def commit() -> Any:
            # A new transaction per attempt: kazoo's can be committed once.
            tx = self._client.transaction()
            for op in ops:
                if isinstance(op, CreateOp):
                    _tx_create(tx, self._chrooted(op.path), op.data, op.ephemeral, op.sequential)
                elif isinstance(op, SetOp):
                    _tx_set(tx, self._chrooted(op.path), op.data, op.version)
                elif isinstance(op, DeleteOp):
                    tx.delete(op.path, op.version)
                else:
                    tx.check(op.path, op.version)
            return tx.commit_async()

        raw = await self._await(commit, None)
        # kazoo reports a failed multi as a list holding the failing op's exception and
        # RolledBackError for the others.
        for i, r in enumerate(raw):
            if isinstance(r, Exception) and not isinstance(r, kz.RolledBackError | kz.RuntimeInconsistency):
                err = _map_error(r, ops[i].path)
                if isinstance(err, MetadataError):
                    err.op_index = i
                raise err
        if any(isinstance(r, Exception) for r in raw):
            raise MetadataError(None, f"multi failed: {raw!r}")
        results: list[Any] = []
        for op, r in zip(ops, raw, strict=True):
            if isinstance(op, CreateOp):
                results.append(r)
            elif isinstance(op, SetOp):
                results.append(_stat(r))
            else:
                results.append(None)
        return results

    def _chrooted(self, path: str) -> str:
        chroot = self._client.chroot
        if not chroot:
            return path
        return chroot if path == "/" else chroot + path

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._replay_task is not None:
            self._replay_task.cancel()
        loop = asyncio.get_running_loop()

        def stop() -> None:
            try:
                self._client.stop()
            finally:
                self._client.close()

        await loop.run_in_executor(None, stop)
