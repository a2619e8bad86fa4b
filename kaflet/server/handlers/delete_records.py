"""DeleteRecords (key 21): move partitions' log start offsets forward (AdminClient.deleteRecords).

Per partition, as Kafka answers: UNKNOWN_TOPIC_OR_PARTITION if the broker does not host it,
NOT_LEADER_OR_FOLLOWER, INVALID_TOPIC_EXCEPTION for internal topics, POLICY_VIOLATION when
cleanup.policy lacks ``delete``, OFFSET_OUT_OF_RANGE for an offset below -1 or above the high
watermark.  On success the answer is the low watermark, once the whole segments below the new
start are gone, the start offset is checkpointed and, as Kafka's DelayedDeleteRecords, every
follower on a live broker has moved its own log start that far (followers take the leader's
with their next fetch); REQUEST_TIMED_OUT if that takes longer than ``timeout_ms``.
"""

from __future__ import annotations

import asyncio
import logging
import time

from kaflet.metadata.topic_names import is_internal
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode, KafkaError
from kaflet.protocol.response import Response
from kaflet.replication.partition import Partition
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.DELETE_RECORDS
MIN_VERSION = 0
MAX_VERSION = 2

log = logging.getLogger("kaflet.delete_records")


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    TR = R.DeleteRecordsTopicResult
    topics = []
    deletable = ctx.authorized(AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in req.topics))
    deadline = time.monotonic() + max(req.timeout_ms, 0) / 1000
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if t.name in deletable:
                code, low = await _delete(ctx, t.name, p.partition_index, p.offset, deadline)
            else:
                code, low = ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1
            parts.append(TR.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=low,
                                                         error_code=code))
        topics.append(TR(name=t.name, partitions=parts))
    return R(topics=topics)


async def _delete(ctx: RequestContext, topic: str, index: int, offset: int, deadline: float) -> tuple[int, int]:
    services = ctx.services
    partition = services.storage.replicas.get(topic, index)
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1
    if is_internal(topic):
        return ErrorCode.INVALID_TOPIC_EXCEPTION, -1
    try:
        low = partition.delete_records(offset)
        await services.storage.logs.log_start_offset_moved(partition.log)
    except KafkaError as exc:
        return exc.code, -1
    except OSError:
        log.exception("DeleteRecords on %s-%d failed", topic, index)
        return ErrorCode.KAFKA_STORAGE_ERROR, -1
    brokers = services.cluster.metadata.brokers
    while (low := partition.low_watermark(brokers.__contains__)) < partition.log.log_start_offset:
        if not partition.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
        changed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake(_partition: Partition, fut: asyncio.Future[None] = changed) -> None:
            if not fut.done():
                fut.set_result(None)

        partition.log_start_waiter(wake)
        try:
            await asyncio.wait_for(changed, deadline - time.monotonic())
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT, low
        finally:
            partition.forget_log_start_waiter(wake)
    return ErrorCode.NONE, low
