"""AlterConfigs (key 33): replace a topic's or broker's stored configs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.response import Response
from kaflet.security.acl import AclOperation
from kaflet.server.dynamic_config import ConfigRequestError
from kaflet.server.handlers.describe_configs import config_access_error
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.ALTER_CONFIGS
MIN_VERSION = 0
MAX_VERSION = 2


async def alter_each_resource(
    ctx: RequestContext, body: memoryview, api_key: int,
    apply: Callable[[RequestContext, Any, bool], Awaitable[None]],
) -> Response:
    """The loop AlterConfigs and IncrementalAlterConfigs share: authorize, apply, answer per resource."""
    req = codec.decode_request(api_key, ctx.version, body)
    R = codec.response_class(api_key)
    Resp = R.AlterConfigsResourceResponse
    validate_only = bool(req.validate_only)
    out = []
    for res in req.resources:
        code, message = 0, None
        denied = config_access_error(ctx, AclOperation.ALTER_CONFIGS, res.resource_type, res.resource_name)
        if denied is not None:
            out.append(Resp(error_code=denied, error_message=None, resource_type=res.resource_type,
                            resource_name=res.resource_name))
            continue
        try:
            await apply(ctx, res, validate_only)
        except ConfigRequestError as exc:
            code, message = exc.code, exc.message
        out.append(Resp(error_code=code, error_message=message, resource_type=res.resource_type,
                        resource_name=res.resource_name))
    return R(responses=out)


async def _replace(ctx: RequestContext, res: Any, validate_only: bool) -> None:
    configs = {c.name: c.value for c in res.configs}
    await ctx.services.admin.configs.alter(res.resource_type, res.resource_name, configs, validate_only)


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    return await alter_each_resource(ctx, body, API_KEY, _replace)
