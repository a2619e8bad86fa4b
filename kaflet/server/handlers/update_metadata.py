"""UpdateMetadata (key 6, v7): the controller's view of brokers and partitions for the cache.

The epochs are checked by the replica manager (``ReplicaManager.maybe_update_metadata_cache``),
which hands the request to ``MetadataCache.update_metadata``; through
kaflet/server/controller_requests.py, which also serves this broker's own controller in-process.
"""

from __future__ import annotations

from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.response import Response
from kaflet.server import controller_requests
from kaflet.server.request_context import RequestContext

API_KEY = ApiKey.UPDATE_METADATA
MIN_VERSION = 7
MAX_VERSION = 7


async def handle(ctx: RequestContext, body: memoryview) -> Response:
    return await controller_requests.handle(ctx, API_KEY, body)
