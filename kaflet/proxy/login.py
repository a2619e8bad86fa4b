"""The gateway's SASL/PLAIN: the username names the cluster, the cluster checks the password.

Clients log in as ``<clusterId>.<appId>`` (the Logi-Kafka convention the brokers use). The
gateway refuses, with SASL_AUTHENTICATION_FAILED and a message the client logs, a username that
is not of that form or whose cluster id the manager does not list. Otherwise it opens (or
reuses) an upstream connection to that cluster with the same credentials
(kaflet/proxy/upstream.py): the brokers decide, and a refusal is passed on in their words. While
no broker of the cluster answers, the login is accepted; the brokers then check the password
when the client connects to them, and the gateway's answers say the cluster is unavailable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container

from kaflet.proxy.upstream import Credentials, LoginRefusedError, UpstreamPool, UpstreamUnavailableError
from kaflet.security.authenticator import Authenticator
from kaflet.security.plain import plain_credentials
from kaflet.security.sasl import SaslAuthenticationError, SaslServer, invalid_credentials

log = logging.getLogger("kaflet.proxy.login")

MECHANISM = "PLAIN"


def cluster_of(username: str, known: Container[int]) -> int:
    """The cluster id of a ``<clusterId>.<appId>`` username the gateway knows; else raises
    SaslAuthenticationError saying what is wrong."""
    cluster, dot, app = username.partition(".")
    if not dot or not app or not cluster.isdigit():
        raise SaslAuthenticationError(
            f"Authentication failed: the gateway needs the username <clusterId>.<appId> (such as 7.my_app), "
            f"got {username[:100]!r}")
    if int(cluster) not in known:
        raise SaslAuthenticationError(
            f"Authentication failed: cluster id {cluster} is not known to the gateway (the management service "
            "lists no service addresses for it)")
    return int(cluster)


class RelaySaslServer(SaslServer):
    """One PLAIN exchange: the cluster from the username, the password checked by the cluster."""

    mechanism = MECHANISM

    def __init__(self, known: Callable[[], Container[int]], pool: UpstreamPool, required: int | None = None) -> None:
        """``required``: the cluster a proxy-mode broker port belongs to (None: any)."""
        super().__init__()
        self._known = known
        self._pool = pool
        self._required = required
        self.cluster_id = -1
        self.credentials: Credentials | None = None

    async def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise invalid_credentials(MECHANISM)
        username, password = plain_credentials(token)
        cluster_id = cluster_of(username, self._known())
        if self._required is not None and cluster_id != self._required:
            raise SaslAuthenticationError(
                f"Authentication failed: this gateway port is a broker of cluster {self._required}; "
                f"{username[:100]!r} logs in to cluster {cluster_id} (bootstrap from the gateway's first port)")
        credentials = Credentials(username, password)
        try:
            await self._pool.login(cluster_id, credentials)
        except LoginRefusedError as exc:
            raise SaslAuthenticationError(f"cluster {cluster_id} refused the login: {exc}") from None
        except UpstreamUnavailableError as exc:
            log.debug("login of %s accepted unchecked: %s", username, exc)
        self.cluster_id = cluster_id
        self.credentials = credentials
        self.authorization_id = username
        self.complete = True
        return b""


class RelayAuthenticator(Authenticator):
    """The gateway listener's SASL: PLAIN only, checked by the target cluster."""

    def __init__(self, known: Callable[[], Container[int]], pool: UpstreamPool,
                 cluster_of_listener: Callable[[str], int | None] = lambda listener: None) -> None:
        """``cluster_of_listener``: the cluster a listener serves alone (proxy mode's broker
        ports), None for the bootstrap listener."""
        self._known = known
        self._pool = pool
        self._cluster_of_listener = cluster_of_listener

    def enabled_mechanisms(self, listener: str) -> list[str]:
        return [MECHANISM]

    def create_server(self, listener: str, mechanism: str) -> SaslServer | None:
        if mechanism != MECHANISM:
            return None
        return RelaySaslServer(self._known, self._pool, self._cluster_of_listener(listener))
