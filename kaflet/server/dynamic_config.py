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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from kaflet.server.config import BROKER_CONFIGS, LONG_MAX, parse_bool, parse_list
from kaflet.server.config_docs import broker_doc, topic_doc
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
    dynamic: bool
    topic_synonym: str | None = None  # the topic config this key supplies the default of


# Broker configs outside BrokerConfig's table: the broker-level names of topic configs, their
# hour/minute variants, the cleaner and thread-pool settings. (name, kind, default, dynamic)
_EXTRA_KEYS: tuple[tuple[str, str, str | None, bool], ...] = (
    ("log.retention.ms", "long", None, True),
    ("log.retention.minutes", "int", None, False),
    ("log.retention.hours", "int", "168", False),
    ("log.retention.bytes", "long", "-1", True),
    ("log.retention.check.interval.ms", "long", "300000", False),
    ("log.roll.jitter.ms", "long", None, True),
    ("log.roll.jitter.hours", "int", "0", False),
    ("log.cleanup.policy", "list", "delete", True),
    ("log.cleaner.enable", "boolean", "true", False),
    ("log.cleaner.delete.retention.ms", "long", "86400000", True),
    ("log.cleaner.min.compaction.lag.ms", "long", "0", True),
    ("log.cleaner.max.compaction.lag.ms", "long", str(LONG_MAX), True),
    ("log.cleaner.min.cleanable.ratio", "double", "0.5", True),
    ("log.cleaner.threads", "int", "1", True),
    ("log.cleaner.dedupe.buffer.size", "long", "134217728", True),
    ("log.cleaner.io.buffer.size", "int", "524288", True),
    ("log.cleaner.io.buffer.load.factor", "double", "0.9", True),
    ("log.cleaner.io.max.bytes.per.second", "double", "1.7976931348623157E308", True),
    ("log.cleaner.backoff.ms", "long", "15000", True),
    ("log.preallocate", "boolean", "false", True),
    ("log.message.downconversion.enable", "boolean", "true", True),
    ("log.message.format.version", "string", "3.0-IV1", False),
    ("log.message.timestamp.difference.max.ms", "long", str(LONG_MAX), True),
    ("unclean.leader.election.enable", "boolean", "false", True),
    ("num.network.threads", "int", "3", True),
    ("num.io.threads", "int", "8", True),
    ("num.recovery.threads.per.data.dir", "int", "1", True),
    ("num.replica.fetchers", "int", "1", True),
    ("background.threads", "int", "10", True),
    ("queued.max.requests", "int", "500", False),
)

# Kafka's types of the keys in BrokerConfig's table where parsing alone cannot tell (int vs long,
# and the address lists Kafka types as plain strings).
_KINDS = {
    "log.roll.ms": "long", "log.flush.interval.messages": "long", "log.flush.interval.ms": "long",
    "log.flush.scheduler.interval.ms": "long", "log.segment.delete.delay.ms": "long",
    "connections.max.idle.ms": "long", "listeners": "string", "advertised.listeners": "string",
    "log.dirs": "string",
}

# Topic-config defaults Kafka keeps at the broker but which it refuses to change at run time.
_NOT_DYNAMIC_TOPIC_DEFAULTS = {"log.message.format.version"}


def _kind_of(name: str, parse: Any) -> str:
    if name in _KINDS:
        return _KINDS[name]
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


@cache
def broker_keys() -> dict[str, BrokerKey]:
    """Every broker config kaflet knows, by name."""
    topic_of = {d.broker_key: name for name, d in TOPIC_CONFIGS.items() if d.broker_key}
    dynamic = {k for k in topic_of if k not in _NOT_DYNAMIC_TOPIC_DEFAULTS}
    out: dict[str, BrokerKey] = {}
    for name, d in BROKER_CONFIGS.items():
        out[name] = BrokerKey(name, _kind_of(name, d.parse), format_value(d.default), name in dynamic, topic_of.get(name))
    for name, kind, default, is_dynamic in _EXTRA_KEYS:
        out[name] = BrokerKey(name, kind, default, is_dynamic or name in dynamic, topic_of.get(name))
    # A topic config whose broker-level name is in neither table still gets one.
    for bname, tname in topic_of.items():
        if bname not in out:
            tdef = TOPIC_CONFIGS[tname]
            out[bname] = BrokerKey(bname, tdef.kind, tdef.default, bname in dynamic, tname)
    # log.dirs defaults to log.dir in kaflet's table; Kafka reports it unset (null).
    if "log.dirs" in out:
        out["log.dirs"] = BrokerKey("log.dirs", "string", None, False)
    return out


def list_kind(name: str, broker: bool) -> bool:
    """True when the config is a LIST (only lists take APPEND and SUBTRACT)."""
    if broker:
        key = broker_keys().get(name)
        return key is not None and key.kind == "list"
    d = TOPIC_CONFIGS.get(name)
    return d is not None and d.kind == "list"


def broker_synonyms(name: str) -> list[str]:
    """Kafka's synonym names of a broker config, most specific first."""
    for group in (("log.roll.ms", "log.roll.hours"), ("log.roll.jitter.ms", "log.roll.jitter.hours"),
                  ("log.retention.ms", "log.retention.minutes", "log.retention.hours")):
        if name in group:
            return list(group)
    if name == "log.flush.interval.ms":
        # The scheduler interval is what applies while log.flush.interval.ms is unset.
        return [name, "log.flush.scheduler.interval.ms"]
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
        defaults = {k: b.default for k, b in broker_keys().items() if b.default is not None}
        return [(self.per_broker, SOURCE_DYNAMIC_BROKER), (self.default, SOURCE_DYNAMIC_DEFAULT_BROKER),
                (self.static, SOURCE_STATIC_BROKER), (defaults, SOURCE_DEFAULT)]

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


def _broker_entry(dynamic: DynamicBrokerConfig, name: str, value: str | None, per_broker: bool) -> ConfigEntry:
    key = broker_keys().get(name)
    # Kafka treats a config of unknown type as possibly secret: no value, no synonym values.
    sensitive = key is None
    syns = dynamic.synonyms(name, sensitive)
    if not per_broker:
        syns = [s for s in syns if s.source == SOURCE_DYNAMIC_DEFAULT_BROKER]
    return ConfigEntry(
        name, None if sensitive else value, syns[0].source if syns else SOURCE_DEFAULT,
        read_only=not (key is not None and key.dynamic), sensitive=sensitive,
        kind=TYPE_IDS.get(key.kind, TYPE_UNKNOWN) if key else TYPE_UNKNOWN,
        documentation=broker_doc(name, key.topic_synonym) if key else None, synonyms=syns,
    )


def describe_broker(dynamic: DynamicBrokerConfig, keys: Sequence[str] | None = None) -> list[ConfigEntry]:
    """This broker's configs: every known key plus whatever server.properties set."""
    names = set(broker_keys()) | set(dynamic.static) | set(dynamic.per_broker) | set(dynamic.default)
    names = {n for n in names if not n.startswith("listener.name.")} | {
        n for n in dynamic.static if n.startswith("listener.name.")}
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


def _check_broker_value(name: str, value: str) -> str:
    key = broker_keys()[name]
    if key.topic_synonym is not None:
        # Same type and bounds as the topic config it is the default of; Kafka's wording, with
        # the broker-level name in it.
        try:
            return validate_topic_config(key.topic_synonym, value)
        except InvalidConfigError as exc:
            raise InvalidConfigError(str(exc).replace(f"configuration {key.topic_synonym}:", f"configuration {name}:")) from None
    v = value.strip()
    if key.kind in ("int", "long"):
        try:
            n = int(v)
        except ValueError:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: Not a number of type {key.kind.upper()}") from None
        if (name.startswith("num.") or name.endswith(".threads")) and n < 1:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Value must be at least 1")
    elif key.kind == "double":
        try:
            float(v)
        except ValueError:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: Not a number of type DOUBLE") from None
    elif key.kind == "boolean" and v.lower() not in ("true", "false"):
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: Expected value to be either true or false")
    return v


def validate_broker_update(props: Mapping[str, str | None], resource_name: str, per_broker: bool) -> dict[str, str]:
    """Validate a whole new dynamic config map of one broker (or of the cluster default).

    Unknown names and bad values: INVALID_CONFIG naming the key. Configs Kafka cannot change
    at run time: INVALID_REQUEST with Kafka's "Cannot update these configs dynamically".
    """
    from kaflet.protocol.errors import ErrorCode

    known = broker_keys()
    unknown = sorted(n for n in props if n not in known)
    if unknown:
        raise ConfigRequestError(ErrorCode.INVALID_CONFIG, f"Unknown broker config name: {', '.join(unknown)}")
    static_only = [n for n in props if not known[n].dynamic]
    if static_only:
        raise ConfigRequestError(
            ErrorCode.INVALID_REQUEST,
            f"Invalid config value for resource ConfigResource(type=BROKER, name='{resource_name}'): "
            f"Cannot update these configs dynamically: Set({', '.join(static_only)})",
        )
    out = {}
    for name, value in props.items():
        if value is None:
            raise ConfigRequestError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {name}")
        try:
            out[name] = _check_broker_value(name, value)
        except InvalidConfigError as exc:
            raise ConfigRequestError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    return out
