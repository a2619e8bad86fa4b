"""Quota configs in the metadata tree, and the ClientQuotas APIs' semantics over them.

Storage is Kafka's (ZooKeeper mode): ``/config/users/<user>``, ``/config/users/<user>/clients/<id>``,
``/config/clients/<id>`` and ``/config/ips/<ip>`` hold ``{"version":1,"config":{...}}`` with the
quota keys next to any other keys (a user's SCRAM credentials), names sanitized, ``<default>``
for the default entity; each write is announced under /config/changes. The store keeps every
quota config in memory: loaded at start-up, updated by the config change listener (ConfigAdmin
hands it users/, clients/ and ips/ notifications), and pushed into the QuotaManager, so changes
apply without a restart on every broker.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kaflet.metadata import zkdata
from kaflet.metadata.tree import BadVersionError, MetadataTree, NodeExistsError, NoNodeError
from kaflet.protocol.errors import ErrorCode
from kaflet.quota.entity import (
    CLIENT_ID,
    CLIENT_QUOTA_KEYS,
    ENTITY_TYPES,
    IP,
    IP_QUOTA_KEYS,
    USER,
    QuotaEntity,
    entity_from_path,
)
from kaflet.quota.manager import QuotaManager

log = logging.getLogger("kaflet.quotas")

# DescribeClientQuotas match types.
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2


class QuotaRequestError(Exception):
    """A request-level or entity-level error of the ClientQuotas APIs."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class FilterComponent:
    """One DescribeClientQuotas filter component."""

    entity_type: str
    match_type: int
    match: str | None


@dataclass(frozen=True, slots=True)
class QuotaOp:
    """One AlterClientQuotas operation: set `key` to `value`, or remove it."""

    key: str
    value: float
    remove: bool


@dataclass(slots=True)
class AlterResult:
    entity: list[tuple[str, str | None]]
    error_code: int = 0
    error_message: str | None = None


@dataclass(slots=True)
class _Entry:
    values: dict[str, float] = field(default_factory=dict)


def _quota_values(entity: QuotaEntity, configs: Mapping[str, str]) -> dict[str, float]:
    keys = IP_QUOTA_KEYS if entity.has(IP) else CLIENT_QUOTA_KEYS
    out: dict[str, float] = {}
    for key in keys:
        raw = configs.get(key)
        if raw is None:
            continue
        try:
            out[key] = float(raw)
        except ValueError:
            log.warning("ignoring quota %s=%r of %s: not a number", key, raw, entity)
    return out


def _format_value(key: str, value: float) -> str:
    """As Kafka stores it: whole-number quotas as longs, the others as doubles ("50.0")."""
    whole = CLIENT_QUOTA_KEYS.get(key, IP_QUOTA_KEYS.get(key, False))
    return str(int(value)) if whole else repr(float(value))


class QuotaConfigStore:
    """Every quota config of the cluster, read from and written to the metadata tree."""

    def __init__(self, tree: MetadataTree, manager: QuotaManager) -> None:
        self.tree = tree
        self.manager = manager
        self.entries: dict[QuotaEntity, dict[str, float]] = {}

    # -- loading and change notifications ------------------------------------------------------

    async def load(self) -> None:
        """Read every quota entity (at start-up, before clients are served)."""
        base = zkdata.CONFIG_PATH
        for user in await self._children(f"{base}/{zkdata.ConfigType.USER}"):
            await self.apply_entity(zkdata.ConfigType.USER, user)
            for client in await self._children(f"{base}/{zkdata.ConfigType.USER}/{user}/clients"):
                await self.apply_entity(zkdata.ConfigType.USER, f"{user}/clients/{client}")
        for client in await self._children(f"{base}/{zkdata.ConfigType.CLIENT}"):
            await self.apply_entity(zkdata.ConfigType.CLIENT, client)
        for ip in await self._children(f"{base}/{zkdata.ConfigType.IP}"):
            await self.apply_entity(zkdata.ConfigType.IP, ip)
        if self.entries:
            log.info("loaded quotas of %d entities", len(self.entries))

    async def _children(self, path: str) -> list[str]:
        try:
            return await self.tree.children(path)
        except NoNodeError:
            return []

    async def apply_entity(self, config_type: str, name: str) -> None:
        """Re-read one /config/<config_type>/<name> node and apply its quotas."""
        entity = entity_from_path(config_type, name)
        if entity is None:
            log.warning("ignoring config change of an unknown quota entity %s/%s", config_type, name)
            return
        got = await self.tree.get_or_none(zkdata.config_entity_path(config_type, name))
        configs = zkdata.parse_entity_config(got[0]) if got else {}
        self._apply(entity, _quota_values(entity, configs))

    def _apply(self, entity: QuotaEntity, values: dict[str, float]) -> None:
        old = self.entries.get(entity, {})
        if values:
            self.entries[entity] = values
        else:
            self.entries.pop(entity, None)
        if values != old:
            log.info("quotas of %s: %s", entity, values or "none")
        if not entity.has(IP):
            self.manager.update_quotas(entity, values)

    # -- DescribeClientQuotas -----------------------------------------------------------------

    def describe(self, components: Sequence[FilterComponent], strict: bool) -> list[tuple[QuotaEntity, dict[str, float]]]:
        """The entities matching the filter, with their quotas; raises QuotaRequestError."""
        by_type: dict[str, FilterComponent] = {}
        for c in components:
            if c.entity_type not in ENTITY_TYPES:
                if not c.entity_type:
                    raise QuotaRequestError(ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity type")
                raise QuotaRequestError(ErrorCode.UNSUPPORTED_VERSION,
                                        f"Custom entity type '{c.entity_type}' not supported")
            if c.entity_type in by_type:
                raise QuotaRequestError(ErrorCode.INVALID_REQUEST,
                                        f"Duplicate {c.entity_type} filter component entity type")
            if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
                raise QuotaRequestError(ErrorCode.INVALID_REQUEST, f"Unexpected match type: {c.match_type}")
            if c.match_type == MATCH_EXACT and c.match is None:
                raise QuotaRequestError(ErrorCode.INVALID_REQUEST,
                                        f"Unexpected null match for an exact {c.entity_type} filter component")
            by_type[c.entity_type] = c
        if IP in by_type and (USER in by_type or CLIENT_ID in by_type):
            raise QuotaRequestError(ErrorCode.INVALID_REQUEST,
                                    "Invalid entity filter component combination, IP filter component should not be "
                                    "used with user or clientId filter component.")
        out = []
        for entity, values in self.entries.items():
            # Kafka answers user/client-id entities unless an ip component is given, and ip
            # entities unless a user or client-id component is given.
            if entity.has(IP) and (USER in by_type or CLIENT_ID in by_type):
                continue
            if not entity.has(IP) and IP in by_type:
                continue
            if all(_matches(by_type.get(t), entity, t, strict) for t in ENTITY_TYPES):
                out.append((entity, dict(values)))
        return sorted(out, key=lambda e: [(t, n or "") for t, n in e[0].parts])

    # -- AlterClientQuotas --------------------------------------------------------------------

    async def alter(self, entries: Sequence[tuple[Sequence[tuple[str, str | None]], Sequence[QuotaOp]]],
                    validate_only: bool) -> list[AlterResult]:
        """Apply each entry's operations to its entity; one result per entry."""
        results = []
        for raw_entity, ops in entries:
            result = AlterResult(list(raw_entity))
            try:
                entity = _validate_entity(raw_entity)
                await self._alter_entity(entity, ops, validate_only)
            except QuotaRequestError as exc:
                result.error_code, result.error_message = int(exc.code), exc.message
            results.append(result)
        return results

    async def _alter_entity(self, entity: QuotaEntity, ops: Sequence[QuotaOp], validate_only: bool) -> None:
        keys = IP_QUOTA_KEYS if entity.has(IP) else CLIENT_QUOTA_KEYS
        for op in ops:
            whole = keys.get(op.key)
            if whole is None:
                raise QuotaRequestError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {op.key}")
            if op.remove:
                continue
            if whole and op.value != int(op.value):
                kind = "Int" if entity.has(IP) else "Long"
                raise QuotaRequestError(ErrorCode.INVALID_REQUEST, f"Configuration {op.key} must be a {kind} value")
            if not op.value > 0:
                raise QuotaRequestError(ErrorCode.INVALID_REQUEST, f"Quota {op.key} must be greater than 0")
        if validate_only:
            return
        config_type, name = entity.config_path()
        path = zkdata.config_entity_path(config_type, name)
        for _attempt in range(10):
            got = await self.tree.get_or_none(path)
            configs = zkdata.parse_entity_config(got[0]) if got else {}
            for op in ops:
                if op.remove:
                    configs.pop(op.key, None)
                else:
                    configs[op.key] = _format_value(op.key, op.value)
            data = zkdata.entity_config_json(configs)
            try:
                if got is None:
                    await self.tree.create(path, data, make_parents=True)
                else:
                    await self.tree.set(path, data, got[1].version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # a concurrent writer (a SCRAM change of the same user, say): re-apply
            await self.tree.create(zkdata.config_change_prefix(), zkdata.config_change_json(f"{config_type}/{name}"),
                                   sequential=True, make_parents=True)
            # Apply here at once; the notification brings the change to the other brokers.
            await self.apply_entity(config_type, name)
            return
        raise QuotaRequestError(ErrorCode.UNKNOWN_SERVER_ERROR, "concurrent updates of the entity's configs")


def _matches(component: FilterComponent | None, entity: QuotaEntity, entity_type: str, strict: bool) -> bool:
    if component is None:
        return not strict or not entity.has(entity_type)
    if not entity.has(entity_type):
        return False
    name = entity.name(entity_type)
    if component.match_type == MATCH_DEFAULT:
        return name is None
    if component.match_type == MATCH_EXACT:
        return name == component.match
    return True  # MATCH_SPECIFIED: any name of this type, the default included (as Kafka)


def _validate_entity(raw: Sequence[tuple[str, str | None]]) -> QuotaEntity:
    if not raw:
        raise QuotaRequestError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for entity_type, name in raw:
        if entity_type not in ENTITY_TYPES:
            if not entity_type:
                raise QuotaRequestError(ErrorCode.INVALID_REQUEST, "Unexpected empty quota entity type")
            raise QuotaRequestError(ErrorCode.UNSUPPORTED_VERSION, f"Custom entity type '{entity_type}' not supported")
        if entity_type in seen:
            raise QuotaRequestError(ErrorCode.INVALID_REQUEST, f"Duplicate {entity_type} entity type")
        seen[entity_type] = name
    if IP in seen and len(seen) > 1:
        raise QuotaRequestError(ErrorCode.INVALID_REQUEST,
                                "Invalid quota entity combination, IP entity should not be used with user/client ID entity.")
    ip = seen.get(IP)
    if ip is not None:
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise QuotaRequestError(ErrorCode.INVALID_REQUEST, f"{ip} is not a valid IP") from None
    return QuotaEntity.of(seen)
