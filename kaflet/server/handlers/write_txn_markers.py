"""WriteTxnMarkers (key 27): the transaction coordinator ends a transaction on partition leaders.

For each marker, a COMMIT or ABORT control batch is appended to each named partition this
broker leads, with Kafka's checks (``Log.append_txn_marker``: INVALID_PRODUCER_EPOCH for a
stale producer epoch, TRANSACTION_COORDINATOR_FENCED for a stale coordinator epoch), and
answered per partition once the high watermark covers it (acks=all, as Kafka writes markers;
REQUEST_TIMED_OUT after request.timeout.ms). Only brokers send it: ClusterAction on the cluster,
else CLUSTER_AUTHORIZATION_FAILED for every partition.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from kaflet.coordinator.group.store import GROUP_METADATA_TOPIC
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode, KafkaError
from kaflet.protocol.response import Response
from kaflet.replication.delayed_produce import wait_for_acks
from kaflet.replication.partition import Partition
from kaflet.security.acl import AclOperation
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.WRITE_TXN_MARKERS
MIN_VERSION = 0
MAX_VERSION = 1  # v2 carries the transaction version of KIP-890 (TV2), which kaflet does not implement

log = logging.getLogger("kaflet.write_txn_markers")


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    return await process(ctx.broker, req, ctx.authorize_cluster(AclOperation.CLUSTER_ACTION))


async def process(broker: Any, req: Any, allowed: bool = True) -> Response:
    """Append the markers of a WriteTxnMarkers request object and answer it once they are
    replicated."""
    R = codec.response_class(API_KEY)
    MR = R.WritableTxnMarkerResult
    TR = MR.WritableTxnMarkerTopicResult
    PR = TR.WritableTxnMarkerPartitionResult
    specs = [(m.producer_id, m.producer_epoch, m.coordinator_epoch, bool(m.transaction_result),
              [(t.name, index) for t in m.topics for index in t.partition_indexes]) for m in req.markers]
    codes = await write_markers(broker, specs, allowed)
    markers = []
    for m, marker_codes in zip(req.markers, codes, strict=True):
        it = iter(marker_codes)
        markers.append(MR(producer_id=m.producer_id, topics=[
            TR(name=t.name, partitions=[PR(partition_index=index, error_code=next(it)) for index in t.partition_indexes])
            for t in m.topics]))
    return R(markers=markers)


#: One marker to write: producer id, producer epoch, coordinator epoch, commit?, its partitions.
MarkerSpec = tuple[int, int, int, bool, Sequence[tuple[str, int]]]


async def write_markers(broker: Any, markers: Sequence[MarkerSpec], allowed: bool = True) -> list[list[ErrorCode]]:
    """Append each marker to its partitions this broker leads and wait until they are
    replicated: one error code per partition, in order. Used for the wire (``process``) and,
    without building request and response objects, by this broker's own transaction
    coordinator (``Broker._write_txn_markers_local``)."""
    started = time.monotonic()
    # (codes of the marker, index, partition, offset the high watermark must reach) per appended marker
    pending: list[tuple[list[ErrorCode], int, Partition, int]] = []
    out: list[list[ErrorCode]] = []
    for producer_id, producer_epoch, coordinator_epoch, commit, partitions in markers:
        codes: list[ErrorCode] = []
        for topic, index in partitions:
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            if allowed:
                code, appended = await _append(broker, topic, index, producer_id, producer_epoch, coordinator_epoch,
                                               commit)
                if appended is not None:
                    pending.append((codes, len(codes), appended[0], appended[1]))
            codes.append(code)
        out.append(codes)
    if pending:
        remaining_ms = broker.config["request.timeout.ms"] - int((time.monotonic() - started) * 1000)
        errors = await wait_for_acks([(part, offset) for _, _, part, offset in pending], remaining_ms)
        for (codes, i, _, _), error in zip(pending, errors, strict=True):
            if error != ErrorCode.NONE:
                codes[i] = error
    return out


async def _append(broker: Any, topic: str, index: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                  commit: bool) -> tuple[ErrorCode, tuple[Partition, int] | None]:
    partition = broker.replica_manager.get(topic, index)
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    try:
        appended = partition.append_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit)
        if appended.flush_needed:
            await partition.log.flush_until(appended.last_offset + 1)
    except KafkaError as exc:
        return exc.code, None
    except OSError as exc:
        log.error("marker append to %s-%d failed: %s", topic, index, exc)
        return ErrorCode.KAFKA_STORAGE_ERROR, None
    coordinator = broker.group_coordinator
    if topic == GROUP_METADATA_TOPIC and coordinator is not None:
        # Kafka's scheduleHandleTxnCompletion: the transaction's offsets become visible (or go).
        coordinator.complete_txn(index, producer_id, commit)
    return ErrorCode.NONE, (partition, appended.last_offset + 1)
