"""AddPartitionsToTxn (key 24, v0-3): partitions join a producer's ongoing transaction.

v4+ (KIP-890's broker-side verification) is not offered. As Kafka does: Write on the
transactional id first; then every partition must be a known, non-internal topic the client
may write, otherwise those partitions get their error and the rest OPERATION_NOT_ATTEMPTED.
"""

from __future__ import annotations

from typing import Any

from kaflet.metadata.topic_names import is_internal
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.protocol.txn_responses import AddPartitionsToTxnResponse
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
MIN_VERSION = 0
MAX_VERSION = 3


def fenced_error(code: ErrorCode, version: int, first_version: int) -> ErrorCode:
    """PRODUCER_FENCED as older request versions know it: INVALID_PRODUCER_EPOCH (KIP-588)."""
    if code == ErrorCode.PRODUCER_FENCED and version < first_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    return await serve(ctx, codec.decode_request(API_KEY, ctx.version, body))


async def serve(ctx: RequestContext, req: Any) -> Response:
    """Answer a decoded request in real partition numbers (the gateway renumbers: server/renumbering.py)."""
    txn_id = req.v3_and_below_transactional_id
    wanted = [(t.name, p) for t in req.v3_and_below_topics for p in t.partitions]
    errors: dict[tuple[str, int], int] = {}
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        errors = {tp: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in wanted}
    else:
        allowed = {name: not is_internal(name) and ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, name)
                   for name, _ in wanted}
        cache = ctx.services.cluster.metadata
        for tp in wanted:
            if not allowed[tp[0]]:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif cache.partition(*tp) is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if errors:
            errors.update({tp: ErrorCode.OPERATION_NOT_ATTEMPTED for tp in wanted if tp not in errors})
        else:
            code = await ctx.services.coordinators.transactions.add_partitions(
                txn_id, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch, set(wanted))
            code = fenced_error(code, ctx.version, 2)
            errors = {tp: code for tp in wanted}
    return AddPartitionsToTxnResponse(errors, ctx.version)
