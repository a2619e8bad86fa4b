"""Produce (key 0): append record batches as bytes, answer with offsets.

The handler decodes, authorizes and checks the request's shape, then makes one call,
``ReplicaManager.append_records`` (kaflet/replication/append.py), and answers once what that
call hands back is flushed and replicated (deferred, so the connection's next Produce appends
meanwhile).

Produce v0-2 carry message sets of magic v0/v1 (kaflet/protocol/legacy_records.py): each is
up-converted to one v2 batch on append and then written like any other, so offsets, timestamps
(message.timestamp.type), compression.type, quotas and acks work as for v3+. Kafka accepts v2
batches in v0-2 requests too (it never checked), and so does kaflet.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kaflet.network.connection import DeferredResponse
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.produce import (
    PartitionProduceResult,
    ProduceRequest,
    ProduceResponse,
    decode_produce_request,
)
from kaflet.protocol.records import ATTRIBUTES_OFFSET, MAGIC_OFFSET, MAGIC_V2, TRANSACTIONAL_FLAG_MASK
from kaflet.replication.append import (
    ADMIN_CLIENT_ID,
    VALID_ACKS,
    AppendEntry,
    PartitionAppendResult,
    PendingAppends,
)
from kaflet.replication.partition import Partition
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server import traffic
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.PRODUCE
MIN_VERSION = 0
MAX_VERSION = 10
#: The first version whose records must be one v2 batch (message sets before it).
V2_ONLY_VERSION = 3

log = logging.getLogger("kaflet.produce")


async def handle(ctx: RequestContext, body: memoryview) -> ProduceResponse | DeferredResponse | None:
    return await serve(ctx, decode_produce_request(body, ctx.version))


async def serve(ctx: RequestContext, req: ProduceRequest) -> ProduceResponse | DeferredResponse | None:
    """Answer a decoded request in real partition numbers (the gateway renumbers: server/renumbering.py)."""
    started = time.monotonic()
    services = ctx.services
    replicas = services.storage.replicas
    results: list[tuple[str, list[PartitionProduceResult]]] = []
    # The partitions that passed the request's checks, and the answer each one fills.
    entries: list[AppendEntry] = []
    answers: list[PartitionProduceResult] = []
    any_error = False
    # Kafka's checks: Write on the transactional id for the whole request, Write on each topic.
    # (Since Kafka 3.0 idempotent batches need no IdempotentWrite here: InitProducerId checks it.)
    # Transactional batches need a transactional id the principal may write (Kafka's check).
    if req.transactional_id is None:
        txn_denied = _has_transactional_batch(req)
    else:
        txn_denied = not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id)
    writable = ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, (t.name for t in req.topics))
    legacy = ctx.version < V2_ONLY_VERSION
    for topic in req.topics:
        parts: list[PartitionProduceResult] = []
        for p in topic.partitions:
            index = p.index
            res = PartitionProduceResult(index)
            parts.append(res)
            checked = _check(req, topic.name, index, p.records, txn_denied, writable, legacy, replicas.get)
            if isinstance(checked, memoryview):
                entries.append(AppendEntry(topic.name, index, checked, legacy))
                answers.append(res)
                continue
            any_error = True
            res.error_code, res.error_message = checked
            if checked[0] not in _SILENT and (part := replicas.get(topic.name, index)) is not None:
                res.log_start_offset = part.log.log_start_offset
            _count_failure(ctx, topic.name, res.error_code, p.records)
        results.append((topic.name, parts))
    pending = replicas.append_records(entries, req.acks, internal_topics_allowed=ctx.header.client_id == ADMIN_CLIENT_ID,
                                      started=started)
    traffic.count_produced(ctx.traffic, entries, pending.results)
    stats = services.accounting.metrics
    principal = ctx.conn.principal.name
    for entry, res, appended in zip(entries, answers, pending.results, strict=True):
        if appended.error != ErrorCode.NONE:
            any_error = True
            _fill(res, appended)
            _count_failure(ctx, entry.topic, res.error_code, entry.records)
            continue
        if stats is not None:
            if appended.converted:
                stats.converted(entry.topic, appended.converted, produce=True)
            stats.produced(entry.topic, len(entry.records), appended.record_count, principal)
        _fill(res, appended)
    if req.acks == 0:
        if any_error:
            # Kafka closes the connection so an acks=0 producer learns that something failed.
            ctx.conn.abort()
        return None
    completion = _complete(ctx, results, answers, pending, req.timeout_ms)
    if pending.must_wait and ctx.may_defer():
        # The batches are appended; what is left is waiting for fsync and followers, which the
        # next Produce on this connection need not wait for to append its own.
        return DeferredResponse(completion)
    return await completion


#: Refusals that say nothing about the partition (so its log start offset is not given).
_SILENT = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
           ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def _check(req: ProduceRequest, topic: str, index: int, records: memoryview | None, txn_denied: bool,
           writable: set[str], legacy: bool, hosted: Callable[[str, int], Partition | None]
           ) -> tuple[ErrorCode, str | None] | memoryview:
    """The request-level checks of one partition, in Kafka's order: the refusal, or the records
    to append."""
    if txn_denied:
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
    if topic not in writable:
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
    if req.acks not in VALID_ACKS:
        return ErrorCode.INVALID_REQUIRED_ACKS, None
    if hosted(topic, index) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    if records is None or len(records) == 0:
        return ErrorCode.INVALID_RECORD, "produce request carries no record batch"
    if not legacy:
        first_size = 12 + int.from_bytes(records[8:12], "big", signed=True) if len(records) >= 12 else 0
        if 12 <= first_size < len(records):
            return ErrorCode.INVALID_RECORD, ("Produce requests with version 3 and later are only allowed to "
                                              "contain exactly one record batch")
    return records


def _fill(res: PartitionProduceResult, appended: PartitionAppendResult) -> None:
    res.error_code = appended.error
    res.error_message = appended.message
    res.record_errors = appended.record_errors
    res.base_offset = appended.base_offset
    res.log_append_time_ms = appended.log_append_time
    res.log_start_offset = appended.log_start_offset
    if appended.error in (ErrorCode.DUPLICATE_SEQUENCE_NUMBER, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER):
        log.debug("%s on partition %d", appended.error.name, res.index)


def _count_failure(ctx: RequestContext, topic: str, error: int, records: memoryview | None) -> None:
    stats = ctx.services.accounting.metrics
    if stats is not None:
        stats.produce_failed(topic, error, len(records) if records is not None else 0)


def _has_transactional_batch(req: ProduceRequest) -> bool:
    """Does a partition's (first) v2 batch carry the transactional attribute? (Message sets of
    Produce v0-2 have no such attribute.)"""
    for topic in req.topics:
        for p in topic.partitions:
            recs = p.records
            if recs is not None and len(recs) > ATTRIBUTES_OFFSET + 1 and \
                    recs[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG_MASK and recs[MAGIC_OFFSET] == MAGIC_V2:
                return True
    return False


async def _complete(ctx: RequestContext, results: list[tuple[str, list[PartitionProduceResult]]],
                    answers: list[PartitionProduceResult], pending: PendingAppends, timeout_ms: int
                    ) -> ProduceResponse:
    """Wait for the fsyncs (flush.messages) and the acks=all high watermarks, then answer."""
    for res, appended in zip(answers, await pending.wait(timeout_ms), strict=True):
        if res.error_code == ErrorCode.NONE and appended.error != ErrorCode.NONE:
            res.error_code = appended.error
            res.error_message = appended.message
    return ProduceResponse(results, ctx.version)
