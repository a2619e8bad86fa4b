"""IncrementalAlterConfigs (key 44): SET, DELETE, APPEND and SUBTRACT on stored configs."""

from __future__ import annotations

from typing import Any

from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.response import Response
from kaflet.server.handlers.alter_configs import alter_each_resource
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.INCREMENTAL_ALTER_CONFIGS
MIN_VERSION = 0
MAX_VERSION = 1


async def _apply_ops(ctx: RequestContext, res: Any, validate_only: bool) -> None:
    ops = [(c.name, c.config_operation, c.value) for c in res.configs]
    await ctx.services.admin.configs.incremental_alter(res.resource_type, res.resource_name, ops, validate_only)


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    return await alter_each_resource(ctx, body, API_KEY, _apply_ops)
