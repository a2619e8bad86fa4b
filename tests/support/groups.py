"""Consumer-group requests over a RawClient, for tests that need exact codes and versions."""

from __future__ import annotations

import struct
from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from tests.support.raw_client import RawClient


def subscription(topics: list[str], pad: int = 0) -> bytes:
    """A consumer protocol subscription (v0) naming `topics`, with `pad` bytes of user data."""
    body = struct.pack(">hi", 0, len(topics))
    for t in topics:
        body += struct.pack(">h", len(t)) + t.encode()
    return body + struct.pack(">i", pad) + b"x" * pad


def join(c: RawClient, group: str, member: str = "", version: int = 3, session: int = 5000,
         protocol_type: str = "consumer", protocols: list[tuple[str, bytes]] | None = None,
         instance: str | None = None, rebalance: int = 3000) -> Any:
    """JoinGroup; the decoded response."""
    R = codec.request_class(ApiKey.JOIN_GROUP)
    protos = [R.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in (protocols or [("range", subscription(["t"]))])]
    return c.request(ApiKey.JOIN_GROUP, version, R(
        group_id=group, session_timeout_ms=session, rebalance_timeout_ms=rebalance, member_id=member,
        group_instance_id=instance, protocol_type=protocol_type, protocols=protos))


def sync(c: RawClient, group: str, gen: int, member: str, assignments: dict[str, bytes] | None = None,
         version: int = 3, protocol_type: str | None = None, protocol_name: str | None = None) -> Any:
    """SyncGroup (the leader passes `assignments`); the decoded response."""
    R = codec.request_class(ApiKey.SYNC_GROUP)
    return c.request(ApiKey.SYNC_GROUP, version, R(
        group_id=group, generation_id=gen, member_id=member, group_instance_id=None, protocol_type=protocol_type,
        protocol_name=protocol_name, assignments=[R.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                                  for m, a in (assignments or {}).items()]))
