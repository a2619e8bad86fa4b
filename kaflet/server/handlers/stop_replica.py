"""StopReplica (key 5, v3): the controller makes this broker stop (and maybe delete) replicas.

The work is the replica manager's (``ReplicaManager.stop_replicas``), through
kaflet/server/controller_requests.py, which also serves this broker's own controller in-process.
"""

from __future__ import annotations

from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.response import Response
from kaflet.server import controller_requests
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.STOP_REPLICA
MIN_VERSION = 3
MAX_VERSION = 3


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    return await controller_requests.handle(ctx, API_KEY, body)
