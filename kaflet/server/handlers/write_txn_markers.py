"""WriteTxnMarkers (key 27): the transaction coordinator ends a transaction on partition leaders.

For each marker, a COMMIT or ABORT control batch is appended to each named partition this
broker leads, with Kafka's checks (``Log.append_txn_marker``: INVALID_PRODUCER_EPOCH for a
stale producer epoch, TRANSACTION_COORDINATOR_FENCED for a stale coordinator epoch), and
answered per partition once the high watermark covers it (acks=all, as Kafka writes markers;
REQUEST_TIMED_OUT after request.timeout.ms). Only brokers send it: ClusterAction on the cluster,
else CLUSTER_AUTHORIZATION_FAILED for every partition.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kaflet.coordinator.group.store import GROUP_METADATA_TOPIC
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.replication.append import MarkerSpec
from kaflet.security.acl import AclOperation
from kaflet.server.request_context import RequestContext
from kaflet.server.services import ReplicaAccess

API_KEY = ApiKey.WRITE_TXN_MARKERS
MIN_VERSION = 0
MAX_VERSION = 1  # v2 carries the transaction version of KIP-890 (TV2), which kaflet does not implement


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    MR = R.WritableTxnMarkerResult
    TR = MR.WritableTxnMarkerTopicResult
    PR = TR.WritableTxnMarkerPartitionResult
    specs = [(m.producer_id, m.producer_epoch, m.coordinator_epoch, bool(m.transaction_result),
              [(t.name, index) for t in m.topics for index in t.partition_indexes]) for m in req.markers]
    services = ctx.services
    if ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        codes = await write_markers(services.storage.replicas, specs, services.settings.request_timeout_ms,
                                    services.coordinators.groups.complete_txn)
    else:
        codes = [[ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * len(spec[4]) for spec in specs]
    markers = []
    for m, marker_codes in zip(req.markers, codes, strict=True):
        it = iter(marker_codes)
        markers.append(MR(producer_id=m.producer_id, topics=[
            TR(name=t.name, partitions=[PR(partition_index=index, error_code=next(it)) for index in t.partition_indexes])
            for t in m.topics]))
    return R(markers=markers)


async def write_markers(replicas: ReplicaAccess, markers: Sequence[MarkerSpec], timeout_ms: int,
                        complete_group_txn: Callable[[int, int, bool], None]) -> list[list[ErrorCode]]:
    """Append each marker to its partitions this broker leads and wait until they are
    replicated: one error code per partition, in order. Used for the wire (``handle``) and,
    without building request and response objects, by this broker's own transaction
    coordinator (``Broker._write_txn_markers_local``). A marker in ``__consumer_offsets`` makes
    the transaction's offsets visible (or drops them) at once: ``complete_group_txn(partition,
    producer id, commit)``, Kafka's scheduleHandleTxnCompletion."""
    results, pending = replicas.append_txn_markers(markers)
    for spec, marker_results in zip(markers, results, strict=True):
        producer_id, _, _, commit, partitions = spec
        for (topic, index), res in zip(partitions, marker_results, strict=True):
            if topic == GROUP_METADATA_TOPIC and res.error == ErrorCode.NONE:
                complete_group_txn(index, producer_id, commit)
    if pending.must_wait:  # else already replicated (a lone replica): no coroutine to run
        await pending.wait(timeout_ms)
    return [[res.error for res in marker_results] for marker_results in results]
