"""DescribeLogDirs (key 35): the log dirs of this broker, with the size and lag of each replica
(kafka-log-dirs.sh, Admin.describeLogDirs, the management console's topic sizes).

As Kafka: Describe on the cluster, else CLUSTER_AUTHORIZATION_FAILED (v3+ top-level; older
versions get an empty answer); a null topic list asks for every replica here; every log dir is
listed, with the topics it holds (an offline dir with KAFKA_STORAGE_ERROR and nothing else) (a topic with none of the asked partitions in it is listed with
none, as Kafka does); offset lag is the high watermark minus the log end offset, never below 0,
or -1 for a log without a partition in the replica manager; a replica being moved here is
listed in its target dir with ``is_future_key`` and, as its lag, how far its log end offset is
behind the current log's; v4 adds the volume's total and usable bytes.
"""

from __future__ import annotations

import os
from collections import defaultdict

from kaflet.log.log import Log
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.DESCRIBE_LOG_DIRS
MIN_VERSION = 0
MAX_VERSION = 4

INVALID_OFFSET_LAG = -1


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    log_manager = ctx.services.storage.logs
    logs = log_manager.all_logs()
    futures = log_manager.all_future_logs()
    wanted = None if req.topics is None else {(t.topic, p) for t in req.topics for p in t.partitions}
    # dir -> topic -> [(partition, is future)]
    by_dir: dict[str, dict[str, list[tuple[int, bool]]]] = defaultdict(lambda: defaultdict(list))
    for (topic, partition) in logs:
        d = log_manager.log_dir_of(topic, partition)
        if d is not None:
            by_dir[d][topic].append((partition, False))
    for (topic, partition) in futures:
        d = log_manager.future_log_dir_of(topic, partition)
        if d is not None:
            by_dir[d][topic].append((partition, True))
    results = []
    offline = log_manager.failure_channel.offline_dirs
    for d in log_manager.log_dirs:
        if d in offline:
            # Kafka lists an offline dir with its error and nothing else.
            results.append(R.DescribeLogDirsResult(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=d, topics=[],
                                                   total_bytes=-1, usable_bytes=-1))
            continue
        RT, RP = R.DescribeLogDirsResult.DescribeLogDirsTopic, R.DescribeLogDirsResult.DescribeLogDirsTopic.DescribeLogDirsPartition
        topics = []
        for topic, partitions in sorted(by_dir.get(d, {}).items()):
            parts = [RP(partition_index=p, partition_size=(futures if future else logs)[(topic, p)].size_in_bytes,
                        offset_lag=_offset_lag(ctx, topic, p, futures.get((topic, p)) if future else None),
                        is_future_key=future)
                     for p, future in sorted(partitions) if wanted is None or (topic, p) in wanted]
            topics.append(RT(name=topic, partitions=parts))
        total, usable = _volume(d)
        results.append(R.DescribeLogDirsResult(error_code=ErrorCode.NONE, log_dir=d, topics=topics,
                                               total_bytes=total, usable_bytes=usable))
    return R(error_code=ErrorCode.NONE, results=results)


def _offset_lag(ctx: RequestContext, topic: str, partition: int, future: Log | None) -> int:
    """Kafka's getLogEndOffsetLag: a current log's distance to the high watermark, a future
    log's to the current log's end."""
    part = ctx.services.storage.replicas.get(topic, partition)
    if part is None:
        return INVALID_OFFSET_LAG
    log = part.log
    if future is not None:
        return log.log_end_offset - future.log_end_offset
    return max(log.high_watermark - log.log_end_offset, 0)


def _volume(directory: str) -> tuple[int, int]:
    """Total and usable bytes of the file system holding `directory` (-1 when unknown)."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
