"""What the gateway's parts share: the rows the management service sends and the read-only
views the authenticator, authorizer, metadata and quota code consult.

The synchronized caches (data_cache.py) implement the views; the static defaults from the
broker's config fill them before the first load, so the views are never "not ready".
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

#: Logi-Kafka's built-in users: ``admin`` is a super user; ``ANONYMOUS`` is what inter-broker
#: and unauthenticated listeners run as, never a name a client may log in with.
ADMIN_USER = "admin"
ANONYMOUS_USER = "ANONYMOUS"

#: Access bits of an ACL row (the management service's ``access`` bitmask).
ACCESS_READ = 1
ACCESS_WRITE = 2
#: Deny bits: only static default ACLs (``topic:user:Read:Deny``) carry them, never the service.
#: A row with a deny bit ends the lookup for that operation with a denial, as Logi-Kafka's
#: Deny entries do; caches keep them like any other bit.
ACCESS_DENY_READ = 4
ACCESS_DENY_WRITE = 8

#: The wildcard of an ACL row's topic or user.
WILDCARD = "*"


class Operation(enum.IntEnum):
    """A row's ``operation``: what happened to the record at ``timestamp``."""

    CREATE = 0
    UPDATE = 1
    DELETE = 2


@dataclass(frozen=True, slots=True)
class GatewayUser:
    """An application as the brokers know it: its appId, password and whether it is super."""

    name: str
    password: str
    super_user: bool = False


@dataclass(frozen=True, slots=True)
class AclRow:
    """One row of /security/acls: a grant carries the merged access, a revoke the bits removed."""

    topic: str
    user: str
    access: int
    operation: Operation
    timestamp: int


@dataclass(frozen=True, slots=True)
class UserRow:
    """One row of /security/users; the latest row of a user wins."""

    user: GatewayUser
    operation: Operation
    timestamp: int


@dataclass(frozen=True, slots=True)
class PartitionRow:
    """One row of /partition/topicPartitions: the partitions of a topic hidden from clients."""

    topic: str
    disabled: frozenset[int]
    operation: Operation
    timestamp: int


class UserView(Protocol):
    """The users the brokers have committed (static defaults included)."""

    def user(self, name: str) -> GatewayUser | None:
        """The user called ``name`` (an appId, without the cluster id prefix), or None."""
        ...


class AclView(Protocol):
    """The topic permissions the brokers have committed (static defaults included)."""

    @property
    def version(self) -> int:
        """Changes whenever committed data changes (the commit timestamp); decisions cached
        per connection stay valid while it is unchanged."""
        ...

    def access(self, topic: str, user: str) -> int | None:
        """The access bits of exactly (topic, user), either may be ``*``; None when no row."""
        ...


class PartitionView(Protocol):
    """The disabled partitions the brokers have committed."""

    def disabled(self, topic: str) -> frozenset[int]:
        """Partitions of ``topic`` hidden from clients (empty for most topics)."""
        ...


class ManagementService(Protocol):
    """The management service's HTTP API as the broker calls it (client.py)."""

    async def post(self, path: str, body: Mapping[str, Any], query: Mapping[str, Any] | None = None) -> Any:
        """POST JSON to ``gateway.url`` + ``path``; the envelope's ``data`` (a JSON string
        already decoded). Raises ManagementServiceError on any failure."""
        ...

    async def get(self, path: str, query: Mapping[str, Any] | None = None) -> Any:
        """GET ``gateway.url`` + ``path``; the envelope's ``data``, as post()."""
        ...


class ManagementServiceError(Exception):
    """The management service was unreachable, slow, or answered something unusable; the
    message is one line fit for the broker's log."""
