"""Followers: fetchers that copy the leaders' logs (Kafka 2.8's ReplicaFetcherManager,
AbstractFetcherThread and ReplicaFetcherThread, on the event loop).

The manager keeps ``num.replica.fetchers`` fetchers per leader broker; a partition goes to the
one its hash picks. Each fetcher is one task with one connection (``BrokerClient``) to its
leader's inter-broker listener, and holds the fetch state of its partitions:

* **Truncating** (a partition just added, at the follower's high watermark): a partition whose
  log has leader epochs asks the leader (OffsetForLeaderEpoch v4 with this broker's replica id)
  where its latest epoch ends there, and truncates to the lower of that and its own end of that
  epoch (Kafka's ``getOffsetTruncationState``, including its intermediate step when the leader
  answers with an epoch the follower does not have); one without epochs, or when the leader has
  none to give, truncates to its high watermark. Then it is
* **Fetching**: Fetch v12 with this broker id as replica id, the partition's leader epoch and log
  start offset, in an incremental fetch session with the leader (KIP-227,
  ``fetch_session_handler.FetchSessionHandler``); the leader's records are appended as they came
  (``Log.append_as_follower``),
  the high watermark becomes the leader's (bounded by the own log end offset) and the log start
  offset follows the leader's.

OFFSET_OUT_OF_RANGE asks the leader for its end offset (ListOffsets with the replica id): a
leader behind this log (after an unclean election) makes the follower truncate to it; otherwise
the follower goes on from the larger of its own end and the leader's log start offset, dropping
its whole log when the leader's start is beyond it. A FENCED_LEADER_EPOCH answer to the epoch
this partition still has removes it from the fetcher until the controller's next LeaderAndIsr;
NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH (the leader has not heard of the epoch yet) and
other errors back the partition off for ``replica.fetch.backoff.ms`` and retry, as Kafka does.
A failed connection backs off every partition and reconnects.

Follower-side replication throttling (KIP-73, kaflet/quota/replication.py): the bytes fetched
for throttled partitions are recorded in the follower quota, and while it is exceeded a
throttled partition that has not caught up is left out of the fetch (Kafka's
``shouldFollowerThrottle``).

Departure from Kafka 2.8: truncation always goes through OffsetForLeaderEpoch (Kafka 2.7+ may
truncate from the Fetch response's diverging epoch instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Protocol

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.broker_connection import BrokerConnectionError
from kaflet.protocol.errors import ErrorCode, KafkaError, error_name
from kaflet.protocol.fetch import (
    FetchedPartition,
    FetchPartition,
    decode_fetch_response,
    encode_fetch_request,
)
from kaflet.protocol.primitives import DecodeError
from kaflet.protocol.records import RecordError
from kaflet.replication.config import ReplicationConfig
from kaflet.replication.fetch_session_handler import FetchSessionHandler
from kaflet.replication.partition import Partition
from kaflet.replication.quota import ReplicaQuota
from kaflet.util.outage_log import OutageLog

log = logging.getLogger("kaflet.fetcher")

FETCH_VERSION = 12
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
LIST_OFFSETS_VERSION = 6
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2

TopicPartition = tuple[str, int]
#: Answers to a fetch whose session the leader no longer has; the next, full, fetch opens another.
_SESSION_ERRORS = (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH)


class LeaderConnection(Protocol):
    """What a fetcher uses of ``kaflet.network.client.BrokerClient``."""

    @property
    def closed(self) -> bool: ...

    async def send(self, api_key: int, version: int, request: Any, *, timeout_s: float | None = None) -> Any: ...

    async def send_raw(self, api_key: int, version: int, request: Any, *,
                       timeout_s: float | None = None) -> memoryview: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """A leader's inter-broker listener."""

    broker_id: int
    host: str
    port: int


#: Opens a connection to a leader (TLS and SASL as the inter-broker listener requires);
#: raises BrokerConnectionError.
Connector = Callable[[BrokerEndpoint], Awaitable[LeaderConnection]]
#: The hosted partition, or None (``ReplicaManager.get``).
PartitionLookup = Callable[[str, int], Partition | None]


class ReplicaState(enum.Enum):
    TRUNCATING = "Truncating"
    FETCHING = "Fetching"


@dataclass(frozen=True, slots=True)
class PartitionFetchState:
    """Where a follower partition stands in its fetcher (Kafka's PartitionFetchState)."""

    fetch_offset: int
    current_leader_epoch: int
    state: ReplicaState
    delayed_until: float = 0.0  # time.monotonic() before which it is not fetched
    lag: int | None = None

    @property
    def in_sync(self) -> bool:
        """Caught up with the leader's high watermark at the last fetch (Kafka's isReplicaInSync)."""
        return self.lag is not None and self.lag <= 0

    def is_delayed(self, now: float) -> bool:
        return self.delayed_until > now

    def ready_for_fetch(self, now: float) -> bool:
        return self.state is ReplicaState.FETCHING and not self.is_delayed(now)

    def truncating(self, now: float) -> bool:
        return self.state is ReplicaState.TRUNCATING and not self.is_delayed(now)


class InitialFetchState(NamedTuple):
    """A partition handed to the fetchers: its leader, the leader epoch, where to start."""

    leader: BrokerEndpoint
    current_leader_epoch: int
    init_offset: int


class OffsetTruncationState(NamedTuple):
    """Where to truncate, and whether that ends the truncation (Kafka's OffsetTruncationState)."""

    offset: int
    truncation_completed: bool


def offset_truncation_state(
    leader_epoch: int,
    leader_end_offset: int,
    follower_end_offset_for: Callable[[int], tuple[int, int]],
    log_end_offset: int,
    initial_fetch_offset: int,
) -> OffsetTruncationState:
    """Kafka's ``getOffsetTruncationState``: where a follower truncates given the leader's
    answer (``leader_epoch``, ``leader_end_offset``) to OffsetForLeaderEpoch for the follower's
    latest epoch.

    ``follower_end_offset_for(epoch)`` is the follower's own (largest epoch <= epoch, its end
    offset), (-1, -1) when unknown; ``initial_fetch_offset`` is where the partition was added
    (its high watermark).
    """
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        # The leader knows nothing of that epoch (or of epochs at all): the high watermark.
        return OffsetTruncationState(initial_fetch_offset, True)
    if leader_epoch == UNDEFINED_EPOCH:
        # An OffsetForLeaderEpoch v0 answer: an offset without its epoch.
        return OffsetTruncationState(min(leader_end_offset, log_end_offset), True)
    follower_epoch, follower_end = follower_end_offset_for(leader_epoch)
    if follower_end == UNDEFINED_EPOCH_OFFSET:
        # The follower tracks no epoch at or below the leader's: the leader's offset it is.
        return OffsetTruncationState(min(leader_end_offset, log_end_offset), True)
    if follower_epoch != leader_epoch:
        # The leader answered with an epoch this log does not have: truncate to the end of the
        # largest epoch below it and ask again for that one.
        return OffsetTruncationState(min(follower_end, log_end_offset), False)
    return OffsetTruncationState(min(follower_end, leader_end_offset, log_end_offset), True)


def fetcher_id(topic: str, partition: int, num_fetchers: int) -> int:
    """Which of a leader's fetchers a partition goes to (Kafka hashes topic and partition)."""
    return (31 * zlib.crc32(topic.encode()) + partition) % num_fetchers


class ReplicaFetcher:
    """One leader broker's fetcher: its follower partitions, one connection, one task."""

    def __init__(self, name: str, leader: BrokerEndpoint, broker_id: int, config: ReplicationConfig,
                 partitions: PartitionLookup, connector: Connector, quota: ReplicaQuota | None = None) -> None:
        self.name = name
        #: The follower replication quota (None: never throttled).
        self.quota = quota
        self.leader = leader
        self.broker_id = broker_id
        self.config = config
        self._partitions = partitions
        self._connector = connector
        #: Fetch states in fetch order (a partition that got data moves to the end, so one
        #: busy partition does not take every response's bytes).
        self.states: dict[TopicPartition, PartitionFetchState] = {}
        #: Partitions removed after an error that needs the controller's next LeaderAndIsr.
        self.failed: set[TopicPartition] = set()
        self._conn: LeaderConnection | None = None
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._outage = OutageLog(log, f"{name}: connection to broker {leader.broker_id} ({leader.host}:{leader.port})")
        #: The incremental fetch session with the leader (KIP-227).
        self._session = FetchSessionHandler(name)

    def __repr__(self) -> str:
        return f"ReplicaFetcher({self.name}, {len(self.states)} partitions)"

    # -- partitions -------------------------------------------------------------------------

    def add_partitions(self, initial: Mapping[TopicPartition, InitialFetchState]) -> None:
        """Start (or keep) fetching these partitions. One already here at the same leader
        epoch keeps its state; otherwise it starts Truncating at its initial offset."""
        for tp, init in initial.items():
            self.failed.discard(tp)
            current = self.states.pop(tp, None)
            if current is not None and current.current_leader_epoch == init.current_leader_epoch:
                self.states[tp] = current
            else:
                self.states[tp] = PartitionFetchState(init.init_offset, init.current_leader_epoch,
                                                      ReplicaState.TRUNCATING)
        self._changed.set()

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionFetchState]:
        """Stop fetching these partitions; returns the states they had."""
        removed = {}
        for tp in tps:
            st = self.states.pop(tp, None)
            if st is not None:
                removed[tp] = st
        if removed:
            self._changed.set()
        return removed

    @property
    def partition_count(self) -> int:
        return len(self.states)

    def _mark_failed(self, tp: TopicPartition) -> None:
        self.states.pop(tp, None)
        self.failed.add(tp)
        log.warning("%s: partition %s-%d marked as failed; it waits for the controller's next LeaderAndIsr",
                    self.name, *tp)

    def _delay(self, tps: Iterable[TopicPartition]) -> None:
        until = time.monotonic() + self.config.fetch_backoff_ms / 1000
        for tp in tps:
            st = self.states.get(tp)
            if st is not None and not st.is_delayed(time.monotonic()):
                self.states[tp] = replace(st, delayed_until=until)

    def _update(self, tp: TopicPartition, st: PartitionFetchState, to_end: bool = False) -> None:
        if to_end:
            self.states.pop(tp, None)
        self.states[tp] = st

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.name}")

    def stop(self) -> asyncio.Task[None] | None:
        """Stop the task and close the connection; returns the task to await (if any)."""
        self._stopped = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        self._close_connection()
        return task

    async def shutdown(self) -> None:
        task = self.stop()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def _connection(self) -> LeaderConnection:
        conn = self._conn
        if conn is None or conn.closed:
            conn = self._conn = await self._connector(self.leader)
        return conn

    async def _run(self) -> None:
        while not self._stopped:
            try:
                await self.do_work()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: unexpected error; backing off", self.name)
                self._close_connection()
                await asyncio.sleep(self.config.fetch_backoff_ms / 1000)

    async def do_work(self) -> None:
        """One round: truncate the partitions that need it, then fetch once (or wait)."""
        await self.maybe_truncate()
        if not await self.maybe_fetch():
            await self._wait_for_work()

    async def _wait_for_work(self) -> None:
        now = time.monotonic()
        delays = [st.delayed_until - now for st in self.states.values() if st.is_delayed(now)]
        timeout = min(delays, default=self.config.fetch_backoff_ms / 1000)
        self._changed.clear()
        # asyncio.timeout, not wait_for: wait_for loses a cancellation that arrives just as the
        # event is set (which stopping a fetcher does).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(timeout, 0.001)):
                await self._changed.wait()

    def _connection_failed(self, what: str, exc: Exception) -> None:
        self._close_connection()
        if self._stopped:
            return
        self._outage.failed(f"{what}: {exc}", f"retrying every {self.config.fetch_backoff_ms} ms")

    def _connection_ok(self) -> None:
        self._outage.succeeded()

    # -- truncation ---------------------------------------------------------------------------

    async def maybe_truncate(self) -> None:
        """Truncate the Truncating partitions (Kafka's ``maybeTruncate``)."""
        now = time.monotonic()
        with_epochs: dict[TopicPartition, tuple[int, int]] = {}  # tp -> (current leader epoch, latest epoch)
        without: list[TopicPartition] = []
        for tp, st in self.states.items():
            if not st.truncating(now):
                continue
            part = self._partitions(*tp)
            if part is None:
                continue
            latest = part.log.latest_epoch()
            if latest >= 0:
                with_epochs[tp] = (st.current_leader_epoch, latest)
            else:
                without.append(tp)
        for tp in without:
            st = self.states[tp]
            log.info("%s: truncating %s-%d to its high watermark %d (no leader epochs)", self.name, *tp,
                     st.fetch_offset)
            self._truncate(tp, OffsetTruncationState(st.fetch_offset, True))
        if with_epochs:
            await self._truncate_to_epoch_end_offsets(with_epochs)

    async def _truncate_to_epoch_end_offsets(self, epochs: dict[TopicPartition, tuple[int, int]]) -> None:
        R = codec.request_class(ApiKey.OFFSET_FOR_LEADER_EPOCH)
        T = R.OffsetForLeaderTopic
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), (current, latest) in epochs.items():
            by_topic.setdefault(topic, []).append(T.OffsetForLeaderPartition(
                partition=index, current_leader_epoch=current, leader_epoch=latest))
        request = R(replica_id=self.broker_id, topics=[T(topic=t, partitions=ps) for t, ps in by_topic.items()])
        try:
            conn = await self._connection()
            response = await conn.send(ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, request)
        except BrokerConnectionError as exc:
            self._connection_failed("OffsetForLeaderEpoch", exc)
            self._delay(epochs)
            return
        self._connection_ok()
        answered: set[TopicPartition] = set()
        retried: dict[int, list[TopicPartition]] = {}
        for t in response.topics:
            for p in t.partitions:
                tp = (t.topic, p.partition)
                requested = epochs.get(tp)
                st = self.states.get(tp)
                # Only if nothing changed while the request was out (Kafka checks the epoch).
                if requested is None or st is None or st.state is not ReplicaState.TRUNCATING \
                        or st.current_leader_epoch != requested[0]:
                    continue
                answered.add(tp)
                error = p.error_code
                if error == ErrorCode.NONE:
                    self._truncate_to_leader_answer(tp, st, p.leader_epoch, p.end_offset)
                elif error == ErrorCode.FENCED_LEADER_EPOCH:
                    self._on_partition_fenced(tp, requested[0])
                else:
                    retried.setdefault(error, []).append(tp)
                    self._delay([tp])
        # One line per error, not per partition: after a leadership move at 10,000 partitions a
        # new leader that has not applied its LeaderAndIsr yet answers UNKNOWN_LEADER_EPOCH for
        # thousands at once (Kafka logs them in one debug line).
        for error, tps in retried.items():
            log.info("%s: retrying OffsetForLeaderEpoch of %d partitions, the leader answered %s: %s%s", self.name,
                     len(tps), error_name(error), ", ".join(f"{t}-{p}" for t, p in tps[:5]),
                     ", ..." if len(tps) > 5 else "")
        self._delay(tp for tp in epochs if tp not in answered and tp in self.states
                    and self.states[tp].state is ReplicaState.TRUNCATING)

    def _truncate_to_leader_answer(self, tp: TopicPartition, st: PartitionFetchState, leader_epoch: int,
                                   end_offset: int) -> None:
        part = self._partitions(*tp)
        if part is None:
            return
        lg = part.log
        decision = offset_truncation_state(leader_epoch, end_offset, lg.end_offset_for_epoch, lg.log_end_offset,
                                           st.fetch_offset)
        if end_offset == UNDEFINED_EPOCH_OFFSET:
            log.warning("%s: the leader has no end offset for epoch %d of %s-%d; truncating to the high watermark "
                        "%d", self.name, lg.latest_epoch(), *tp, decision.offset)
        self._truncate(tp, decision)

    def _truncate(self, tp: TopicPartition, decision: OffsetTruncationState) -> None:
        part = self._partitions(*tp)
        st = self.states.get(tp)
        if part is None or st is None:
            return
        lg = part.log
        try:
            if decision.offset < lg.log_end_offset:
                if decision.offset < lg.high_watermark:
                    log.warning("%s: truncating %s-%d to offset %d below its high watermark %d", self.name, *tp,
                                decision.offset, lg.high_watermark)
                else:
                    log.info("%s: truncating %s-%d to offset %d", self.name, *tp, decision.offset)
                lg.truncate_to(decision.offset)
        except (OSError, ValueError) as exc:
            log.error("%s: failed to truncate %s-%d at offset %d: %s", self.name, *tp, decision.offset, exc)
            self._mark_failed(tp)
            return
        state = ReplicaState.FETCHING if decision.truncation_completed else ReplicaState.TRUNCATING
        # Truncation works on whole batches: the log's end is where fetching resumes.
        self.states[tp] = PartitionFetchState(min(decision.offset, lg.log_end_offset), st.current_leader_epoch,
                                              state, lag=st.lag)

    def _on_partition_fenced(self, tp: TopicPartition, request_epoch: int) -> None:
        st = self.states.get(tp)
        if st is None:
            return
        if st.current_leader_epoch == request_epoch:
            log.info("%s: %s-%d has an older epoch (%d) than the leader; it waits for the new LeaderAndIsr",
                     self.name, *tp, request_epoch)
            self._mark_failed(tp)
        else:
            self._delay([tp])

    # -- fetching -----------------------------------------------------------------------------

    def build_fetch(self) -> tuple[bytes, dict[TopicPartition, PartitionFetchState]] | None:
        """The encoded Fetch v12 request for the partitions ready to fetch (in the fetch
        session: only those whose position changed), and the states of all of them as sent."""
        now = time.monotonic()
        sent: dict[TopicPartition, PartitionFetchState] = {}
        ready: dict[TopicPartition, FetchPartition] = {}
        max_bytes = self.config.fetch_max_bytes
        quota = self.quota
        # Asked once per fetch, as Kafka does (the rate cannot change while the request is built).
        over_quota = quota is not None and quota.is_quota_exceeded()
        lookup = self._partitions
        fetching = ReplicaState.FETCHING
        # Every partition of the fetcher is looked at for every fetch (as Kafka's buildFetch
        # does; the session sends only the changed ones): the test is PartitionFetchState's
        # ready_for_fetch inlined, a third of the walk's time at thousands of partitions.
        for tp, st in self.states.items():
            if st.state is not fetching or st.delayed_until > now:
                continue
            if over_quota and not st.in_sync and quota is not None and quota.is_throttled(*tp):
                continue
            part = lookup(*tp)
            if part is None:
                continue
            sent[tp] = st
            ready[tp] = (tp[1], st.current_leader_epoch, st.fetch_offset, -1, part.log.log_start_offset, max_bytes)
        if not ready and not self._session.session_partitions:
            return None
        data = self._session.build(ready)
        by_topic: dict[str, list[FetchPartition]] = {}
        for tp, fp in data.to_send.items():
            by_topic.setdefault(tp[0], []).append(fp)
        forgotten: dict[str, list[int]] = {}
        for topic, index in data.to_forget:
            forgotten.setdefault(topic, []).append(index)
        cfg = self.config
        request = encode_fetch_request(self.broker_id, cfg.fetch_wait_max_ms, cfg.fetch_min_bytes,
                                       cfg.fetch_response_max_bytes, 0, data.metadata.session_id,
                                       data.metadata.epoch, list(by_topic.items()), list(forgotten.items()))
        return request, sent

    async def maybe_fetch(self) -> bool:
        """Send one fetch and process its answer; False when no partition was ready."""
        built = self.build_fetch()
        if built is None:
            return False
        request, sent = built
        timeout_s = (self.config.socket_timeout_ms + self.config.fetch_wait_max_ms) / 1000
        try:
            conn = await self._connection()
            body = await conn.send_raw(ApiKey.FETCH, FETCH_VERSION, request, timeout_s=timeout_s)
            response = decode_fetch_response(body, FETCH_VERSION)
        except (BrokerConnectionError, DecodeError) as exc:
            self._session.handle_error()
            self._connection_failed("Fetch", exc)
            self._delay(sent)
            return True
        self._connection_ok()
        answered = ((topic, data.index) for topic, parts in response.topics for data in parts)
        if not self._session.handle_response(response.error_code, response.session_id, answered,
                                             response.throttle_time_ms):
            # A lost session is replaced by the next (full) fetch at once; anything else backs off.
            if response.error_code not in _SESSION_ERRORS:
                if response.error_code != ErrorCode.NONE:
                    log.warning("%s: Fetch answered %s", self.name, error_name(response.error_code))
                self._delay(sent)
            return True
        errors: list[TopicPartition] = []
        for topic, parts in response.topics:
            for data in parts:
                tp = (topic, data.index)
                requested = sent.get(tp)
                st = self.states.get(tp)
                # Removed, re-added, truncated or moved on meanwhile: this answer is stale.
                if requested is None or st is None or st.fetch_offset != requested.fetch_offset \
                        or st.current_leader_epoch != requested.current_leader_epoch \
                        or st.state is not ReplicaState.FETCHING:
                    continue
                if await self._process_partition(tp, st, data):
                    errors.append(tp)
        self._delay(errors)
        return True

    async def _process_partition(self, tp: TopicPartition, st: PartitionFetchState, data: FetchedPartition) -> bool:
        """Handle one partition of a fetch response; True if it must back off."""
        error = data.error_code
        if error == ErrorCode.NONE:
            return await self._append(tp, st, data)
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            return await self._handle_out_of_range(tp, st)
        if error == ErrorCode.FENCED_LEADER_EPOCH:
            self._on_partition_fenced(tp, st.current_leader_epoch)
            return tp in self.states
        if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH):
            log.debug("%s: %s for %s-%d; retrying until the next LeaderAndIsr", self.name, error_name(error), *tp)
        else:
            log.warning("%s: error for %s-%d at offset %d: %s", self.name, *tp, st.fetch_offset, error_name(error))
        return True

    async def _append(self, tp: TopicPartition, st: PartitionFetchState, data: FetchedPartition) -> bool:
        part = self._partitions(*tp)
        if part is None:
            self.states.pop(tp, None)
            return False
        lg = part.log
        if st.fetch_offset != lg.log_end_offset:
            log.error("%s: offset mismatch for %s-%d: fetched from %d, log end offset %d", self.name, *tp,
                      st.fetch_offset, lg.log_end_offset)
            self._mark_failed(tp)
            return False
        try:
            appended = part.append_as_follower(data.records) if len(data.records) else None
            if part.follow_leader_offsets(data.high_watermark, data.log_start_offset):
                lg.delete_log_start_offset_breached()
        except RecordError as exc:
            # A corrupt batch may be a transient state of the leader's log: retry later.
            log.error("%s: invalid records fetched for %s-%d at offset %d: %s", self.name, *tp, st.fetch_offset, exc)
            return True
        except (KafkaError, OSError, ValueError) as exc:
            log.error("%s: cannot append to %s-%d at offset %d: %s", self.name, *tp, st.fetch_offset, exc)
            self._mark_failed(tp)
            return False
        quota = self.quota
        if quota is not None and quota.is_throttled(*tp):
            # In-sync or not: the whole throttled traffic counts (Kafka's processPartitionData).
            quota.record(len(data.records))
        if appended is None:
            return False
        next_offset = appended.last_offset + 1
        self._update(tp, PartitionFetchState(next_offset, st.current_leader_epoch, ReplicaState.FETCHING,
                                             lag=max(0, data.high_watermark - next_offset)), to_end=True)
        if appended.flush_needed:
            try:
                await lg.flush_until(next_offset)
            except OSError as exc:
                log.error("%s: flush of %s-%d failed: %s", self.name, *tp, exc)
        return False

    async def _handle_out_of_range(self, tp: TopicPartition, st: PartitionFetchState) -> bool:
        """Kafka's ``fetchOffsetAndTruncate``; True if it must back off and retry."""
        part = self._partitions(*tp)
        if part is None:
            return False
        try:
            leader_end = await self._leader_offset(tp, st.current_leader_epoch, LATEST_TIMESTAMP)
            current = self.states.get(tp)
            if current is not st:
                return False
            lg = part.log
            replica_end = lg.log_end_offset
            if leader_end < replica_end:
                # The leader has less than this log (an unclean election): truncate to it.
                log.warning("%s: resetting the fetch offset of %s-%d from %d to the leader's end offset %d",
                            self.name, *tp, replica_end, leader_end)
                lg.truncate_to(leader_end)
                offset = lg.log_end_offset
            else:
                leader_start = await self._leader_offset(tp, st.current_leader_epoch, EARLIEST_TIMESTAMP)
                if self.states.get(tp) is not st:
                    return False
                replica_end = lg.log_end_offset
                offset = max(leader_start, replica_end)
                log.warning("%s: resetting the fetch offset of %s-%d from %d to %d (leader's log start offset %d)",
                            self.name, *tp, replica_end, offset, leader_start)
                if leader_start > replica_end:
                    lg.truncate_fully_and_start_at(leader_start)
        except KafkaError as exc:
            if exc.code == ErrorCode.FENCED_LEADER_EPOCH:
                self._on_partition_fenced(tp, st.current_leader_epoch)
                return tp in self.states
            log.info("%s: cannot get the leader's offsets for %s-%d: %s", self.name, *tp, exc)
            return True
        except BrokerConnectionError as exc:
            self._connection_failed("ListOffsets", exc)
            return True
        except (OSError, ValueError) as exc:
            log.error("%s: failed to reset %s-%d: %s", self.name, *tp, exc)
            self._mark_failed(tp)
            return False
        self._update(tp, PartitionFetchState(offset, st.current_leader_epoch, ReplicaState.FETCHING, lag=0))
        return False

    async def _leader_offset(self, tp: TopicPartition, current_leader_epoch: int, timestamp: int) -> int:
        R = codec.request_class(ApiKey.LIST_OFFSETS)
        T = R.ListOffsetsTopic
        request = R(replica_id=self.broker_id, isolation_level=0, topics=[T(name=tp[0], partitions=[
            T.ListOffsetsPartition(partition_index=tp[1], current_leader_epoch=current_leader_epoch,
                                   timestamp=timestamp)])])
        conn = await self._connection()
        response = await conn.send(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, request)
        for t in response.topics:
            for p in t.partitions:
                if t.name == tp[0] and p.partition_index == tp[1]:
                    if p.error_code != ErrorCode.NONE:
                        raise KafkaError(ErrorCode(p.error_code), f"ListOffsets answered {error_name(p.error_code)}")
                    return int(p.offset)
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "ListOffsets answered without the partition")


class ReplicaFetcherManager:
    """The fetchers of this broker's follower partitions, ``num.replica.fetchers`` per leader."""

    def __init__(self, broker_id: int, config: ReplicationConfig, partitions: PartitionLookup,
                 connector: Connector, quota: ReplicaQuota | None = None) -> None:
        self.broker_id = broker_id
        self.quota = quota
        self.config = config
        self._partitions = partitions
        self._connector = connector
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    def add_fetcher_for_partitions(self, initial: Mapping[TopicPartition, InitialFetchState]) -> None:
        """Hand partitions to their leaders' fetchers, starting fetchers as needed (a fetcher
        whose leader moved to another address is replaced)."""
        grouped: dict[tuple[int, int], dict[TopicPartition, InitialFetchState]] = {}
        for tp, init in initial.items():
            key = (init.leader.broker_id, fetcher_id(tp[0], tp[1], self.config.num_replica_fetchers))
            grouped.setdefault(key, {})[tp] = init
        for key, states in grouped.items():
            leader = next(iter(states.values())).leader
            fetcher = self.fetchers.get(key)
            if fetcher is not None and fetcher.leader != leader:
                self._stop(self.fetchers.pop(key))
                fetcher = None
            if fetcher is None:
                fetcher = self.fetchers[key] = ReplicaFetcher(
                    f"ReplicaFetcherThread-{key[1]}-{key[0]}", leader, self.broker_id, self.config,
                    self._partitions, self._connector, self.quota)
                fetcher.start()
            fetcher.add_partitions(states)
            log.info("added fetcher to broker %d for partitions %s", key[0],
                     ", ".join(f"{t}-{p} (offset {s.init_offset}, epoch {s.current_leader_epoch})"
                               for (t, p), s in states.items()))

    def remove_fetcher_for_partitions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionFetchState]:
        wanted = set(tps)
        removed: dict[TopicPartition, PartitionFetchState] = {}
        if not wanted:
            return removed
        for fetcher in self.fetchers.values():
            removed.update(fetcher.remove_partitions(wanted))
            fetcher.failed -= wanted
        if removed:
            log.info("removed fetcher for partitions %s", ", ".join(f"{t}-{p}" for t, p in removed))
        return removed

    def fetch_state(self, topic: str, partition: int) -> PartitionFetchState | None:
        for fetcher in self.fetchers.values():
            st = fetcher.states.get((topic, partition))
            if st is not None:
                return st
        return None

    def shutdown_idle_fetchers(self) -> None:
        """Stop the fetchers left without partitions."""
        for key in [k for k, f in self.fetchers.items() if f.partition_count == 0]:
            self._stop(self.fetchers.pop(key))

    def _stop(self, fetcher: ReplicaFetcher) -> None:
        task = fetcher.stop()
        if task is not None:
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def shutdown(self) -> None:
        """Stop every fetcher and wait for their tasks."""
        for fetcher in list(self.fetchers.values()):
            self._stop(fetcher)
        self.fetchers.clear()
        if self._stopping:
            await asyncio.gather(*list(self._stopping), return_exceptions=True)
