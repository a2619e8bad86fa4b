"""DescribeTransactions (key 65, v0): the coordinator's state of each transactional id (Kafka's
checks: Describe on the id; the transaction's topics the principal may not Describe are left
out)."""

from __future__ import annotations

from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.DESCRIBE_TRANSACTIONS
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R: Any = codec.response_class(API_KEY)
    S = R.TransactionState
    out = []
    for txn_id in req.transactional_ids:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            code, txn = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
        else:
            code, txn = ctx.services.coordinators.transactions.describe(txn_id)
        if txn is None:
            out.append(S(error_code=code, transactional_id=txn_id, transaction_state="", transaction_timeout_ms=0,
                         transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1, topics=[]))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(txn.partitions):
            by_topic.setdefault(topic, []).append(index)
        visible = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, by_topic)
        out.append(S(error_code=ErrorCode.NONE, transactional_id=txn_id, transaction_state=txn.state.kafka_name,
                     transaction_timeout_ms=txn.timeout_ms, transaction_start_time_ms=txn.start_ms,
                     producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
                     topics=[S.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items() if t in visible]))
    return R(transaction_states=out)
