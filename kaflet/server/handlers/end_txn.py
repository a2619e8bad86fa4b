"""EndTxn (key 26, v0-3): commit or abort a producer's transaction. Answered once
PrepareCommit/PrepareAbort is in __transaction_state, as Kafka answers; the connection then
reads its next request only once the marker round that follows has completed or had
``completion_wait_ms`` (``Connection.after_response``, ``TransactionCoordinator.await_completion``).

The client reads the answer while the markers are written instead of after, which takes the
round off the transaction's critical path (librdkafka, 100 x 1 KiB a transaction: a median 2.52
ms before, 2.15 ms after; benchmarks/README.md), and whatever it sends next on this connection
still finds the transaction complete."""

from __future__ import annotations

import functools

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
    coordinator = ctx.services.coordinators.transactions
    code = await coordinator.end_txn(req.transactional_id, req.producer_id, req.producer_epoch, bool(req.committed),
                                     await_markers=False)
    if code == ErrorCode.NONE:
        ctx.conn.after_response = functools.partial(coordinator.await_completion, req.transactional_id)
    return EndTxnResponse(fenced_error(code, ctx.version, 2), ctx.version)
