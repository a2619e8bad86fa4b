"""ElectLeaders (key 43, v0-2): preferred or unclean leader elections on demand (KIP-183, KIP-460).

As Kafka 2.8: Alter on the cluster; no partitions means every partition; the active controller
runs the election (others answer NOT_CONTROLLER for each partition) and the answer waits, up to
the request's timeout, until this broker's metadata shows the elected leaders (Kafka's
DelayedElectLeader); partitions still waiting then get REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from typing import Any

from kaflet.controller.context import TopicPartition
from kaflet.controller.controller import ElectionType
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.ELECT_LEADERS
MIN_VERSION = 0
MAX_VERSION = 2

Results = dict[tuple[str, int], tuple[int, str | None]]


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    cluster = ctx.services.cluster
    election = ElectionType(req.election_type) if ctx.version >= 1 else ElectionType.PREFERRED
    asked = None if req.topic_partitions is None else [
        (t.topic, p) for t in req.topic_partitions for p in t.partitions]
    if not ctx.authorize_cluster(AclOperation.ALTER):
        denied = (int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), None)
        return _response(ctx.version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, dict.fromkeys(asked or [], denied))
    cache = cluster.metadata
    partitions = asked if asked is not None else [
        (t.name, p) for t in cache.topics.values() for p in t.partitions]
    controller = ctx.services.admin.controller
    if not controller.is_active:
        results: Results = dict.fromkeys(partitions, (int(ErrorCode.NOT_CONTROLLER), None))
        return _response(ctx.version, ErrorCode.NONE, results)
    results = await controller.elect_leaders(election, partitions)
    elected = {tp for tp, (code, _) in results.items() if code == ErrorCode.NONE}
    if elected:
        # The leader epochs the controller wrote; this broker's metadata must catch up to them.
        expected = {}
        for topic, index in elected:
            state = controller.context.partition_leadership_info(TopicPartition(topic, index))
            expected[(topic, index)] = state.leader_epoch if state is not None else 0

        def shown() -> bool:
            for (topic, index), epoch in expected.items():
                info = cache.topics.get(topic)
                part = info.partitions.get(index) if info is not None else None
                if part is None or part.leader < 0 or part.leader_epoch < epoch:
                    return False
            return True

        if not await cluster.wait_for_metadata(shown, max(req.timeout_ms, 0)):
            for tp in elected:
                results[tp] = (int(ErrorCode.REQUEST_TIMED_OUT), "Leader election did not complete in time")
    if asked is None:
        # Asked for every partition: only those that had an election (or an error) are listed.
        results = {tp: r for tp, r in results.items() if r[0] != ErrorCode.ELECTION_NOT_NEEDED}
    return _response(ctx.version, ErrorCode.NONE, results)


def _response(version: int, error: ErrorCode, results: Results) -> Any:
    R: Any = codec.response_class(API_KEY)
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), (code, message) in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            R.ReplicaElectionResult.PartitionResult(partition_id=index, error_code=code, error_message=message))
    return R(error_code=error, replica_election_results=[
        R.ReplicaElectionResult(topic=t, partition_result=parts) for t, parts in by_topic.items()])
