"""The gateway's connections to the clusters' brokers, with kaflet's inter-broker client.

A client's requests that the gateway answers from a cluster (Metadata, FindCoordinator,
DescribeCluster) are sent to that cluster as the client itself: one upstream connection per
(cluster, username, password), logged in with the client's own SASL/PLAIN credentials. So the
answer is exactly what the brokers would give that application (its ACLs decide which topics it
sees, its quotas count), and the password is checked by the brokers, never by the gateway. The
connection is opened when a client logs in (a wrong password is refused with the brokers' own
message) and shared by every client connection with the same credentials until it has been idle
for ``upstream.idle.ms``.

Answers are kept for ``discovery.metadata.cache.ms`` under the exact request bytes, so a storm
of bootstrapping clients costs the cluster one request per distinct request and interval.

Proxy mode (kaflet/proxy/forwarding.py) opens its own connections, one per client connection
and broker, with `UpstreamPool.open`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kaflet.network.client import PLAINTEXT, BrokerClient, ClientSecurity
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.broker_connection import BrokerAuthenticationError, BrokerConnectionError
from kaflet.proxy.metrics import GatewayMetrics
from kaflet.util.tasks import cancel_and_wait

log = logging.getLogger("kaflet.proxy.upstream")

Address = tuple[str, int]
CLIENT_ID = "kaflet-gateway"
#: Cached answers kept at most; past it the cache starts over (a bound, not an eviction policy).
MAX_CACHED = 10_000
_RANGE = struct.Struct(">hhh")


class UpstreamUnavailableError(Exception):
    """No broker of the cluster could be reached; one line saying which and why."""


class LoginRefusedError(Exception):
    """The cluster refused the client's credentials; the message is the brokers' own."""


@dataclass(frozen=True, slots=True)
class Credentials:
    """A client's SASL/PLAIN login, relayed to the cluster."""

    username: str
    password: str = field(repr=False)


class _Session:
    """One upstream connection for (cluster, credentials), opened on demand."""

    __slots__ = ("client", "lock", "last_used", "checked_at")

    def __init__(self) -> None:
        self.client: BrokerClient | None = None
        self.lock = asyncio.Lock()
        self.last_used = time.monotonic()
        #: When the cluster last accepted these credentials (a SASL exchange).
        self.checked_at = float("-inf")


class UpstreamPool:
    """Upstream connections by (cluster id, credentials) and the brief cache of their answers.

    ``addresses`` gives a cluster's service addresses as the manager last said (None: unknown).
    """

    def __init__(self, addresses: Callable[[int], tuple[Address, ...] | None], *, connect_timeout_s: float,
                 request_timeout_s: float, idle_s: float, cache_s: float, login_recheck_s: float = 60.0,
                 tls: ssl.SSLContext | None = None) -> None:
        """``tls``: the context of the brokers' SASL_SSL listener (None: SASL_PLAINTEXT);
        ``login_recheck_s``: how long a cluster's acceptance of a password stands for new logins."""
        self._addresses = addresses
        self.tls = tls
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self.idle_s = idle_s
        self.cache_s = cache_s
        self.login_recheck_s = login_recheck_s
        self._sessions: dict[tuple[int, Credentials], _Session] = {}
        self._cache: dict[tuple[int, Credentials, int, int, bytes], tuple[float, bytes]] = {}
        #: forget_cluster calls per cluster id, so an answer on its way through a move is not cached.
        self._moves: dict[int, int] = {}
        self._next = 0  # rotates the first address tried, so the clusters' brokers share the load
        self._reaper: asyncio.Task[None] | None = None
        #: The counters behind /metrics (None: metrics.listener is off).
        self.metrics: GatewayMetrics | None = None

    def start(self) -> None:
        """Close idle upstream connections from now on."""
        self._reaper = asyncio.create_task(self._reap(), name="upstream-idle")

    async def login(self, cluster_id: int, credentials: Credentials) -> None:
        """Check a client's login with the cluster: LoginRefusedError when the cluster refuses
        the credentials, UpstreamUnavailableError when no broker answers.

        An open connection with the same credentials answers for them for ``login_recheck_s``
        after the cluster accepted them; later logins are checked again on a connection of
        their own. Otherwise a connection kept busy by other clients would keep accepting a
        password the cluster no longer does (changed or deleted in the management service)."""
        session = self._sessions.get((cluster_id, credentials))
        if session is None or session.client is None or session.client.closed:
            await self._client(cluster_id, credentials)
            return
        if time.monotonic() - session.checked_at < self.login_recheck_s:
            session.last_used = time.monotonic()
            return
        # Connections already logged in stay so (as Kafka keeps an authenticated connection
        # until it closes); only the new login is checked.
        check = await self.open(cluster_id, credentials)
        check.close()
        session.checked_at = time.monotonic()

    async def request(self, cluster_id: int, credentials: Credentials, api_key: int, version: int,
                      body: bytes, *, cache: bool = False) -> bytes:
        """The cluster's response body to a request body, sent as ``credentials``; with
        ``cache``, a cached one when the same request was answered within ``cache_s``. A connection that broke is
        reopened once (to the next address) before UpstreamUnavailableError."""
        key = (cluster_id, credentials, api_key, version, body)
        now = time.monotonic()
        moves = self._moves.get(cluster_id, 0)
        hit = self._cache.get(key) if cache else None
        if hit is not None and hit[0] > now:
            return hit[1]
        for attempt in (1, 2):
            client = await self._client(cluster_id, credentials)
            try:
                sent_at = time.monotonic()
                answer = bytes(await client.send_raw(api_key, version, body))
                if self.metrics is not None:
                    self.metrics.on_upstream(cluster_id, api_key, (time.monotonic() - sent_at) * 1000)
                break
            except BrokerConnectionError as exc:
                self._drop(cluster_id, credentials, client)
                if attempt == 2:
                    raise UpstreamUnavailableError(f"cluster {cluster_id}: {exc}") from None
        # An answer from before a move (forget_cluster while it was on its way) is not kept.
        if cache and self.cache_s > 0 and self._moves.get(cluster_id, 0) == moves:
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            self._cache[key] = (time.monotonic() + self.cache_s, answer)
        return answer

    async def _client(self, cluster_id: int, credentials: Credentials) -> BrokerClient:
        session = self._sessions.get((cluster_id, credentials))
        if session is None:
            session = self._sessions.setdefault((cluster_id, credentials), _Session())
        session.last_used = time.monotonic()
        if session.client is not None and not session.client.closed:
            return session.client
        async with session.lock:
            if session.client is None or session.client.closed:
                try:
                    session.client = await self._connect(cluster_id, credentials)
                    session.checked_at = time.monotonic()
                except Exception:
                    if self._sessions.get((cluster_id, credentials)) is session and session.client is None:
                        del self._sessions[(cluster_id, credentials)]
                    raise
            return session.client

    async def _connect(self, cluster_id: int, credentials: Credentials) -> BrokerClient:
        return await self.open(cluster_id, credentials)

    async def open(self, cluster_id: int, credentials: Credentials, *, client_id: str = CLIENT_ID,
                   at: Address | None = None) -> BrokerClient:
        """A new connection to one of the cluster's service addresses (or to ``at``, one of its
        brokers), logged in with ``credentials``, that the caller owns: LoginRefusedError when
        the cluster refuses them, UpstreamUnavailableError when no broker answers."""
        addresses = (at,) if at is not None else self._addresses(cluster_id)
        if not addresses:
            raise UpstreamUnavailableError(f"cluster {cluster_id} has no service addresses")
        security = ClientSecurity("SASL_SSL" if self.tls else "SASL_PLAINTEXT", ssl_context=self.tls,
                                  sasl_mechanism="PLAIN", sasl_username=credentials.username,
                                  sasl_password=credentials.password)
        self._next += 1
        errors = []
        for i in range(len(addresses)):
            host, port = addresses[(self._next + i) % len(addresses)]
            try:
                return await BrokerClient.connect(host, port, security, client_id=client_id,
                                                  connect_timeout_s=self.connect_timeout_s,
                                                  request_timeout_s=self.request_timeout_s)
            except BrokerAuthenticationError as exc:
                raise LoginRefusedError(_refusal(str(exc))) from None
            except BrokerConnectionError as exc:
                errors.append(str(exc))
        raise UpstreamUnavailableError(f"cluster {cluster_id}: no broker answered ({'; '.join(errors)})")

    def _drop(self, cluster_id: int, credentials: Credentials, client: BrokerClient) -> None:
        client.close()
        session = self._sessions.get((cluster_id, credentials))
        if session is not None and session.client is client:
            session.client = None

    def forget_cluster(self, cluster_id: int) -> None:
        """The cluster's addresses changed: close its connections and drop its cached answers,
        so the next request goes to the new place."""
        for key in [k for k in self._sessions if k[0] == cluster_id]:
            session = self._sessions.pop(key)
            if session.client is not None:
                session.client.close()
        for ckey in [k for k in self._cache if k[0] == cluster_id]:
            del self._cache[ckey]
        self._moves[cluster_id] = self._moves.get(cluster_id, 0) + 1

    async def probe_api_versions(self, cluster_id: int) -> dict[int, tuple[int, int]] | None:
        """The API version ranges one of the cluster's brokers serves (ApiVersions v0, which a
        SASL listener answers before authentication); None when none answers."""
        security = ClientSecurity("SSL", ssl_context=self.tls) if self.tls else PLAINTEXT
        for host, port in self._addresses(cluster_id) or ():
            try:
                async with await BrokerClient.connect(host, port, security, client_id=CLIENT_ID,
                                                       connect_timeout_s=self.connect_timeout_s,
                                                       request_timeout_s=self.request_timeout_s) as client:
                    body = await client.send_raw(ApiKey.API_VERSIONS, 0, b"")
                    return _api_ranges(bytes(body))
            except (BrokerConnectionError, struct.error) as exc:
                log.debug("ApiVersions of cluster %d at %s:%d: %s", cluster_id, host, port, exc)
        return None

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(max(self.idle_s / 4, 0.05))
            cutoff = time.monotonic() - self.idle_s
            for key, session in list(self._sessions.items()):
                if session.last_used < cutoff and not session.lock.locked():
                    del self._sessions[key]
                    if session.client is not None:
                        session.client.close()
            now = time.monotonic()
            for ckey in [k for k, (expires, _) in self._cache.items() if expires <= now]:
                del self._cache[ckey]

    async def aclose(self) -> None:
        """Stop the reaper and close every upstream connection."""
        await cancel_and_wait(self._reaper)
        for session in self._sessions.values():
            if session.client is not None:
                await session.client.aclose()
        self._sessions.clear()
        self._cache.clear()

    @property
    def connections(self) -> int:
        """Upstream connections open now."""
        return sum(1 for s in self._sessions.values() if s.client is not None and not s.client.closed)


def _api_ranges(body: bytes) -> dict[int, tuple[int, int]] | None:
    """(api key -> (min, max)) of an ApiVersions v0 response body; None when it carries an error."""
    error, count = struct.unpack_from(">hi", body, 0)
    if error:
        return None
    return {key: (lo, hi) for key, lo, hi in (_RANGE.unpack_from(body, 6 + 6 * i) for i in range(count))}


def _refusal(text: str) -> str:
    # BrokerClient says "SASL authentication with host:port failed: <the broker's message>".
    _, sep, rest = text.partition(" failed: ")
    return rest if sep else text
