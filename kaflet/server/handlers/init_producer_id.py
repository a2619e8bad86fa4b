"""InitProducerId (key 22): producer ids and epochs for idempotent and transactional producers
(a transactional id goes to the transaction coordinator, which bumps its epoch and so fences
the producer that used it before)."""

from __future__ import annotations

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.INIT_PRODUCER_ID
MIN_VERSION = 0
MAX_VERSION = 4

_MAX_EPOCH = 32767


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    # Kafka's checks: Write on the transactional id; for an idempotent producer IdempotentWrite on
    # the cluster or, since Kafka 3.0 (KIP-679), Write on any topic.
    denied = None
    if req.transactional_id is not None:
        if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
            denied = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.authorize_cluster(AclOperation.IDEMPOTENT_WRITE) and \
            not ctx.authorize_by_resource_type(AclOperation.WRITE, ResourceType.TOPIC):
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if denied is not None:
        return R(error_code=denied, producer_id=-1, producer_epoch=-1)
    pid = getattr(req, "producer_id", -1)
    epoch = getattr(req, "producer_epoch", -1)
    if req.transactional_id is not None:
        code, new_pid, new_epoch = await ctx.services.coordinators.transactions.init_producer_id(
            req.transactional_id, req.transaction_timeout_ms, pid, epoch)
        if code == ErrorCode.PRODUCER_FENCED and ctx.version < 4:
            code = ErrorCode.INVALID_PRODUCER_EPOCH  # PRODUCER_FENCED is new in v4 (KIP-588)
        return R(error_code=code, producer_id=new_pid, producer_epoch=new_epoch)
    if pid >= 0 and epoch >= 0 and epoch < _MAX_EPOCH - 1:
        # KIP-360: an idempotent producer bumps its own epoch to reset its sequences.
        new_pid, new_epoch = pid, epoch + 1
    else:
        new_pid, new_epoch = await ctx.services.coordinators.producer_ids.next_id(), 0
    return R(error_code=0, producer_id=new_pid, producer_epoch=new_epoch)
