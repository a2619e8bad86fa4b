"""Logi-Kafka's synchronized cache ("DataCache") over the metadata tree.

Every broker keeps the same named caches (users, ACLs, disabled partitions) in memory, pulled
from the management service, and all brokers make a change visible at the same moment. The
coordination lives in the metadata tree, so it works on ZooKeeper and on the embedded backend::

    /DataCache/<name>/sync/<brokerId>   ephemeral: the newest timestamp this broker has fetched
    /DataCache/<name>/commit            the cluster's commit timestamp (decimal ms)
    /DataCache/<name>/reload            a broker id that must reload from scratch

1. At start a broker registers ``sync/<id>``, loads everything (``start=0``) and applies the
   rows older than ``commit``; the younger ones are parked, invisible.
2. Every sync interval it pulls the rows of [its fetched timestamp, now) and parks them.
3. The leader, the broker with the lowest id under ``sync/``, sets ``commit`` to the minimum
   of all brokers' fetched timestamps. Each broker watches ``commit`` and applies the parked rows
   older than it. So no broker shows a row another one has not fetched.
4. Every check interval a broker re-reads everything up to ``commit`` and reloads if its view
   differs; writing its id to ``reload`` forces a reload at once.

Where kaflet departs from Logi-Kafka, on purpose: a broker writes its fetched timestamp after
every successful pull (Logi-Kafka only when rows came), so ``commit`` keeps following the
slowest broker instead of waiting for the next change; "first child" is the lowest broker id
(ZooKeeper lists children in no defined order); and a management service that is down at
start-up does not stop the broker: it serves the static defaults and keeps trying.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from kaflet.gateway.client import EndpointMissingError
from kaflet.gateway.model import ManagementServiceError, Operation
from kaflet.metadata.tree import (
    BadVersionError,
    MetadataError,
    MetadataTree,
    NodeExistsError,
    NoNodeError,
    WatchEvent,
)
from kaflet.util.outage_log import OutageLog

log = logging.getLogger("kaflet.gateway.cache")

K = TypeVar("K")
V = TypeVar("V")

DATA_CACHE_ROOT = "/DataCache"

#: Logi-Kafka's periods: one pull a minute, a full check every four hours.
DEFAULT_SYNC_INTERVAL_MS = 60_000
DEFAULT_CHECK_INTERVAL_MS = 4 * 3600 * 1000
#: First retry after a failed pull; doubled per failure, never longer than the sync interval.
FIRST_RETRY_MS = 1000


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: the management service's rows carry such timestamps."""
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Record(Generic[K, V]):
    """One change of a cache entry: what ``key`` became at ``timestamp``."""

    key: K
    value: V
    operation: Operation
    timestamp: int


@dataclass(frozen=True, slots=True)
class Dataset(Generic[K, V]):
    """What a provider fetched: the records of [start, ``timestamp``)."""

    records: Sequence[Record[K, V]]
    timestamp: int


class DataProvider(Protocol[K, V]):
    """Where a cache's rows come from (the management service)."""

    async def fetch(self, start: int, end: int) -> Dataset[K, V]:
        """The records whose timestamp lies in [start, end); ManagementServiceError on failure."""
        ...


#: How a record changes an entry: the entry's new value, or None to remove it.
Merge = Callable[[Record[K, V], "V | None"], "V | None"]


def latest_wins(record: Record[K, V], old: V | None) -> V | None:
    """The merge of most caches: the newest record of a key is its value; delete removes it."""
    return None if record.operation == Operation.DELETE else record.value


def paths(name: str) -> tuple[str, str, str]:
    """(sync parent, commit, reload) paths of cache ``name``."""
    base = f"{DATA_CACHE_ROOT}/{name}"
    return f"{base}/sync", f"{base}/commit", f"{base}/reload"


def _parse_timestamp(data: bytes | None) -> int | None:
    try:
        value = int((data or b"").decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        return None
    return value if value > 0 else None


class DataCache(Generic[K, V]):
    """One named cache on one broker (``node_id``); see the module docstring.

    ``merge`` folds records into entries (latest wins unless given); ``defaults`` are records
    folded in before anything the service sends (the static users and ACLs from config).
    Read with :meth:`get` or :attr:`entries`; :attr:`commit_timestamp` moves whenever the
    committed view may have changed.
    """

    def __init__(
        self,
        name: str,
        node_id: int,
        tree: MetadataTree,
        provider: DataProvider[K, V],
        *,
        merge: Merge[K, V] = latest_wins,
        defaults: Iterable[Record[K, V]] = (),
        sync_interval_ms: int = DEFAULT_SYNC_INTERVAL_MS,
        check_interval_ms: int = DEFAULT_CHECK_INTERVAL_MS,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        if not name or "/" in name:
            raise ValueError(f"invalid cache name {name!r}")
        if node_id < 0:
            raise ValueError(f"invalid node id {node_id}")
        self.name = name
        self.node_id = node_id
        self.tree = tree
        self.provider = provider
        self.merge = merge
        self.defaults = list(defaults)
        self.sync_interval_ms = sync_interval_ms
        self.check_interval_ms = check_interval_ms
        self.clock = clock
        self.sync_parent, self.commit_path, self.reload_path = paths(name)
        #: The pulls' failures: one warning per outage of the service (or of ZooKeeper), not one per attempt.
        self.pulls = OutageLog(log, f"DataCache {name} node {node_id}: pull")
        self.sync_path = f"{self.sync_parent}/{node_id}"
        self._main: dict[K, V] = self._fold({}, self.defaults)
        self._parked: list[Record[K, V]] = []
        #: The commit timestamp this broker has applied.
        self.commit_timestamp = 0
        #: The newest timestamp fetched ("uncommitted"): the start of the next pull.
        self.fetched_timestamp = 0
        #: True once a full load from the service has succeeded (else: static defaults only).
        self.loaded = False
        #: Bumped whenever the committed view is replaced (a commit that applied rows, a load).
        self.view_version = 0
        self.reloads = 0
        self._load_generation = 0
        self._watch_generation = 0
        self._last_check = 0
        self._stopped = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._reload_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # a reload and a pull do not interleave their tree writes

    # -- reading ----------------------------------------------------------------------------------

    def get(self, key: K) -> V | None:
        """The committed value of ``key``."""
        return self._main.get(key)

    @property
    def entries(self) -> Mapping[K, V]:
        """The committed view (replaced, never changed in place: safe to hold)."""
        return self._main

    @property
    def parked(self) -> int:
        """Records fetched but not yet committed."""
        return len(self._parked)

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Register in the tree, load everything (static defaults if the service does not
        answer), and start pulling; raises MetadataError when the tree cannot be used."""
        started = self.clock()
        await self._register(started)
        self.fetched_timestamp = started
        await self._follow(self._watch_generation)
        try:
            await self._load()
        except ManagementServiceError as exc:
            self.pulls.failed(exc, f"serving the {len(self._main)} static default entries until the management "
                                   "service answers")
        self._last_check = self.clock()
        self._task = asyncio.create_task(self._run(), name=f"data-cache-{self.name}")

    async def stop(self) -> None:
        """Stop pulling, forget the watches, and leave ``sync/`` (other brokers stop waiting)."""
        self._stopped = True
        self._watch_generation += 1
        self._wake.set()
        for task in (self._task, self._reload_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        with contextlib.suppress(MetadataError):
            await self.tree.delete(self.sync_path)

    async def resync(self) -> None:
        """After a new ZooKeeper session: register ``sync/<id>`` again, re-arm the watches and
        catch up with ``commit``."""
        await self._register(self.fetched_timestamp)
        self._watch_generation += 1
        await self._follow(self._watch_generation)

    def wake(self) -> None:
        """Pull now instead of at the end of the interval (tests, operators)."""
        self._wake.set()

    # -- the tree ---------------------------------------------------------------------------------

    async def _register(self, timestamp: int) -> None:
        tree = self.tree
        await tree.ensure_path(self.sync_parent)
        with contextlib.suppress(NoNodeError):
            # Our node from an earlier session that ZooKeeper has not expired yet: ids are unique.
            await tree.delete(self.sync_path)
        if not await tree.children(self.sync_parent) or await self._read_commit() is None:
            # Nobody else is running (or nothing was ever committed): start from now.
            await self._write_commit(timestamp)
        try:
            await tree.create(self.sync_path, str(timestamp).encode(), ephemeral=True)
        except NodeExistsError:
            await tree.set(self.sync_path, str(timestamp).encode())

    async def _read_commit(self) -> int | None:
        found = await self.tree.get_or_none(self.commit_path)
        return None if found is None else _parse_timestamp(found[0])

    async def _write_commit(self, timestamp: int) -> None:
        data = str(timestamp).encode()
        try:
            await self.tree.set(self.commit_path, data)
        except NoNodeError:
            try:
                await self.tree.create(self.commit_path, data)
            except NodeExistsError:
                await self.tree.set(self.commit_path, data)

    async def _write_fetched(self, timestamp: int) -> None:
        data = str(timestamp).encode()
        try:
            await self.tree.set(self.sync_path, data)
        except NoNodeError:
            # The session that owned it ended; the new one registers again.
            await self.tree.create(self.sync_path, data, ephemeral=True)

    async def _follow(self, generation: int) -> None:
        """Watch ``commit`` and ``reload`` (re-armed at every event of this generation)."""
        await self._follow_commit(generation)
        await self._follow_reload(generation, act=False)

    def _current(self, generation: int) -> bool:
        return generation == self._watch_generation and not self._stopped

    async def _follow_commit(self, generation: int) -> None:
        async def fired(event: WatchEvent) -> None:
            if self._current(generation):
                await self._guarded(self._follow_commit(generation), "following the commit timestamp")

        if await self.tree.exists(self.commit_path, watch=fired) is None:
            return
        timestamp = await self._read_commit()
        if timestamp is None:
            log.warning("DataCache %s node %d: %s holds no valid timestamp", self.name, self.node_id,
                        self.commit_path)
            return
        self.apply_commit(timestamp)

    async def _follow_reload(self, generation: int, *, act: bool = True) -> None:
        async def fired(event: WatchEvent) -> None:
            if self._current(generation):
                await self._guarded(self._follow_reload(generation), "following the reload node")

        if await self.tree.exists(self.reload_path, watch=fired) is None or not act:
            return
        found = await self.tree.get_or_none(self.reload_path)
        raw = (found[0] or b"").decode("ascii", "replace").strip() if found else ""
        if raw == str(self.node_id):
            log.info("DataCache %s node %d: reload requested through %s", self.name, self.node_id,
                     self.reload_path)
            self._task_reload()

    async def _guarded(self, step: Coroutine[Any, Any, None], what: str) -> None:
        try:
            await step
        except MetadataError as exc:
            log.warning("DataCache %s node %d: %s failed: %s", self.name, self.node_id, what, exc)

    def _task_reload(self) -> None:
        async def reload() -> None:
            try:
                await self.reload()
            except (ManagementServiceError, MetadataError) as exc:
                log.warning("DataCache %s node %d: reload failed (%s); the periodic pull retries it",
                            self.name, self.node_id, exc)
                self.loaded = False
        self._reload_task = asyncio.create_task(reload(), name=f"data-cache-{self.name}-reload")

    # -- loading, pulling, committing -------------------------------------------------------------

    def _fold(self, base: dict[K, V], records: Iterable[Record[K, V]]) -> dict[K, V]:
        out = dict(base)
        for record in records:
            value = self.merge(record, out.get(record.key))
            if value is None:
                out.pop(record.key, None)
            else:
                out[record.key] = value
        return out

    async def _fetch(self, start: int, end: int) -> list[Record[K, V]]:
        dataset = await self.provider.fetch(start, end)
        # The service's window includes ``end``; such rows come again as the next pull's start.
        return sorted((r for r in dataset.records if r.timestamp < end), key=lambda r: r.timestamp)

    async def _load(self) -> None:
        """Everything from the service: rows older than ``commit`` applied, the rest parked."""
        async with self._lock:
            self._load_generation += 1
            commit = await self._read_commit()
            if commit is not None and commit > self.commit_timestamp:
                self.commit_timestamp = commit
            end = self.clock()
            records = await self._fetch(0, end)
            limit = self.commit_timestamp
            self._main = self._fold({}, [*self.defaults, *(r for r in records if r.timestamp < limit)])
            self.view_version += 1
            self._parked = [r for r in records if r.timestamp >= limit]
            self.fetched_timestamp = max(self.fetched_timestamp, end)
            self.loaded = True
            await self._write_fetched(self.fetched_timestamp)
        log.info("DataCache %s node %d loaded: %d entries, %d parked, commit %d", self.name, self.node_id,
                 len(self._main), len(self._parked), self.commit_timestamp)

    async def reload(self) -> None:
        """Drop everything and load from scratch (the ``reload`` node, a failed check)."""
        self.reloads += 1
        await self._load()

    async def sync_once(self) -> int:
        """One pull: park the new rows, publish the fetched timestamp, and, as leader, move
        ``commit``. Returns the number of rows pulled."""
        async with self._lock:
            generation = self._load_generation
            start, end = self.fetched_timestamp, self.clock()
            if end <= start:
                return 0
            records = await self._fetch(start, end)
            if generation != self._load_generation:
                return 0  # a reload replaced the state while we were fetching
            if records:
                self._parked.extend(records)
                self._parked.sort(key=lambda r: r.timestamp)
                self._apply_parked()  # the commit may have passed some of them already
            self.fetched_timestamp = end
            await self._write_fetched(end)
        await self._lead()
        return len(records)

    async def _lead(self) -> None:
        """As leader: commit = the lowest timestamp any broker has fetched."""
        ids = []
        for child in await self.tree.children(self.sync_parent):
            with contextlib.suppress(ValueError):
                ids.append(int(child))
        if not ids or min(ids) != self.node_id:
            return
        lowest = self.fetched_timestamp
        for other in ids:
            if other == self.node_id:
                continue
            found = await self.tree.get_or_none(f"{self.sync_parent}/{other}")
            value = None if found is None else _parse_timestamp(found[0])
            if value is not None:  # a broker that just left, or a node in the making
                lowest = min(lowest, value)
        found = await self.tree.get_or_none(self.commit_path)
        current = None if found is None else _parse_timestamp(found[0])
        if current is not None and lowest <= current:
            return
        try:
            if found is None:
                await self.tree.create(self.commit_path, str(lowest).encode())
            else:
                await self.tree.set(self.commit_path, str(lowest).encode(), version=found[1].version)
        except (BadVersionError, NodeExistsError):
            return  # another leader moved it meanwhile (leadership just changed)
        self.apply_commit(lowest)

    def apply_commit(self, timestamp: int) -> None:
        """Make the parked rows older than ``timestamp`` visible (the ``commit`` watch)."""
        if timestamp <= self.commit_timestamp:
            return
        self.commit_timestamp = timestamp
        self._apply_parked()

    def _apply_parked(self) -> None:
        limit = self.commit_timestamp
        due = [r for r in self._parked if r.timestamp < limit]
        if due:
            self._parked = [r for r in self._parked if r.timestamp >= limit]
            self._main = self._fold(self._main, due)
            self.view_version += 1
            log.info("DataCache %s node %d committed %d rows at %d", self.name, self.node_id, len(due), limit)

    async def check(self) -> bool:
        """Compare the committed view with everything the service has below ``commit``;
        reload when they differ. Returns True when they matched."""
        commit = self.commit_timestamp
        records = await self._fetch(0, commit)
        expected = self._fold({}, [*self.defaults, *records])
        if commit != self.commit_timestamp:
            return True  # committed meanwhile: compare next time
        if expected == self._main:
            return True
        missing = [k for k in expected if self._main.get(k) != expected[k]]
        extra = [k for k in self._main if k not in expected]
        log.warning("DataCache %s node %d differs from the management service below commit %d "
                    "(%d entries differ or missing, %d extra); reloading", self.name, self.node_id, commit,
                    len(missing), len(extra))
        await self.reload()
        return False

    # -- the periodic task ------------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        missing = False  # the service has no such endpoint: ask again every check interval
        while not self._stopped:
            if missing:
                delay_ms = self.check_interval_ms
            elif failures:
                delay_ms = min(self.sync_interval_ms, FIRST_RETRY_MS * 2 ** min(failures - 1, 20))
            else:
                delay_ms = self.sync_interval_ms
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay_ms / 1000)
            if self._stopped:
                return
            try:
                if not self.loaded:
                    await self._load()
                else:
                    await self.sync_once()
                    if self.clock() - self._last_check >= self.check_interval_ms:
                        self._last_check = self.clock()
                        await self.check()
                self.pulls.succeeded()
                failures = 0
                missing = False
            except EndpointMissingError as exc:
                if not missing:
                    log.warning("DataCache %s node %d: %s; keeping %d entries, asking again every %.0f s",
                                self.name, self.node_id, exc, len(self._main), self.check_interval_ms / 1000)
                missing = True
            except (ManagementServiceError, MetadataError) as exc:
                failures += 1
                retry = min(self.sync_interval_ms, FIRST_RETRY_MS * 2 ** min(failures - 1, 20))
                self.pulls.failed(exc, f"keeping commit {self.commit_timestamp}; next attempt in {retry / 1000:.1f} s, "
                                       f"backing off to every {self.sync_interval_ms / 1000:g} s")
            except Exception as exc:  # a bug must not end the cache: keep the last view, say so
                failures += 1
                log.error("DataCache %s node %d: pull failed unexpectedly: %r", self.name, self.node_id, exc)
