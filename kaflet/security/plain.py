"""SASL/PLAIN (RFC 4616) with users from Kafka's JAAS `user_<name>="<password>"` options."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from kaflet.security.jaas import LoginModule
from kaflet.security.sasl import SaslAuthenticationError, SaslServer, invalid_credentials

MECHANISM = "PLAIN"
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"

#: Checks a user name and password; True when they match.
PasswordCheck = Callable[[str, str], Awaitable[bool]]


def parse_plain_token(token: bytes) -> tuple[str, str, str]:
    """Split `authzid NUL authcid NUL passwd` into its three parts; raises ValueError."""
    text = token.decode("utf-8")  # UnicodeDecodeError is a ValueError
    parts = text.split("\x00")
    if len(parts) != 3:
        raise ValueError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
    return parts[0], parts[1], parts[2]


def jaas_users(module: LoginModule) -> dict[str, str]:
    """The `user_<name>` options of a PlainLoginModule entry: name -> password."""
    return {k[5:]: v for k, v in module.options.items() if k.startswith("user_") and len(k) > 5}


def static_password_check(users: dict[str, str]) -> PasswordCheck:
    """A PasswordCheck over a fixed user table (Kafka's PlainServerCallbackHandler)."""

    async def check(user: str, password: str) -> bool:
        expected = users.get(user)
        # compare_digest keeps the comparison time independent of where the passwords differ
        return expected is not None and hmac.compare_digest(expected.encode(), password.encode())

    return check


def plain_credentials(token: bytes) -> tuple[str, str]:
    """(username, password) of a PLAIN token after Kafka's checks (both given, no other
    authorization id); raises SaslAuthenticationError with Kafka's message."""
    try:
        authzid, user, password = parse_plain_token(token)
    except ValueError:
        raise invalid_credentials(MECHANISM) from None
    if not user:
        raise SaslAuthenticationError("Authentication failed: username not specified")
    if not password:
        raise SaslAuthenticationError("Authentication failed: password not specified")
    if authzid and authzid != user:
        raise SaslAuthenticationError(
            "Authentication failed: Client requested an authorization id that is different from username")
    return user, password


class PlainSaslServer(SaslServer):
    """One PLAIN exchange: a single client token, an empty answer."""

    mechanism = MECHANISM

    def __init__(self, check: PasswordCheck) -> None:
        super().__init__()
        self._check = check

    async def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise invalid_credentials(MECHANISM)
        user, password = plain_credentials(token)
        if not await self._check(user, password):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        self.authorization_id = user
        self.complete = True
        return b""
