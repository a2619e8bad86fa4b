"""DescribeClientQuotas (key 48): the quotas of the entities matching a filter."""

from __future__ import annotations

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.response import Response
from kaflet.quota.store import FilterComponent, QuotaRequestError
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.DESCRIBE_CLIENT_QUOTAS
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    req = codec.decode_request(API_KEY, ctx.version, body)
    R = codec.response_class(API_KEY)
    components = [FilterComponent(c.entity_type, c.match_type, c.match) for c in req.components]
    try:
        found = ctx.services.admin.quota_configs.describe(components, bool(req.strict))
    except QuotaRequestError as exc:
        return R(error_code=int(exc.code), error_message=exc.message, entries=None)
    entries = [
        R.EntryData(
            entity=[R.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity.parts],
            values=[R.EntryData.ValueData(key=k, value=float(v)) for k, v in sorted(values.items())],
        )
        for entity, values in found
    ]
    return R(error_code=0, error_message=None, entries=entries)
