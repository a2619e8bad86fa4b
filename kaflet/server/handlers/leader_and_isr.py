"""LeaderAndIsr (key 4, v5): the controller makes this broker lead or follow partitions.

The work is the replica manager's (``ReplicaManager.become_leader_or_follower``), through
kaflet/server/controller_requests.py, which also serves this broker's own controller in-process.
"""

from __future__ import annotations

from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.response import Response
from kaflet.server import controller_requests
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.LEADER_AND_ISR
MIN_VERSION = 5
MAX_VERSION = 5


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    return await controller_requests.handle(ctx, API_KEY, body)
