"""ControlledShutdown (key 7, v3): a broker about to stop asks the controller to move its
leaderships away first (KafkaController.controlled_shutdown). Brokers other than the active
controller answer NOT_CONTROLLER, as Kafka's; the broker then asks again after a refresh."""

from __future__ import annotations

from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.CONTROLLED_SHUTDOWN
MIN_VERSION = 3
MAX_VERSION = 3


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R: Any = codec.response_class(API_KEY)
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, remaining_partitions=[])
    controller = ctx.services.admin.controller
    if not controller.is_active:
        return R(error_code=ErrorCode.NOT_CONTROLLER, remaining_partitions=[])
    error, remaining = await controller.controlled_shutdown(req.broker_id, req.broker_epoch)
    return R(error_code=error, remaining_partitions=[
        R.RemainingPartition(topic_name=t, partition_index=p) for t, p in remaining])
