"""The authenticator interface and Kafka's behaviour as its first implementation.

An `Authenticator` answers two questions for a SASL listener: which mechanisms a client may
choose, and a fresh `SaslServer` for the chosen one. The per-connection protocol around it
(SaslHandshake, SaslAuthenticate, the legacy raw exchange, failures) lives in `session.py` and
is the same for every implementation, so the Logi-Kafka gateway only has to provide its own
`Authenticator` (users from its synchronized cache, `<clusterId>.<user>` names, session limits).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator

from kaflet.security import plain, scram
from kaflet.security.jaas import JaasError, LoginModule, single_module
from kaflet.security.principal import KafkaPrincipal
from kaflet.security.sasl import SaslServer

log = logging.getLogger("kaflet.security")

#: Mechanisms kaflet implements; the others Kafka knows are refused honestly in the handshake.
IMPLEMENTED = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
KNOWN_UNIMPLEMENTED = ("GSSAPI", "OAUTHBEARER")

#: (listener, key) -> value with `listener.name.<listener>.` overrides applied; None when unset.
ListenerConfig = Callable[[str, str], str | None]


class AuthenticatorConfigError(ValueError):
    """SASL settings that cannot work; the message names the key."""


def listener_mechanisms(get: ListenerConfig, listener: str) -> list[str]:
    """The listener's sasl.enabled.mechanisms, upper-cased (Kafka's default: GSSAPI)."""
    return [m.strip().upper() for m in (get(listener, "sasl.enabled.mechanisms") or "GSSAPI").split(",") if m.strip()]


def listener_jaas_modules(get: ListenerConfig, listener: str,
                          keys: tuple[str, ...]) -> Iterator[tuple[str, LoginModule]]:
    """(key, login module) of each of `keys` the listener sets, in order (Kafka looks up
    ``listener.name.<l>.<mechanism>.sasl.jaas.config`` before the unprefixed forms)."""
    for key in keys:
        text = get(listener, key)
        if not text:
            continue
        try:
            yield key, single_module(text)
        except JaasError as exc:
            raise AuthenticatorConfigError(f"listener.name.{listener.lower()}.{key} (or {key}): {exc}") from None


class Authenticator(ABC):
    """Creates the SASL server of each exchange; one instance serves every SASL listener."""

    @abstractmethod
    def enabled_mechanisms(self, listener: str) -> list[str]:
        """What the listener offers in SaslHandshake responses."""

    @abstractmethod
    def create_server(self, listener: str, mechanism: str) -> SaslServer | None:
        """A new SaslServer for `mechanism`, or None when it is not available on the listener."""

    def principal(self, server: SaslServer) -> KafkaPrincipal:
        """The principal of a completed exchange (Kafka's DefaultKafkaPrincipalBuilder: User:<id>)."""
        return KafkaPrincipal.user(server.authorization_id)


class KafkaAuthenticator(Authenticator):
    """Kafka's SASL: PLAIN users from JAAS config, SCRAM credentials from /config/users."""

    def __init__(self, get: ListenerConfig, listeners: list[str], scram_lookup: scram.CredentialLookup) -> None:
        self._scram_lookup = scram_lookup
        self._enabled: dict[str, list[str]] = {}
        self._plain: dict[str, plain.PasswordCheck] = {}
        for listener in listeners:
            enabled = listener_mechanisms(get, listener)
            usable = [m for m in enabled if m in IMPLEMENTED]
            unusable = [m for m in enabled if m not in IMPLEMENTED]
            if not usable:
                raise AuthenticatorConfigError(
                    f"sasl.enabled.mechanisms for listener {listener} is {','.join(enabled) or 'empty'}; kaflet "
                    f"implements {', '.join(IMPLEMENTED)} (set e.g. sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256)")
            if unusable:
                log.warning("listener %s: SASL mechanism(s) %s are not implemented in kaflet; clients asking for "
                            "them get UNSUPPORTED_SASL_MECHANISM", listener, ", ".join(unusable))
            self._enabled[listener] = usable
            if "PLAIN" in usable:
                self._plain[listener] = plain.static_password_check(self._plain_users(get, listener))

    @staticmethod
    def _plain_users(get: ListenerConfig, listener: str) -> dict[str, str]:
        # Kafka's lookup: listener.name.<l>.plain.sasl.jaas.config, then the unprefixed forms.
        for key, module in listener_jaas_modules(get, listener, ("plain.sasl.jaas.config", "sasl.jaas.config")):
            shown = f"listener.name.{listener.lower()}.{key}"
            if module.class_name != plain.PLAIN_LOGIN_MODULE:
                if key == "sasl.jaas.config":
                    continue  # the unprefixed value may configure another mechanism
                raise AuthenticatorConfigError(f"{shown}: expected {plain.PLAIN_LOGIN_MODULE}, "
                                               f"found {module.class_name}")
            users = plain.jaas_users(module)
            if not users:
                log.warning("listener %s: the PLAIN JAAS config defines no user_<name> entries; "
                            "no PLAIN login can succeed", listener)
            return users
        raise AuthenticatorConfigError(
            f"PLAIN is enabled on listener {listener} but listener.name.{listener.lower()}.plain.sasl.jaas.config "
            f"is not set (e.g. {plain.PLAIN_LOGIN_MODULE} required user_alice=\"alice-secret\";)")

    def enabled_mechanisms(self, listener: str) -> list[str]:
        return list(self._enabled.get(listener, ()))

    def create_server(self, listener: str, mechanism: str) -> SaslServer | None:
        if mechanism not in self._enabled.get(listener, ()):
            return None
        if mechanism == "PLAIN":
            return plain.PlainSaslServer(self._plain[listener])
        mech = scram.MECHANISMS.get(mechanism)
        if mech is not None:
            return scram.ScramSaslServer(mech, self._scram_lookup)
        return None
