"""AlterClientQuotas / DescribeClientQuotas over a RawClient."""

from __future__ import annotations

from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from tests.support.raw_client import RawClient

ALTER, DESCRIBE = ApiKey.ALTER_CLIENT_QUOTAS, ApiKey.DESCRIBE_CLIENT_QUOTAS


def alter(bootstrap: str, entity: list[tuple[str, str | None]], ops: dict[str, float | None],
          validate_only: bool = False, version: int = 1) -> Any:
    """AlterClientQuotas for one entity; a None value removes the key. The entity's result."""
    A = codec.request_class(ALTER)
    req = A(entries=[A.EntryData(
        entity=[A.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        ops=[A.EntryData.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops.items()])],
        validate_only=validate_only)
    rc = RawClient(bootstrap)
    try:
        return rc.request(ALTER, version, req).entries[0]
    finally:
        rc.close()


def describe(bootstrap: str, components: list[tuple[str, int, str | None]], strict: bool = False,
             version: int = 1) -> Any:
    """DescribeClientQuotas with (entity type, match type, match) components; the response."""
    D = codec.request_class(DESCRIBE)
    req = D(components=[D.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components], strict=strict)
    rc = RawClient(bootstrap)
    try:
        return rc.request(DESCRIBE, version, req)
    finally:
        rc.close()


def as_dict(resp: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    """A DescribeClientQuotas response as {entity: {quota key: value}}."""
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in resp.entries or []}
