"""Incremental fetch sessions (KIP-227), as Kafka's FetchSession.scala.

A client that opens a session (a full fetch with epoch 0) is given a session id; its next
fetches (epoch 1, 2, ...) carry only the partitions whose fetch position or limits changed and
the partitions to forget, and each incremental response carries only the partitions with
something new: records, a changed high watermark or log start offset, an error. The broker keeps
each session's partitions with what it last told the client about them (`CachedPartition`).

`FetchManager.new_context` turns a request's session id and epoch into one of Kafka's four fetch
contexts:

| session id, epoch | context |
|---|---|
| 0, -1 (or any id, -1) | sessionless: full request and response, no session (the id given is closed) |
| 0, 0 (or id, 0) | full: full request and response, and a new session if the cache admits one |
| id, n > 0 | incremental, if the session exists (FETCH_SESSION_ID_NOT_FOUND) and expects epoch n (INVALID_FETCH_SESSION_EPOCH) |

Sessions by topic name (Fetch v7-v12) and by topic id (v13+) do not mix: a request of the other
kind gets FETCH_SESSION_TOPIC_ID_ERROR. Who fetches does not matter here except for eviction:
sessions of followers (replica id >= 0) are privileged.

The cache (`max.incremental.fetch.session.cache.slots`, Kafka's default 1000) evicts as Kafka's
FetchSessionCacheShard does. A new session may take the slot of (1) the least recently used
session if it was unused for more than 2 minutes, else (2) the least valuable evictable
session, ordered by (privileged, partition count, id): a consumer session is evictable at once by
a privileged one and by anyone once it is older than 2 minutes; a privileged session only once
it is older than 2 minutes. The new session wins when it is privileged and the other is not, or
has more partitions. kaflet keeps one cache where Kafka 3.8+ splits the slots over 8 shards to
spread lock contention; with one event loop there is no contention, and one cache evicts the
least valuable session of all rather than of one shard.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping

from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.fetch import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchPartition,
    FetchResponse,
    NodeEndpoint,
    PartitionFetchData,
    Region,
    encode_fetch_response,
    next_epoch,
    records_size,
)
from kaflet.protocol.response import OwnEncoding

#: Kafka's KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: how long a session is safe from
#: eviction after its creation, and how long it may go unused before it is stale.
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS = 120_000

#: A topic as a fetch request names it: its name (Fetch v7-v12) or its 16-byte id (v13+).
TopicKey = str | bytes
PartitionKey = tuple[TopicKey, int]


class CachedPartition:
    """A partition of a fetch: what the client asks for and what it was last told about it.

    `topic` is the topic's name, None while a topic id cannot be resolved (UNKNOWN_TOPIC_ID).
    """

    __slots__ = ("topic_key", "topic", "partition", "max_bytes", "fetch_offset", "high_watermark",
                 "leader_epoch", "fetcher_log_start_offset", "local_log_start_offset", "last_fetched_epoch")

    def __init__(self, topic_key: TopicKey, topic: str | None, fp: FetchPartition) -> None:
        self.topic_key = topic_key
        self.topic = topic
        (self.partition, self.leader_epoch, self.fetch_offset, self.last_fetched_epoch,
         self.fetcher_log_start_offset, self.max_bytes) = fp
        self.high_watermark = -1
        self.local_log_start_offset = -1

    @property
    def key(self) -> PartitionKey:
        return (self.topic_key, self.partition)

    def update_request_params(self, req: CachedPartition) -> None:
        """Take the fetch position and limits of a newer request for the same partition."""
        self.max_bytes = req.max_bytes
        self.fetch_offset = req.fetch_offset
        self.fetcher_log_start_offset = req.fetcher_log_start_offset
        self.leader_epoch = req.leader_epoch
        self.last_fetched_epoch = req.last_fetched_epoch

    def maybe_update_response_data(self, resp: PartitionFetchData, update: bool) -> bool:
        """Whether an incremental response must carry this partition; with ``update``, remember
        what it tells the client (Kafka's CachedPartition.maybeUpdateResponseData)."""
        must = bool(resp.records) or resp.preferred_read_replica >= 0
        if self.high_watermark != resp.high_watermark:
            must = True
            if update:
                self.high_watermark = resp.high_watermark
        if self.local_log_start_offset != resp.log_start_offset:
            must = True
            if update:
                self.local_log_start_offset = resp.log_start_offset
        if resp.error_code:
            # Errors always go out; forgetting the high watermark re-sends the partition once
            # the error is gone.
            must = True
            if update:
                self.high_watermark = -1
        return must

    def __repr__(self) -> str:
        return (f"CachedPartition({self.topic or self.topic_key!r}-{self.partition}, fetch_offset="
                f"{self.fetch_offset}, high_watermark={self.high_watermark})")


class FetchSession:
    """One incremental fetch session: its partitions in fetch order, its epoch, its use."""

    __slots__ = ("id", "privileged", "partitions", "uses_topic_ids", "creation_ms", "last_used_ms", "epoch",
                 "cached_size")

    def __init__(self, session_id: int, privileged: bool, partitions: dict[PartitionKey, CachedPartition],
                 uses_topic_ids: bool, now_ms: float, epoch: int) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = epoch
        #: The partition count as of the last touch (what eviction compares); -1: not cached.
        self.cached_size = -1

    def update(self, fetch_data: dict[PartitionKey, CachedPartition],
               to_forget: Iterable[PartitionKey]) -> tuple[int, int, int]:
        """Apply an incremental request: add or update its partitions, drop the forgotten ones.

        Returns how many partitions were (added, updated, removed).
        """
        added = updated = removed = 0
        partitions = self.partitions
        for key, req in fetch_data.items():
            cached = partitions.get(key)
            if cached is None:
                partitions[key] = req
                added += 1
            else:
                cached.update_request_params(req)
                updated += 1
        for key in to_forget:
            if partitions.pop(key, None) is not None:
                removed += 1
        return added, updated, removed

    def __repr__(self) -> str:
        return (f"FetchSession(id={self.id}, privileged={self.privileged}, partitions={len(self.partitions)}, "
                f"uses_topic_ids={self.uses_topic_ids}, epoch={self.epoch})")


def _evictable_key(session: FetchSession) -> tuple[bool, int, int]:
    return (session.privileged, session.cached_size, session.id)


class FetchSessionCache:
    """The broker's fetch sessions, bounded by ``max_entries`` slots (see the module docstring)."""

    def __init__(self, max_entries: int, eviction_ms: int = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS,
                 rng: random.Random | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._rng = rng or random.Random()
        self._sessions: dict[int, FetchSession] = {}
        # Least recently used first; touching moves a session to the end. Kafka orders by
        # (last used ms, id); sessions touched within the same millisecond keep their touch order.
        self._last_used: OrderedDict[int, FetchSession] = OrderedDict()
        self._evictable_by_all: dict[int, FetchSession] = {}
        self._evictable_by_privileged: dict[int, FetchSession] = {}
        self.total_partitions = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def _new_session_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, 0x7FFFFFFF)
            if session_id not in self._sessions:
                return session_id

    def maybe_create_session(self, now_ms: float, privileged: bool, size: int, uses_topic_ids: bool,
                             create_partitions: Callable[[], dict[PartitionKey, CachedPartition]]) -> int:
        """A new session's id, or INVALID_SESSION_ID when the cache has no slot it may take."""
        if len(self._sessions) >= self.max_entries and not self._try_evict(privileged, size, now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_session_id(), privileged, create_partitions(), uses_topic_ids, now_ms,
                               next_epoch(INITIAL_EPOCH))
        self._sessions[session.id] = session
        self.touch(session, now_ms)
        return session.id

    def _try_evict(self, privileged: bool, size: int, now_ms: float) -> bool:
        if not self._last_used:
            return False
        lru = next(iter(self._last_used.values()))
        if now_ms - lru.last_used_ms > self.eviction_ms:
            self.remove(lru)
            self.evictions += 1
            return True
        candidates = self._evictable_by_privileged if privileged else self._evictable_by_all
        if not candidates:
            return False
        victim = min(candidates.values(), key=_evictable_key)
        # The new session sorts with id 0, below any real id: on a tie it does not evict.
        if (privileged, size, 0) < _evictable_key(victim):
            return False
        self.remove(victim)
        self.evictions += 1
        return True

    def remove(self, session: FetchSession | int) -> FetchSession | None:
        """Drop a session (or the session with this id); returns it, or None if it was not cached."""
        found = self._sessions.pop(session if isinstance(session, int) else session.id, None)
        if found is None:
            return None
        self._last_used.pop(found.id, None)
        self._evictable_by_all.pop(found.id, None)
        self._evictable_by_privileged.pop(found.id, None)
        self.total_partitions -= found.cached_size
        found.cached_size = -1
        return found

    def touch(self, session: FetchSession, now_ms: float) -> None:
        """Mark a session used now, and re-file it for eviction with its current size."""
        session.last_used_ms = now_ms
        self._last_used[session.id] = session
        self._last_used.move_to_end(session.id)
        if session.cached_size != -1:
            self.total_partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        self.total_partitions += session.cached_size
        old = now_ms - session.creation_ms > self.eviction_ms
        if not session.privileged or old:
            self._evictable_by_privileged[session.id] = session
        else:
            self._evictable_by_privileged.pop(session.id, None)
        if old:
            self._evictable_by_all[session.id] = session
        else:
            self._evictable_by_all.pop(session.id, None)


#: A partition's answer, paired with the CachedPartition it answers.
ResponsePartition = tuple[CachedPartition, PartitionFetchData]


class FetchContext:
    """What one fetch request reads, and how its answer relates to a session."""

    #: A session error: nothing is read, the response carries only this code.
    error: ErrorCode = ErrorCode.NONE

    def partitions(self) -> list[CachedPartition]:
        """The partitions to read, in order (for an incremental fetch: all of the session's)."""
        raise NotImplementedError

    def respond(self, parts: list[ResponsePartition], update: bool = True
                ) -> tuple[ErrorCode, int, list[ResponsePartition]]:
        """(error code, session id, partitions to send) for the answers read for `partitions()`.

        ``update=False`` only looks (for the size of the response): no session is created or
        changed, and a new session's id is not known yet (0).
        """
        raise NotImplementedError

    def throttled(self) -> tuple[ErrorCode, int]:
        """(error code, session id) of the empty answer to a throttled fetch, which leaves the
        session as it was (Kafka's getThrottledResponse)."""
        return ErrorCode.NONE, INVALID_SESSION_ID


class SessionErrorContext(FetchContext):
    """The request's session is unknown or out of step: answer the error and nothing else."""

    def __init__(self, error: ErrorCode) -> None:
        self.error = error

    def partitions(self) -> list[CachedPartition]:
        return []

    def respond(self, parts: list[ResponsePartition], update: bool = True
                ) -> tuple[ErrorCode, int, list[ResponsePartition]]:
        return self.error, INVALID_SESSION_ID, []


class SessionlessFetchContext(FetchContext):
    """A full fetch that neither uses nor creates a session (epoch -1, or a session emptied)."""

    def __init__(self, fetch_data: dict[PartitionKey, CachedPartition]) -> None:
        self.fetch_data = fetch_data

    def partitions(self) -> list[CachedPartition]:
        return list(self.fetch_data.values())

    def respond(self, parts: list[ResponsePartition], update: bool = True
                ) -> tuple[ErrorCode, int, list[ResponsePartition]]:
        return ErrorCode.NONE, INVALID_SESSION_ID, parts


class FullFetchContext(FetchContext):
    """A full fetch (epoch 0) that opens a session with its partitions if the cache admits it."""

    def __init__(self, cache: FetchSessionCache, fetch_data: dict[PartitionKey, CachedPartition],
                 uses_topic_ids: bool, privileged: bool, clock_ms: Callable[[], float]) -> None:
        self.cache = cache
        self.fetch_data = fetch_data
        self.uses_topic_ids = uses_topic_ids
        self.privileged = privileged
        self.clock_ms = clock_ms

    def partitions(self) -> list[CachedPartition]:
        return list(self.fetch_data.values())

    def respond(self, parts: list[ResponsePartition], update: bool = True
                ) -> tuple[ErrorCode, int, list[ResponsePartition]]:
        if not update:
            return ErrorCode.NONE, INVALID_SESSION_ID, parts

        def create_partitions() -> dict[PartitionKey, CachedPartition]:
            cached: dict[PartitionKey, CachedPartition] = {}
            for cp, resp in parts:
                cp.high_watermark = resp.high_watermark
                cp.local_log_start_offset = resp.log_start_offset
                cached[(cp.topic_key, cp.partition)] = cp
            return cached

        session_id = self.cache.maybe_create_session(self.clock_ms(), self.privileged, len(parts),
                                                     self.uses_topic_ids, create_partitions)
        return ErrorCode.NONE, session_id, parts


class IncrementalFetchContext(FetchContext):
    """A fetch within a session: reads all of its partitions, answers only what changed."""

    def __init__(self, session: FetchSession, request_epoch: int) -> None:
        self.session = session
        self.request_epoch = request_epoch

    def partitions(self) -> list[CachedPartition]:
        return list(self.session.partitions.values())

    def _overtaken(self) -> bool:
        # Another request of this session was served while this one waited.
        return self.session.epoch != next_epoch(self.request_epoch)

    def respond(self, parts: list[ResponsePartition], update: bool = True
                ) -> tuple[ErrorCode, int, list[ResponsePartition]]:
        session = self.session
        if self._overtaken():
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.id, []
        out: list[ResponsePartition] = []
        cached = session.partitions
        for cp, resp in parts:
            if cp.maybe_update_response_data(resp, update):
                out.append((cp, resp))
                if update and resp.records:
                    # Partitions that got data go to the back, so the next fetch's byte budget
                    # reaches the others first.
                    key = (cp.topic_key, cp.partition)
                    if cached.pop(key, None) is not None:
                        cached[key] = cp
        return ErrorCode.NONE, session.id, out

    def throttled(self) -> tuple[ErrorCode, int]:
        if self._overtaken():
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH, self.session.id
        return ErrorCode.NONE, self.session.id


class SessionFetchResponse(OwnEncoding):
    """A Fetch response whose session is updated only when it goes out with its data.

    Kafka's order: the fetch quota is charged the response's size first (``size()``, which
    changes nothing); a throttled fetch is then answered without data (``without_data()``) and
    its session stays as it was, otherwise the session takes in what the response tells the
    client as it is encoded (``encode``).
    """

    __slots__ = ("context", "parts", "version", "node_endpoints", "_sized")

    def __init__(self, context: FetchContext, parts: list[ResponsePartition], version: int,
                 node_endpoints: list[NodeEndpoint]) -> None:
        self.context = context
        self.parts = parts
        self.version = version
        self.node_endpoints = node_endpoints
        self._sized: tuple[int, list[ResponsePartition], list[bytes | Region]] | None = None

    def _encode(self, error: ErrorCode, session_id: int, selected: list[ResponsePartition],
                throttle_time_ms: int) -> list[bytes | Region]:
        topics: list[tuple[str | bytes, list[PartitionFetchData]]] = []
        last: TopicKey | None = None
        for cp, data in selected:
            if cp.topic_key != last or not topics:
                last = cp.topic_key
                topics.append((last, [data]))
            else:
                topics[-1][1].append(data)
        return encode_fetch_response(topics, throttle_time_ms, self.version, error, session_id,
                                     self.node_endpoints)

    def encode(self, throttle_time_ms: int) -> list[bytes | Region]:
        error, session_id, selected = self.context.respond(self.parts)
        if throttle_time_ms == 0 and self._sized is not None:
            sized_id, sized_selection, chunks = self._sized
            if sized_id == session_id and sized_selection == selected:
                return chunks
        return self._encode(error, session_id, selected, throttle_time_ms)

    def size(self) -> int:
        """The encoded body's size in bytes, record data included (what the fetch quota counts)."""
        error, session_id, selected = self.context.respond(self.parts, update=False)
        chunks = self._encode(error, session_id, selected, 0)
        self._sized = (session_id, selected, chunks)
        return records_size(chunks)

    def without_data(self) -> FetchResponse:
        """The answer to a throttled fetch: no partitions, the session left as it was."""
        error, session_id = self.context.throttled()
        return FetchResponse([], self.version, error, session_id)


class FetchManager:
    """Creates the fetch context of each request from the broker's session cache."""

    def __init__(self, cache: FetchSessionCache, clock_ms: Callable[[], float]) -> None:
        self.cache = cache
        self.clock_ms = clock_ms

    def new_context(self, version: int, session_id: int, epoch: int, privileged: bool,
                    fetch_data: dict[PartitionKey, CachedPartition], to_forget: list[PartitionKey],
                    topic_names: Mapping[bytes, str]) -> FetchContext:
        """Kafka's FetchManager.newContext; `topic_names` resolves topic ids (v13+)."""
        uses_topic_ids = version >= 13
        cache = self.cache
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                cache.remove(session_id)  # a full request closes the session it names
            if epoch == FINAL_EPOCH:
                return SessionlessFetchContext(fetch_data)
            return FullFetchContext(cache, fetch_data, uses_topic_ids, privileged, self.clock_ms)
        session = cache.get(session_id)
        if session is None:
            return SessionErrorContext(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return SessionErrorContext(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return SessionErrorContext(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(fetch_data, to_forget)
        if not session.partitions:
            cache.remove(session)
            return SessionlessFetchContext(fetch_data)
        if uses_topic_ids:
            # Names of ids that were unknown may be known now (and a deleted topic's id is not).
            for cp in session.partitions.values():
                cp.topic = topic_names.get(cp.topic_key)  # type: ignore[arg-type]  # ids are bytes
        cache.touch(session, self.clock_ms())
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetchContext(session, epoch)
