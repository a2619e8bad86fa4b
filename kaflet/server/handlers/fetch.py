"""Fetch (key 1): file regions of the logs, long-polling until min_bytes or max_wait_ms.

Sessions (KIP-227) are not kept: every response carries session id 0, which tells the client
to send full fetch requests, as Kafka does when its session cache is full.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode, KafkaError
from kaflet.protocol.fetch import FetchResponse, PartitionFetchData
from kaflet.replication.follower_fetch import fetch_upper_bound, is_follower_fetch, record_follower_fetch
from kaflet.replication.partition import Partition
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.FETCH
MIN_VERSION = 4
MAX_VERSION = 12


#: Stands in for the partition of a topic the principal may not fetch.
DENIED: Any = object()


def _read_partition(
    partition: Partition | None, p: Any, budget: int, min_one: bool, replica_id: int
) -> tuple[PartitionFetchData, int]:
    out = PartitionFetchData(p.partition)
    if partition is DENIED:
        out.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return out, 0
    if partition is None:
        out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return out, 0
    if not partition.is_leader:
        out.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return out, 0
    log = partition.log
    out.high_watermark = log.high_watermark
    out.last_stable_offset = log.high_watermark
    out.log_start_offset = log.log_start_offset
    epoch_error = partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
    if epoch_error:
        out.error_code = epoch_error
        return out, 0
    max_bytes = min(p.partition_max_bytes, budget)
    if max_bytes <= 0 and not min_one:
        return out, 0
    try:
        result = log.read(p.fetch_offset, max(max_bytes, 0), fetch_upper_bound(partition, replica_id), min_one)
    except KafkaError as exc:
        out.error_code = exc.code
        return out, 0
    except OSError:
        out.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        return out, 0
    out.records = list(result.regions)
    return out, sum(r.size for r in result.regions)


async def handle(ctx: RequestContext, body: memoryview) -> FetchResponse:
    req = codec.decode_request(API_KEY, ctx.version, body)
    broker = ctx.broker
    session_error = ErrorCode.NONE
    if ctx.version >= 7 and req.session_id != 0:
        session_error = ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    wanted: list[tuple[str, list[tuple[Any, Partition | None]]]] = []
    if not session_error:
        # A follower (replica id >= 0) needs ClusterAction on the cluster for everything it
        # fetches; a consumer needs Read on each topic. Refused partitions get
        # TOPIC_AUTHORIZATION_FAILED (DENIED below) and are not waited for.
        if req.replica_id >= 0:
            readable = {t.topic for t in req.topics} if ctx.authorize_cluster(AclOperation.CLUSTER_ACTION) else set()
        else:
            readable = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, (t.topic for t in req.topics))
        for t in req.topics:
            if t.topic in readable:
                wanted.append((t.topic, [(p, broker.replica_manager.get(t.topic, p.partition)) for p in t.partitions]))
            else:
                wanted.append((t.topic, [(p, DENIED) for p in t.partitions]))
    deadline = time.monotonic() + max(req.max_wait_ms, 0) / 1000
    max_bytes = req.max_bytes if ctx.version >= 3 else 0x7FFFFFFF
    waitable = [part for _, ps in wanted for _, part in ps if part is not None and part is not DENIED]
    recorded = not is_follower_fetch(req.replica_id)
    while True:
        topics, total, errors = _collect(wanted, max_bytes, req.replica_id)
        if not recorded:
            # A follower's position is recorded once, from the first read (Kafka's fetchMessages).
            recorded = True
            errors = _record_follower_fetch(req.replica_id, wanted, topics) or errors
        remaining = deadline - time.monotonic()
        if total >= req.min_bytes or errors or remaining <= 0 or not waitable or broker.stopping:
            break
        await _wait_for_data(waitable, remaining)
    return FetchResponse(topics, ctx.version, session_error, 0)


def _collect(
    wanted: list[tuple[str, list[tuple[Any, Partition | None]]]], max_bytes: int, replica_id: int
) -> tuple[list[tuple[str, list[PartitionFetchData]]], int, bool]:
    topics = []
    total = 0
    errors = False
    for name, parts in wanted:
        datas = []
        for p, partition in parts:
            data, size = _read_partition(partition, p, max_bytes - total, total == 0, replica_id)
            total += size
            # A refused partition does not cut the others' long poll short (Kafka answers it aside).
            errors = errors or (data.error_code != 0 and partition is not DENIED)
            datas.append(data)
        topics.append((name, datas))
    return topics, total, errors


def _record_follower_fetch(replica_id: int, wanted: list[tuple[str, list[tuple[Any, Partition | None]]]],
                           topics: list[tuple[str, list[PartitionFetchData]]]) -> bool:
    """Record the follower's position in each partition read; True if one refused it."""
    failed = False
    for (_, parts), (_, datas) in zip(wanted, topics, strict=True):
        for (p, partition), data in zip(parts, datas, strict=True):
            if data.error_code or partition is None or partition is DENIED:
                continue
            error = record_follower_fetch(partition, replica_id, p.fetch_offset, getattr(p, "log_start_offset", -1))
            if error:
                data.error_code, data.records = error, []
                failed = True
    return failed


async def _wait_for_data(partitions: list[Partition], timeout: float) -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    for part in partitions:
        part.data_waiter(fut)
    try:
        await asyncio.wait_for(fut, timeout)
    except TimeoutError:
        pass
    finally:
        for part in partitions:
            part.forget_waiter(fut)


