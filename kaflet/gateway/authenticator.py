"""Gateway authentication: SASL/PLAIN and Logi-Kafka's ``DIDI`` checked against the users view.

A listener authenticates through the gateway when its PLAIN JAAS config names one of the
gateway's login modules (Logi-Kafka's class names are accepted, so its server.properties works
unchanged), or when it enables the ``DIDI`` mechanism. Clients log in as ``<clusterId>.<appId>``
with the application's password; the principal is ``User:<appId>``. Refused, with Kafka's
SASL_AUTHENTICATION_FAILED: a wrong password, an unknown application, another cluster's id,
ANONYMOUS, and a user already holding max.sessions.per.user connections to this broker.

The JAAS module's ``username``/``password`` are the broker's own login (Kafka uses them for the
inter-broker client): that user is a super user and, like Logi-Kafka's brokers, logs in without
the cluster id prefix.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable

from kaflet.gateway.model import ANONYMOUS_USER, GatewayUser, UserView
from kaflet.gateway.sessions import GatewayPrincipal, SessionCounter
from kaflet.security.authenticator import (
    Authenticator,
    AuthenticatorConfigError,
    ListenerConfig,
    listener_jaas_modules,
    listener_mechanisms,
)
from kaflet.security.jaas import LoginModule
from kaflet.security.plain import parse_plain_token
from kaflet.security.principal import USER_TYPE, KafkaPrincipal
from kaflet.security.sasl import SaslAuthenticationError, SaslServer, invalid_credentials

log = logging.getLogger("kaflet.gateway")
denials = logging.getLogger("kaflet.gateway.denials")

DIDI_MECHANISM = "DIDI"
MECHANISMS = ("PLAIN", DIDI_MECHANISM)

#: Login modules that select gateway authentication: Logi-Kafka's two, and kaflet's short name.
GATEWAY_LOGIN_MODULES = (
    "com.didichuxing.datachannel.kafka.security.sasl.plain.PlainLoginModule",
    "com.didichuxing.datachannel.kafka.security.sasl.didi.DidiLoginModule",
    "kaflet.gateway.PlainLoginModule",
)

_BAD_CREDENTIALS = "Authentication failed: Invalid username or password"


def gateway_login_module(get: ListenerConfig, listener: str) -> LoginModule | None:
    """The listener's gateway login module, or None when the listener uses Kafka's SASL."""
    keys = ("plain.sasl.jaas.config", "didi.sasl.jaas.config", "sasl.jaas.config")
    for _key, module in listener_jaas_modules(get, listener, keys):
        if module.class_name in GATEWAY_LOGIN_MODULES:
            return module
    return None


def is_gateway_listener(get: ListenerConfig, listener: str) -> bool:
    """Whether the SASL listener authenticates through the gateway."""
    return (gateway_login_module(get, listener) is not None
            or DIDI_MECHANISM in listener_mechanisms(get, listener))


class GatewaySaslServer(SaslServer):
    """One PLAIN or DIDI exchange checked against the users view; holds a session slot until
    `dispose` (the connection closed)."""

    def __init__(self, mechanism: str, authenticator: GatewayAuthenticator) -> None:
        super().__init__()
        self.mechanism = mechanism
        self._auth = authenticator
        self._holding = ""

    async def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise invalid_credentials(self.mechanism)
        try:
            authzid, login, password = parse_plain_token(token)
        except ValueError:
            raise invalid_credentials(self.mechanism) from None
        if not login:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        # Kafka's PLAIN requires a matching authorization id; Logi-Kafka's DIDI ignores it.
        if self.mechanism == "PLAIN" and authzid and authzid != login:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        user = self._auth.check(login, password)
        self.authorization_id = user.name
        self._holding = user.name
        self.complete = True
        return b""

    def dispose(self) -> None:
        if self._holding:
            self._auth.sessions.release(self._holding)
            self._holding = ""


class GatewayAuthenticator(Authenticator):
    """The gateway listeners' SASL: applications from the users view, sessions counted."""

    def __init__(self, get: ListenerConfig, listeners: list[str], users: Callable[[], UserView], cluster_id: int,
                 sessions: SessionCounter) -> None:
        self._users = users
        self.cluster_id = cluster_id
        self.sessions = sessions
        self._enabled: dict[str, list[str]] = {}
        self.broker_login: tuple[str, str] | None = None
        for listener in listeners:
            enabled = listener_mechanisms(get, listener)
            usable = [m for m in enabled if m in MECHANISMS]
            if not usable:
                raise AuthenticatorConfigError(
                    f"listener {listener} authenticates through the gateway but sasl.enabled.mechanisms is "
                    f"{','.join(enabled)}; the gateway offers {', '.join(MECHANISMS)}")
            unusable = [m for m in enabled if m not in MECHANISMS]
            if unusable:
                log.warning("listener %s authenticates through the gateway, which offers %s; clients asking for "
                            "%s get UNSUPPORTED_SASL_MECHANISM", listener, ", ".join(MECHANISMS), ", ".join(unusable))
            self._enabled[listener] = usable
            module = gateway_login_module(get, listener)
            if module is not None and module.options.get("username") and module.options.get("password"):
                login = (module.options["username"], module.options["password"])
                if self.broker_login is not None and self.broker_login != login:
                    raise AuthenticatorConfigError(
                        f"listener.name.{listener.lower()}.plain.sasl.jaas.config: the gateway listeners must share "
                        "one username/password (the brokers' own login)")
                self.broker_login = login

    @property
    def broker_user(self) -> GatewayUser | None:
        """The brokers' own login from the JAAS config: a super user."""
        if self.broker_login is None:
            return None
        return GatewayUser(self.broker_login[0], self.broker_login[1], True)

    def enabled_mechanisms(self, listener: str) -> list[str]:
        return list(self._enabled.get(listener, ()))

    def create_server(self, listener: str, mechanism: str) -> SaslServer | None:
        if mechanism not in self._enabled.get(listener, ()):
            return None
        return GatewaySaslServer(mechanism, self)

    def principal(self, server: SaslServer) -> KafkaPrincipal:
        return GatewayPrincipal(USER_TYPE, server.authorization_id)

    def check(self, login: str, password: str) -> GatewayUser:
        """The user `login` names when the password matches and a session is free; else raises
        SaslAuthenticationError (and logs the refusal to the denials log)."""
        user = self._lookup(login)
        if user is None or not user.password or not hmac.compare_digest(user.password.encode(), password.encode()):
            denials.info("User = %s login failed: invalid username or password", login)
            raise SaslAuthenticationError(_BAD_CREDENTIALS)
        if not self.sessions.acquire(user.name):
            denials.info("User = %s login failed: %d sessions open on this broker (max.sessions.per.user)",
                         user.name, self.sessions.limit)
            raise SaslAuthenticationError(
                f"Authentication failed: user {user.name} already has {self.sessions.limit} connections to this "
                "broker (max.sessions.per.user)")
        return user

    def _lookup(self, login: str) -> GatewayUser | None:
        broker = self.broker_user
        if broker is not None and login == broker.name:
            return broker
        cluster, dot, app = login.partition(".")
        if not dot or not app:
            denials.info("User = %s login failed: not of the form <clusterId>.<appId>", login)
            raise SaslAuthenticationError(
                f"Authentication failed: the username must be <clusterId>.<appId> (cluster id {self.cluster_id})")
        if cluster != str(self.cluster_id):
            denials.info("User = %s login failed: cluster id %s is not this cluster's (%d)", login, cluster,
                         self.cluster_id)
            raise SaslAuthenticationError(
                f"Authentication failed: cluster id {cluster} is not this cluster's ({self.cluster_id})")
        if app == ANONYMOUS_USER:
            denials.info("User = %s login failed: no client may log in as %s", login, ANONYMOUS_USER)
            raise SaslAuthenticationError(_BAD_CREDENTIALS)
        return self._users().user(app)
