"""What a handler knows about the request it serves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kaflet.protocol.header import RequestHeader

if TYPE_CHECKING:
    from kaflet.network.connection import Connection
    from kaflet.server.broker import Broker


@dataclass(slots=True)
class RequestContext:
    """The broker, the connection and the parsed header of one request."""

    broker: Broker
    conn: Connection
    header: RequestHeader

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def listener(self) -> str:
        return self.conn.listener
