"""The gateway's three synchronized caches: users, topic ACLs and disabled partitions.

Each is a :class:`~kaflet.gateway.data_cache.DataCache` fed by one incremental endpoint of the
management service and implements the view of model.py the rest of the broker consults. The ACL
and partition caches have Logi-Kafka's names (``/DataCache/kafka_authorizer``,
``kafka_partition``); the seed does not show its user cache's, kaflet calls it ``kafka_user``.

Rows are checked field by field. Numbers may come as JSON numbers or as decimal strings (the
published manager sends numbers, Logi-Kafka's own test service strings, and Logi-Kafka reads
both); anything else (a missing field, a float, a word, an operation outside 0..2) fails the
whole pull with one ManagementServiceError, so the broker keeps its last committed view rather
than apply part of a batch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from kaflet.gateway.client import rows_of
from kaflet.gateway.data_cache import (
    DEFAULT_CHECK_INTERVAL_MS,
    DEFAULT_SYNC_INTERVAL_MS,
    DataCache,
    Dataset,
    Record,
)
from kaflet.gateway.model import (
    AclRow,
    GatewayUser,
    ManagementService,
    ManagementServiceError,
    Operation,
    PartitionRow,
    UserRow,
)
from kaflet.metadata.tree import MetadataTree

USERS_PATH = "/api/v1/security/users"
ACLS_PATH = "/api/v1/security/acls"
PARTITIONS_PATH = "/api/v1/partition/topicPartitions"

USERS_CACHE = "kafka_user"
ACLS_CACHE = "kafka_authorizer"
PARTITIONS_CACHE = "kafka_partition"

_DECIMAL = re.compile(r"^-?\d{1,19}$")

T = TypeVar("T")


def _int(row: Mapping[str, Any], key: str) -> int:
    value = row.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _DECIMAL.match(value.strip()):
        return int(value)
    raise ManagementServiceError(f"row field {key!r} is not an integer: {_show(row)}")


def _str(row: Mapping[str, Any], key: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value:
        raise ManagementServiceError(f"row field {key!r} is not a non-empty string: {_show(row)}")
    return value


def _operation(row: Mapping[str, Any]) -> Operation:
    value = _int(row, "operation")
    if value not in (0, 1, 2):
        raise ManagementServiceError(f"row operation {value} is not 0, 1 or 2: {_show(row)}")
    return Operation(value)


def _timestamp(row: Mapping[str, Any]) -> int:
    value = _int(row, "timestamp")
    if value < 0:
        raise ManagementServiceError(f"row timestamp {value} is negative: {_show(row)}")
    return value


def _show(row: Mapping[str, Any]) -> str:
    text = repr(dict(row))
    return text if len(text) <= 200 else text[:200] + "..."


def parse_user_row(row: Mapping[str, Any]) -> UserRow:
    """A /security/users row (``username``, ``password``, ``userType``, ``operation``, ``timestamp``)."""
    user = GatewayUser(_str(row, "username"), _str(row, "password"), _int(row, "userType") != 0)
    return UserRow(user, _operation(row), _timestamp(row))


def parse_acl_row(row: Mapping[str, Any]) -> AclRow:
    """A /security/acls row (``topicName``, ``username``, ``access`` 0..3, ``operation``, ``timestamp``)."""
    access = _int(row, "access")
    if not 0 <= access <= 3:
        raise ManagementServiceError(f"row access {access} is not 0..3: {_show(row)}")
    return AclRow(_str(row, "topicName"), _str(row, "username"), access, _operation(row), _timestamp(row))


def parse_partition_row(row: Mapping[str, Any]) -> PartitionRow:
    """A /partition/topicPartitions row (``topicName``, ``disablePartitions`` "1,2")."""
    raw = row.get("disablePartitions")
    if raw is None or raw == "":
        items: list[Any] = []
    elif isinstance(raw, str):
        items = [x.strip() for x in raw.split(",") if x.strip()]
    elif isinstance(raw, list):
        items = raw
    else:
        raise ManagementServiceError(f"row field 'disablePartitions' is not a list of partitions: {_show(row)}")
    disabled = set()
    for item in items:
        number = _int({"partition": item}, "partition")
        if number < 0:
            raise ManagementServiceError(f"row partition {item!r} is not a partition number: {_show(row)}")
        disabled.add(number)
    return PartitionRow(_str(row, "topicName"), frozenset(disabled), _operation(row), _timestamp(row))


class RowProvider:
    """Pulls one incremental endpoint: POST ``{"clusterId", "start", "end"}``, ``data.rows``."""

    def __init__(self, service: ManagementService, path: str, cluster_id: int,
                 to_record: Callable[[Mapping[str, Any]], Record[Any, Any]]) -> None:
        self.service = service
        self.path = path
        self.cluster_id = cluster_id
        self.to_record = to_record

    async def fetch(self, start: int, end: int) -> Dataset[Any, Any]:
        """The records of [start, end] as the service returns them (the cache drops ``end``)."""
        data = await self.service.post(self.path, {"clusterId": self.cluster_id, "start": start, "end": end})
        rows = rows_of(data, f"POST {self.path}")
        return Dataset([self.to_record(row) for row in rows], end)


def user_record(row: UserRow) -> Record[str, GatewayUser]:
    return Record(row.user.name, row.user, row.operation, row.timestamp)


def acl_record(row: AclRow) -> Record[tuple[str, str], int]:
    return Record((row.topic, row.user), row.access, row.operation, row.timestamp)


def partition_record(row: PartitionRow) -> Record[str, frozenset[int]]:
    return Record(row.topic, row.disabled, row.operation, row.timestamp)


def merge_access(record: Record[tuple[str, str], int], old: int | None) -> int | None:
    """A grant adds its bits (it carries the merged access); a revoke clears the bits it
    carries; no bits left removes the entry. Logi-Kafka keeps one allow entry per bit, which
    comes to the same."""
    bits = old or 0
    left = bits & ~record.value if record.operation == Operation.DELETE else bits | record.value
    return left or None


class UserCache(DataCache[str, GatewayUser]):
    """The users (applications) the brokers have committed: a :class:`UserView`."""

    def user(self, name: str) -> GatewayUser | None:
        """The user ``name`` (an appId, without the cluster id prefix), or None."""
        return self.get(name)


class AclCache(DataCache[tuple[str, str], int]):
    """The topic permissions the brokers have committed: an :class:`AclView`."""

    @property
    def version(self) -> int:
        """Moves whenever the committed ACLs change: with each commit that applies rows, and
        with a reload (which may change them under an unchanged commit timestamp). Decisions
        cached per connection hold while it is unchanged."""
        return self.view_version

    def access(self, topic: str, user: str) -> int | None:
        """The access bits of exactly (topic, user), either may be ``*``; None when no row."""
        return self.get((topic, user))


class PartitionCache(DataCache[str, frozenset[int]]):
    """The disabled partitions the brokers have committed: a :class:`PartitionView`."""

    _NONE: frozenset[int] = frozenset()

    def disabled(self, topic: str) -> frozenset[int]:
        """Partitions of ``topic`` hidden from clients (empty for most topics)."""
        return self.get(topic) or self._NONE


def _provider(service: ManagementService, path: str, cluster_id: int, parse: Callable[[Mapping[str, Any]], T],
              to_record: Callable[[T], Record[Any, Any]]) -> RowProvider:
    return RowProvider(service, path, cluster_id, lambda row: to_record(parse(row)))


def build_caches(
    tree: MetadataTree,
    service: ManagementService,
    *,
    broker_id: int,
    cluster_id: int,
    default_users: Iterable[UserRow] = (),
    default_acls: Iterable[AclRow] = (),
    sync_interval_ms: int = DEFAULT_SYNC_INTERVAL_MS,
    check_interval_ms: int = DEFAULT_CHECK_INTERVAL_MS,
) -> tuple[UserCache, AclCache, PartitionCache]:
    """The three caches of one broker, not started."""
    sync, check = sync_interval_ms, check_interval_ms
    users = UserCache(USERS_CACHE, broker_id, tree,
                      _provider(service, USERS_PATH, cluster_id, parse_user_row, user_record),
                      defaults=[user_record(r) for r in default_users], sync_interval_ms=sync,
                      check_interval_ms=check)
    acls = AclCache(ACLS_CACHE, broker_id, tree,
                    _provider(service, ACLS_PATH, cluster_id, parse_acl_row, acl_record),
                    merge=merge_access, defaults=[acl_record(r) for r in default_acls], sync_interval_ms=sync,
                    check_interval_ms=check)
    partitions = PartitionCache(PARTITIONS_CACHE, broker_id, tree,
                                _provider(service, PARTITIONS_PATH, cluster_id, parse_partition_row,
                                          partition_record), sync_interval_ms=sync, check_interval_ms=check)
    return users, acls, partitions
