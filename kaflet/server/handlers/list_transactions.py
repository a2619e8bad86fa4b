"""ListTransactions (key 66, v0-1): the transactional ids this broker coordinates, filtered by
state, producer id and (v1, KIP-994) how long they have been running; only the ids the
principal may Describe are listed."""

from __future__ import annotations

from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.LIST_TRANSACTIONS
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R: Any = codec.response_class(API_KEY)
    duration = req.duration_filter if ctx.version >= 1 else -1
    code, unknown, txns = ctx.services.coordinators.transactions.list(set(req.producer_id_filters), set(req.state_filters),
                                                          duration)
    states = [R.TransactionState(transactional_id=t.transactional_id, producer_id=t.producer_id,
                                 transaction_state=t.state.kafka_name)
              for t in txns if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id)]
    return R(error_code=code, unknown_state_filters=unknown, transaction_states=states)
