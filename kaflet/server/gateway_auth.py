"""The broker's gateway authentication and authorization, composed from its config.

Gateway listeners (a gateway login module in their JAAS config) authenticate against the users
view; the gateway authorizer (authorizer.class.name = Logi-Kafka's DidiAuthorizer) decides from
the users and ACL views. Both consult the views through this object, so the synchronized caches
can take the static views' place at run time (``users``/``acls`` are reassigned).
"""

from __future__ import annotations

import logging

from kaflet.gateway.authenticator import GatewayAuthenticator
from kaflet.gateway.authorizer import GatewayAuthorizer
from kaflet.gateway.model import AclView, UserView
from kaflet.gateway.sessions import SessionCounter
from kaflet.gateway.static import StaticAcls, StaticConfigError, StaticUsers
from kaflet.security.authenticator import ListenerConfig
from kaflet.security.authorizer import Authorizer
from kaflet.server.config import BrokerConfig, ConfigError

log = logging.getLogger("kaflet.gateway")
DENIALS_LOGGER = "kaflet.gateway.denials"


class GatewayAuth:
    """The gateway's authenticator (if any listener uses it), session counts and views."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.sessions = SessionCounter(config["max.sessions.per.user"])
        self.authenticator: GatewayAuthenticator | None = None
        self.authorizer: GatewayAuthorizer | None = None
        self.users: UserView = StaticUsers()
        self.acls: AclView = StaticAcls()
        self._file_handler: logging.Handler | None = None

    def authenticator_for(self, get: ListenerConfig, listeners: list[str]) -> GatewayAuthenticator:
        """The authenticator of the gateway listeners (listener_security.build calls this)."""
        self.authenticator = GatewayAuthenticator(get, listeners, lambda: self.users, self.config["cluster.id"],
                                                  self.sessions)
        return self.authenticator

    def start(self, authorizer: Authorizer | None) -> None:
        """Build the static views and hand them to the authorizer; raises ConfigError."""
        cfg = self.config
        broker_user = self.authenticator.broker_user if self.authenticator is not None else None
        try:
            self.users = StaticUsers.from_config(cfg["gateway.default.users"], [broker_user] if broker_user else [])
            self.acls = StaticAcls.from_config(cfg["gateway.default.acls"])
        except StaticConfigError as exc:
            raise ConfigError(str(exc)) from None
        if isinstance(authorizer, GatewayAuthorizer):
            self.authorizer = authorizer
            authorizer.attach(lambda: self.users, lambda: self.acls)
        if self.authenticator is None and self.authorizer is None:
            unused = [k for k in ("gateway.default.users", "gateway.default.acls", "gateway.denials.log.file")
                      if cfg[k] is not None]
            if unused:
                log.warning("%s set, but no listener authenticates through the gateway and authorizer.class.name "
                            "is not the gateway's: they have no effect", ", ".join(unused))
            return
        path = cfg["gateway.denials.log.file"]
        if path:
            try:
                handler = logging.FileHandler(path)
            except OSError as exc:
                raise ConfigError(f"gateway.denials.log.file {path}: {exc.strerror}") from None
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            denials = logging.getLogger(DENIALS_LOGGER)
            denials.addHandler(handler)
            denials.setLevel(logging.INFO)
            denials.propagate = False
            self._file_handler = handler
        log.info("gateway: cluster.id=%d, max.sessions.per.user=%d, authentication %s, authorization %s",
                 cfg["cluster.id"], cfg["max.sessions.per.user"], "on" if self.authenticator else "off",
                 "on" if self.authorizer else "off")

    def stop(self) -> None:
        if self._file_handler is not None:
            denials = logging.getLogger(DENIALS_LOGGER)
            denials.removeHandler(self._file_handler)
            denials.propagate = True
            self._file_handler.close()
            self._file_handler = None
