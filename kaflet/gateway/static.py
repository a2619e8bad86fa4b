"""The gateway's static users and topic permissions: built-in users and the defaults from config.

Logi-Kafka seeds its user and ACL caches with strings before the management service answers:
users as ``name:password:isSuper`` and ACLs as ``topic:user:operation:status``, where operation
is ``Read``/``Write`` (or 1/2) and status ``Allow``/``Deny`` (or 1/0). kaflet reads them from
``gateway.default.users`` and ``gateway.default.acls`` (the seed hard-codes empty lists, so the
names are kaflet's). The views here serve them as they are; the synchronized caches start from
them and add the management service's rows on top.
"""

from __future__ import annotations

from collections.abc import Iterable

from kaflet.gateway.model import (
    ACCESS_DENY_READ,
    ACCESS_DENY_WRITE,
    ACCESS_READ,
    ACCESS_WRITE,
    ADMIN_USER,
    ANONYMOUS_USER,
    GatewayUser,
)


class StaticConfigError(ValueError):
    """A default user or ACL string cannot be read; the message names it."""


def parse_user(entry: str) -> GatewayUser:
    """``name:password:isSuper`` (isSuper: true/false) as a GatewayUser."""
    parts = entry.strip().split(":")
    if len(parts) != 3:
        raise StaticConfigError(f"default user {entry.strip()!r} is not name:password:isSuper")
    name, password, is_super = (p.strip() for p in parts)
    if not name or not password:
        raise StaticConfigError(f"default user {entry.strip()!r} needs a name and a password")
    if is_super.lower() not in ("true", "false"):
        raise StaticConfigError(f"default user {entry.strip()!r}: isSuper must be true or false")
    return GatewayUser(name, password, is_super.lower() == "true")


_OPERATIONS = {"read": (ACCESS_READ, ACCESS_DENY_READ), "1": (ACCESS_READ, ACCESS_DENY_READ),
               "write": (ACCESS_WRITE, ACCESS_DENY_WRITE), "2": (ACCESS_WRITE, ACCESS_DENY_WRITE)}
_STATUSES = {"allow": True, "1": True, "deny": False, "0": False}


def parse_acl(entry: str) -> tuple[str, str, int]:
    """``topic:user:Read|Write:Allow|Deny`` as (topic, user, access bits); a Deny sets a deny bit."""
    parts = [p.strip() for p in entry.strip().split(":")]
    if len(parts) != 4:
        raise StaticConfigError(f"default ACL {entry.strip()!r} is not topic:user:Read|Write:Allow|Deny")
    topic, user, operation, status = parts
    if not topic or not user:
        raise StaticConfigError(f"default ACL {entry.strip()!r} needs a topic (or *) and a user (or *)")
    bits = _OPERATIONS.get(operation.lower())
    if bits is None:
        raise StaticConfigError(f"default ACL {entry.strip()!r}: the operation must be Read or Write")
    allow = _STATUSES.get(status.lower())
    if allow is None:
        raise StaticConfigError(f"default ACL {entry.strip()!r}: the status must be Allow or Deny")
    return topic, user, bits[0] if allow else bits[1]


def split_entries(value: str | None) -> list[str]:
    """A comma-separated config value as its non-empty entries."""
    return [e.strip() for e in (value or "").split(",") if e.strip()]


class StaticUsers:
    """A UserView over the built-in users and the configured defaults (later entries win)."""

    def __init__(self, defaults: Iterable[GatewayUser] = ()) -> None:
        # ANONYMOUS is what PLAINTEXT listeners and inter-broker links run as: a super user that
        # no client may log in as (the authenticator refuses the name), so it needs no password.
        # admin is a super user without a password (no login works) until one is configured.
        self._users: dict[str, GatewayUser] = {
            ANONYMOUS_USER: GatewayUser(ANONYMOUS_USER, "", True),
            ADMIN_USER: GatewayUser(ADMIN_USER, "", True),
        }
        for u in defaults:
            self._users[u.name] = u

    @classmethod
    def from_config(cls, value: str | None, first: Iterable[GatewayUser] = ()) -> StaticUsers:
        """The users of a config value, after `first` (the brokers' own login), which they may override."""
        return cls([*first, *(parse_user(e) for e in split_entries(value))])

    def user(self, name: str) -> GatewayUser | None:
        return self._users.get(name)

    def users(self) -> list[GatewayUser]:
        """Every user, for the caches that start from these."""
        return list(self._users.values())


class StaticAcls:
    """An AclView over the configured default ACLs; its version never moves."""

    def __init__(self, entries: Iterable[tuple[str, str, int]] = ()) -> None:
        self._access: dict[tuple[str, str], int] = {}
        for topic, user, bits in entries:
            self._access[(topic, user)] = self._access.get((topic, user), 0) | bits

    @classmethod
    def from_config(cls, value: str | None) -> StaticAcls:
        return cls(parse_acl(e) for e in split_entries(value))

    @property
    def version(self) -> int:
        return 0

    def access(self, topic: str, user: str) -> int | None:
        return self._access.get((topic, user))

    def rows(self) -> list[tuple[str, str, int]]:
        """Every (topic, user, access bits), for the caches that start from these."""
        return [(t, u, a) for (t, u), a in self._access.items()]
