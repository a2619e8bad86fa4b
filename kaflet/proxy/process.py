"""The gateway process: discovery settings from the manager, upstream connections, the listeners
(in proxy mode the bootstrap port and the brokers' ports, kaflet/proxy/ports.py).

Start-up pulls the discovery settings once. When the manager does not answer, the gateway starts
from its config cache file (``gateway.config.cache``) if it has one, and otherwise refuses to
start with one line saying why. It holds no other state: many gateways behind one DNS name are
interchangeable.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from pathlib import Path

from kaflet.gateway.client import HttpManagementService
from kaflet.gateway.model import ManagementServiceError
from kaflet.metrics.exporter import MetricsEndpoint
from kaflet.network.connection import ListenerSecurity
from kaflet.network.listener import Listener
from kaflet.proxy.config import GatewayConfig
from kaflet.proxy.degradation import Degradation
from kaflet.proxy.discovery import (
    INSTANCE_HEADER,
    INTERVAL_HEADER,
    DiscoveryParseError,
    DiscoveryState,
    DiscoverySync,
    read_cache,
)
from kaflet.proxy.forwarding import ProxyRouter
from kaflet.proxy.login import RelayAuthenticator, RelaySaslServer
from kaflet.proxy.metrics import GatewayCollector, GatewayMetrics, GatewayState, cluster_label
from kaflet.proxy.ports import BrokerPorts
from kaflet.proxy.producers import ProducerPlacements
from kaflet.proxy.router import ApiRanges, DiscoveryRouter
from kaflet.proxy.upstream import Address, UpstreamPool
from kaflet.security.session import SaslSession
from kaflet.util.tasks import cancel_and_wait

log = logging.getLogger("kaflet.proxy")

LISTENER = "GATEWAY"
#: Each client connection's receive buffer: the discovery requests are small (a larger one gets
#: a buffer of its own), and the gateway holds many idle connections: with the brokers' 64 KiB a
#: connection cost the gateway 70 KiB of RSS, with 4 KiB 11 KiB (benchmarks/gateway_discovery.py).
STAGING_BYTES = 4096


class GatewayStartError(Exception):
    """The gateway cannot start; the message is one line."""


def instance_id(config: GatewayConfig) -> str:
    """How the manager's console tells this gateway from others on the same address: the host
    name and listen port (stable over restarts), or the PID when the port is chosen at start."""
    return f"{socket.gethostname()}:{config.listen_port}" if config.listen_port else \
        f"{socket.gethostname()}/pid{os.getpid()}"


class GatewayProcess:
    """One `kaflet gateway`: `start`, then `stop`."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.service = HttpManagementService(config.manager_url, config.manager_timeout_ms / 1000,
                                             {INSTANCE_HEADER: instance_id(config),
                                              INTERVAL_HEADER: str(config.sync_interval_ms)})
        cache = Path(config.config_cache) if config.config_cache else None
        self.sync = DiscoverySync(self.service, config.sync_interval_ms / 1000, cache_path=cache,
                                  on_change=self._on_change)
        self.pool = UpstreamPool(self._addresses, connect_timeout_s=config.upstream_connect_timeout_ms / 1000,
                                 request_timeout_s=config.upstream_request_timeout_ms / 1000,
                                 idle_s=config.upstream_idle_ms / 1000, cache_s=config.metadata_cache_ms / 1000,
                                 login_recheck_s=config.upstream_login_recheck_ms / 1000, tls=config.upstream_tls)
        #: The counters behind /metrics; None (nothing counted) without metrics.listener.
        self.metrics = GatewayMetrics() if config.metrics_listener else None
        self.pool.metrics = self.metrics
        self.metrics_endpoint: MetricsEndpoint | None = None
        self.ranges = ApiRanges()
        self.degradation = Degradation(lambda: self.sync.state, burst_ms=config.degradation_burst_ms,
                                       max_throttle_ms=config.max_throttle_time_ms)
        self.ports = BrokerPorts(config.broker_port_base, config.ports_per_cluster, self._expose)
        self.placements = ProducerPlacements()
        self.router = self._router(None)
        self.authenticator = RelayAuthenticator(lambda: self.sync.state.clusters, self.pool,
                                                self._cluster_of_listener)
        self.listener = self._listener(LISTENER, config.listen_port)
        #: Proxy mode's broker ports (kaflet/proxy/ports.py), bound when first named to a client.
        self.broker_listeners: dict[int, tuple[Listener, ProxyRouter]] = {}
        self._unbindable: set[int] = set()
        self._probing: asyncio.Task[None] | None = None
        self._reprobe: asyncio.Task[None] | None = None

    @property
    def proxy(self) -> bool:
        return self.config.mode == "proxy"

    def _router(self, target: tuple[int, int] | None) -> DiscoveryRouter:
        config = self.config
        delay_s = config.failed_authentication_delay_ms / 1000
        if not self.proxy:
            return DiscoveryRouter(self.pool, self.ranges, delay_s, self.degradation, self.metrics)
        return ProxyRouter(self.pool, self.ranges, delay_s, self.degradation, self.ports, config.advertised_host,
                           target, self.metrics, self.placements)

    def _listener(self, name: str, port: int) -> Listener:
        config = self.config
        security = ListenerSecurity(
            config.listen_protocol, ssl_context=config.listen_tls,
            sasl_session_factory=lambda: SaslSession(self.authenticator, name, config.failed_authentication_delay_ms,
                                                     config.sasl_max_receive_size),
            sasl_max_receive=config.sasl_max_receive_size)
        # A proxy's connections carry produce and fetch: the brokers' receive buffer, and
        # requests read on while earlier ones are still upstream.
        return Listener(name, config.listen_host, port, max_request_bytes=config.socket_request_max_bytes,
                        idle_ms=config.connections_max_idle_ms, send_buf=-1, recv_buf=-1, security=security,
                        **({"pipelined": config.max_inflight_requests} if self.proxy else
                           {"staging_bytes": STAGING_BYTES}))

    def _cluster_of_listener(self, name: str) -> int | None:
        # A broker port serves the clients of its cluster only.
        _, sep, port = name.partition(f"{LISTENER}-")
        return self.ports.target_of(int(port))[0] if sep else None

    def _expose(self, cluster_id: int, broker_id: int, port: int) -> bool:
        """Listen on a broker's port (proxy mode); False (one log line) when the port is taken."""
        if port in self.broker_listeners:
            return True
        listener = self._listener(f"{LISTENER}-{port}", port)
        try:
            listener.bind()
        except OSError as exc:
            if port not in self._unbindable:
                self._unbindable.add(port)
                log.error("cannot listen on %s:%d for broker %d of cluster %d: %s; the broker is left out of the "
                          "answers until it can", self.config.listen_host or "0.0.0.0", port, broker_id, cluster_id,
                          exc.strerror or exc)
            return False
        self._unbindable.discard(port)
        router = self._router((cluster_id, broker_id))
        assert isinstance(router, ProxyRouter)
        listener.serve(router)
        self.broker_listeners[port] = (listener, router)
        log.info("broker %d of cluster %d: gateway port %d", broker_id, cluster_id, port)
        return True

    def _addresses(self, cluster_id: int) -> tuple[Address, ...] | None:
        return self.sync.state.clusters.get(cluster_id)

    async def start(self) -> None:
        """Pull (or read the cache), bind, serve; GatewayStartError when it cannot."""
        config = self.config
        try:
            await self.sync.sync_once()
        except ManagementServiceError as exc:
            if self.sync.cache_path is None:
                raise GatewayStartError(
                    f"the management service did not answer ({exc}) and no --config-cache file was given to "
                    "start from") from None
            try:
                self.sync.state = read_cache(self.sync.cache_path)
            except DiscoveryParseError as bad:
                raise GatewayStartError(
                    f"the management service did not answer ({exc}) and the config cache cannot be used: "
                    f"{bad}") from None
            log.warning("the management service did not answer; starting from the config cache %s (%d clusters); "
                        "pulling again every %g s", self.sync.cache_path, len(self.sync.state.clusters),
                        self.sync.interval_s)
            # The outage began before start-up: its end is logged once, as any other's.
            self.sync.failed(exc, "serving the config cache meanwhile")
        await self._probe()
        try:
            self.listener.bind()
        except OSError as exc:
            raise GatewayStartError(f"cannot listen on {config.listen_host}:{config.listen_port}: "
                                    f"{exc.strerror or exc}") from None
        self.listener.serve(self.router)
        if config.metrics_listener is not None:
            await self._serve_metrics(*config.metrics_listener)
        self.sync.start()
        self.pool.start()
        self._reprobe = asyncio.create_task(self._probe_until_a_cluster_answers(), name="probe-until-answered")
        clusters = ", ".join(str(c) for c in sorted(self.sync.state.clusters)) or "none yet"
        log.info("kaflet gateway (%s mode) listening on %s:%d; clusters %s from %s%s", config.mode,
                 config.listen_host or "0.0.0.0", self.listener.port, clusters, config.manager_url,
                 f"; broker ports from {config.broker_port_base} ({config.ports_per_cluster} per cluster id)"
                 if self.proxy else "")

    @property
    def port(self) -> int:
        return self.listener.port

    async def _serve_metrics(self, host: str, port: int) -> None:
        assert self.metrics is not None
        endpoint = MetricsEndpoint(host, port, what="the gateway")
        endpoint.registry.register(GatewayCollector(self.metrics, GatewayState(
            connections=self._connections, available=self._available,
            sync_age_s=lambda: None if self.sync.last_success is None else time.monotonic() - self.sync.last_success,
            sync_failures=lambda: self.sync.failures)))
        try:
            await endpoint.start()
        except OSError as exc:
            raise GatewayStartError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
        self.metrics_endpoint = endpoint

    def _routers(self) -> list[DiscoveryRouter]:
        return [self.router, *(router for _, router in self.broker_listeners.values())]

    def _connections(self) -> dict[tuple[str, str], int]:
        """Client connections now by (cluster, app) of their login, ("", "") before one."""
        counts: dict[tuple[str, str], int] = {}
        for listener in (self.listener, *(listener for listener, _ in self.broker_listeners.values())):
            for conn in listener.connections:
                server = conn.sasl.server if conn.sasl is not None and conn.sasl.complete else None
                key = ("", "")
                if isinstance(server, RelaySaslServer) and server.credentials is not None:
                    key = (cluster_label(server.cluster_id), server.credentials.username.partition(".")[2])
                counts[key] = counts.get(key, 0) + 1
        return counts

    def _available(self) -> dict[int, bool]:
        """Each listed cluster: False while a router's last request to it found no broker."""
        routers = self._routers()
        return {cid: not any(router.failing(cid) for router in routers) for cid in self.sync.state.clusters}

    def _on_change(self, before: DiscoveryState, after: DiscoveryState) -> None:
        changed = [c for c in set(before.clusters) | set(after.clusters)
                   if before.clusters.get(c) != after.clusters.get(c)]
        for cluster_id in changed:
            self.pool.forget_cluster(cluster_id)
            self.ports.forget_cluster(cluster_id)
        if changed and (self._probing is None or self._probing.done()):
            self._probing = asyncio.create_task(self._probe(), name="probe-api-versions")

    async def _probe(self) -> None:
        """Narrow the advertised versions to what the reachable clusters serve."""
        found = await asyncio.gather(*(self.pool.probe_api_versions(c) for c in sorted(self.sync.state.clusters)))
        self.ranges.update([ranges for ranges in found if ranges is not None])

    async def _probe_until_a_cluster_answers(self) -> None:
        # With no cluster reachable at start-up only the gateway's own APIs are advertised; ask
        # again every sync interval until one answers (a change of addresses asks at once).
        while not self.ranges.from_clusters:
            await asyncio.sleep(self.sync.interval_s)
            await self._probe()

    async def stop(self) -> None:
        """Stop accepting, close client and upstream connections, stop pulling."""
        await cancel_and_wait(self._reprobe)
        listeners = [self.listener, *(listener for listener, _ in self.broker_listeners.values())]
        for listener in listeners:
            listener.stop_accepting()
        await self.sync.stop()
        await cancel_and_wait(self._probing)
        await asyncio.gather(*(listener.drain_and_close(5.0) for listener in listeners))
        for router in (self.router, *(router for _, router in self.broker_listeners.values())):
            if isinstance(router, ProxyRouter):
                router.close_all()
        await self.pool.aclose()
        await self.service.close()
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.stop()


async def serve(config: GatewayConfig) -> int:
    """Run a gateway until SIGTERM or SIGINT; the exit status (1: it could not start)."""
    gateway = GatewayProcess(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await gateway.start()
    except GatewayStartError as exc:
        log.error("kaflet gateway cannot start: %s", exc)
        await gateway.stop()
        return 1
    await stop.wait()
    log.info("kaflet gateway stopping")
    await gateway.stop()
    return 0
