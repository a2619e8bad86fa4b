"""Fetch (key 1, v4-v16): decode, work out the partitions with the fetch session, authorize, make
one call, ``ReplicaManager.fetch_messages`` (kaflet/replication/fetch_path.py), answer.

Follows Kafka's KafkaApis.handleFetchRequest: the request's fetch session
(kaflet/server/fetch_session.py) says which partitions to read (for an incremental fetch: all
of the session's); partitions of unknown topic ids (v13+), refused topics and partitions the
metadata cache does not know are answered aside, the others go to the replica manager, which
reads them and waits (up to max_wait_ms) until min_bytes are readable or a partition fails. The
session then picks what goes into the response. Topics are named up to v12 and identified by
their id from v13. A follower's fetch (replica id >= 0) needs ClusterAction and is exempt from
client quotas; the leader replication quota (KIP-73) is handed to the call while it throttles
anything.

Fetch v0-3 (consumers that predate the v2 record format) read the same way, then what was read
is down-converted to message sets (magic v0 for Fetch v0-1, v1 for v2-3), as Kafka's
KafkaApis.maybeConvertFetchedData does; a topic with message.downconversion.enable=false answers
them UNSUPPORTED_VERSION, a zstd topic (compression.type) UNSUPPORTED_COMPRESSION_TYPE. v4+
never goes there: their records stay file regions.
"""

from __future__ import annotations

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
)
from kaflet.protocol.legacy_records import MAGIC_V0, MAGIC_V1, down_convert
from kaflet.protocol.records import COMPRESSION_ZSTD
from kaflet.replication.fetch_path import FetchParams
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server import traffic
from kaflet.server.fetch_session import (
    CachedPartition,
    PartitionKey,
    ResponsePartition,
    SessionFetchResponse,
    TopicKey,
)
from kaflet.server.request_context import RequestContext
from kaflet.server.services import ReplicaAccess

API_KEY = ApiKey.FETCH
MIN_VERSION = 0
MAX_VERSION = 16
#: The first version that reads v2 record batches as stored (older ones are down-converted).
V2_VERSION = 4
#: The last version whose byte limits are hard (KIP-74 made them soft in v3): see FetchParams.
HARD_MAX_BYTES_VERSION = 2
#: The first version that knows KAFKA_STORAGE_ERROR; Kafka tells older clients NOT_LEADER so
#: they refresh metadata and retry.
STORAGE_ERROR_VERSION = 6


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
    params = FetchParams(req.replica_id, req.max_wait_ms, min(req.min_bytes, max_bytes), max_bytes,
                         req.isolation_level, version <= HARD_MAX_BYTES_VERSION)
    # The leader replication quota, when it throttles anything (else the read skips it).
    leader_quota = storage.leader_quota
    quota = leader_quota if is_follower and leader_quota.throttles_any else None
    replicas = storage.replicas
    # The session's entries go as they are (PartitionFetchInfo): nothing is copied per partition.
    result = await replicas.fetch_messages(params, targets, quota, storage.disk_load)
    read: list[ResponsePartition] = list(zip(targets, result.partitions, strict=True))
    if version < STORAGE_ERROR_VERSION:
        for _, data in read:
            if data.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
                data.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    if version < V2_VERSION:
        _down_convert(read, replicas, version, max_bytes, services.accounting.metrics)
    ctx.throttle_ms = result.throttle_ms
    stats = services.accounting.metrics
    if stats is not None:
        # Once per partition read, as Kafka's TotalFetchRequestsPerSec (bytes out: the dispatcher,
        # which knows whether a quota empties the answer).
        for cp, data in read:
            if cp.topic is not None:
                stats.fetched(cp.topic, data.error_code)
    if not is_follower:
        traffic.count_fetched(ctx.traffic, read)
    nodes: list[NodeEndpoint] = []
    if version >= 16:
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
    """Split the partitions to fetch into those the replica manager reads and those answered
    with an error now (Kafka's KafkaApis makes the same split).

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


def _down_convert(read: list[ResponsePartition], replicas: ReplicaAccess, version: int, max_bytes: int,
                  stats: BrokerMetrics | None) -> None:
    """Replace each partition's records by a message set of the magic ``version`` reads (Fetch
    v0-3, consumers only), within its max_bytes and what is left of the response's."""
    magic = MAGIC_V0 if version <= 1 else MAGIC_V1
    total = 0
    for cp, data in read:
        topic = cp.topic
        if data.error_code or topic is None:
            continue
        part = replicas.get(topic, cp.partition)
        if part is None:
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
        records = b"".join(r.read_bytes() if isinstance(r, FileRegion) else bytes(r)  # type: ignore[arg-type]
                           for r in data.records)
        try:
            # As the read: the first partition with data may exceed the limits by one message.
            converted = down_convert(records, magic, cp.fetch_offset, max(min(cp.max_bytes, max_bytes - total), 0),
                                     total == 0)
        except KafkaError as exc:
            _refuse(data, exc.code)
            continue
        data.records = [converted.data] if converted.data else None
        total += len(converted.data)
        if stats is not None and converted.record_count:
            stats.converted(topic, converted.record_count, produce=False)


def _refuse(data: PartitionFetchData, error: ErrorCode) -> None:
    """A partition's answer reduced to an error (Kafka's FetchResponse.partitionResponse)."""
    data.error_code = error
    data.high_watermark = data.last_stable_offset = data.log_start_offset = -1
    data.records = None


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
