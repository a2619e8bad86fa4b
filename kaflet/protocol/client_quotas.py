"""AlterClientQuotas as kaflet's tools send it: `kaflet configs` (kafka-configs.sh's job) and the
management service, which sets an application's quota on a topic. Sans-io: the request object
in, the refusal out; the caller sends it over its own connection."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey

#: The version sent (the ClientQuotas APIs' first; every Kafka 2.6+ broker serves it).
ALTER_CLIENT_QUOTAS_VERSION = 0


def alter_request(entity_type: str, name: str | None, add: Mapping[str, float], delete: Iterable[str]) -> Any:
    """Set the `add` quotas of one entity and remove the `delete` ones (name None: the default entity)."""
    req_cls = codec.request_class(ApiKey.ALTER_CLIENT_QUOTAS)
    entry = req_cls.EntryData
    ops = [entry.OpData(key=k, value=v, remove=False) for k, v in add.items()]
    ops += [entry.OpData(key=k, value=0.0, remove=True) for k in delete]
    return req_cls(entries=[entry(entity=[entry.EntityData(entity_type=entity_type, entity_name=name)], ops=ops)],
                   validate_only=False)


def alter_refusal(response: Any) -> str | None:
    """Why the broker refused the request's one entity, as a sentence; None when it was applied."""
    result = response.entries[0]
    if not result.error_code:
        return None
    return f"{result.error_message or 'AlterClientQuotas failed'} (error {result.error_code})."
