"""EndTxn (key 26, v0-3): commit or abort a producer's transaction. Answered once
PrepareCommit/PrepareAbort is in __transaction_state and the marker round that follows (Kafka's
order) has completed or had ``completion_wait_ms`` (``TransactionCoordinator.end_txn``)."""

from __future__ import annotations

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.protocol.txn_responses import EndTxnResponse
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.handlers.add_partitions_to_txn import fenced_error
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.END_TXN
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return EndTxnResponse(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ctx.version)
    code = await ctx.services.coordinators.transactions.end_txn(req.transactional_id, req.producer_id, req.producer_epoch,
                                                     bool(req.committed))
    return EndTxnResponse(fenced_error(code, ctx.version, 2), ctx.version)
