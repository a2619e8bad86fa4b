"""A member of a group and the results its JoinGroup / SyncGroup requests wait for."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from kaflet.protocol.errors import ErrorCode

# Kafka keeps a member that has joined but not yet completed its first rebalance for this long
# (KIP-394), whatever its session timeout, so a slow first rebalance does not drop it.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


@dataclass(slots=True)
class JoinResult:
    """What a JoinGroup request answers; `members` is non-empty only for the leader."""

    member_id: str
    error: ErrorCode = ErrorCode.NONE
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    """What a SyncGroup request answers."""

    error: ErrorCode = ErrorCode.NONE
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(eq=False, slots=True)
class Member:
    """One member: its identity, timeouts, supported protocols and current assignment."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    is_new: bool = False
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None
    heartbeat_timer: asyncio.TimerHandle | None = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        """The member's metadata for `protocol` (empty if it does not support it)."""
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, same order, same metadata: a rejoin that changes nothing."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among `candidates`."""
        for name in self.protocol_names:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def complete_join(self, result: JoinResult) -> bool:
        """Answer a waiting JoinGroup; False if none was waiting."""
        fut, self.join_future = self.join_future, None
        if fut is None:
            return False
        if not fut.done():
            fut.set_result(result)
        return True

    def complete_sync(self, result: SyncResult) -> bool:
        """Answer a waiting SyncGroup; False if none was waiting."""
        fut, self.sync_future = self.sync_future, None
        if fut is None:
            return False
        if not fut.done():
            fut.set_result(result)
        return True

    def cancel_heartbeat(self) -> None:
        if self.heartbeat_timer is not None:
            self.heartbeat_timer.cancel()
            self.heartbeat_timer = None
