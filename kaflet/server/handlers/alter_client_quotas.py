"""AlterClientQuotas (key 49): set and remove quotas of user, client-id and ip entities."""

from __future__ import annotations

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.response import Response
from kaflet.quota.store import QuotaOp
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.ALTER_CLIENT_QUOTAS
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    entries = [([(e.entity_type, e.entity_name) for e in entry.entity],
                [QuotaOp(op.key, float(op.value), bool(op.remove)) for op in entry.ops])
               for entry in req.entries]
    results = await ctx.services.admin.quota_configs.alter(entries, bool(req.validate_only))
    return R(entries=[
        R.EntryData(error_code=r.error_code, error_message=r.error_message,
                    entity=[R.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in r.entity])
        for r in results])
