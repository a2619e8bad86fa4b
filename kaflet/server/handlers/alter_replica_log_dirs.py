"""AlterReplicaLogDirs (key 34, v0-2, flexible from v2): move replicas of this broker to other
log directories of it (kafka-reassign-partitions.sh's ``log_dirs``, Admin.alterReplicaLogDirs).

As Kafka: Alter on the cluster, else CLUSTER_AUTHORIZATION_FAILED for every partition; a
partition named under two directories goes to the last one; each gets the replica manager's
answer (``ReplicaManager.alter_replica_log_dirs``): LOG_DIR_NOT_FOUND for a path that is not one
of ``log.dirs`` (compared as given: a relative path never matches), KAFKA_STORAGE_ERROR for an
offline one, REPLICA_NOT_AVAILABLE for a replica not (yet) here, whose directory is remembered
for when it comes. The move itself runs after the answer (``replication/alter_log_dirs.py``).
"""

from __future__ import annotations

from collections import defaultdict

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.ALTER_REPLICA_LOG_DIRS
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    wanted: dict[tuple[str, int], str] = {}
    for d in req.dirs:
        for t in d.topics:
            for p in t.partitions:
                wanted[(t.name, p)] = d.path
    if ctx.authorize_cluster(AclOperation.ALTER):
        errors = ctx.services.storage.replicas.alter_replica_log_dirs(wanted)
    else:
        errors = dict.fromkeys(wanted, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    by_topic: dict[str, list[tuple[int, ErrorCode]]] = defaultdict(list)
    for (topic, partition), error in errors.items():
        by_topic[topic].append((partition, error))
    R = codec.response_class(API_KEY)
    T = R.AlterReplicaLogDirTopicResult
    return R(results=[T(topic_name=topic, partitions=[
        T.AlterReplicaLogDirPartitionResult(partition_index=p, error_code=e) for p, e in parts])
        for topic, parts in by_topic.items()])
