"""Quota entities and keys, and the order in which Kafka resolves a client's quota.

An entity is a combination of entity types (``user``, ``client-id``, or ``ip`` alone), each
with a name or the default (None; ``<default>`` in the metadata tree). A connection's quota of
one kind comes from the first entity in Kafka's precedence order that sets that kind
(``DefaultQuotaCallback``): a more specific entity always wins, and a user quota wins over a
client-id quota.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kaflet.metadata import zkdata

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
#: Entity types in the order they appear in paths and responses.
ENTITY_TYPES = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

#: Quota keys of user / client-id entities and whether Kafka types them as whole numbers.
CLIENT_QUOTA_KEYS: dict[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}
#: Quota keys of ip entities (stored and described; not enforced yet).
IP_QUOTA_KEYS: dict[str, bool] = {CONNECTION_CREATION_RATE: True}


class QuotaType(enum.Enum):
    """The quotas the broker enforces, by their config key."""

    PRODUCE = PRODUCER_BYTE_RATE
    FETCH = CONSUMER_BYTE_RATE
    REQUEST = REQUEST_PERCENTAGE


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A quota entity: ``(entity type, name)`` pairs in ENTITY_TYPES order; a None name is the default."""

    parts: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, items: Mapping[str, str | None] | Iterable[tuple[str, str | None]]) -> QuotaEntity:
        pairs = dict(items.items() if isinstance(items, Mapping) else items)
        return cls(tuple((t, pairs[t]) for t in ENTITY_TYPES if t in pairs))

    def has(self, entity_type: str) -> bool:
        return any(t == entity_type for t, _ in self.parts)

    def name(self, entity_type: str) -> str | None:
        for t, n in self.parts:
            if t == entity_type:
                return n
        return None

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(t for t, _ in self.parts)

    def config_path(self) -> tuple[str, str]:
        """(config type, entity name) under /config, e.g. ("users", "alice/clients/app")."""
        seg = {t: zkdata.DEFAULT_ENTITY if n is None else zkdata.sanitize(n) for t, n in self.parts}
        if self.types == (USER, CLIENT_ID):
            return zkdata.ConfigType.USER, f"{seg[USER]}/clients/{seg[CLIENT_ID]}"
        if self.types == (USER,):
            return zkdata.ConfigType.USER, seg[USER]
        if self.types == (CLIENT_ID,):
            return zkdata.ConfigType.CLIENT, seg[CLIENT_ID]
        if self.types == (IP,):
            return zkdata.ConfigType.IP, self.parts[0][1] or zkdata.DEFAULT_ENTITY
        raise ValueError(f"not a storable quota entity: {self}")

    def __str__(self) -> str:
        return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in self.parts) or "<empty>"


def entity_from_path(config_type: str, name: str) -> QuotaEntity | None:
    """The entity of a /config/<config_type>/<name> node (name as in a change notification)."""

    def unsanitize(seg: str) -> str | None:
        return None if seg == zkdata.DEFAULT_ENTITY else zkdata.desanitize(seg)

    if config_type == zkdata.ConfigType.USER:
        user, sep, rest = name.partition("/clients/")
        if sep:
            return QuotaEntity.of({USER: unsanitize(user), CLIENT_ID: unsanitize(rest)})
        if "/" in name:
            return None
        return QuotaEntity.of({USER: unsanitize(name)})
    if config_type == zkdata.ConfigType.CLIENT and "/" not in name:
        return QuotaEntity.of({CLIENT_ID: unsanitize(name)})
    if config_type == zkdata.ConfigType.IP and "/" not in name:
        return QuotaEntity.of({IP: None if name == zkdata.DEFAULT_ENTITY else name})
    return None


def precedence(user: str, client_id: str) -> list[tuple[QuotaEntity, tuple[str, str]]]:
    """The entities that may give (user, client_id) a quota, most specific first.

    Each comes with the key of the rate it is measured against: the names of the levels the
    entity has, so clients sharing a user quota share one rate, while a default client-id quota
    gives every client id its own rate (Kafka's metric tags).
    """
    u, c = ((USER, user), (USER, None)), ((CLIENT_ID, client_id), (CLIENT_ID, None))
    both = (user, client_id)
    return [
        (QuotaEntity((u[0], c[0])), both),
        (QuotaEntity((u[0], c[1])), both),
        (QuotaEntity((u[0],)), (user, "")),
        (QuotaEntity((u[1], c[0])), both),
        (QuotaEntity((u[1], c[1])), both),
        (QuotaEntity((u[1],)), (user, "")),
        (QuotaEntity((c[0],)), ("", client_id)),
        (QuotaEntity((c[1],)), ("", client_id)),
    ]


def resolve(quotas: Mapping[QuotaEntity, float], user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
    """The (rate key, quota) that applies to (user, client_id) among `quotas`, or None (unlimited)."""
    for entity, key in precedence(user, client_id):
        value = quotas.get(entity)
        if value is not None:
            return key, value
    return None
