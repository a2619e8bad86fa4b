"""Topic-level configs: Kafka's names, types, defaults and validation messages."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from kaflet.server.config import LONG_MAX

log = logging.getLogger("kaflet.config")


class InvalidConfigError(ValueError):
    """A topic config name or value that Kafka would refuse with INVALID_CONFIG."""


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    """One topic config: type, bounds, the broker config that supplies its default."""

    name: str
    kind: str  # long, int, double, boolean, string, list
    broker_key: str | None
    default: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    enforced: bool = True  # False: stored and described, but kaflet does not act on it yet


def _d(*items: TopicConfigDef) -> dict[str, TopicConfigDef]:
    return {i.name: i for i in items}


_L = str(LONG_MAX)
TOPIC_CONFIGS: dict[str, TopicConfigDef] = _d(
    TopicConfigDef("cleanup.policy", "list", "log.cleanup.policy", "delete", choices=("compact", "delete")),
    TopicConfigDef("compression.type", "string", "compression.type", "producer",
                   choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    TopicConfigDef("delete.retention.ms", "long", "log.cleaner.delete.retention.ms", "86400000", minimum=0),
    TopicConfigDef("file.delete.delay.ms", "long", "log.segment.delete.delay.ms", "60000", minimum=0),
    TopicConfigDef("flush.messages", "long", "log.flush.interval.messages", _L, minimum=1),
    TopicConfigDef("flush.ms", "long", "log.flush.interval.ms", _L, minimum=0),
    TopicConfigDef("follower.replication.throttled.replicas", "list", None, "", enforced=False),
    TopicConfigDef("index.interval.bytes", "int", "log.index.interval.bytes", "4096", minimum=0),
    TopicConfigDef("leader.replication.throttled.replicas", "list", None, "", enforced=False),
    TopicConfigDef("max.compaction.lag.ms", "long", "log.cleaner.max.compaction.lag.ms", _L, minimum=1),
    TopicConfigDef("max.message.bytes", "int", "message.max.bytes", "1048588", minimum=0),
    TopicConfigDef("message.downconversion.enable", "boolean", "log.message.downconversion.enable", "true", enforced=False),
    TopicConfigDef("message.format.version", "string", "log.message.format.version", "3.0-IV1", enforced=False),
    TopicConfigDef("message.timestamp.difference.max.ms", "long", "log.message.timestamp.difference.max.ms", _L,
                   minimum=0),
    TopicConfigDef("message.timestamp.type", "string", "log.message.timestamp.type", "CreateTime",
                   choices=("CreateTime", "LogAppendTime")),
    TopicConfigDef("min.cleanable.dirty.ratio", "double", "log.cleaner.min.cleanable.ratio", "0.5",
                   minimum=0, maximum=1),
    TopicConfigDef("min.compaction.lag.ms", "long", "log.cleaner.min.compaction.lag.ms", "0", minimum=0),
    TopicConfigDef("min.insync.replicas", "int", "min.insync.replicas", "1", minimum=1),
    TopicConfigDef("preallocate", "boolean", "log.preallocate", "false", enforced=False),
    TopicConfigDef("retention.bytes", "long", "log.retention.bytes", "-1"),
    TopicConfigDef("retention.ms", "long", "log.retention.ms", "604800000", minimum=-1),
    TopicConfigDef("segment.bytes", "int", "log.segment.bytes", "1073741824", minimum=14),
    TopicConfigDef("segment.index.bytes", "int", "log.index.size.max.bytes", "10485760", minimum=4),
    TopicConfigDef("segment.jitter.ms", "long", "log.roll.jitter.ms", "0", minimum=0, enforced=False),
    TopicConfigDef("segment.ms", "long", "log.roll.ms", "604800000", minimum=1),
    TopicConfigDef("unclean.leader.election.enable", "boolean", "unclean.leader.election.enable", "false", enforced=False),
)

_PARSERS: dict[str, Callable[[str], object]] = {"long": int, "int": int, "double": float}


def validate_topic_config(name: str, value: str | None) -> str:
    """Return the normalised value or raise InvalidConfigError with Kafka's wording."""
    d = TOPIC_CONFIGS.get(name)
    if d is None:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
    if value is None:
        raise InvalidConfigError(f"Invalid value null for configuration {name}: entry must be non null")
    v = value.strip()
    if d.kind in _PARSERS:
        try:
            num = _PARSERS[d.kind](v)
        except ValueError:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: Not a number of type {d.kind.upper()}"
            ) from None
        if d.kind == "int" and not -(2**31) <= int(num) < 2**31:  # type: ignore[call-overload]
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT")
        if d.kind == "long" and not -(2**63) <= int(num) < 2**63:  # type: ignore[call-overload]
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Not a number of type LONG")
        if d.minimum is not None and num < d.minimum:  # type: ignore[operator]
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: Value must be at least {_num(d.minimum)}"
            )
        if d.maximum is not None and num > d.maximum:  # type: ignore[operator]
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: Value must be no more than {_num(d.maximum)}"
            )
        return v
    if d.kind == "boolean":
        if v.lower() not in ("true", "false"):
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Expected value to be either true or false")
        return v.lower()
    if d.kind == "list":
        items = [x.strip() for x in v.split(",") if x.strip()]
        if d.choices is not None:
            for item in items:
                if item not in d.choices:
                    raise InvalidConfigError(
                        f"Invalid value {item} for configuration {name}: String must be one of: {', '.join(d.choices)}"
                    )
        return ",".join(items)
    if d.choices is not None and v not in d.choices:
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: String must be one of: {', '.join(d.choices)}"
        )
    return v


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def validate_topic_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Validate a whole override map; returns normalised values."""
    out = {k: validate_topic_config(k, v) for k, v in configs.items()}
    pending = [k for k in out if not TOPIC_CONFIGS[k].enforced]
    if pending:
        log.warning("topic configs %s are stored but not yet enforced by kaflet", ", ".join(sorted(pending)))
    return out


def effective_topic_config(broker_defaults: dict[str, str], overrides: dict[str, str]) -> dict[str, str]:
    """Every topic config's value: the override, else the broker's default, else Kafka's."""
    out = {name: d.default for name, d in TOPIC_CONFIGS.items()}
    out.update({k: v for k, v in broker_defaults.items() if k in out})
    out.update(overrides)
    return out
