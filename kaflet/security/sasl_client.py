"""The client side of SASL authentication: SaslHandshake v1, then SaslAuthenticate v2 rounds.

The exchange is written without I/O, as a generator that yields the requests to send and is
sent their decoded responses, so the blocking connection of the command-line tools and the
broker's asyncio client to other brokers run the same code. PLAIN and SCRAM-SHA-256/512, the
mechanisms kaflet implements on the server side too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.security.sasl import SaslAuthenticationError
from kaflet.security.scram import MECHANISMS, ScramClient

#: Mechanisms a kaflet client can authenticate with.
CLIENT_MECHANISMS = ("PLAIN", *MECHANISMS)

#: (api key, version, request object) to send; the exchange is sent back the decoded response.
SaslRequest = tuple[int, int, Any]
SaslExchange = Generator[SaslRequest, Any, None]


class SaslClientError(Exception):
    """Authentication failed; str(exc) is one line saying why (never the password)."""


class UnsupportedMechanismError(SaslClientError):
    """The broker does not offer the mechanism (SaslHandshake's UNSUPPORTED_SASL_MECHANISM)."""

    def __init__(self, mechanism: str, enabled: list[str]) -> None:
        super().__init__(f"SASL mechanism {mechanism} is not enabled on the broker "
                         f"(enabled: {', '.join(enabled) or 'none'})")
        self.mechanism = mechanism
        self.enabled = enabled


class SaslRejectedError(SaslClientError):
    """The broker answered a SaslAuthenticate with an error (wrong password, unknown user...)."""

    def __init__(self, mechanism: str, error_code: int, message: str | None) -> None:
        try:
            name = ErrorCode(error_code).name
        except ValueError:
            name = f"error {error_code}"
        text = (message or f"SASL {mechanism} authentication failed").rstrip(".")
        super().__init__(f"{text} ({name})")
        self.error_code = error_code


def sasl_exchange(mechanism: str, username: str, password: str) -> SaslExchange:
    """The requests of one authentication; raises SaslClientError when it fails."""
    if mechanism not in CLIENT_MECHANISMS:
        raise SaslClientError(f"SASL mechanism {mechanism} is not supported by kaflet's client "
                              f"(use {', '.join(CLIENT_MECHANISMS)})")
    handshake = yield (ApiKey.SASL_HANDSHAKE, 1, codec.request_class(ApiKey.SASL_HANDSHAKE)(mechanism=mechanism))
    if handshake.error_code:
        raise UnsupportedMechanismError(mechanism, list(handshake.mechanisms or []))
    try:
        if mechanism == "PLAIN":
            # RFC 4616 without an authorization id: NUL user NUL password; the answer is empty.
            yield from _round(mechanism, b"\0" + username.encode() + b"\0" + password.encode())
            return
        scram = ScramClient(MECHANISMS[mechanism], username, password)
        server_first = yield from _round(mechanism, scram.first())
        scram.verify((yield from _round(mechanism, scram.final(server_first))))
    except SaslAuthenticationError as exc:
        # The server's SCRAM messages did not check out (a bad nonce, signature, iteration count).
        raise SaslClientError(str(exc)) from None


def _round(mechanism: str, token: bytes) -> Generator[SaslRequest, Any, bytes]:
    resp = yield (ApiKey.SASL_AUTHENTICATE, 2, codec.request_class(ApiKey.SASL_AUTHENTICATE)(auth_bytes=token))
    if resp.error_code:
        raise SaslRejectedError(mechanism, resp.error_code, resp.error_message)
    return bytes(resp.auth_bytes or b"")


def run_blocking(exchange: SaslExchange, request: Callable[[int, int, Any], Any]) -> None:
    """Drive an exchange with a blocking `request(api_key, version, obj) -> response`."""
    try:
        step = next(exchange)
        while True:
            step = exchange.send(request(*step))
    except StopIteration:
        return


async def run_async(exchange: SaslExchange, request: Callable[[int, int, Any], Awaitable[Any]]) -> None:
    """Drive an exchange with an async `request(api_key, version, obj) -> response`."""
    try:
        step = next(exchange)
        while True:
            step = exchange.send(await request(*step))
    except StopIteration:
        return
