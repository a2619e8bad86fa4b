"""The gateway's partition renumbering: one step around the handlers, installed by the dispatcher.

With the gateway's disabled partitions (kaflet/gateway/partitions.py) clients see a topic's
other partitions numbered 0..n-1. Kroxylicious-style, the renumbering is a filter over decoded
requests and responses rather than a concern of each handler: for every API whose messages
carry partition numbers, `REWRITES` holds how its request is decoded and served, a request
rewrite (client numbers -> real ones, before the handler runs) and a response rewrite (real
numbers -> the client's, after it). Handlers see and answer only real partitions.

The dispatcher puts the step in front of a handler only while the broker has a partition
router (the gateway is on) and the API is in the table, so without the gateway the hot paths
cost nothing. APIs not in the table (the admin and inter-broker ones) name real partitions.

Two ways back to the client's numbers, chosen per API to answer exactly what the handlers
answered when they mapped the numbers themselves:
- answers that echo the request's partitions in its order (Produce, ListOffsets, OffsetCommit,
  TxnOffsetCommit, OffsetForLeaderEpoch, DescribeProducers) get the request's numbers back by
  position, so a number with no partition behind it is answered as the client sent it;
- answers that list partitions the request did not name (Metadata, OffsetFetch of all committed
  offsets, Fetch's session partitions) are numbered with `PartitionTable.to_client`, leaving out
  disabled partitions (Fetch answers one disabled since the client last asked under an index no
  partition has, so the client refreshes its metadata).
AddPartitionsToTxn groups its answer by error, so it gets the numbers back through a map from
real partition to the client's number.

The cluster's own requests see the real partitions (`from_the_cluster`): the active
controller's kafka_exporter series (metrics/cluster_view.py) ask the other brokers for every
partition's offsets and every group's commits, and renumbered answers would put a hidden
partition's neighbour's offsets under its name. A request is the cluster's when it comes over the
inter-broker listener, names itself as a broker does (``broker-N-...``, ``controller-N``), and
its principal may ClusterAction on the Cluster, what Kafka asks of the inter-broker principal
(the gateway's authorizer grants it to super users only, never to an application's login). The
client id is a statement, not a proof: on a cluster without an authorizer every principal may
ClusterAction, so a client on a listener it shares with the brokers could claim to be one, as it
can already fetch as a follower; there the hiding is a view for well-behaved clients, not access
control (docs/gateway.md, "Disabled partitions").
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

from kaflet.gateway.partitions import PartitionRouter, PartitionTable
from kaflet.network.connection import DeferredResponse
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.fetch import FetchRequest, decode_fetch_request
from kaflet.protocol.list_offsets import decode_list_offsets_request
from kaflet.protocol.produce import ProduceRequest, ProduceResponse, decode_produce_request
from kaflet.protocol.response import Response
from kaflet.protocol.txn_responses import AddPartitionsToTxnResponse
from kaflet.security.acl import AclOperation
from kaflet.server.fetch_session import SessionFetchResponse
from kaflet.server.handlers import (
    add_partitions_to_txn,
    describe_producers,
    describe_topic_partitions,
    fetch,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    txn_offset_commit,
)
from kaflet.server.request_context import RequestContext

#: A topic's client numbering; None when the topic has no disabled partition (most topics).
Tables = Callable[[str], PartitionTable | None]

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Memo = TypeVar("Memo")

#: Client numbers of a request's partitions in its order (None: no topic of it was renumbered).
Positions = list[int] | None
#: (topic, real partition) -> the client's number (None: no topic of it was renumbered).
Numbers = dict[tuple[str, int], int] | None


@dataclass(frozen=True, slots=True)
class Rewrite(Generic[Req, Resp, Memo]):
    """One API's renumbering: decode, rewrite the request, serve it, rewrite the response.

    `request` renumbers the decoded request in place and returns what `response` needs to
    number the answer for the client, or None when the answer needs nothing.
    """

    decode: Callable[[memoryview, int], Req]
    serve: Callable[[RequestContext, Req], Awaitable[Resp | DeferredResponse | None]]
    request: Callable[[RequestContext, Req, Tables], Memo | None]
    response: Callable[[RequestContext, Resp, Memo, Tables], None]

    async def handle(self, tables: Tables, ctx: RequestContext, body: memoryview) -> Resp | DeferredResponse | None:
        req = self.decode(body, ctx.version)
        memo = self.request(ctx, req, tables)
        answer = await self.serve(ctx, req)
        if memo is None or answer is None:
            return answer
        if isinstance(answer, DeferredResponse):
            return DeferredResponse(self._complete(ctx, answer.completion, memo, tables))
        self.response(ctx, answer, memo, tables)
        return answer

    async def _complete(self, ctx: RequestContext, completion: Coroutine[Any, Any, Resp], memo: Memo,
                        tables: Tables) -> Resp:
        answer = await completion
        self.response(ctx, answer, memo, tables)
        return answer


#: The client ids kaflet's brokers give their connections to each other (server/broker.py,
#: server/broker_metrics.py, controller/channel.py).
_BROKER_CLIENT_ID = re.compile(r"(?:broker-\d+-[a-z-]+|controller-\d+)")


def from_the_cluster(ctx: RequestContext) -> bool:
    """Is this request the cluster's own (another broker's), to be served in real partitions?"""
    listener = ctx.services.settings.inter_broker_listener
    client_id = ctx.header.client_id
    return (listener is not None and ctx.listener == listener and client_id is not None
            and _BROKER_CLIENT_ID.fullmatch(client_id) is not None
            and ctx.authorize_cluster(AclOperation.CLUSTER_ACTION))


def renumbered(router: PartitionRouter, api_key: int
               ) -> Callable[[RequestContext, memoryview], Coroutine[Any, Any, Response]] | None:
    """The handler of `api_key` behind the renumbering step; None when the API names no partitions."""
    rewrite = REWRITES.get(api_key)
    return None if rewrite is None else partial(rewrite.handle, router.table)


# -- shared walks over the generic codec's messages ------------------------------------------------

def _to_real(topics: Iterable[Any], name: str, parts: str, index: str, tables: Tables) -> Positions:
    """Renumber attribute `index` of each partition entry to the real partition; the client's numbers."""
    clients: list[int] = []
    changed = False
    for t in topics:
        table = tables(getattr(t, name))
        for p in getattr(t, parts):
            client = getattr(p, index)
            clients.append(client)
            if table is not None:
                setattr(p, index, table.to_real(client))
                changed = True
    return clients if changed else None


def _numbers_to_real(topics: Iterable[Any], name: str, parts: str, tables: Tables) -> Numbers:
    """Renumber lists of partition numbers (attribute `parts`) to real ones; real -> client."""
    numbers: dict[tuple[str, int], int] = {}
    for t in topics:
        topic = getattr(t, name)
        table = tables(topic)
        if table is not None:
            clients = getattr(t, parts)
            real = [table.to_real(c) for c in clients]
            setattr(t, parts, real)
            numbers.update(((topic, r), c) for r, c in zip(real, clients, strict=True))
    return numbers or None


def _restore(topics: Iterable[Any], parts: str, index: str, clients: list[int]) -> None:
    """Give the answer's partitions, in request order, the client's numbers again."""
    numbers = iter(clients)
    for t in topics:
        for p in getattr(t, parts):
            setattr(p, index, next(numbers))


def _to_client(topics: Iterable[Any], name: str, parts: str, index: str, tables: Tables) -> None:
    """Number the answer's partitions for the client, leaving out the disabled ones."""
    for t in topics:
        topic = getattr(t, name)
        table = tables(topic) if topic is not None else None
        if table is None:
            continue
        kept = []
        for p in getattr(t, parts):
            client = table.to_client(getattr(p, index))
            if client is not None:
                setattr(p, index, client)
                kept.append(p)
        setattr(t, parts, kept)


# -- one pair per API ------------------------------------------------------------------------------

def _produce_request(ctx: RequestContext, req: ProduceRequest, tables: Tables) -> Positions:
    return _to_real(req.topics, "name", "partitions", "index", tables)


def _produce_response(ctx: RequestContext, resp: ProduceResponse, clients: list[int], tables: Tables) -> None:
    numbers = iter(clients)
    for _, parts in resp.results:
        for res in parts:
            res.index = next(numbers)


def _fetch_request(ctx: RequestContext, req: FetchRequest, tables: Tables) -> bool | None:
    """A consumer's partitions (and forgotten ones) to real ones; followers name real partitions."""
    if req.replica_id >= 0:
        return None
    names = ctx.services.cluster.metadata.topics_by_id
    by_id = ctx.version >= 13

    def table_of(name: str, topic_id: bytes) -> PartitionTable | None:
        topic = names.get(topic_id) if by_id else name
        return tables(topic) if topic is not None else None

    for t in req.topics:
        if (table := table_of(t.name, t.topic_id)) is not None:
            t.partitions = [(table.to_real(fp[0]), fp[1], fp[2], fp[3], fp[4], fp[5]) for fp in t.partitions]
    for f in req.forgotten_topics:
        if (table := table_of(f.name, f.topic_id)) is not None:
            f.partitions = [table.to_real(p) for p in f.partitions]
    return True


def _fetch_response(ctx: RequestContext, resp: SessionFetchResponse, _: bool, tables: Tables) -> None:
    for cp, data in resp.parts:
        table = tables(cp.topic) if cp.topic is not None else None
        if table is not None:
            client = table.to_client(cp.partition)
            # A partition disabled since the client last asked: answered under an index no
            # partition has, so the client refreshes its metadata.
            data.index = client if client is not None else -1 - cp.partition


def _list_offsets_request(ctx: RequestContext, req: Any, tables: Tables) -> Positions:
    # Renumbered whatever replica id it carries: Kafka checks no ClusterAction for a follower's
    # ListOffsets, so the replica id cannot tell a follower; the brokers' own requests do not
    # come here (`from_the_cluster`).
    return _to_real(req.topics, "name", "partitions", "partition_index", tables)


def _metadata_request(ctx: RequestContext, req: Any, tables: Tables) -> bool:
    return True  # names no partitions; every answer lists the topics' partitions


def _metadata_response(ctx: RequestContext, resp: Any, _: bool, tables: Tables) -> None:
    _to_client(resp.topics, "name", "partitions", "partition_index", tables)


def _describe_topic_partitions_request(ctx: RequestContext, req: Any, tables: Tables) -> bool:
    """The cursor's partition to the real one; past the client's last, past the real last."""
    cursor = req.cursor
    table = tables(cursor.topic_name) if cursor is not None else None
    if cursor is not None and table is not None and cursor.partition_index >= 0:
        index = cursor.partition_index
        cursor.partition_index = table.real_of[index] if index < len(table.real_of) else table.count
    return True


def _describe_topic_partitions_response(ctx: RequestContext, resp: Any, _: bool, tables: Tables) -> None:
    _to_client(resp.topics, "name", "partitions", "partition_index", tables)
    cursor = resp.next_cursor
    table = tables(cursor.topic_name) if cursor is not None else None
    if cursor is not None and table is not None:
        # The client resumes at the first enabled partition from the real one on.
        cursor.partition_index = bisect_left(table.real_of, cursor.partition_index)


def _offset_for_leader_epoch_request(ctx: RequestContext, req: Any, tables: Tables) -> Positions:
    if ctx.version >= 3 and getattr(req, "replica_id", -1) >= 0:
        return None  # a follower names real partitions
    return _to_real(req.topics, "topic", "partitions", "partition", tables)


def _offset_fetch_request(ctx: RequestContext, req: Any, tables: Tables) -> Numbers | bool:
    """Requested partitions to real ones; True when all committed offsets are asked for."""
    if ctx.version >= 8:
        topics = [t for g in req.groups if g.topics is not None for t in g.topics]
    else:
        topics = req.topics or []
    return _numbers_to_real(topics, "name", "partition_indexes", tables) or True


def _offset_fetch_response(ctx: RequestContext, resp: Any, numbers: Numbers | bool, tables: Tables) -> None:
    if ctx.version < 2 and resp.error_code and isinstance(numbers, dict):
        # Before v2 a group's error is answered for every requested partition, under the
        # request's numbers.
        for t in resp.topics:
            for p in t.partitions:
                p.partition_index = numbers.get((t.name, p.partition_index), p.partition_index)
        return
    for topics in [g.topics for g in resp.groups] if ctx.version >= 8 else [resp.topics]:
        _to_client(topics, "name", "partitions", "partition_index", tables)


def _add_partitions_to_txn_request(ctx: RequestContext, req: Any, tables: Tables) -> Numbers:
    return _numbers_to_real(req.v3_and_below_topics, "name", "partitions", tables)


def _add_partitions_to_txn_response(ctx: RequestContext, resp: AddPartitionsToTxnResponse,
                                    numbers: dict[tuple[str, int], int], tables: Tables) -> None:
    resp.errors = {(t, numbers.get((t, i), i)): code for (t, i), code in resp.errors.items()}


def _describe_producers_request(ctx: RequestContext, req: Any, tables: Tables) -> Positions:
    clients = [i for t in req.topics for i in t.partition_indexes]
    return clients if _numbers_to_real(req.topics, "name", "partition_indexes", tables) else None


def _positional(topics: str, parts: str, index: str) -> Callable[[RequestContext, Any, list[int], Tables], None]:
    """The response rewrite of an API whose answer echoes the request's partitions in order."""
    def response(ctx: RequestContext, resp: Any, clients: list[int], tables: Tables) -> None:
        _restore(getattr(resp, topics), parts, index, clients)
    return response


def _positional_request(name: str, parts: str, index: str) -> Callable[[RequestContext, Any, Tables], Positions]:
    def request(ctx: RequestContext, req: Any, tables: Tables) -> Positions:
        return _to_real(req.topics, name, parts, index, tables)
    return request


def _codec_decoder(api_key: ApiKey) -> Callable[[memoryview, int], Any]:
    return lambda body, version: codec.decode_request(api_key, version, body)


REWRITES: dict[int, Rewrite[Any, Any, Any]] = {
    ApiKey.PRODUCE: Rewrite(decode_produce_request, produce.serve, _produce_request, _produce_response),
    ApiKey.FETCH: Rewrite(decode_fetch_request, fetch.serve, _fetch_request, _fetch_response),
    ApiKey.LIST_OFFSETS: Rewrite(decode_list_offsets_request, list_offsets.serve, _list_offsets_request,
                                 _positional("topics", "partitions", "partition_index")),
    ApiKey.METADATA: Rewrite(_codec_decoder(ApiKey.METADATA), metadata.serve, _metadata_request, _metadata_response),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: Rewrite(_codec_decoder(ApiKey.DESCRIBE_TOPIC_PARTITIONS),
                                              describe_topic_partitions.serve, _describe_topic_partitions_request,
                                              _describe_topic_partitions_response),
    ApiKey.OFFSET_COMMIT: Rewrite(_codec_decoder(ApiKey.OFFSET_COMMIT), offset_commit.serve,
                                  _positional_request("name", "partitions", "partition_index"),
                                  _positional("topics", "partitions", "partition_index")),
    ApiKey.OFFSET_FETCH: Rewrite(_codec_decoder(ApiKey.OFFSET_FETCH), offset_fetch.serve, _offset_fetch_request,
                                 _offset_fetch_response),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Rewrite(_codec_decoder(ApiKey.OFFSET_FOR_LEADER_EPOCH),
                                            offset_for_leader_epoch.serve, _offset_for_leader_epoch_request,
                                            _positional("topics", "partitions", "partition")),
    ApiKey.ADD_PARTITIONS_TO_TXN: Rewrite(_codec_decoder(ApiKey.ADD_PARTITIONS_TO_TXN), add_partitions_to_txn.serve,
                                          _add_partitions_to_txn_request, _add_partitions_to_txn_response),
    ApiKey.TXN_OFFSET_COMMIT: Rewrite(_codec_decoder(ApiKey.TXN_OFFSET_COMMIT), txn_offset_commit.serve,
                                      _positional_request("name", "partitions", "partition_index"),
                                      _positional("topics", "partitions", "partition_index")),
    ApiKey.DESCRIBE_PRODUCERS: Rewrite(_codec_decoder(ApiKey.DESCRIBE_PRODUCERS), describe_producers.serve,
                                       _describe_producers_request,
                                       _positional("topics", "partitions", "partition_index")),
}
