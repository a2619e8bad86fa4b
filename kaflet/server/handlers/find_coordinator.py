"""FindCoordinator (key 10): which broker coordinates a group or a transactional id (v4: several
keys at once). The coordinator is the leader of the key's partition of __consumer_offsets or
__transaction_state, created on first use as Kafka does."""

from __future__ import annotations

from typing import Any

from kaflet.coordinator.group.store import GROUP_METADATA_TOPIC
from kaflet.coordinator.transaction.coordinator import TransactionCoordinator
from kaflet.coordinator.transaction.schemas import TRANSACTION_STATE_TOPIC
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext
from kaflet.server.services import GroupCoordination

API_KEY = ApiKey.FIND_COORDINATOR
MIN_VERSION = 0
MAX_VERSION = 4

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1

_Found = tuple[int, int, str, int, str | None]  # error, node id, host, port, message


def _error(code: ErrorCode, message: str | None = None) -> _Found:
    return int(code), -1, "", -1, message


async def _find(ctx: RequestContext, key: str, key_type: int) -> _Found:
    services = ctx.services
    # Kafka's checks: Describe on the group or the transactional id the coordinator is for.
    if key_type == KEY_TYPE_GROUP and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if key_type == KEY_TYPE_TRANSACTION and not ctx.authorize(AclOperation.DESCRIBE,
                                                               ResourceType.TRANSACTIONAL_ID, key):
        return _error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    coordinator: GroupCoordination | TransactionCoordinator
    if key_type == KEY_TYPE_GROUP:
        coordinator, topic = services.coordinators.groups, GROUP_METADATA_TOPIC
    elif key_type == KEY_TYPE_TRANSACTION:
        coordinator, topic = services.coordinators.transactions, TRANSACTION_STATE_TOPIC
    else:
        return _error(ErrorCode.INVALID_REQUEST, f"Unknown coordinator type {key_type}")
    if coordinator.ensure_topic is None or not await coordinator.ensure_topic():
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.")
    cache = services.cluster.metadata
    info = cache.topics.get(topic)
    part = info.partitions.get(coordinator.partition_for(key)) if info is not None else None
    node = cache.brokers.get(part.leader) if part is not None else None
    ep = node.endpoint(ctx.listener) if node is not None else None
    if node is None or ep is None:
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.")
    return int(ErrorCode.NONE), node.id, ep.host or "", ep.port, None


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R: Any = codec.response_class(API_KEY)
    v = ctx.version
    key_type = req.key_type if v >= 1 else KEY_TYPE_GROUP
    if v >= 4:
        coordinators = []
        for key in req.coordinator_keys:
            err, node_id, host, port, msg = await _find(ctx, key, key_type)
            coordinators.append(R.Coordinator(key=key, node_id=node_id, host=host, port=port, error_code=err,
                                              error_message=msg))
        resp = R(coordinators=coordinators)
    else:
        err, node_id, host, port, msg = await _find(ctx, req.key, key_type)
        resp = R(error_code=err, error_message=msg, node_id=node_id, host=host, port=port)
    return resp
