"""Produce (key 0): append record batches as bytes, answer with offsets.

Produce v0-2 carry message sets of magic v0/v1 (kaflet/protocol/legacy_records.py): each is
up-converted to one v2 batch here and then appended like any other, so offsets, timestamps
(message.timestamp.type), compression.type, quotas and acks work as for v3+. Kafka accepts v2
batches in v0-2 requests too (it never checked), and so does kaflet.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Coroutine
from typing import Any

from kaflet.network.connection import DeferredResponse
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode, KafkaError
from kaflet.protocol.legacy_records import decode_message_set, record_set_magic, to_record_batch
from kaflet.protocol.produce import (
    PartitionProduceResult,
    ProduceRequest,
    ProduceResponse,
    decode_produce_request,
)
from kaflet.protocol.records import (
    ATTRIBUTES_OFFSET,
    MAGIC_OFFSET,
    MAGIC_V2,
    TRANSACTIONAL_FLAG_MASK,
    RecordValidationError,
)
from kaflet.replication.delayed_produce import wait_for_acks
from kaflet.replication.partition import Partition
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.PRODUCE
MIN_VERSION = 0
MAX_VERSION = 10
#: The first version whose records must be one v2 batch (message sets before it).
V2_ONLY_VERSION = 3

log = logging.getLogger("kaflet.produce")


async def handle(ctx: RequestContext, body: memoryview) -> ProduceResponse | DeferredResponse | None:
    started = time.monotonic()
    req = decode_produce_request(body, ctx.version)
    broker = ctx.broker
    results: list[tuple[str, list[PartitionProduceResult]]] = []
    flushes: list[tuple[PartitionProduceResult, Coroutine[Any, Any, None]]] = []
    # acks=all: (result, partition, offset the high watermark must reach) per appended batch.
    replicated: list[tuple[PartitionProduceResult, Partition, int]] = []
    any_error = False
    # Kafka's checks: Write on the transactional id for the whole request, Write on each topic.
    # (Since Kafka 3.0 idempotent batches need no IdempotentWrite here: InitProducerId checks it.)
    # Transactional batches need a transactional id the principal may write (Kafka's check).
    if req.transactional_id is None:
        txn_denied = _has_transactional_batch(req)
    else:
        txn_denied = not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id)
    writable = ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, (t.name for t in req.topics))
    traffic = ctx.traffic
    stats = broker.metrics
    legacy = ctx.version < V2_ONLY_VERSION
    for topic in req.topics:
        parts: list[PartitionProduceResult] = []
        table = ctx.partition_table(topic.name)
        for p in topic.partitions:
            res = PartitionProduceResult(p.index)  # the answer keeps the client's number
            parts.append(res)
            partition = broker.replica_manager.get(topic.name, p.index if table is None else table.to_real(p.index))
            try:
                if txn_denied or topic.name not in writable:
                    partition = None  # nothing about the partition may leak into the answer
                    raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if txn_denied
                                     else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if req.acks not in (-1, 0, 1):
                    raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS)
                if partition is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                if p.records is None or len(p.records) == 0:
                    raise KafkaError(ErrorCode.INVALID_RECORD, "produce request carries no record batch")
                records = p.records
                if legacy:
                    if record_set_magic(records) != MAGIC_V2:
                        # magic v0/v1; anything else is answered as Kafka does (CORRUPT_MESSAGE)
                        ms = decode_message_set(records, partition.log.config.max_message_bytes)
                        records = memoryview(to_record_batch(ms))
                        if stats is not None:
                            stats.converted(topic.name, len(ms.records), produce=True)
                else:
                    first_size = 12 + int.from_bytes(records[8:12], "big", signed=True) if len(records) >= 12 else 0
                    if 12 <= first_size < len(records):
                        raise KafkaError(ErrorCode.INVALID_RECORD, "Produce requests with version 3 and later are "
                                         "only allowed to contain exactly one record batch")
                appended = partition.append(records, req.acks)
                if traffic is not None:
                    traffic[topic.name] = traffic.get(topic.name, 0) + len(p.records)
                if stats is not None:
                    stats.produced(topic.name, len(p.records), appended.record_count, ctx.conn.principal.name)
                res.base_offset = appended.base_offset
                res.log_append_time_ms = appended.log_append_time
                res.log_start_offset = appended.log_start_offset
                if req.acks != 0 and appended.flush_needed:
                    flushes.append((res, partition.log.flush_until(appended.last_offset + 1)))
                if req.acks == -1:
                    replicated.append((res, partition, appended.last_offset + 1))
            except OSError as exc:
                any_error = True
                # The failure channel has said it once for the directory (or the resource).
                log.debug("append to %s-%d failed: %s", topic.name, p.index, exc)
                res.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                res.error_message = f"Disk error when appending to {topic.name}-{p.index}"
                if stats is not None:
                    stats.produce_failed(topic.name, res.error_code, len(p.records) if p.records is not None else 0)
            except KafkaError as exc:
                any_error = True
                res.error_code = int(exc.code)
                res.error_message = exc.message
                if isinstance(exc, RecordValidationError):
                    res.record_errors = exc.record_errors
                if exc.code in (ErrorCode.DUPLICATE_SEQUENCE_NUMBER, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER):
                    log.debug("%s on %s-%d", exc.code.name, topic.name, p.index)
                if stats is not None:
                    stats.produce_failed(topic.name, res.error_code, len(p.records) if p.records is not None else 0)
            if partition is not None and res.log_start_offset < 0:
                res.log_start_offset = partition.log.log_start_offset
        results.append((topic.name, parts))
    if req.acks == 0:
        if any_error:
            # Kafka closes the connection so an acks=0 producer learns that something failed.
            ctx.conn.abort()
        return None
    completion = _complete(ctx, results, flushes, replicated, req.timeout_ms, started)
    waits = flushes or any(part.log.high_watermark < offset for _, part, offset in replicated)
    if waits and ctx.may_defer():
        # The batches are appended; what is left is waiting for fsync and followers, which the
        # next Produce on this connection need not wait for to append its own.
        return DeferredResponse(completion)
    return await completion


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
                    flushes: list[tuple[PartitionProduceResult, Coroutine[Any, Any, None]]],
                    replicated: list[tuple[PartitionProduceResult, Partition, int]], timeout_ms: int,
                    started: float) -> ProduceResponse:
    """Wait for the fsyncs (flush.messages) and the acks=all high watermarks, then answer."""
    for res, flush in flushes:
        try:
            await flush
        except OSError as exc:
            # The batch is in the page cache but not on disk: the guarantee asked for
            # (flush.messages) does not hold, so it must not be acknowledged.
            log.error("fsync of %s failed: %s", res.index, exc)
            res.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            res.error_message = "Disk error while flushing the log"
    replicated = [r for r in replicated if r[0].error_code == ErrorCode.NONE]
    if replicated:
        # Kafka's DelayedProduce: the request's timeout_ms counts from its arrival.
        remaining_ms = timeout_ms - int((time.monotonic() - started) * 1000)
        errors = await wait_for_acks([(part, offset) for _, part, offset in replicated], remaining_ms)
        for (res, _, _), error in zip(replicated, errors, strict=True):
            if error != ErrorCode.NONE:
                res.error_code = error
    return ProduceResponse(results, ctx.version)
