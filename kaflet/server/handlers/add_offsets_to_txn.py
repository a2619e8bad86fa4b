"""AddOffsetsToTxn (key 25, v0-3): a group's __consumer_offsets partition joins the transaction,
so TxnOffsetCommit's offsets are committed or aborted with it (Kafka's checks: Write on the
transactional id, Read on the group)."""

from __future__ import annotations

from kaflet.coordinator.group.store import GROUP_METADATA_TOPIC
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.handlers.add_partitions_to_txn import fenced_error
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.ADD_OFFSETS_TO_TXN
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return R(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    tp = (GROUP_METADATA_TOPIC, ctx.services.coordinators.groups.partition_for(req.group_id))
    code = await ctx.services.coordinators.transactions.add_partitions(req.transactional_id, req.producer_id,
                                                            req.producer_epoch, {tp})
    return R(error_code=fenced_error(code, ctx.version, 2))
