"""One module per Kafka API. Each exposes API_KEY, MIN_VERSION, MAX_VERSION and `handle`.

`handle(ctx, body)` returns the response body (bytes or a list of chunks), or None when the
request gets no response (Produce with acks=0). ApiVersions is built from this registry, so
what is advertised is exactly what has a handler.
"""

from __future__ import annotations

from types import ModuleType

from kaflet.server.handlers import (
    api_versions,
    create_partitions,
    create_topics,
    delete_topics,
    describe_cluster,
    fetch,
    init_producer_id,
    list_offsets,
    metadata,
    produce,
)

HANDLER_MODULES: list[ModuleType] = [
    produce,
    fetch,
    list_offsets,
    metadata,
    api_versions,
    create_topics,
    delete_topics,
    init_producer_id,
    create_partitions,
    describe_cluster,
]

HANDLERS: dict[int, ModuleType] = {m.API_KEY: m for m in HANDLER_MODULES}


def supported_versions() -> list[tuple[int, int, int]]:
    """(api_key, min_version, max_version) for every API with a handler, by key."""
    return sorted((m.API_KEY, m.MIN_VERSION, m.MAX_VERSION) for m in HANDLER_MODULES)
