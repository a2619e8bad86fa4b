"""The SASL server side of one exchange, mechanism-independent.

A `SaslServer` is created per connection for the mechanism the client chose in SaslHandshake
and fed the client's tokens one by one. It either answers with a challenge, completes with an
authorization id, or raises `SaslAuthenticationError` whose message is safe to send to the client
(it never contains a password, and does not say whether a user exists).
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class SaslAuthenticationError(Exception):
    """Authentication failed; str(exc) is the message the client receives (and the log shows)."""


def invalid_credentials(mechanism: str) -> SaslAuthenticationError:
    """Kafka's message for a failure whose details must stay on the server."""
    return SaslAuthenticationError(
        f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
    )


class SaslServer(ABC):
    """One SASL exchange on the server side."""

    mechanism: str = ""

    def __init__(self) -> None:
        self.complete = False
        self.authorization_id = ""

    @abstractmethod
    async def evaluate(self, token: bytes) -> bytes:
        """Consume one client token; return the server's answer (may be empty).

        Raises SaslAuthenticationError on bad credentials or a malformed token. Async because a
        mechanism may look credentials up (the metadata tree, a management service).
        """

    def dispose(self) -> None:  # noqa: B027 - optional hook
        """The connection closed: release what the exchange holds (Java's SaslServer.dispose)."""
