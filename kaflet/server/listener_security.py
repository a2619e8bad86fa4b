"""Listener security from the broker config: a TLS context and/or SASL sessions per listener.

Kept out of broker.py so the composition root only asks for one `ListenerSecurity` per endpoint.
Configs are looked up as Kafka does: `listener.name.<listener in lower case>.<key>` first, then
`<key>`. Anything unusable is reported as one start-up line naming the key.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from kaflet.gateway.authenticator import is_gateway_listener
from kaflet.network.connection import ListenerSecurity
from kaflet.security import scram
from kaflet.security.authenticator import (
    Authenticator,
    AuthenticatorConfigError,
    KafkaAuthenticator,
    ListenerConfig,
)
from kaflet.security.principal import ANONYMOUS, KafkaPrincipal
from kaflet.security.session import SaslSession
from kaflet.security.tls import TlsConfigError, server_context
from kaflet.security.x500 import CertificateError, subject_rfc2253
from kaflet.server.config import BrokerConfig, Endpoint

log = logging.getLogger("kaflet.security")

#: Upper bound on the time a connection has for the TLS handshake and SASL authentication.
AUTH_TIMEOUT_MS = 10000

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class SecurityConfigError(ValueError):
    """The security settings of a listener cannot work; one line naming the key."""


def listener_config(config: BrokerConfig) -> Callable[[str, str], str | None]:
    """(listener, key) -> the listener's override, else the broker-wide value, else None."""
    originals = config.originals

    def get(listener: str, key: str) -> str | None:
        value = originals.get(f"listener.name.{listener.lower()}.{key}")
        return value if value is not None else originals.get(key)

    return get


def tls_principal(cert_der: bytes | None) -> KafkaPrincipal:
    """Kafka's DEFAULT ssl.principal.mapping.rules: User:<subject DN>, or ANONYMOUS without a certificate."""
    if not cert_der:
        return ANONYMOUS
    try:
        return KafkaPrincipal.user(subject_rfc2253(cert_der))
    except CertificateError as exc:
        # The handshake verified the certificate, so this is a reader limit: refuse the connection.
        raise ConnectionError(f"cannot read the subject of the client certificate: {exc}") from None


#: Builds the authenticator of the SASL listeners that authenticate through the gateway.
GatewayAuthenticatorFactory = Callable[[ListenerConfig, list[str]], Authenticator]


def build(config: BrokerConfig, endpoints: list[Endpoint], scram_lookup: scram.CredentialLookup,
          gateway: GatewayAuthenticatorFactory | None = None) -> dict[str, ListenerSecurity]:
    """One ListenerSecurity per endpoint; raises SecurityConfigError.

    SASL listeners whose JAAS config names a gateway login module (or that enable DIDI) get the
    authenticator `gateway` builds; the others Kafka's.
    """
    get = listener_config(config)
    sasl_listeners = [ep.listener for ep in endpoints if ep.protocol.startswith("SASL_")]
    authenticators: dict[str, Authenticator] = {}
    try:
        through_gateway = [listener for listener in sasl_listeners if is_gateway_listener(get, listener)]
        if through_gateway:
            if gateway is None:
                raise SecurityConfigError(f"listener(s) {', '.join(through_gateway)} name the gateway's login module "
                                          "but this broker has no gateway")
            gateway_authenticator = gateway(get, through_gateway)
            authenticators.update(dict.fromkeys(through_gateway, gateway_authenticator))
        kafka_listeners = [listener for listener in sasl_listeners if listener not in authenticators]
        if kafka_listeners:
            kafka_authenticator = KafkaAuthenticator(get, kafka_listeners, scram_lookup)
            authenticators.update(dict.fromkeys(kafka_listeners, kafka_authenticator))
    except AuthenticatorConfigError as exc:
        raise SecurityConfigError(str(exc)) from None
    idle_ms = config["connections.max.idle.ms"]
    timeout_s = (min(idle_ms, AUTH_TIMEOUT_MS) if idle_ms > 0 else AUTH_TIMEOUT_MS) / 1000
    out: dict[str, ListenerSecurity] = {}
    for ep in endpoints:
        if ep.protocol not in PROTOCOLS:
            raise SecurityConfigError(f"listener {ep.listener}: unknown security protocol {ep.protocol} in "
                                      f"listener.security.protocol.map (use one of {', '.join(PROTOCOLS)})")
        sec = ListenerSecurity(protocol=ep.protocol, auth_timeout_s=timeout_s)
        if ep.protocol in ("SSL", "SASL_SSL"):
            try:
                sec.ssl_context = server_context(functools.partial(get, ep.listener))
            except TlsConfigError as exc:
                raise SecurityConfigError(f"listener {ep.listener}: {exc}") from None
            sec.tls_principal = tls_principal
        if ep.protocol.startswith("SASL_"):
            authenticator = authenticators[ep.listener]
            delay = _int(get(ep.listener, "connection.failed.authentication.delay.ms"),
                         config["connection.failed.authentication.delay.ms"], "connection.failed.authentication.delay.ms")
            max_receive = _int(get(ep.listener, "sasl.server.max.receive.size"), config["sasl.server.max.receive.size"],
                               "sasl.server.max.receive.size")
            sec.sasl_max_receive = max_receive
            reauth = max_reauth_ms(config, get, ep.listener, authenticator.enabled_mechanisms(ep.listener))
            sec.sasl_session_factory = functools.partial(SaslSession, authenticator, ep.listener, delay, max_receive,
                                                         functools.partial(_lookup, reauth))
            log.info("listener %s (%s): SASL mechanisms %s", ep.listener, ep.protocol,
                     ", ".join(authenticator.enabled_mechanisms(ep.listener)))
        out[ep.listener] = sec
    return out


def max_reauth_ms(config: BrokerConfig, get: ListenerConfig, listener: str, mechanisms: list[str]) -> dict[str, int]:
    """connections.max.reauth.ms per mechanism of a listener: the
    ``listener.name.<l>.<mechanism>.connections.max.reauth.ms`` override, else the listener's or
    the broker's value (KIP-368)."""
    out: dict[str, int] = {}
    for mechanism in mechanisms:
        key = f"listener.name.{listener.lower()}.{mechanism.lower()}.connections.max.reauth.ms"
        raw = config.originals.get(key)
        if raw is None:
            key = "connections.max.reauth.ms"
            raw = get(listener, key)
        out[mechanism] = _int(raw, config["connections.max.reauth.ms"], key)
    return out


def _lookup(values: dict[str, int], mechanism: str) -> int:
    return values.get(mechanism, 0)


def _int(raw: str | None, default: int, key: str) -> int:
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise SecurityConfigError(f"Invalid value {raw!r} for configuration {key}: expected an integer") from None
