"""DescribeCluster (key 60): cluster id, controller and brokers.

As on Kafka's brokers the request itself needs no permission (Metadata tells the same); the
cluster's authorized operations, when asked for, need Describe on the cluster (else none).
"""

from __future__ import annotations

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.server.handlers.metadata import NO_OPERATIONS, cluster_operations
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.DESCRIBE_CLUSTER
MIN_VERSION = 0
MAX_VERSION = 1

_BROKER_ENDPOINTS = 1


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    cluster = ctx.services.cluster
    endpoint_type = getattr(req, "endpoint_type", _BROKER_ENDPOINTS)
    if endpoint_type != _BROKER_ENDPOINTS:
        return R(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, error_message="only broker endpoints are available", endpoint_type=endpoint_type,
            cluster_id=cluster.cluster_id, controller_id=-1, brokers=[])
    await cluster.metadata_known()
    brokers = []
    for b in cluster.metadata.live_brokers():
        ep = b.endpoint(ctx.listener)
        if ep is not None:
            brokers.append(R.DescribeClusterBroker(broker_id=b.id, host=ep.host or "", port=ep.port, rack=b.rack))
    ops = cluster_operations(ctx) if req.include_cluster_authorized_operations else NO_OPERATIONS
    return R(
        error_code=0, error_message=None, endpoint_type=endpoint_type,
        cluster_id=cluster.cluster_id, controller_id=cluster.metadata.controller_id, brokers=brokers,
        authorized_operations=ops)
