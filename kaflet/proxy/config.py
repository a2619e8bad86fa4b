"""The gateway process's settings: Kafka-style keys from a properties file, then the command line.

Every key is checked when the process starts; a bad value is one `GatewayConfigError` line that
names the key. docs: README.md, "Running a gateway".
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from kaflet.metrics.exporter import ListenerError, parse_listener
from kaflet.security.tls import SSL_CONFIG_KEYS, TlsConfigError, client_context, server_context

MODES = ("discovery", "proxy")
#: The security protocols of the client side and of the upstream side: clients always log in
#: with SASL/PLAIN as <clusterId>.<appId>, with or without TLS.
PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
UPSTREAM_PREFIX = "upstream."

DEFAULTS: dict[str, str] = {
    "gateway.manager.url": "",
    "gateway.listen": "0.0.0.0:9092",
    "gateway.mode": "discovery",
    "gateway.advertised.host": "",
    "gateway.config.cache": "",
    "gateway.sync.interval.ms": "30000",
    "gateway.manager.timeout.ms": "10000",
    "discovery.metadata.cache.ms": "1000",
    "upstream.request.timeout.ms": "30000",
    "upstream.connect.timeout.ms": "10000",
    "upstream.idle.ms": "300000",
    "upstream.login.recheck.ms": "60000",
    "connections.max.idle.ms": "600000",
    "socket.request.max.bytes": "104857600",
    "sasl.server.max.receive.size": "524288",
    "connection.failed.authentication.delay.ms": "100",
    "degradation.burst.ms": "1000",
    "max.throttle.time.ms": "30000",
    "proxy.broker.port.base": "",
    "proxy.broker.ports.per.cluster": "100",
    "proxy.max.inflight.requests": "64",
    "metrics.listener": "",
    "upstream.security.protocol": "",
    # The client side's TLS (gateway.listen SASL_SSL://...), Kafka's ssl.* keys in PEM form, and
    # the upstream side's, the same keys prefixed with "upstream.".
    **{key: "" for key in SSL_CONFIG_KEYS},
    **{UPSTREAM_PREFIX + key: "" for key in SSL_CONFIG_KEYS},
}
_PROTOCOL_PREFIX = re.compile(r"^(?P<protocol>[A-Za-z_]+)://(?P<rest>.*)$")

_HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]*):(?P<port>\d{1,5})$")


class GatewayConfigError(ValueError):
    """A setting that cannot work; the message is one line naming the key."""


def parse_host_port(text: str, what: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``; an empty host is every interface); GatewayConfigError if not."""
    m = _HOST_PORT.match(text.strip())
    if m is None or not 0 <= int(m.group("port")) <= 65535:
        raise GatewayConfigError(f"{what}: {text!r} is not host:port")
    return m.group("host").strip("[]"), int(m.group("port"))


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """The checked settings of one gateway process."""

    manager_url: str
    listen_host: str
    listen_port: int
    mode: str
    advertised_host: str
    config_cache: str
    sync_interval_ms: int
    manager_timeout_ms: int
    metadata_cache_ms: int
    upstream_request_timeout_ms: int
    upstream_connect_timeout_ms: int
    upstream_idle_ms: int
    upstream_login_recheck_ms: int
    connections_max_idle_ms: int
    socket_request_max_bytes: int
    sasl_max_receive_size: int
    failed_authentication_delay_ms: int
    #: How long's worth of its rate a client may send at once (kaflet/proxy/degradation.py).
    degradation_burst_ms: int
    max_throttle_time_ms: int
    #: Proxy mode's port-per-broker scheme: broker B of cluster C is reached at
    #: ``broker_port_base + C * ports_per_cluster + B`` (README.md, "Proxy mode").
    broker_port_base: int = 0
    ports_per_cluster: int = 100
    max_inflight_requests: int = 64
    #: ``metrics.listener``'s (host, port); None: no /metrics and no counters kept.
    metrics_listener: tuple[str, int] | None = None
    #: The client side's security protocol and its TLS context (SASL_SSL).
    listen_protocol: str = "SASL_PLAINTEXT"
    listen_tls: ssl.SSLContext | None = None
    #: The upstream side's (the brokers' listener the discovery settings name).
    upstream_protocol: str = "SASL_PLAINTEXT"
    upstream_tls: ssl.SSLContext | None = None

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> GatewayConfig:
        """Checked settings from ``props`` (unset keys take DEFAULTS); unknown keys are refused,
        so a misspelt key is not silently ignored."""
        unknown = sorted(set(props) - set(DEFAULTS))
        if unknown:
            raise GatewayConfigError(f"unknown setting {unknown[0]} (the gateway's settings: README.md, "
                                     "\"Running a gateway\")")
        given = {k: v.strip() for k, v in props.items()}
        values = {**DEFAULTS, **given}
        url = values["gateway.manager.url"]
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise GatewayConfigError(
                "gateway.manager.url (--manager-url) must be the management service's gateway URL, such as "
                f"http://manager:8080/gateway; got {url!r}")
        listen = values["gateway.listen"]
        listen_protocol = "SASL_PLAINTEXT"
        if m := _PROTOCOL_PREFIX.match(listen):
            listen_protocol, listen = m.group("protocol").upper(), m.group("rest")
            if listen_protocol not in PROTOCOLS:
                raise GatewayConfigError(f"gateway.listen (--listen): the gateway's clients log in with SASL/PLAIN, "
                                         f"so its protocol is one of {', '.join(PROTOCOLS)}; got {listen_protocol}")
        host, port = parse_host_port(listen, "gateway.listen (--listen)")
        mode = values["gateway.mode"]
        if mode not in MODES:
            raise GatewayConfigError(f"gateway.mode (--mode) is one of {', '.join(MODES)}; got {mode!r}")
        upstream_protocol = values["upstream.security.protocol"].upper()
        if upstream_protocol and upstream_protocol not in PROTOCOLS:
            raise GatewayConfigError(f"upstream.security.protocol is one of {', '.join(PROTOCOLS)}; got "
                                     f"{upstream_protocol}")
        if mode == "discovery":
            # Clients reach the brokers the answers name with their own security protocol, and the
            # brokers name the listener the gateway's request came in on.
            if upstream_protocol and upstream_protocol != listen_protocol:
                raise GatewayConfigError(
                    f"upstream.security.protocol {upstream_protocol} differs from gateway.listen's {listen_protocol}: "
                    "in discovery mode clients connect to the brokers' listener the gateway uses, with their own "
                    "security protocol, so the two must be the same")
            upstream_protocol = listen_protocol
        upstream_protocol = upstream_protocol or "SASL_PLAINTEXT"
        listen_tls = upstream_tls = None
        if listen_protocol == "SASL_SSL":
            try:
                listen_tls = server_context(given.get)
            except TlsConfigError as exc:
                raise GatewayConfigError(f"the SASL_SSL listener's TLS: {exc}") from None
        elif any(values[key] for key in SSL_CONFIG_KEYS):
            raise GatewayConfigError("ssl.* settings are for a SASL_SSL listener: set gateway.listen (--listen) "
                                     "to SASL_SSL://host:port, or leave them out")
        if upstream_protocol == "SASL_SSL":
            try:
                upstream_tls = client_context(lambda key: given.get(UPSTREAM_PREFIX + key))
            except TlsConfigError as exc:
                raise GatewayConfigError(f"the upstream side's TLS (the upstream.ssl.* keys): {exc}") from None
        metrics_listener = None
        if values["metrics.listener"]:
            try:
                metrics_listener = parse_listener(values["metrics.listener"])
            except ListenerError as exc:
                raise GatewayConfigError(str(exc)) from None
        if values["gateway.advertised.host"] and mode == "discovery":
            raise GatewayConfigError(
                "gateway.advertised.host (--advertised-host) is for proxy mode: in discovery mode clients are "
                "sent the clusters' own broker addresses")

        def positive_key(key: str, text: str, minimum: int) -> int:
            if not text.isdigit() or int(text) < minimum:
                raise GatewayConfigError(f"{key} must be a whole number of at least {minimum}; got {text!r}")
            return int(text)

        def positive(key: str, minimum: int = 1) -> int:
            return positive_key(key, values[key], minimum)

        base_text = values["proxy.broker.port.base"]
        if not base_text:
            if mode == "proxy" and port == 0:
                raise GatewayConfigError("proxy.broker.port.base must be set when gateway.listen (--listen) picks a "
                                         "free port (port 0): the brokers' ports follow from it")
            base_text = str(port + 1)
        broker_port_base = positive_key("proxy.broker.port.base", base_text, 1)
        ports_per_cluster = positive("proxy.broker.ports.per.cluster")
        if broker_port_base + ports_per_cluster > 65536:
            raise GatewayConfigError(f"proxy.broker.port.base {broker_port_base} leaves no room for "
                                     f"proxy.broker.ports.per.cluster {ports_per_cluster} ports below 65536")
        return cls(
            manager_url=url.rstrip("/"), listen_host=host, listen_port=port, mode=mode,
            advertised_host=values["gateway.advertised.host"], config_cache=values["gateway.config.cache"],
            sync_interval_ms=positive("gateway.sync.interval.ms", 100),
            manager_timeout_ms=positive("gateway.manager.timeout.ms", 100),
            metadata_cache_ms=positive("discovery.metadata.cache.ms", 0),
            upstream_request_timeout_ms=positive("upstream.request.timeout.ms", 100),
            upstream_connect_timeout_ms=positive("upstream.connect.timeout.ms", 100),
            upstream_idle_ms=positive("upstream.idle.ms", 1000),
            upstream_login_recheck_ms=positive("upstream.login.recheck.ms", 0),
            connections_max_idle_ms=positive("connections.max.idle.ms", 0),
            socket_request_max_bytes=positive("socket.request.max.bytes", 1024),
            sasl_max_receive_size=positive("sasl.server.max.receive.size", 512),
            failed_authentication_delay_ms=positive("connection.failed.authentication.delay.ms", 0),
            degradation_burst_ms=positive("degradation.burst.ms"),
            max_throttle_time_ms=positive("max.throttle.time.ms"),
            broker_port_base=broker_port_base, ports_per_cluster=ports_per_cluster,
            max_inflight_requests=positive("proxy.max.inflight.requests"),
            metrics_listener=metrics_listener, listen_protocol=listen_protocol, listen_tls=listen_tls,
            upstream_protocol=upstream_protocol, upstream_tls=upstream_tls,
        )
