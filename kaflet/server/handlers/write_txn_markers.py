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
    replicated; from the wire (``handle``) or from this broker's own transaction coordinator."""
    started = time.monotonic()
    R = codec.response_class(API_KEY)
    MR = R.WritableTxnMarkerResult
    TR = MR.WritableTxnMarkerTopicResult
    PR = TR.WritableTxnMarkerPartitionResult
    # (error list, index, partition, offset the high watermark must reach) per appended marker
    pending: list[tuple[list[Any], int, Partition, int]] = []
    markers = []
    for m in req.markers:
        topics = []
        for t in m.topics:
            results: list[Any] = []
            for index in t.partition_indexes:
                code: int = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                if allowed:
                    code, appended = await _append(broker, t.name, index, m)
                    if appended is not None:
                        pending.append((results, len(results), appended[0], appended[1]))
                results.append(PR(partition_index=index, error_code=code))
            topics.append(TR(name=t.name, partitions=results))
        markers.append(MR(producer_id=m.producer_id, topics=topics))
    if pending:
        remaining_ms = broker.config["request.timeout.ms"] - int((time.monotonic() - started) * 1000)
        errors = await wait_for_acks([(part, offset) for _, _, part, offset in pending], remaining_ms)
        for (results, i, _, _), error in zip(pending, errors, strict=True):
            if error != ErrorCode.NONE:
                results[i].error_code = error
    return R(markers=markers)


async def _append(broker: Any, topic: str, index: int, marker: Any) -> tuple[int, tuple[Partition, int] | None]:
    partition = broker.replica_manager.get(topic, index)
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    try:
        appended = partition.append_txn_marker(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                                               bool(marker.transaction_result))
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
        coordinator.complete_txn(index, marker.producer_id, bool(marker.transaction_result))
    return ErrorCode.NONE, (partition, appended.last_offset + 1)
