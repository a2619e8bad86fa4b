"""The I/O-free client SASL exchange, answered by kaflet's own server-side mechanisms."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.security import scram
from kaflet.security.plain import PlainSaslServer, static_password_check
from kaflet.security.sasl import SaslAuthenticationError, SaslServer
from kaflet.security.sasl_client import (
    SaslClientError,
    SaslRejectedError,
    UnsupportedMechanismError,
    run_async,
    run_blocking,
    sasl_exchange,
)


class _Broker:
    """Answers SaslHandshake/SaslAuthenticate request objects the way kaflet's handlers do."""

    def __init__(self, server: SaslServer, enabled: list[str], tamper: bool = False) -> None:
        self.server = server
        self.enabled = enabled
        self.tamper = tamper

    def request(self, api_key: int, version: int, req: Any) -> Any:
        return asyncio.run(self.answer(api_key, version, req))

    async def answer(self, api_key: int, version: int, req: Any) -> Any:
        if api_key == ApiKey.SASL_HANDSHAKE:
            ok = req.mechanism in self.enabled
            return codec.build_response(api_key, error_code=0 if ok else ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                        mechanisms=self.enabled)
        try:
            answer = await self.server.evaluate(bytes(req.auth_bytes))
        except SaslAuthenticationError as exc:
            return codec.build_response(api_key, error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                                        error_message=str(exc), auth_bytes=b"", session_lifetime_ms=0)
        if self.tamper and answer.startswith(b"v="):
            answer = b"v=" + bytes(reversed(answer[2:]))
        return codec.build_response(api_key, error_code=0, error_message=None, auth_bytes=answer,
                                    session_lifetime_ms=0)


def _scram_server(mech: scram.ScramMechanism, user: str, password: str) -> scram.ScramSaslServer:
    cred = scram.credential_from_password(mech, password, 4096)

    async def lookup(name: str, m: scram.ScramMechanism) -> scram.ScramCredential | None:
        return cred if name == user else None

    return scram.ScramSaslServer(mech, lookup)


@pytest.mark.parametrize("mech", list(scram.MECHANISMS.values()), ids=lambda m: m.name)
def test_scram_exchange(mech: scram.ScramMechanism) -> None:
    server = _scram_server(mech, "ib", "secret")
    run_blocking(sasl_exchange(mech.name, "ib", "secret"), _Broker(server, [mech.name]).request)
    assert server.complete and server.authorization_id == "ib"


def test_plain_exchange_async_and_rejection() -> None:
    server = PlainSaslServer(static_password_check({"broker": "pw"}))
    broker = _Broker(server, ["PLAIN"])

    asyncio.run(run_async(sasl_exchange("PLAIN", "broker", "pw"), broker.answer))
    assert server.authorization_id == "broker"
    rejected = _Broker(PlainSaslServer(static_password_check({"broker": "pw"})), ["PLAIN"])
    with pytest.raises(SaslRejectedError, match=r"Invalid username or password \(SASL_AUTHENTICATION_FAILED\)"):
        run_blocking(sasl_exchange("PLAIN", "broker", "nope"), rejected.request)


def test_server_that_cannot_prove_the_credential() -> None:
    broker = _Broker(_scram_server(scram.SCRAM_SHA_256, "ib", "secret"), ["SCRAM-SHA-256"], tamper=True)
    with pytest.raises(SaslClientError, match="signature is invalid"):
        run_blocking(sasl_exchange("SCRAM-SHA-256", "ib", "secret"), broker.request)


def test_mechanism_not_offered_and_not_implemented() -> None:
    broker = _Broker(_scram_server(scram.SCRAM_SHA_256, "ib", "x"), ["SCRAM-SHA-256"])
    with pytest.raises(UnsupportedMechanismError) as info:
        run_blocking(sasl_exchange("PLAIN", "ib", "x"), broker.request)
    assert info.value.enabled == ["SCRAM-SHA-256"]
    assert str(info.value) == "SASL mechanism PLAIN is not enabled on the broker (enabled: SCRAM-SHA-256)"
    with pytest.raises(SaslClientError, match="GSSAPI is not supported"):
        run_blocking(sasl_exchange("GSSAPI", "ib", "x"), broker.request)
