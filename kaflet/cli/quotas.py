"""Client quotas for `kaflet configs --entity-type users|clients` (like kafka-configs.sh).

Quota keys (producer_byte_rate, consumer_byte_rate, request_percentage, ...) go through
AlterClientQuotas / DescribeClientQuotas; for users, SCRAM keys given in the same --add-config
or --delete-config go to the SCRAM credential APIs (kaflet.cli.users), as Kafka's tool does.
The client libraries have no ClientQuotas calls, so these requests go over kaflet's own connection
(the same one `kaflet configs` uses for the cluster-wide broker default).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from kaflet.cli.common import CliError

_DESCRIBE_CLIENT_QUOTAS, _ALTER_CLIENT_QUOTAS = 48, 49
_MATCH_EXACT, _MATCH_DEFAULT, _MATCH_SPECIFIED = 0, 1, 2

#: --entity-type -> the ClientQuotas entity type.
ENTITY_TYPES = {"users": "user", "clients": "client-id"}
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
SCRAM_KEYS = ("SCRAM-SHA-256", "SCRAM-SHA-512")

#: Sends (api key, version, request) to the broker and returns the decoded response.
RawCall = Callable[[int, int, Any], Any]


def split_keys(entity_type: str, add: dict[str, str], delete: list[str]) -> tuple[dict[str, str], list[str],
                                                                                   dict[str, str], list[str]]:
    """(quota adds, quota deletes, SCRAM adds, SCRAM deletes); unknown keys are a usage error."""
    allowed = QUOTA_KEYS + (SCRAM_KEYS if entity_type == "users" else ())
    unknown = [k for k in [*add, *delete] if k not in allowed]
    if unknown:
        raise click.UsageError(f"Invalid config(s) for entity type {entity_type}: {', '.join(unknown)} "
                               f"(allowed: {', '.join(allowed)}).")
    return ({k: v for k, v in add.items() if k in QUOTA_KEYS}, [k for k in delete if k in QUOTA_KEYS],
            {k: v for k, v in add.items() if k in SCRAM_KEYS}, [k for k in delete if k in SCRAM_KEYS])


def _value(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise click.BadParameter(f"{key} must be a number, got {text!r}", param_hint="--add-config") from None
    return value


def alter(raw: RawCall, entity_type: str, name: str | None, add: dict[str, str], delete: list[str]) -> None:
    """Set and remove quotas of one entity (name None: the default entity)."""
    from kaflet.protocol import client_quotas

    req = client_quotas.alter_request(ENTITY_TYPES[entity_type], name, {k: _value(k, v) for k, v in add.items()},
                                      delete)
    refusal = client_quotas.alter_refusal(raw(_ALTER_CLIENT_QUOTAS, client_quotas.ALTER_CLIENT_QUOTAS_VERSION, req))
    if refusal:
        raise CliError(refusal)


def describe(raw: RawCall, entity_type: str, name: str | None, default: bool) -> list[tuple[list[tuple[str, str | None]],
                                                                                           dict[str, float]]]:
    """The quotas of one entity, of the default entity, or (no name) of every entity of the type."""
    from kaflet.protocol import codec

    req_cls = codec.request_class(_DESCRIBE_CLIENT_QUOTAS)
    if default:
        component = req_cls.ComponentData(entity_type=ENTITY_TYPES[entity_type], match_type=_MATCH_DEFAULT, match=None)
    elif name:
        component = req_cls.ComponentData(entity_type=ENTITY_TYPES[entity_type], match_type=_MATCH_EXACT, match=name)
    else:
        component = req_cls.ComponentData(entity_type=ENTITY_TYPES[entity_type], match_type=_MATCH_SPECIFIED, match=None)
    resp = raw(_DESCRIBE_CLIENT_QUOTAS, 0, req_cls(components=[component], strict=True))
    if resp.error_code:
        raise CliError(f"{resp.error_message or 'DescribeClientQuotas failed'} (error {resp.error_code}).")
    return [([(e.entity_type, e.entity_name) for e in entry.entity], {v.key: v.value for v in entry.values})
            for entry in resp.entries or []]


def entity_description(entity: list[tuple[str, str | None]]) -> str:
    """As kafka-configs.sh words it: "user-principal 'alice'", "the default client-id"."""
    words = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
    return ", ".join(f"the default {words.get(t, t)}" if n is None else f"{words.get(t, t)} '{n}'" for t, n in entity)


def print_quotas(found: list[tuple[list[tuple[str, str | None]], dict[str, float]]], entity_type: str,
                 name: str | None, default: bool) -> None:
    if not found and (name or default):
        entity = [(ENTITY_TYPES[entity_type], None if default else name)]
        click.echo(f"Quota configs for {entity_description(entity)} are ")
    for entity, values in found:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
        click.echo(f"Quota configs for {entity_description(entity)} are {shown}")
