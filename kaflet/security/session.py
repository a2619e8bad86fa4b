"""The SASL state machine of one connection, as Kafka's SaslServerAuthenticator runs it.

    HANDSHAKE_OR_VERSIONS --ApiVersions--> HANDSHAKE --SaslHandshake v1--> AUTHENTICATE --done--> COMPLETE
                          \\--SaslHandshake v0--> AUTHENTICATE_RAW (raw size-prefixed tokens) --done--^

Before COMPLETE only ApiVersions and SaslHandshake (then SaslAuthenticate) are accepted; anything
else closes the connection, as Kafka does.

Re-authentication (KIP-368): with ``connections.max.reauth.ms`` above 0 for the mechanism, a
completed authentication gets that session lifetime, sent to the client in SaslAuthenticate v1+.
Before it ends the client sends SaslHandshake again on the same connection (COMPLETE -> HANDSHAKE)
and authenticates anew, with the same mechanism and as the same principal, or the connection is
closed. A connection whose session has expired is closed at its next request that does not start
a re-authentication (the dispatcher asks ``expired``).
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable

from kaflet.security.authenticator import Authenticator
from kaflet.security.principal import ANONYMOUS, KafkaPrincipal
from kaflet.security.sasl import SaslAuthenticationError, SaslServer

log = logging.getLogger("kaflet.security")

#: Kafka lets a connection start a re-authentication at most once a second.
MIN_REAUTH_INTERVAL_S = 1.0


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
                 max_receive_size: int, max_reauth_ms: Callable[[str], int] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.authenticator = authenticator
        self.listener = listener
        self.failed_delay_s = max(failed_delay_ms, 0) / 1000
        self.max_receive_size = max_receive_size
        self.max_reauth_ms = max_reauth_ms
        self.clock = clock
        self.state = SaslState.HANDSHAKE_OR_VERSIONS
        self.server: SaslServer | None = None
        self.mechanism = ""
        self.principal: KafkaPrincipal = ANONYMOUS
        #: The lifetime the last completed authentication was given (0: none, never expires).
        self.session_lifetime_ms = 0
        #: When the session expires (the clock's time), None when it does not.
        self.expires_at: float | None = None
        #: Completed re-authentications of this connection.
        self.reauthentications = 0
        self._reauth_started_at: float | None = None
        #: (mechanism, principal) of the session being re-authenticated.
        self._previous: tuple[str, KafkaPrincipal] | None = None
        self._bad_mechanism: str | None = None

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    @property
    def in_handshake(self) -> bool:
        return self.state in (SaslState.HANDSHAKE_OR_VERSIONS, SaslState.HANDSHAKE)

    def enabled_mechanisms(self) -> list[str]:
        return self.authenticator.enabled_mechanisms(self.listener)

    @property
    def reauthenticating(self) -> bool:
        return self._previous is not None

    def expired(self) -> bool:
        """The session's lifetime has passed: the connection may only re-authenticate."""
        return self.expires_at is not None and self.clock() > self.expires_at

    def begin_reauthentication(self) -> bool:
        """A SaslHandshake on an authenticated connection: start re-authenticating when this
        session has a lifetime and the last start is a second ago or more (Kafka's rule); False
        leaves the handshake to be refused as on any authenticated connection."""
        if self.state is not SaslState.COMPLETE or self.expires_at is None:
            return False
        now = self.clock()
        if self._reauth_started_at is not None and now - self._reauth_started_at < MIN_REAUTH_INTERVAL_S:
            return False
        self._reauth_started_at = now
        self._previous = (self.mechanism, self.principal)
        # The old exchange gives back what it holds (a gateway session slot) for the new one.
        if self.server is not None:
            self.server.dispose()
            self.server = None
        self.state = SaslState.HANDSHAKE
        return True

    def on_api_versions(self) -> None:
        if self.state is SaslState.HANDSHAKE_OR_VERSIONS:
            self.state = SaslState.HANDSHAKE

    def handshake(self, mechanism: str, version: int) -> bool:
        """Start an exchange for `mechanism`; False (and FAILED) when it is not available."""
        server = self.authenticator.create_server(self.listener, mechanism)
        if server is None:
            self.state = SaslState.FAILED
            return False
        if self._previous is not None and mechanism != self._previous[0]:
            # As Kafka: the handshake is answered, the exchange that follows fails.
            self._bad_mechanism = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                   f"re-authentication of mechanism '{self._previous[0]}'")
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
        if self._bad_mechanism is not None:
            self.state = SaslState.FAILED
            raise SaslAuthenticationError(self._bad_mechanism)
        try:
            answer = await self.server.evaluate(token)
        except SaslAuthenticationError:
            self.state = SaslState.FAILED
            raise
        if self.server.complete:
            principal = self.authenticator.principal(self.server)
            if self._previous is not None:
                before = self._previous[1]
                if principal != before:
                    self.state = SaslState.FAILED
                    raise SaslAuthenticationError(
                        f"Cannot change principals during re-authentication from {before}: {principal}")
                self._previous = None
                self.reauthentications += 1
            self.principal = principal
            self.state = SaslState.COMPLETE
            self._start_lifetime()
        return answer

    def _start_lifetime(self) -> None:
        limit = self.max_reauth_ms(self.mechanism) if self.max_reauth_ms is not None else 0
        if limit > 0:
            self.session_lifetime_ms = limit
            self.expires_at = self.clock() + limit / 1000
        else:
            self.session_lifetime_ms = 0
            self.expires_at = None

    def close(self) -> None:
        """The connection closed: let the SASL server release what it holds (a session slot)."""
        if self.server is not None:
            self.server.dispose()
            self.server = None
