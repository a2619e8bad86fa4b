"""Fetch (key 1, v4-v16): file regions of the logs, long-polling until min_bytes or max_wait_ms.

Follows Kafka's KafkaApis.handleFetchRequest: the request's fetch session
(kaflet/server/fetch_session.py) says which partitions to read (for an incremental fetch: all
of the session's); partitions of unknown topic ids (v13+), refused topics and unknown partitions
are answered aside, the others are read from their logs, and the request waits (up to
max_wait_ms) until min_bytes are readable or a partition fails. The session then picks what
goes into the response. Topics are named up to v12 and identified by their id from v13.

A follower's fetch (replica id >= 0, ClusterAction) reads up to the log end offset and records
the follower's position once (kaflet/replication/follower_fetch.py), which may move the high
watermark and add the follower to the ISR; consumers read up to the high watermark, from the
leader only. Leader-side replication throttling (KIP-73) leaves throttled partitions' records out
of a lagging follower's answer while the leader quota is exceeded (``should_leader_throttle``).

While a log dir's disk is overloaded, a consumer's read of data that is not in the page cache
may be refused by the disk load protector (kaflet/log/disk_load.py): the partition answers
without records and the response, sent at once, carries the protector's throttle time.

Fetch v0-3 (consumers that predate the v2 record format) read the same way, then what was read
is down-converted to message sets (magic v0 for Fetch v0-1, v1 for v2-3), as Kafka's
KafkaApis.maybeConvertFetchedData does; a topic with message.downconversion.enable=false answers
them UNSUPPORTED_VERSION, a zstd topic (compression.type) UNSUPPORTED_COMPRESSION_TYPE. v4+
never goes there: their records stay file regions.
"""

from __future__ import annotations

import time

from kaflet.log.disk_load import ColdReads
from kaflet.log.segment import FileRegion
from kaflet.metadata.metadata_cache import MetadataCache
from kaflet.metrics.stats import BrokerMetrics
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode, KafkaError
from kaflet.protocol.fetch import (
    FetchRequest,
    NodeEndpoint,
    PartitionFetchData,
    decode_fetch_request,
    records_size,
)
from kaflet.protocol.legacy_records import MAGIC_V0, MAGIC_V1, down_convert
from kaflet.protocol.records import COMPRESSION_ZSTD
from kaflet.replication.delayed_fetch import wait_for_data
from kaflet.replication.follower_fetch import fetch_upper_bound, record_follower_fetch, should_leader_throttle
from kaflet.replication.partition import Partition
from kaflet.replication.quota import ReplicaQuota
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.fetch_session import (
    CachedPartition,
    PartitionKey,
    ResponsePartition,
    SessionFetchResponse,
    TopicKey,
)
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.FETCH
MIN_VERSION = 0
MAX_VERSION = 16
#: The first version that reads v2 record batches as stored (older ones are down-converted).
V2_VERSION = 4

READ_COMMITTED = 1
_NOT_LEADER = ErrorCode.NOT_LEADER_OR_FOLLOWER

# A partition to read: its entry of the fetch, the local partition (None: not hosted here), and
# its answer.
_Target = tuple[CachedPartition, Partition | None, PartitionFetchData]


async def handle(ctx: RequestContext, body: memoryview) -> SessionFetchResponse:
    return await serve(ctx, decode_fetch_request(body, ctx.version))


async def serve(ctx: RequestContext, req: FetchRequest) -> SessionFetchResponse:
    """Answer a decoded request in real partition numbers (the gateway renumbers: server/renumbering.py)."""
    version = ctx.version
    services = ctx.services
    storage = services.storage
    cache = services.cluster.metadata
    is_follower = req.replica_id >= 0
    ctx.quota_exempt = is_follower
    fetch_data, to_forget = _request_partitions(req, version, cache.topics_by_id)
    context = storage.fetch_sessions.new_context(version, req.session_id, req.session_epoch, is_follower,
                                               fetch_data, to_forget, cache.topics_by_id)
    targets, erroneous = _classify(ctx, context.partitions(), is_follower, cache)

    max_bytes = min(req.max_bytes, services.settings.fetch_max_bytes)
    min_bytes = min(req.min_bytes, max_bytes)
    deadline = time.monotonic() + max(req.max_wait_ms, 0) / 1000
    hosted = storage.replicas.partitions
    # One answer object per partition for the whole request; a pass over the logs refills it.
    local = [(cp, hosted.get((cp.topic, cp.partition)), PartitionFetchData(cp.partition))  # type: ignore[arg-type]
             for cp in targets]
    # Fetch v5 and older clients do not know KAFKA_STORAGE_ERROR; Kafka tells them NOT_LEADER so
    # they refresh metadata and retry.
    storage_error = ErrorCode.KAFKA_STORAGE_ERROR if version > 5 else _NOT_LEADER
    replica_id = req.replica_id
    read_committed = req.isolation_level == READ_COMMITTED and not is_follower
    # Disk load protection: while a disk is overloaded a consumer's cold reads may be refused.
    protector = storage.disk_load
    cold = protector.cold_reads() if protector is not None and not is_follower else None
    # The leader replication quota, when it throttles anything (else the hot path skips it).
    leader_quota = storage.leader_quota
    quota = leader_quota if is_follower and leader_quota.throttles_any else None
    total, failed = _read(local, max_bytes, 0, storage_error, cache, replica_id, read_committed, cold, quota)
    if is_follower:
        # A follower's position is recorded once, from the first read (Kafka's fetchMessages).
        total, refused = _record_follower_fetch(local, replica_id, total)
        failed = failed or refused
    waiting: dict[Partition, int] | None = None
    state = services.state
    # A refused cold read answers at once: the throttle time is the client's wait.
    while not (total >= min_bytes or failed or not local or state.stopping or (cold is not None and cold.refused)):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        if waiting is None:
            # Each partition of the broker appears once (requests name a partition once).
            waiting = {part: i for i, (_, part, _) in enumerate(local) if part is not None}
        woken = await wait_for_data(waiting, remaining, is_follower)
        if not woken:
            break  # timed out: nothing was appended, the answers stand
        # Only the partitions appended to (or removed) since the last pass can answer differently.
        again = []
        for part in woken:
            i = waiting.get(part)
            if i is not None:
                cp, _, data = local[i]
                local[i] = (cp, hosted.get((cp.topic, cp.partition)), data)  # type: ignore[arg-type]
                again.append(local[i])
        total, failed = _read(again, max_bytes, total, storage_error, cache, replica_id, read_committed, cold, quota)

    if version < V2_VERSION:
        _down_convert(local, version, max_bytes, services.accounting.metrics)
    if cold is not None:
        ctx.throttle_ms = cold.throttle_ms
    if quota is not None:
        _record_throttled(quota, local)
    read: list[ResponsePartition] = [(cp, data) for cp, _, data in local]
    stats = services.accounting.metrics
    if stats is not None:
        # Once per partition read, as Kafka's TotalFetchRequestsPerSec (bytes out: the dispatcher,
        # which knows whether a quota empties the answer).
        for cp, data in read:
            if cp.topic is not None:
                stats.fetched(cp.topic, data.error_code)
    traffic = ctx.traffic
    if traffic is not None and not is_follower:
        # A consumer's bytes per topic read (topics it fetched nothing from count with 0).
        for cp, data in read:
            name = cp.topic
            if name is not None:
                traffic[name] = traffic.get(name, 0) + (records_size(data.records) if data.records else 0)
    nodes: list[NodeEndpoint] = []
    if version >= 16 and failed:
        nodes = _current_leaders(read, cache, ctx.listener)
    # The session takes in this answer when it is encoded, unless the quotas throttle it.
    return SessionFetchResponse(context, read + erroneous, version, nodes)


def _request_partitions(req: FetchRequest, version: int, names: dict[bytes, str],
                        ) -> tuple[dict[PartitionKey, CachedPartition], list[PartitionKey]]:
    """The request's partitions by (topic, partition), and the partitions it forgets.

    Up to v12 a topic is its name; from v13 its id, with the name (None when unknown) resolved
    from the metadata cache. A partition named twice keeps its first place and its last values.
    """
    fetch_data: dict[PartitionKey, CachedPartition] = {}
    by_id = version >= 13
    for t in req.topics:
        key: TopicKey
        if by_id:
            key = t.topic_id
            name: str | None = names.get(key)
        else:
            key = name = t.name
        for fp in t.partitions:
            fetch_data[(key, fp[0])] = CachedPartition(key, name, fp)
    to_forget: list[PartitionKey] = []
    for f in req.forgotten_topics:
        key = f.topic_id if by_id else f.name
        to_forget.extend((key, p) for p in f.partitions)
    return fetch_data, to_forget


def _classify(ctx: RequestContext, partitions: list[CachedPartition], is_follower: bool,
              cache: MetadataCache) -> tuple[list[CachedPartition], list[ResponsePartition]]:
    """Split the partitions to fetch into those to read and those answered with an error now.

    A follower needs ClusterAction on the cluster; a consumer needs Read on each topic.
    """
    if not partitions:
        return [], []
    erroneous: list[ResponsePartition] = []
    if is_follower:
        allowed = ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
        if not allowed:
            return [], [(cp, PartitionFetchData(cp.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                        for cp in partitions]
        readable: set[str] | None = None
    else:
        names = {cp.topic for cp in partitions if cp.topic is not None}
        readable = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, names)
    targets: list[CachedPartition] = []
    topics = cache.topics
    for cp in partitions:
        name = cp.topic
        if name is None:
            erroneous.append((cp, PartitionFetchData(cp.partition, ErrorCode.UNKNOWN_TOPIC_ID)))
        elif readable is not None and name not in readable:
            erroneous.append((cp, PartitionFetchData(cp.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
        elif (info := topics.get(name)) is None or cp.partition not in info.partitions:
            erroneous.append((cp, PartitionFetchData(cp.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
        else:
            targets.append(cp)
    return targets, erroneous


def _read(targets: list[_Target], max_bytes: int, total: int, storage_error: ErrorCode, cache: MetadataCache,
          replica_id: int, read_committed: bool = False, cold: ColdReads | None = None,
          quota: ReplicaQuota | None = None) -> tuple[int, bool]:
    """Read partitions into their answers (Kafka's readFromLog); ``total`` bytes are already read.

    Returns the bytes read in all and whether a partition failed. Up to ``max_bytes`` in all,
    each partition up to its own limit; the first partition with data may exceed both by its
    first batch, so a large batch is never stuck. A consumer reads up to the high watermark, a
    follower up to the log end offset (``fetch_upper_bound``), a read_committed consumer up to the
    last stable offset, with the aborted transactions of what it reads (the .txnindex entries);
    a partition whose fetch offset is there has nothing to read and costs no log lookup.
    With ``cold``, a read of data not in the page cache that the disk load protector refuses
    leaves the partition without records, and so does the leader replication ``quota`` for a
    throttled partition of a lagging follower while it is exceeded.
    """
    failed = False
    for cp, part, data in targets:
        if data.records:
            total -= records_size(data.records)
            data.records = data.aborted_transactions = None
        if part is None or not part.is_leader:
            # Gone from this broker since the request arrived: deleted, or no longer led here.
            info = cache.topics.get(cp.topic)  # type: ignore[arg-type]
            known = info is not None and cp.partition in info.partitions
            data.error_code = _NOT_LEADER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            failed = True
            continue
        log = part.log
        hw = log.high_watermark
        start = log.log_start_offset
        data.high_watermark = hw
        data.last_stable_offset = lso = log.last_stable_offset
        data.log_start_offset = start
        epoch = cp.leader_epoch
        if epoch >= 0 and epoch != part.leader_epoch:
            data.error_code = part.check_leader_epoch(epoch)
            failed = True
            continue
        offset = cp.fetch_offset
        bound = lso if read_committed else fetch_upper_bound(part, replica_id)
        if offset == bound and offset >= start:
            continue
        budget = min(cp.max_bytes, max_bytes - total)
        if budget <= 0 and total:
            continue
        if quota is not None and should_leader_throttle(quota, part, replica_id):
            continue
        try:
            regions = log.read(offset, max(budget, 0), bound, total == 0).regions
        except KafkaError as exc:
            data.error_code = storage_error if exc.code == ErrorCode.KAFKA_STORAGE_ERROR else exc.code
            failed = True
            continue
        except OSError:
            data.error_code = storage_error
            failed = True
            continue
        if regions and cold is not None and not all(
                cold.admit(log.dir, r.fileno(), r.position, r.size) for r in regions):
            continue
        if regions:
            data.records = list(regions)
            for r in regions:
                total += r.size
            if read_committed:
                data.aborted_transactions = [(a.producer_id, a.first_offset)
                                             for a in log.aborted_txns_for_read(offset, bound)] or None
    return total, failed


def _record_throttled(quota: ReplicaQuota, targets: list[_Target]) -> None:
    """Count the bytes of throttled partitions sent to a follower (in sync or not), as Kafka's
    sizeOfThrottledPartitions does for every follower fetch."""
    nbytes = sum(records_size(data.records) for cp, part, data in targets
                 if data.records and part is not None and quota.is_throttled(part.topic, part.index))
    quota.record(nbytes)


def _down_convert(targets: list[_Target], version: int, max_bytes: int, stats: BrokerMetrics | None) -> None:
    """Replace each partition's records by a message set of the magic ``version`` reads (Fetch
    v0-3, consumers only), within its max_bytes and what is left of the response's."""
    magic = MAGIC_V0 if version <= 1 else MAGIC_V1
    total = 0
    for cp, part, data in targets:
        if part is None or data.error_code:
            continue
        config = part.log.config
        # Kafka answers these partitions with nothing but the error: a zstd topic (which old
        # consumers cannot read), a topic that refuses down-conversion.
        if config.target_codec == COMPRESSION_ZSTD:
            _refuse(data, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
            continue
        if not config.message_downconversion_enable:
            _refuse(data, ErrorCode.UNSUPPORTED_VERSION)
            continue
        if not data.records:
            continue
        read = b"".join(r.read_bytes() if isinstance(r, FileRegion) else bytes(r)  # type: ignore[arg-type]
                        for r in data.records)
        try:
            # As the read: the first partition with data may exceed the limits by one message.
            converted = down_convert(read, magic, cp.fetch_offset, max(min(cp.max_bytes, max_bytes - total), 0),
                                     total == 0)
        except KafkaError as exc:
            _refuse(data, exc.code)
            continue
        data.records = [converted.data] if converted.data else None
        total += len(converted.data)
        if stats is not None and converted.record_count:
            stats.converted(cp.topic, converted.record_count, produce=False)  # type: ignore[arg-type]


def _refuse(data: PartitionFetchData, error: ErrorCode) -> None:
    """A partition's answer reduced to an error (Kafka's FetchResponse.partitionResponse)."""
    data.error_code = error
    data.high_watermark = data.last_stable_offset = data.log_start_offset = -1
    data.records = None


def _record_follower_fetch(targets: list[_Target], replica_id: int, total: int) -> tuple[int, bool]:
    """Record the follower's position in each partition read; returns the bytes still read and
    whether a partition refused it (a replica id that is not one of its followers)."""
    refused = False
    for cp, part, data in targets:
        if data.error_code or part is None:
            continue
        error = record_follower_fetch(part, replica_id, cp.fetch_offset, cp.fetcher_log_start_offset)
        if error:
            if data.records:
                total -= records_size(data.records)
            data.error_code, data.records = error, None
            refused = True
    return total, refused


def _current_leaders(answer: list[ResponsePartition], cache: MetadataCache, listener: str) -> list[NodeEndpoint]:
    """v16 (KIP-951): the leader of each NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH partition
    read, and the endpoints of those leaders on the request's listener."""
    nodes: dict[int, NodeEndpoint] = {}
    for cp, data in answer:
        if data.error_code not in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
            continue
        info = cache.topics.get(cp.topic) if cp.topic is not None else None
        pinfo = info.partitions.get(cp.partition) if info is not None else None
        if pinfo is None:
            continue
        data.current_leader = (pinfo.leader, pinfo.leader_epoch)
        broker = cache.brokers.get(pinfo.leader)
        if broker is None:
            continue
        endpoint = broker.endpoint(listener)
        if endpoint is not None and endpoint.host is not None:
            nodes[pinfo.leader] = NodeEndpoint(pinfo.leader, endpoint.host, endpoint.port, broker.rack)
    return list(nodes.values())
