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
    if (pid < 0) != (epoch < 0):
        # Kafka's KafkaApis: a producer id without an epoch, or an epoch without an id.
        return R(error_code=ErrorCode.INVALID_REQUEST, producer_id=-1, producer_epoch=-1)
    if req.transactional_id is not None:
        code, new_pid, new_epoch = await ctx.services.coordinators.transactions.init_producer_id(
            req.transactional_id, req.transaction_timeout_ms, pid, epoch)
        if code == ErrorCode.PRODUCER_FENCED and ctx.version < 4:
            code = ErrorCode.INVALID_PRODUCER_EPOCH  # PRODUCER_FENCED is new in v4 (KIP-588)
        return R(error_code=code, producer_id=new_pid, producer_epoch=new_epoch)
    # An idempotent producer always gets a new id at epoch 0, also when it names its current one
    # (KIP-360's reset), as Kafka's coordinator answers: bumping the epoch of the id it names
    # would let any client fence whichever producer holds that id.
    return R(error_code=0, producer_id=await ctx.services.coordinators.producer_ids.next_id(), producer_epoch=0)
