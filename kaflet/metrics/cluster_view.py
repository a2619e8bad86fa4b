"""Gathering kafka_exporter's view of the cluster on the active controller, with a short cache.

The series of kaflet/metrics/cluster_series.py describe the whole cluster, so one broker serves
them: the active controller (in a broker alone, that broker). Were every broker to serve them,
dashboards that sum over them (lag per group, messages in per topic) would count a three-broker
cluster three times. The controller's metadata cache has every partition's leader, replicas and
ISR; the offsets come from the leaders (ListOffsets latest and earliest, 200 partitions a
request), the groups from the coordinators (ListGroups, then DescribeGroups and OffsetFetch v8
for 25 groups a request), one at a time on one connection per broker; what this broker leads or
coordinates itself is read from its own state. A broker that does not answer leaves its
partitions without offsets and its groups out, as kafka_exporter does, and is logged as an outage.

`ClusterSeries.text` is what a scrape calls: the exposition text of a snapshot at most
``max_age_s`` old; scrapes that arrive while one is gathered wait for it rather than start another.
The snapshot is read on the event loop (copies of plain values, kept from the last scrape where
nothing changed: `ClusterView`) and the text written there too (reusing the metadata's families
while they are unchanged: `TextCache`), both handing the loop back after each millisecond of
work (kaflet/util/loop_slice.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kaflet.metadata.metadata_cache import MetadataCache
from kaflet.metrics.cluster_series import ClusterSnapshot, GroupRow, PartitionRow, TextCache, cluster_text
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.broker_connection import BrokerConnection, BrokerConnectionError
from kaflet.protocol.describe_groups import VERSION as DESCRIBE_GROUPS_VERSION
from kaflet.protocol.describe_groups import decode_member_counts
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
    encode_list_offsets_request,
    read_offsets,
)
from kaflet.protocol.offset_fetch import read_committed
from kaflet.protocol.primitives import DecodeError
from kaflet.util.loop_slice import LoopSlice
from kaflet.util.outage_log import OutageLogs

log = logging.getLogger("kaflet.metrics")

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
#: Versions sent to the other brokers (OffsetFetch 8: many groups in one request, KIP-709).
LIST_OFFSETS_VERSION = 6
LIST_GROUPS_VERSION = 4
OFFSET_FETCH_VERSION = 8
#: Partitions per ListOffsets and groups per DescribeGroups / OffsetFetch, one request in flight
#: per broker (~2 ms each at 200 partitions on an idle core). The other broker hands its loop
#: back after 2 ms of serving this connection (network/connection.py's `SLICE_S`), pipelined or
#: not: one at a time from another core, the next request is in its socket by the time the
#: answer's send returns, so before that limit 20-40 of them were one step of its loop. Not much
#: smaller: each answer is read here in one step of this loop too.
PARTITIONS_PER_REQUEST = 200
GROUPS_PER_REQUEST = 25
#: Partitions copied from the metadata between two looks at the clock (`LoopSlice`).
PARTITIONS_PER_YIELD = 50
#: A scrape does not wait longer than this for another broker (Prometheus' default timeout is 10 s).
REQUEST_TIMEOUT_S = 5.0
#: A snapshot younger than this is served again.
MAX_AGE_S = 1.0


@dataclass(frozen=True, slots=True)
class LocalState:
    """What the view reads of this broker itself."""

    broker_id: int
    #: The listener whose endpoints name the brokers (``kafka_broker_info``'s address).
    listener: str
    metadata: MetadataCache
    #: (high watermark, log start offset) of a partition led here, else None.
    offsets: Callable[[str, int], tuple[int, int] | None]
    #: The groups this broker coordinates.
    groups: Callable[[], dict[str, GroupRow]]
    connect: Callable[[int], Awaitable[BrokerConnection]]


@dataclass(slots=True)
class _Remote:
    offsets: dict[tuple[str, int], tuple[int, int]]
    groups: dict[str, GroupRow]


@dataclass(slots=True)
class _Layout:
    """The partitions as the metadata placed them at `version`: every topic's rows, and which
    partitions this broker and each other broker lead."""

    version: int
    topics: dict[str, list[PartitionRow]]
    local: list[tuple[str, int]]
    by_leader: dict[int, list[tuple[str, int]]]


class ClusterView:
    """Reads a ClusterSnapshot from this broker's state and the other brokers'.

    What did not change since the last scrape is not made again: the partitions' rows while the
    metadata's version is the same, and a group's row while its members and offsets are. Besides
    the work, this is about the garbage collector: what a scrape keeps alive across its awaits
    is promoted to the oldest generation, and every ~75,000 objects promoted there (a quarter of
    a 10,000-partition broker's ~300,000) cost a full collection that held the loop 0.3-0.5 s
    (one every second or two while scraped every second, the main part of produce's p99)."""

    def __init__(self, local: LocalState) -> None:
        self.local = local
        self._connections: dict[int, BrokerConnection] = {}
        self._outages = OutageLogs(log, lambda b: f"metrics: reading offsets and groups of broker {b}")
        self._layout: _Layout | None = None
        #: The last scrape's groups, whose unchanged rows the next one keeps.
        self._groups: dict[str, GroupRow] = {}

    async def snapshot(self) -> ClusterSnapshot:
        local = self.local
        md = local.metadata
        brokers = []
        for broker in md.live_brokers():
            ep = broker.endpoint(local.listener) or (broker.endpoints[0] if broker.endpoints else None)
            brokers.append((broker.id, f"{ep.host}:{ep.port}" if ep is not None else ""))
        layout = self._layout
        if layout is None or layout.version != md.version:
            layout = self._layout = await self._read_layout()
        offsets: dict[tuple[str, int], tuple[int, int]] = {}
        loop_slice = LoopSlice()
        for i, (name, index) in enumerate(layout.local, start=1):
            here = local.offsets(name, index)
            if here is not None:
                offsets[(name, index)] = here
            if i % PARTITIONS_PER_YIELD == 0:
                await loop_slice.pause()
        last = self._groups
        groups = _kept(local.groups(), last)
        others = [bid for bid, _ in brokers if bid != local.broker_id]
        for remote in await asyncio.gather(*(self._from_broker(bid, layout.by_leader.get(bid, []), last)
                                              for bid in others)):
            offsets.update(remote.offsets)
            groups.update(remote.groups)
        self._groups = groups
        return ClusterSnapshot(brokers, layout.topics, offsets, groups)

    async def _read_layout(self) -> _Layout:
        md = self.local.metadata
        me = self.local.broker_id
        layout = _Layout(md.version, {}, [], {})
        copied = 0
        loop_slice = LoopSlice()
        # A list: the loop is handed back between chunks, and an UpdateMetadata may change the
        # topics meanwhile (each topic's partitions are copied in one go; the version read
        # before makes the next scrape copy them again).
        for name, info in list(md.topics.items()):
            rows = layout.topics[name] = []
            for p in info.partitions.values():
                leader = p.leader
                rows.append((p.index, leader, tuple(p.replicas), tuple(p.isr)))
                if leader == me:
                    layout.local.append((name, p.index))
                elif leader >= 0:
                    layout.by_leader.setdefault(leader, []).append((name, p.index))
            copied += len(rows)
            if copied >= PARTITIONS_PER_YIELD:
                # 10,000 partitions in one go held the loop ~0.1 s (0.4 s on a loaded machine):
                # produce requests waited that long at every scrape.
                copied = 0
                await loop_slice.pause()
        return layout

    async def _connection(self, broker_id: int) -> BrokerConnection:
        conn = self._connections.get(broker_id)
        if conn is None or conn.closed:
            conn = self._connections[broker_id] = await self.local.connect(broker_id)
        return conn

    async def _from_broker(self, broker_id: int, partitions: list[tuple[str, int]],
                           last: dict[str, GroupRow]) -> _Remote:
        out = _Remote({}, {})
        try:
            conn = await self._connection(broker_id)
            chunks = [partitions[i:i + PARTITIONS_PER_REQUEST] for i in range(0, len(partitions), PARTITIONS_PER_REQUEST)]
            answers = [await _list_offsets(conn, chunk, ts) for ts in (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP)
                       for chunk in chunks]
            groups = await _groups(conn, last)
        except (BrokerConnectionError, DecodeError) as exc:
            broken = self._connections.pop(broker_id, None)
            if broken is not None:
                broken.close()
            self._outages[broker_id].failed(exc, "its partitions' offsets and its groups are left out of this scrape")
            return out
        self._outages[broker_id].succeeded()
        loop_slice = LoopSlice()
        # A chunk's two answers at a time, not all of a broker's partitions in one step.
        for newest, oldest in zip(answers[:len(chunks)], answers[len(chunks):], strict=True):
            out.offsets.update({tp: (off, oldest[tp]) for tp, off in newest.items() if tp in oldest})
            await loop_slice.pause()
        out.groups = groups
        return out

    def close(self) -> None:
        """Close the connections to the other brokers."""
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()


def _kept(groups: dict[str, GroupRow], last: dict[str, GroupRow]) -> dict[str, GroupRow]:
    """`groups`, with the rows equal to the last scrape's replaced by those (so the new ones die young)."""
    for group_id, row in groups.items():
        old = last.get(group_id)
        if old is not None and old == row:
            groups[group_id] = old
    return groups


def _list_offsets_body(partitions: Sequence[tuple[str, int]], timestamp: int) -> bytes:
    """The ListOffsets request for `partitions` at `timestamp`, encoded (its objects die here,
    rather than live in the awaiting coroutine until every answer is in)."""
    by_topic: dict[str, list[ListOffsetsPartition]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(ListOffsetsPartition(index, timestamp))
    request = ListOffsetsRequest(-1, 0, [ListOffsetsTopic(topic, parts) for topic, parts in by_topic.items()])
    return encode_list_offsets_request(request, LIST_OFFSETS_VERSION)


async def _list_offsets(conn: BrokerConnection, partitions: Sequence[tuple[str, int]],
                        timestamp: int) -> dict[tuple[str, int], int]:
    """The offsets at `timestamp` of the partitions the broker answers for without an error."""
    if not partitions:
        return {}
    body = await conn.send_raw(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, _list_offsets_body(partitions, timestamp),
                               timeout_s=REQUEST_TIMEOUT_S)
    return read_offsets(body, LIST_OFFSETS_VERSION)


async def _group_ids(conn: BrokerConnection) -> list[str]:
    listed = await conn.send(ApiKey.LIST_GROUPS, LIST_GROUPS_VERSION,
                             codec.request_class(ApiKey.LIST_GROUPS)(states_filter=[]), timeout_s=REQUEST_TIMEOUT_S)
    return [g.group_id for g in listed.groups]


async def _groups(conn: BrokerConnection, last: dict[str, GroupRow]) -> dict[str, GroupRow]:
    """The groups the broker coordinates, with their member counts and committed offsets."""
    ids = await _group_ids(conn)
    chunks = [await _group_rows(conn, ids[i:i + GROUPS_PER_REQUEST], last) for i in range(0, len(ids), GROUPS_PER_REQUEST)]
    return {group_id: row for chunk in chunks for group_id, row in chunk.items()}


def _describe_groups_body(ids: list[str]) -> bytes:
    """The DescribeGroups request of `ids`, encoded here so its objects die now (see _list_offsets_body)."""
    DG: Any = codec.request_class(ApiKey.DESCRIBE_GROUPS)
    return bytes(DG(groups=ids, include_authorized_operations=False).encode(version=DESCRIBE_GROUPS_VERSION))


def _offset_fetch_body(ids: list[str]) -> bytes:
    """The OffsetFetch request of all the offsets of the groups `ids`, encoded."""
    OF: Any = codec.request_class(ApiKey.OFFSET_FETCH)
    groups = [OF.OffsetFetchRequestGroup(group_id=g, topics=None) for g in ids]
    return bytes(OF(groups=groups, require_stable=False).encode(version=OFFSET_FETCH_VERSION))


async def _group_rows(conn: BrokerConnection, ids: list[str], last: dict[str, GroupRow]) -> dict[str, GroupRow]:
    """The rows of the groups `ids` (those described without an error), each answer read as it comes."""
    # One after the other: the other chunks' requests are on the connection meanwhile.
    described = await conn.send_raw(ApiKey.DESCRIBE_GROUPS, DESCRIBE_GROUPS_VERSION, _describe_groups_body(ids),
                                    timeout_s=REQUEST_TIMEOUT_S)
    members = {g.group_id: g.members for g in decode_member_counts(described) if g.error_code == ErrorCode.NONE}
    fetched = await conn.send_raw(ApiKey.OFFSET_FETCH, OFFSET_FETCH_VERSION, _offset_fetch_body(ids),
                                  timeout_s=REQUEST_TIMEOUT_S)
    committed = read_committed(fetched)
    return _kept({group_id: GroupRow(n, committed.get(group_id, {})) for group_id, n in members.items()}, last)


def render(snapshot: ClusterSnapshot) -> bytes:
    """The exposition text of the snapshot's series."""
    return cluster_text(snapshot).encode()


class ClusterSeries:
    """kafka_exporter's series as the active controller serves them, cached for ``max_age_s``."""

    def __init__(self, view: ClusterView, active: Callable[[], bool], *, max_age_s: float = MAX_AGE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.view = view
        self.active = active
        self.max_age_s = max_age_s
        self.clock = clock
        self._body: tuple[bytes, ...] = ()
        self._read_at = float("-inf")
        self._pending: asyncio.Future[tuple[bytes, ...]] | None = None
        # Used by one refresh at a time (`_pending`).
        self._cache = TextCache()

    async def text(self) -> bytes:
        """The series' exposition text; empty on a broker that is not the active controller."""
        return b"".join(await self.pieces())

    async def pieces(self) -> tuple[bytes, ...]:
        """`text` in the pieces it was written in (a family or a slice of one each): a scrape
        sends them one by one rather than join and copy ~7 MB in one step of the loop."""
        if not self.active():
            if self._body:
                self._body, self._read_at = (), float("-inf")
                self.view.close()
            return ()
        if self.clock() - self._read_at < self.max_age_s:
            return self._body
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._refresh())
        # Shielded: a scrape that disconnects does not cancel the others' snapshot.
        return await asyncio.shield(self._pending)

    async def _refresh(self) -> tuple[bytes, ...]:
        try:
            began = self.clock()
            snapshot = await self.view.snapshot()
            # Written on the loop in slices, not on a thread: a thread writing for ~0.3 s held
            # the GIL against the loop, whose every system call then waited up to the 5 ms
            # switch interval to get it back (produce p99 went from 0.07 to 0.6 s). Each piece
            # is encoded as it comes: one join and encode of the whole text held the loop
            # 5-16 ms at 10,000 partitions.
            pieces: list[bytes] = []
            loop_slice = LoopSlice()
            for piece in self._cache.pieces(snapshot):
                if piece is None:
                    await loop_slice.pause()
                elif piece:
                    pieces.append(piece.encode())
            body = tuple(pieces)
            self._body, self._read_at = body, began
            return body
        finally:
            self._pending = None

    def close(self) -> None:
        self.view.close()

