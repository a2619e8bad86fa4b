"""How this broker connects to the others, from its config, checked at start-up as Kafka checks it.

The inter-broker listener is `inter.broker.listener.name`, or else the listener named after
`security.inter.broker.protocol` (default PLAINTEXT); setting both is an error, and the listener
must be in listener.security.protocol.map and advertised. Its security protocol says what the
connection needs: a client TLS context from the listener's ssl.* configs (with
`listener.name.<l>.` overrides, as the server side reads them), and for SASL the mechanism
`sasl.mechanism.inter.broker.protocol` (which must be enabled on that listener) with the
`username`/`password` of the listener's JAAS config for that mechanism. Every problem is a
ConfigError with one line naming the key. The largest response taken from another broker
follows socket.request.max.bytes and replica.fetch.response.max.bytes (InterBrokerSettings).
"""

from __future__ import annotations

import functools

from kaflet.gateway.authenticator import GATEWAY_LOGIN_MODULES
from kaflet.network.client import PROTOCOLS, ClientSecurity, InterBrokerSettings
from kaflet.security import plain
from kaflet.security.jaas import JaasError, single_module
from kaflet.security.sasl_client import CLIENT_MECHANISMS
from kaflet.security.tls import TlsConfigError, client_context
from kaflet.server.config import BrokerConfig, ConfigError, parse_endpoints
from kaflet.server.listener_security import listener_config

SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

def inter_broker_settings(config: BrokerConfig) -> InterBrokerSettings:
    """The inter-broker client settings of this broker; raises ConfigError (one line, naming the key)."""
    listener, protocol = _listener_and_protocol(config)
    get = listener_config(config)
    ssl_context = None
    if protocol in ("SSL", "SASL_SSL"):
        try:
            ssl_context = client_context(functools.partial(get, listener))
        except TlsConfigError as exc:
            raise ConfigError(f"inter-broker listener {listener}: {exc}") from None
    mechanism = username = password = ""
    if protocol.startswith("SASL_"):
        mechanism = _mechanism(config, listener)
        username, password = _credentials(config, listener, mechanism)
    return InterBrokerSettings(
        listener=listener,
        security=ClientSecurity(protocol, ssl_context, mechanism, username, password),
        request_timeout_s=config["request.timeout.ms"] / 1000,
        max_response_bytes=config["socket.request.max.bytes"] + config["replica.fetch.response.max.bytes"],
    )


def _listener_and_protocol(config: BrokerConfig) -> tuple[str, str]:
    protocol_map = config["listener.security.protocol.map"]
    advertised = parse_endpoints(config["advertised.listeners"] or config["listeners"], protocol_map)
    # parse_endpoints has validated the map's syntax.
    pmap = {k.strip().upper(): v.strip().upper() for k, _, v in
            (item.partition(":") for item in protocol_map.split(",") if item.strip())}
    name = config["inter.broker.listener.name"]
    if name is not None:
        if "security.inter.broker.protocol" in config.originals:
            raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.")
        listener = name.strip().upper()
        if listener not in pmap:
            raise ConfigError(f"Listener with name {listener} defined in inter.broker.listener.name not found in "
                              "listener.security.protocol.map.")
        protocol = pmap[listener]
    else:
        protocol = config["security.inter.broker.protocol"].strip().upper()
        if protocol not in PROTOCOLS:
            raise ConfigError(f"Invalid value {config['security.inter.broker.protocol']} for configuration "
                              f"security.inter.broker.protocol: Security protocol must be one of {', '.join(PROTOCOLS)}")
        listener = protocol
    names = [ep.listener for ep in advertised]
    if listener not in names:
        raise ConfigError(f"inter.broker.listener.name must be a listener name defined in advertised.listeners. "
                          f"The valid options based on currently configured listeners are {','.join(names)}")
    if protocol not in PROTOCOLS:
        raise ConfigError(f"listener {listener}: unknown security protocol {protocol} in "
                          f"listener.security.protocol.map (use one of {', '.join(PROTOCOLS)})")
    return listener, protocol


def _mechanism(config: BrokerConfig, listener: str) -> str:
    mechanism = config["sasl.mechanism.inter.broker.protocol"].strip()
    if mechanism not in CLIENT_MECHANISMS:
        default = " (Kafka's default)" if mechanism == "GSSAPI" else ""
        raise ConfigError(f"sasl.mechanism.inter.broker.protocol={mechanism}{default} is not supported by kaflet "
                          f"for inter-broker SASL; set it to one of {', '.join(CLIENT_MECHANISMS)}")
    enabled = [m.strip() for m in (listener_config(config)(listener, "sasl.enabled.mechanisms") or "GSSAPI").split(",")]
    if mechanism not in enabled:
        raise ConfigError("sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when SASL "
                          f"is used for inter-broker communication (listener {listener} enables {','.join(enabled)})")
    return mechanism


def _credentials(config: BrokerConfig, listener: str, mechanism: str) -> tuple[str, str]:
    """username/password of the listener's JAAS config for the mechanism (Kafka's client login)."""
    get = listener_config(config)
    module_class = plain.PLAIN_LOGIN_MODULE if mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
    prefixed = f"{mechanism.lower()}.sasl.jaas.config"
    shown = f"listener.name.{listener.lower()}.{prefixed}"
    for key in (prefixed, "sasl.jaas.config"):
        text = get(listener, key)
        if not text:
            continue
        try:
            module = single_module(text)
        except JaasError as exc:
            raise ConfigError(f"listener.name.{listener.lower()}.{key} (or {key}): {exc}") from None
        # A gateway listener's module holds the brokers' own login as Kafka's PLAIN module does.
        if module.class_name != module_class and not (mechanism == "PLAIN"
                                                      and module.class_name in GATEWAY_LOGIN_MODULES):
            if key == "sasl.jaas.config":
                continue  # the unprefixed value may configure another mechanism
            raise ConfigError(f"{shown}: expected {module_class}, found {module.class_name}")
        username, password = module.options.get("username"), module.options.get("password")
        if not username or password is None:
            raise ConfigError(f"{shown} (or sasl.jaas.config): inter-broker SASL {mechanism} needs the username and "
                              f"password options (e.g. {module_class} required username=\"admin\" "
                              "password=\"admin-secret\";)")
        return username, password
    raise ConfigError(f"inter-broker SASL {mechanism} on listener {listener} needs {shown} with username and "
                      f"password (e.g. {module_class} required username=\"admin\" password=\"admin-secret\";)")
