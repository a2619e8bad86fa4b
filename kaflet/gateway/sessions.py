"""What the gateway keeps per connection and per user: live session counts, cached decisions.

A connection authenticated by the gateway carries a `GatewayPrincipal`, which is Kafka's
``User:<appId>`` plus the connection's `Decisions`: the authorizer's answers for this connection,
valid while the ACL view's version is unchanged (Logi-Kafka keeps them on its per-connection
session the same way).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kaflet.security.acl import AclOperation
from kaflet.security.principal import KafkaPrincipal


class SessionCounter:
    """Live authenticated connections per user on this broker, bounded by max.sessions.per.user."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._live: dict[str, int] = {}
        #: Logins refused because the user was at the limit (for the broker's figures and tests).
        self.refused = 0

    def acquire(self, user: str) -> bool:
        """Count one more session of `user`; False (nothing counted) when it is at the limit."""
        n = self._live.get(user, 0)
        if n >= self.limit:
            self.refused += 1
            return False
        self._live[user] = n + 1
        return True

    def release(self, user: str) -> None:
        """One session of `user` ended."""
        n = self._live.get(user, 0) - 1
        if n > 0:
            self._live[user] = n
        else:
            self._live.pop(user, None)

    def live(self, user: str) -> int:
        return self._live.get(user, 0)


class Decisions:
    """One connection's cached topic Read/Write decisions, dropped when the ACL version moves."""

    __slots__ = ("version", "answers")

    #: More distinct (operation, resource) pairs than one client plausibly uses; past it, start over.
    MAX = 4096

    def __init__(self) -> None:
        self.version: int | None = None
        self.answers: dict[tuple[AclOperation, str], bool] = {}

    def current(self, version: int) -> dict[tuple[AclOperation, str], bool]:
        """The answers valid at `version` (emptied when it differs from the cached one's)."""
        if version != self.version or len(self.answers) >= self.MAX:
            self.version = version
            self.answers = {}
        return self.answers


@dataclass(frozen=True, slots=True)
class GatewayPrincipal(KafkaPrincipal):
    """``User:<appId>`` of a gateway login, with its connection's decision cache."""

    decisions: Decisions = field(default_factory=Decisions, compare=False, repr=False)
