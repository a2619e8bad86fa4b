"""Config resolution as Kafka's DescribeConfigs reports it, and dynamic broker configs.

Pure functions and small classes, no I/O, so the rules are unit-testable:

* which broker configs exist, their types and defaults, and which of them Kafka lets an operator
  change at run time (per broker, or as the cluster-wide default ``/config/brokers/<default>``);
* the synonym chain of a config, in Kafka's order: dynamic per-broker, dynamic cluster default,
  static (server.properties), built-in default; for a topic config the topic's own override comes
  first. The first synonym is the config's *source*;
* validation of dynamic broker updates and the IncrementalAlterConfigs operations.

The I/O side (the metadata tree, notifications, applying changes to logs) is in config_admin.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from kaflet.log.cleaner import RECONFIGURABLE_CONFIGS as CLEANER_CONFIGS
from kaflet.log.cleaner import CleanerConfig
from kaflet.server.config import (
    BROKER_CONFIGS,
    UNIT_SYNONYMS,
    BrokerConfig,
    log_not_acted_on,
    log_unknown_dynamic,
    parse_bool,
    parse_list,
)
from kaflet.server.config_docs import broker_doc, topic_doc
from kaflet.server.kafka_configs import (
    CLUSTER_LEVEL_LISTENER_CONFIGS,
    CLUSTER_WIDE,
    DYNAMIC_ONLY,
    LISTENER_ONLY_SECURITY_CONFIGS,
    PER_BROKER,
    READ_ONLY,
    broker_catalogue,
    broker_config_key,
    check_value,
    listener_base,
    lookup_config,
)
from kaflet.server.topic_config import TOPIC_CONFIGS, InvalidConfigError, validate_topic_config

# DescribeConfigs config sources (the wire ids).
SOURCE_UNKNOWN = 0
SOURCE_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

# DescribeConfigs v3+ config types (the wire ids).
TYPE_UNKNOWN = 0
TYPE_IDS = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8,
            "password": 9}

# IncrementalAlterConfigs operations.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
OP_NAMES = {OP_SET: "SET", OP_DELETE: "DELETE", OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}

# ConfigResource types.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8


class ConfigRequestError(Exception):
    """A config resource that gets an error code and message instead of a result."""

    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class BrokerKey:
    """One broker config as DescribeConfigs reports it."""

    name: str
    kind: str
    default: str | None
    dynamic: bool  # Kafka lists it as dynamic (DescribeConfigs' read_only is its negation)
    topic_synonym: str | None = None  # the topic config this key supplies the default of
    mode: str = READ_ONLY  # Kafka's update mode (kafka_configs)
    internal: bool = False  # listed by DescribeConfigs only when set, as Kafka does
    kafka: bool = True  # False: a kaflet-only key (the gateway's throttle bound)


def _kind_of(parse: Any) -> str:
    return {int: "int", parse_bool: "boolean", parse_list: "list", float: "double"}.get(parse, "string")


def format_value(value: Any) -> str | None:
    """A typed config value as Kafka prints it (lists comma separated, booleans lower case)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _same_value(d: Any, kafka_default: str | None) -> bool:
    if kafka_default is None or d.default is None:
        return kafka_default is None and d.default is None
    try:
        return bool(d.parse(kafka_default) == d.default)
    except ValueError:
        return False


@cache
def broker_keys() -> dict[str, BrokerKey]:
    """Every broker config: Kafka's whole catalogue, with kaflet's own defaults for the keys it
    acts on, and kaflet's own keys."""
    topic_of = {d.broker_key: name for name, d in TOPIC_CONFIGS.items() if d.broker_key}
    out: dict[str, BrokerKey] = {}
    for name, kk in broker_catalogue().items():
        # Like Kafka, DescribeConfigs lists internal keys, dynamic-only ones (not KafkaConfig's) and
        # the keys 3.x dropped only when they are set.
        unlisted = kk.internal or kk.mode == DYNAMIC_ONLY or kk.removed_in is not None
        out[name] = BrokerKey(name, kk.kind, kk.default, kk.mode in (PER_BROKER, CLUSTER_WIDE), topic_of.get(name),
                              kk.mode, unlisted)
    for name, d in BROKER_CONFIGS.items():
        k = out.get(name)
        if k is None:
            out[name] = BrokerKey(name, _kind_of(d.parse), format_value(d.default), False, kafka=False)
        elif name != "log.dirs" and not _same_value(d, k.default):
            # kaflet's own default (listeners, log.dir, ...). log.dirs defaults to log.dir in
            # kaflet's table; Kafka reports it unset (null), and so does DescribeConfigs.
            out[name] = dataclasses.replace(k, default=format_value(d.default))
    return out


@cache
def _default_layer() -> Mapping[str, str]:
    """The built-in defaults, as a config layer (DescribeConfigs walks it once per entry)."""
    return {k: b.default for k, b in broker_keys().items() if b.default is not None}


def list_kind(name: str, broker: bool) -> bool:
    """True when the config is a LIST (only lists take APPEND and SUBTRACT)."""
    if broker:
        key = broker_keys().get(name)
        return key is not None and key.kind == "list"
    d = TOPIC_CONFIGS.get(name)
    return d is not None and d.kind == "list"


def broker_synonyms(name: str) -> list[str]:
    """Kafka's synonym names of a broker config, most specific first (brokerConfigSynonyms).

    log.flush.scheduler.interval.ms is what applies while log.flush.interval.ms is unset; a
    listener override has its base config as synonym.
    """
    for group in UNIT_SYNONYMS.values():
        names = [b for b, _ in group]
        if name in names and (name != "log.flush.scheduler.interval.ms"):
            return names
    base = listener_base(name)
    if base is not None:
        return [name, base[1]]
    return [name]


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str | None
    source: int


@dataclass(slots=True)
class ConfigEntry:
    """One config of a DescribeConfigs result."""

    name: str
    value: str | None
    source: int
    read_only: bool
    sensitive: bool
    kind: int
    documentation: str | None
    synonyms: list[Synonym] = field(default_factory=list)


class DynamicBrokerConfig:
    """The broker's config layers: dynamic per-broker, dynamic cluster default, static, default."""

    def __init__(self, broker_id: int, static: Mapping[str, str]) -> None:
        self.broker_id = broker_id
        self.static = {k: str(v) for k, v in static.items()}
        self.default: dict[str, str] = {}
        self.per_broker: dict[str, str] = {}

    def update(self, *, default: Mapping[str, str] | None = None, per_broker: Mapping[str, str] | None = None) -> None:
        """Replace one or both dynamic layers (as read from /config/brokers/...)."""
        if default is not None:
            self.default = dict(default)
        if per_broker is not None:
            self.per_broker = dict(per_broker)

    def _layers(self) -> list[tuple[Mapping[str, str | None], int]]:
        return [(self.per_broker, SOURCE_DYNAMIC_BROKER), (self.default, SOURCE_DYNAMIC_DEFAULT_BROKER),
                (self.static, SOURCE_STATIC_BROKER), (_default_layer(), SOURCE_DEFAULT)]

    def value(self, name: str) -> str | None:
        """The broker's current value of ``name`` (None when unset everywhere)."""
        for layer, _ in self._layers():
            if name in layer and not (name == "broker.id" and layer[name] == "-1"):
                return layer[name]
        if name == "broker.id":
            return str(self.broker_id)  # the generated (or stored) id, not the "generate" marker
        return None

    def synonyms(self, name: str, sensitive: bool = False) -> list[Synonym]:
        """Kafka's synonym list: every layer in turn, each over all synonym names; leading
        entries for names other than ``name`` are dropped, as Kafka does."""
        chain = broker_synonyms(name)
        out = [Synonym(n, None if sensitive else layer[n], source)
               for layer, source in self._layers() for n in chain if n in layer]
        while out and out[0].name != name:
            out.pop(0)
        return out

    def topic_default_overlay(self) -> dict[str, str]:
        """Topic-config defaults that dynamic broker configs change (topic names -> values).

        Each topic config's broker-level name is the most specific of its synonyms (e.g.
        log.retention.ms over .minutes and .hours), so a dynamic value of it wins outright.
        """
        out = {}
        for tname, d in TOPIC_CONFIGS.items():
            if d.broker_key is None:
                continue
            for layer in (self.per_broker, self.default):
                if d.broker_key in layer:
                    out[tname] = layer[d.broker_key]
                    break
        return out


def effective_topic_defaults(static_defaults: Mapping[str, str], dynamic: DynamicBrokerConfig) -> dict[str, str]:
    """The broker's topic-config defaults with the dynamic broker configs applied."""
    return {**static_defaults, **dynamic.topic_default_overlay()}


def effective_cleaner_config(static: BrokerConfig, dynamic: DynamicBrokerConfig) -> CleanerConfig:
    """The log cleaner's settings: server.properties with the dynamic ``log.cleaner.*`` values
    Kafka's cleaner takes at run time (per broker first, then the cluster default). Raises
    ConfigError for a stored value kaflet cannot use."""
    values = {name: static[name] for name in ("log.cleaner.enable", *CLEANER_CONFIGS)}
    for name in CLEANER_CONFIGS:
        for layer in (dynamic.per_broker, dynamic.default):
            if name in layer:
                values[name] = BrokerConfig.parse_value(name, layer[name])
                break
    return CleanerConfig.from_broker(values)


# --------------------------------------------------------------------------------------------
# describing


def _wanted(names: Iterable[str], keys: Sequence[str] | None) -> list[str]:
    if keys is None or len(keys) == 0:
        return sorted(names)
    wanted = set(keys)
    return sorted(n for n in names if n in wanted)


def describe_topic(dynamic: DynamicBrokerConfig, topic_defaults: Mapping[str, str], overrides: Mapping[str, str],
                   keys: Sequence[str] | None = None) -> list[ConfigEntry]:
    """Every topic config (or the named ones) with its effective value, source and synonyms."""
    out = []
    for name in _wanted(TOPIC_CONFIGS, keys):
        d = TOPIC_CONFIGS[name]
        value = overrides.get(name, topic_defaults.get(name, d.default))
        syns = dynamic.synonyms(d.broker_key) if d.broker_key else []
        if name in overrides:
            syns.insert(0, Synonym(name, overrides[name], SOURCE_TOPIC))
        out.append(ConfigEntry(name, value, syns[0].source if syns else SOURCE_DEFAULT, False, False,
                               TYPE_IDS.get(d.kind, TYPE_UNKNOWN), topic_doc(name), syns))
    return out


def _type_key(name: str) -> BrokerKey | None:
    """The key whose type a broker config has: its own, else its listener base config's."""
    return lookup_config(broker_keys(), name)


def _broker_entry(dynamic: DynamicBrokerConfig, name: str, value: str | None, per_broker: bool) -> ConfigEntry:
    key = broker_keys().get(name)
    typed = _type_key(name)
    # Kafka treats a PASSWORD config, and a config of unknown type (it might be a secret), as
    # sensitive: no value, no synonym values.
    sensitive = typed is None or typed.kind == "password"
    syns = dynamic.synonyms(name, sensitive)
    if not per_broker:
        syns = [s for s in syns if s.source == SOURCE_DYNAMIC_DEFAULT_BROKER]
    return ConfigEntry(
        name, None if sensitive else value, syns[0].source if syns else SOURCE_DEFAULT,
        read_only=not (key is not None and key.dynamic), sensitive=sensitive,
        kind=TYPE_IDS.get(typed.kind, TYPE_UNKNOWN) if typed else TYPE_UNKNOWN,
        documentation=broker_doc(name, key.topic_synonym) if key else None, synonyms=syns,
    )


def describe_broker(dynamic: DynamicBrokerConfig, keys: Sequence[str] | None = None) -> list[ConfigEntry]:
    """This broker's configs, as Kafka lists them: every non-internal config plus whatever is set
    (server.properties, the dynamic configs, listener overrides and custom keys included)."""
    names = {n for n, k in broker_keys().items() if not k.internal}
    names |= set(dynamic.static) | set(dynamic.per_broker) | set(dynamic.default)
    return [_broker_entry(dynamic, n, dynamic.value(n), True) for n in _wanted(names, keys)]


def describe_broker_default(dynamic: DynamicBrokerConfig, keys: Sequence[str] | None = None) -> list[ConfigEntry]:
    """The cluster-wide dynamic defaults (only the keys set there)."""
    return [_broker_entry(dynamic, n, dynamic.default[n], False) for n in _wanted(dynamic.default, keys)]


# --------------------------------------------------------------------------------------------
# altering


def apply_incremental(current: Mapping[str, str], ops: Sequence[tuple[str, int, str | None]], *,
                      broker: bool) -> dict[str, str]:
    """Apply IncrementalAlterConfigs operations to a stored config map; returns the new map.

    Raises ConfigRequestError for duplicate keys, null values, unknown operations and
    APPEND/SUBTRACT on a config that is not a list.
    """
    from kaflet.protocol.errors import ErrorCode

    names = [n for n, _, _ in ops]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigRequestError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys : {','.join(dupes)}")
    nulls = [f"{OP_NAMES.get(op, op)}:{n}" for n, op, v in ops if v is None and op != OP_DELETE]
    if nulls:
        raise ConfigRequestError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {','.join(nulls)}")
    out = dict(current)
    for name, op, value in ops:
        if op == OP_SET:
            out[name] = value  # type: ignore[assignment]
        elif op == OP_DELETE:
            out.pop(name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            known = name in (broker_keys() if broker else TOPIC_CONFIGS)
            if not known:
                kind = "broker" if broker else "topic"
                raise ConfigRequestError(ErrorCode.INVALID_CONFIG, f"Unknown {kind} config name: {name}")
            if not list_kind(name, broker):
                verb = "append" if op == OP_APPEND else "subtract"
                raise ConfigRequestError(ErrorCode.INVALID_REQUEST,
                                         f"Config value {verb} is not allowed for config key: {name}")
            if name in out:
                base = out[name]
            elif broker:
                base = broker_keys()[name].default or ""
            else:
                base = TOPIC_CONFIGS[name].default
            old = [x.strip() for x in base.split(",") if x.strip()]
            items = [x.strip() for x in (value or "").split(",") if x.strip()]
            if op == OP_APPEND:
                new = old + [x for x in items if x not in old]
            else:
                new = [x for x in old if x not in items]
            out[name] = ",".join(new)
        else:
            raise ConfigRequestError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op} for config {name}")
    return out


def _check_broker_value(key: BrokerKey, name: str, value: str) -> str:
    """Kafka's type and range check of a dynamic broker config (``name`` may be its listener override)."""
    if key.topic_synonym is not None:
        # Same type and bounds as the topic config it is the default of; Kafka's wording, with
        # the broker-level name in it.
        try:
            return validate_topic_config(key.topic_synonym, value)
        except InvalidConfigError as exc:
            raise InvalidConfigError(str(exc).replace(f"configuration {key.topic_synonym}:", f"configuration {name}:")) from None
    kafka = broker_config_key(key.name)
    if kafka is None:
        return value.strip()
    try:
        return check_value(kafka, value)
    except InvalidConfigError as exc:
        raise InvalidConfigError(str(exc).replace(f"configuration {key.name}:", f"configuration {name}:")) from None


@cache
def _dynamic_password_configs() -> tuple[str, ...]:
    return tuple(n for n, k in broker_catalogue().items() if k.kind == "password" and k.mode != READ_ONLY)


def is_password_config(name: str) -> bool:
    """Kafka's DynamicBrokerConfig.isPasswordConfig: a dynamic PASSWORD config, or an override of one."""
    return any(name.endswith(p) for p in _dynamic_password_configs())


def validate_broker_update(props: Mapping[str, str | None], resource_name: str, per_broker: bool, *,
                           password_encoder: bool = False) -> dict[str, str]:
    """Validate a whole new dynamic config map of one broker (or of the cluster default), with
    Kafka's DynamicBrokerConfig rules, in its order:

    * read-only configs (Kafka's and kaflet's own): "Cannot update these configs dynamically";
    * keystores and truststores without a listener prefix: "... only per-listener";
    * values: Kafka's type and range checks (INVALID_CONFIG naming the key);
    * per-broker configs at the cluster default: "broker id must be specified";
    * dynamic PASSWORD configs: Kafka stores them encrypted with password.encoder.secret, which
      kaflet does not implement, so they are refused with Kafka's message for a broker without it.

    Keys that are not Kafka configs at all are accepted and stored, as Kafka does (they are the
    custom configs of its plugins). Returns the normalised map.
    """
    from kaflet.protocol.errors import ErrorCode

    prefix = f"Invalid config value for resource ConfigResource(type=BROKER, name='{resource_name}'): "

    def refuse(names: Iterable[str], message: str, code: int = ErrorCode.INVALID_REQUEST) -> None:
        found = sorted(names)
        if found:
            raise ConfigRequestError(code, f"{prefix}{message}: Set({', '.join(found)})")

    nulls = sorted(n for n, v in props.items() if v is None)
    if nulls:
        raise ConfigRequestError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {','.join(nulls)}")
    keys = broker_keys()
    refuse((n for n in props if n in keys and keys[n].mode == READ_ONLY), "Cannot update these configs dynamically")
    refuse((n for n in props if n in LISTENER_ONLY_SECURITY_CONFIGS),
           "These security configs can be dynamically updated only per-listener using the listener prefix")
    out: dict[str, str] = {}
    for name, value in props.items():
        assert value is not None
        key = _type_key(name)
        if key is None or (key.mode == READ_ONLY and name not in keys):
            out[name] = value  # a custom config (or an override DynamicConfig does not type)
            continue
        try:
            out[name] = _check_broker_value(key, name, value)
        except InvalidConfigError as exc:
            raise ConfigRequestError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    if not per_broker:
        refuse((n for n in props if (n in keys and keys[n].mode == PER_BROKER) or (
            (base := listener_base(n)) is not None and base[1] not in CLUSTER_LEVEL_LISTENER_CONFIGS)),
            "Cannot update these configs at default cluster level, broker id must be specified")
    passwords = sorted(n for n in props if is_password_config(n))
    if passwords:
        why = ("kaflet does not encrypt dynamic password configs; password.encoder.secret has no effect"
               if password_encoder else "Password encoder secret not configured")
        raise ConfigRequestError(ErrorCode.INVALID_CONFIG, prefix + why)
    return out


#: Broker configs whose current value is read each time it is used (Broker._producer_id_expiration_ms)
#: or applied by ConfigAdmin when it changes (the replication quotas' bounds).
_READ_LIVE = frozenset({"producer.id.expiration.ms", "leader.replication.throttled.rate",
                        "follower.replication.throttled.rate", "replica.alter.log.dirs.io.max.bytes.per.second"})


def applied_at_run_time(name: str) -> bool:
    """Whether kaflet applies a dynamic change of this broker config: the broker-level default
    of a topic config it enforces reaches every log without an override, the cleaner's settings
    restart the cleaner (ConfigAdmin), and those in ``_READ_LIVE`` are read where they are used."""
    if name in CLEANER_CONFIGS or name in _READ_LIVE:
        return True
    key = broker_keys().get(name)
    if key is None or key.topic_synonym is None:
        return False
    d = TOPIC_CONFIGS[key.topic_synonym]
    return d.enforced


def report_dynamic_key(name: str) -> None:
    """Log once that a stored dynamic broker config has no effect in kaflet (unless it has one)."""
    if applied_at_run_time(name):
        return
    if broker_config_key(name) is None:
        log_unknown_dynamic(name)
    else:
        log_not_acted_on(name, dynamic=True)
