"""The SASL state machine of one connection, as Kafka's SaslServerAuthenticator runs it.

    HANDSHAKE_OR_VERSIONS --ApiVersions--> HANDSHAKE --SaslHandshake v1--> AUTHENTICATE --done--> COMPLETE
                          \\--SaslHandshake v0--> AUTHENTICATE_RAW (raw size-prefixed tokens) --done--^

Before COMPLETE only ApiVersions and SaslHandshake (then SaslAuthenticate) are accepted; anything
else closes the connection, as Kafka does. Re-authentication (KIP-368) is not offered: the
session lifetime sent back is 0.
"""

from __future__ import annotations

import enum
import logging

from kaflet.security.authenticator import Authenticator
from kaflet.security.principal import ANONYMOUS, KafkaPrincipal
from kaflet.security.sasl import SaslAuthenticationError, SaslServer

log = logging.getLogger("kaflet.security")


class SaslState(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake_or_versions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    AUTHENTICATE_RAW = "authenticate_raw"
    COMPLETE = "complete"
    FAILED = "failed"


class SaslSession:
    """Per-connection SASL progress; the handlers and the dispatcher drive it."""

    def __init__(self, authenticator: Authenticator, listener: str, failed_delay_ms: int,
                 max_receive_size: int) -> None:
        self.authenticator = authenticator
        self.listener = listener
        self.failed_delay_s = max(failed_delay_ms, 0) / 1000
        self.max_receive_size = max_receive_size
        self.state = SaslState.HANDSHAKE_OR_VERSIONS
        self.server: SaslServer | None = None
        self.mechanism = ""
        self.principal: KafkaPrincipal = ANONYMOUS

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    @property
    def in_handshake(self) -> bool:
        return self.state in (SaslState.HANDSHAKE_OR_VERSIONS, SaslState.HANDSHAKE)

    def enabled_mechanisms(self) -> list[str]:
        return self.authenticator.enabled_mechanisms(self.listener)

    def on_api_versions(self) -> None:
        if self.state is SaslState.HANDSHAKE_OR_VERSIONS:
            self.state = SaslState.HANDSHAKE

    def handshake(self, mechanism: str, version: int) -> bool:
        """Start an exchange for `mechanism`; False (and FAILED) when it is not available."""
        server = self.authenticator.create_server(self.listener, mechanism)
        if server is None:
            self.state = SaslState.FAILED
            return False
        self.server = server
        self.mechanism = mechanism
        # SaslHandshake v0 means the client will send raw tokens without Kafka headers (KIP-43).
        self.state = SaslState.AUTHENTICATE if version >= 1 else SaslState.AUTHENTICATE_RAW
        return True

    async def authenticate(self, token: bytes) -> bytes:
        """Feed one client token; returns the answer. Raises SaslAuthenticationError (state FAILED)."""
        if self.server is None or self.state not in (SaslState.AUTHENTICATE, SaslState.AUTHENTICATE_RAW):
            self.state = SaslState.FAILED
            raise SaslAuthenticationError("Unexpected SASL token outside an authentication exchange")
        try:
            answer = await self.server.evaluate(token)
        except SaslAuthenticationError:
            self.state = SaslState.FAILED
            raise
        if self.server.complete:
            self.principal = self.authenticator.principal(self.server)
            self.state = SaslState.COMPLETE
        return answer

    def close(self) -> None:
        """The connection closed: let the SASL server release what it holds (a session slot)."""
        if self.server is not None:
            self.server.dispose()
            self.server = None
