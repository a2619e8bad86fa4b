"""Topic-level configs: Kafka's whole LogConfig catalogue, its validation, and what kaflet enforces.

Every topic config Kafka knows is accepted, validated with Kafka's rules and messages, stored
in ``/config/topics/<t>`` and described. The ones kaflet stores but does not act on are listed in
NOT_ENFORCED with the reason, and the broker logs each of them once when it is first set.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from kaflet.server.kafka_configs import InvalidConfigError, KafkaConfigKey, check_value, topic_catalogue

log = logging.getLogger("kaflet.config")

__all__ = ["InvalidConfigError", "NOT_ENFORCED", "TOPIC_CONFIGS", "TopicConfigDef", "effective_topic_config",
           "validate_topic_config", "validate_topic_configs"]

# Topic configs kaflet stores and describes but does not act on, and why.
NOT_ENFORCED: dict[str, str] = {
    "local.retention.bytes": "tiered storage is not implemented",
    "local.retention.ms": "tiered storage is not implemented",
    "message.format.version": "kaflet always writes record format v2, as Kafka 3.0 and later do",
    "preallocate": "segment files are not preallocated",
    "remote.log.copy.disable": "tiered storage is not implemented",
    "remote.log.delete.on.disable": "tiered storage is not implemented",
    "remote.storage.enable": "tiered storage is not implemented",
}

# Kafka's LogConfig.validateNoInvalidRemoteStorageConfigsInZK, and remote.storage.enable on a
# broker without tiered storage (remote.log.storage.system.enable, which kaflet does not implement).
_ZK_REFUSED = ("It is invalid to set `remote.log.delete.on.disable` or `remote.log.copy.disable` "
               "under Zookeeper's mode.")
_NO_TIERED_STORAGE = "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    """One topic config: Kafka's key and whether kaflet acts on it."""

    key: KafkaConfigKey
    enforced: bool

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def kind(self) -> str:
        return self.key.kind

    @property
    def broker_key(self) -> str | None:
        """The broker config that supplies this config's default (Kafka's TOPIC_CONFIG_SYNONYMS)."""
        return self.key.synonym

    @property
    def default(self) -> str:
        return self.key.default or ""


TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    name: TopicConfigDef(key, name not in NOT_ENFORCED) for name, key in topic_catalogue().items()
}

_reported: set[str] = set()


def validate_topic_config(name: str, value: str | None) -> str:
    """Return the normalised value or raise InvalidConfigError with Kafka's wording."""
    d = TOPIC_CONFIGS.get(name)
    if d is None:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
    if value is None:
        raise InvalidConfigError(f"Invalid value null for configuration {name}: entry must be non null")
    return check_value(d.key, value)


def validate_topic_configs(configs: Mapping[str, str | None],
                           defaults: Mapping[str, str] | None = None) -> dict[str, str]:
    """Validate a whole override map as Kafka's LogConfig.validate does; returns normalised values.

    ``defaults`` are the broker's topic-config defaults, for the checks across configs.
    """
    out = {k: validate_topic_config(k, v) for k, v in configs.items()}
    merged = {**(defaults or {}), **out}
    lag_min = int(merged.get("min.compaction.lag.ms", TOPIC_CONFIGS["min.compaction.lag.ms"].default))
    lag_max = int(merged.get("max.compaction.lag.ms", TOPIC_CONFIGS["max.compaction.lag.ms"].default))
    if lag_min > lag_max:
        raise InvalidConfigError(f"conflict topic config setting min.compaction.lag.ms ({lag_min}) > "
                                 f"max.compaction.lag.ms ({lag_max})")
    if "true" in (out.get("remote.log.delete.on.disable"), out.get("remote.log.copy.disable")):
        raise InvalidConfigError(_ZK_REFUSED)
    if out.get("remote.storage.enable") == "true":
        raise InvalidConfigError(_NO_TIERED_STORAGE)
    report_not_enforced(out)
    return out


def report_not_enforced(overrides: Mapping[str, str]) -> None:
    """Log, once per config and process, that a stored topic config is not acted on."""
    for name in sorted(set(overrides) - _reported):
        why = NOT_ENFORCED.get(name)
        if why is not None:
            _reported.add(name)
            log.warning("topic config %s is stored but kaflet does not act on it: %s", name, why)


def effective_topic_config(broker_defaults: dict[str, str], overrides: dict[str, str]) -> dict[str, str]:
    """Every topic config's value: the override, else the broker's default, else Kafka's."""
    out = {name: d.default for name, d in TOPIC_CONFIGS.items()}
    out.update({k: v for k, v in broker_defaults.items() if k in out})
    out.update(overrides)
    return out
