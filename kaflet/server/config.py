"""Broker configuration: Kafka's server.properties names, types and defaults.

BROKER_CONFIGS holds the keys kaflet acts on. Every other supplied key is sorted at start-up
against Kafka's catalogue (kafka_configs.py): a Kafka key kaflet does not act on is validated
with Kafka's rules and reported once as having no effect; a key Kafka does not know gets Kafka's
"supplied but isn't a known config" warning. Nothing is silently accepted.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from kaflet.coordinator.group.consumer_coordinator import ConsumerGroupConfig
from kaflet.server.kafka_configs import (
    DYNAMIC_ONLY,
    LISTENER_PREFIX,
    InvalidConfigError,
    broker_config_key,
    check_value,
    listener_base,
)

log = logging.getLogger("kaflet.config")

LONG_MAX = 9223372036854775807


class ConfigError(ValueError):
    """A configuration value is missing, malformed or out of range."""


def parse_bool(v: str) -> bool:
    s = v.strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ValueError(f"expected true or false, got {v!r}")


def parse_list(v: str) -> list[str]:
    return [x.strip() for x in v.split(",") if x.strip()]


def _parse_fraction(v: str) -> float:
    value = float(v)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{v!r} is not between 0 and 1")
    return value


def _parse_rate(v: str) -> float:
    value = float(v)
    if not value >= 0.0:
        raise ValueError(f"{v!r} is negative")
    return value


def _parse_cleanup_policy(v: str) -> str:
    items = parse_list(v)
    for item in items:
        if item not in ("compact", "delete"):
            raise ValueError(f"{item!r} is not one of compact, delete")
    return ",".join(items)


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One broker config key: its parser, default and bounds."""

    name: str
    parse: Callable[[str], Any]
    default: Any
    minimum: int | None = None
    choices: tuple[str, ...] | None = None


def _defs(*items: ConfigDef) -> dict[str, ConfigDef]:
    return {d.name: d for d in items}


BROKER_CONFIGS: dict[str, ConfigDef] = _defs(
    ConfigDef("broker.id", int, -1, minimum=-1),
    ConfigDef("broker.id.generation.enable", parse_bool, True),
    ConfigDef("reserved.broker.max.id", int, 1000, minimum=0),
    ConfigDef("broker.rack", str, None),
    ConfigDef("listeners", parse_list, ["PLAINTEXT://127.0.0.1:9092"]),
    ConfigDef("advertised.listeners", parse_list, None),
    ConfigDef("listener.security.protocol.map", str,
              "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"),
    ConfigDef("log.dirs", parse_list, None),
    ConfigDef("log.dir", str, "./data"),
    ConfigDef("num.partitions", int, 1, minimum=1),
    ConfigDef("default.replication.factor", int, 1, minimum=1),
    ConfigDef("auto.create.topics.enable", parse_bool, True),
    ConfigDef("delete.topic.enable", parse_bool, True),
    ConfigDef("message.max.bytes", int, 1048588, minimum=0),
    ConfigDef("log.segment.bytes", int, 1073741824, minimum=14),
    ConfigDef("log.roll.ms", int, None, minimum=1),
    ConfigDef("log.roll.hours", int, 168, minimum=1),
    ConfigDef("log.index.size.max.bytes", int, 10485760, minimum=4),
    ConfigDef("log.index.interval.bytes", int, 4096, minimum=0),
    ConfigDef("log.flush.interval.messages", int, LONG_MAX, minimum=1),
    ConfigDef("log.flush.interval.ms", int, None, minimum=0),
    ConfigDef("log.flush.scheduler.interval.ms", int, LONG_MAX, minimum=0),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", int, 60000, minimum=0),
    ConfigDef("log.flush.start.offset.checkpoint.interval.ms", int, 60000, minimum=0),
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", int, 5000, minimum=1),
    # Replication (kaflet/replication): the leader's ISR rule and the followers' fetchers.
    ConfigDef("replica.lag.time.max.ms", int, 30000, minimum=1),
    ConfigDef("num.replica.fetchers", int, 1, minimum=1),
    ConfigDef("replica.fetch.wait.max.ms", int, 500, minimum=0),
    ConfigDef("replica.fetch.min.bytes", int, 1, minimum=0),
    ConfigDef("replica.fetch.max.bytes", int, 1048576, minimum=0),
    ConfigDef("replica.fetch.response.max.bytes", int, 10485760, minimum=0),
    ConfigDef("replica.fetch.backoff.ms", int, 1000, minimum=0),
    ConfigDef("replica.socket.timeout.ms", int, 30000, minimum=1),
    ConfigDef("log.message.timestamp.type", str, "CreateTime", choices=("CreateTime", "LogAppendTime")),
    ConfigDef("compression.type", str, "producer",
              choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
    ConfigDef("log.segment.delete.delay.ms", int, 60000, minimum=0),
    # Retention: log.retention.ms wins over .minutes, which wins over .hours (retention_ms).
    ConfigDef("log.retention.ms", int, None),
    ConfigDef("log.retention.minutes", int, None),
    ConfigDef("log.retention.hours", int, 168),
    ConfigDef("log.retention.bytes", int, -1),
    ConfigDef("log.retention.check.interval.ms", int, 300000, minimum=1),
    ConfigDef("log.cleanup.policy", _parse_cleanup_policy, "delete"),
    # The log cleaner (kaflet/log/cleaner*.py) and the broker defaults of its topic configs.
    ConfigDef("log.cleaner.enable", parse_bool, True),
    ConfigDef("log.cleaner.threads", int, 1, minimum=0),
    ConfigDef("log.cleaner.backoff.ms", int, 15000, minimum=0),
    ConfigDef("log.cleaner.dedupe.buffer.size", int, 134217728, minimum=1),
    ConfigDef("log.cleaner.io.buffer.size", int, 524288, minimum=0),
    ConfigDef("log.cleaner.io.buffer.load.factor", float, 0.9),
    ConfigDef("log.cleaner.io.max.bytes.per.second", float, 1.7976931348623157e308),
    ConfigDef("log.cleaner.min.cleanable.ratio", float, 0.5),
    ConfigDef("log.cleaner.delete.retention.ms", int, 86400000, minimum=0),
    ConfigDef("log.cleaner.min.compaction.lag.ms", int, 0, minimum=0),
    ConfigDef("log.cleaner.max.compaction.lag.ms", int, LONG_MAX, minimum=1),
    ConfigDef("min.insync.replicas", int, 1, minimum=1),
    ConfigDef("socket.request.max.bytes", int, 104857600, minimum=1),
    ConfigDef("socket.send.buffer.bytes", int, 102400, minimum=-1),
    ConfigDef("socket.receive.buffer.bytes", int, 102400, minimum=-1),
    ConfigDef("connections.max.idle.ms", int, 600000, minimum=-1),
    ConfigDef("fetch.max.bytes", int, 57671680, minimum=1024),
    ConfigDef("max.incremental.fetch.session.cache.slots", int, 1000, minimum=0),
    ConfigDef("request.timeout.ms", int, 30000, minimum=0),
    ConfigDef("max.request.partition.size.limit", int, 2000, minimum=1),
    # Cluster mode (kaflet/controller, docs/cluster.md): ZooKeeper, the controller, shutdown.
    ConfigDef("zookeeper.connect", str, None),
    ConfigDef("zookeeper.session.timeout.ms", int, 18000, minimum=1),
    ConfigDef("zookeeper.connection.timeout.ms", int, None, minimum=1),
    ConfigDef("controller.socket.timeout.ms", int, 30000, minimum=1),
    ConfigDef("controlled.shutdown.enable", parse_bool, True),
    ConfigDef("controlled.shutdown.max.retries", int, 3, minimum=0),
    ConfigDef("controlled.shutdown.retry.backoff.ms", int, 5000, minimum=0),
    ConfigDef("auto.leader.rebalance.enable", parse_bool, True),
    ConfigDef("leader.imbalance.check.interval.seconds", int, 300, minimum=1),
    ConfigDef("leader.imbalance.per.broker.percentage", int, 10, minimum=0),
    ConfigDef("unclean.leader.election.enable", parse_bool, False),
    # Group coordinator and committed offsets (kaflet/coordinator/group).
    ConfigDef("group.min.session.timeout.ms", int, 6000, minimum=0),
    ConfigDef("group.max.session.timeout.ms", int, 1800000, minimum=0),
    ConfigDef("group.initial.rebalance.delay.ms", int, 3000, minimum=0),
    ConfigDef("group.max.size", int, 2147483647, minimum=1),
    # KIP-848's consumer groups (kaflet/coordinator/group/consumer_coordinator.py checks their bounds).
    ConfigDef("group.consumer.session.timeout.ms", int, 45000, minimum=1),
    ConfigDef("group.consumer.min.session.timeout.ms", int, 45000, minimum=1),
    ConfigDef("group.consumer.max.session.timeout.ms", int, 60000, minimum=1),
    ConfigDef("group.consumer.heartbeat.interval.ms", int, 5000, minimum=1),
    ConfigDef("group.consumer.min.heartbeat.interval.ms", int, 5000, minimum=1),
    ConfigDef("group.consumer.max.heartbeat.interval.ms", int, 15000, minimum=1),
    ConfigDef("group.consumer.max.size", int, 2147483647, minimum=1),
    ConfigDef("group.consumer.assignors", parse_list, ["uniform", "range"]),
    ConfigDef("group.consumer.migration.policy", str.lower, "disabled",
              choices=("disabled", "upgrade", "downgrade", "bidirectional")),
    ConfigDef("offsets.topic.num.partitions", int, 50, minimum=1),
    ConfigDef("offsets.topic.replication.factor", int, 3, minimum=1),
    ConfigDef("offsets.topic.segment.bytes", int, 104857600, minimum=1),
    ConfigDef("offsets.retention.minutes", int, 10080, minimum=1),
    ConfigDef("offsets.retention.check.interval.ms", int, 600000, minimum=1),
    ConfigDef("offset.metadata.max.bytes", int, 4096, minimum=0),
    ConfigDef("offsets.commit.timeout.ms", int, 5000, minimum=1),
    # Transaction coordinator (kaflet/coordinator/transaction).
    ConfigDef("transaction.state.log.num.partitions", int, 50, minimum=1),
    ConfigDef("transaction.state.log.replication.factor", int, 3, minimum=1),
    ConfigDef("transaction.state.log.segment.bytes", int, 104857600, minimum=1),
    ConfigDef("transaction.state.log.min.isr", int, 2, minimum=1),
    ConfigDef("transaction.max.timeout.ms", int, 900000, minimum=1),
    ConfigDef("transactional.id.expiration.ms", int, 604800000, minimum=1),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", int, 10000, minimum=1),
    ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", int, 3600000, minimum=1),
    # Producer state of every log (kaflet/log/producer_state.py; a dynamic change applies).
    ConfigDef("producer.id.expiration.ms", int, 86400000, minimum=1),
    ConfigDef("producer.id.expiration.check.interval.ms", int, 600000, minimum=1),
    # Listener security (kaflet/security). Each may be overridden per listener as
    # listener.name.<listener>.<key>; secrets are in SECRET_SECURITY_CONFIGS below instead.
    ConfigDef("sasl.enabled.mechanisms", str, "GSSAPI"),
    ConfigDef("connection.failed.authentication.delay.ms", int, 100, minimum=0),
    ConfigDef("sasl.server.max.receive.size", int, 524288, minimum=1),
    # KIP-368: 0 or less is off; also listener.name.<l>.<mechanism>.connections.max.reauth.ms.
    ConfigDef("connections.max.reauth.ms", int, 0),
    ConfigDef("ssl.keystore.type", str, "JKS"),
    ConfigDef("ssl.keystore.location", str, None),
    ConfigDef("ssl.keystore.certificate.chain", str, None),
    ConfigDef("ssl.truststore.type", str, "JKS"),
    ConfigDef("ssl.truststore.location", str, None),
    ConfigDef("ssl.truststore.certificates", str, None),
    ConfigDef("ssl.client.auth", str, "none", choices=("required", "requested", "none")),
    ConfigDef("ssl.enabled.protocols", str, "TLSv1.2,TLSv1.3"),
    ConfigDef("ssl.protocol", str, "TLSv1.3"),
    ConfigDef("ssl.cipher.suites", str, None),
    ConfigDef("ssl.principal.mapping.rules", str, "DEFAULT"),
    ConfigDef("ssl.endpoint.identification.algorithm", str, "https"),
    ConfigDef("security.inter.broker.protocol", str, "PLAINTEXT"),
    ConfigDef("sasl.mechanism.inter.broker.protocol", str, "GSSAPI"),
    ConfigDef("inter.broker.listener.name", str, None),
    # Authorization (kaflet/security/authorizer.py).
    ConfigDef("authorizer.class.name", str, ""),
    ConfigDef("super.users", str, None),
    ConfigDef("allow.everyone.if.no.acl.found", parse_bool, False),
    # Client quotas (kaflet/quota): rates are measured over quota.window.num windows of
    # quota.window.size.seconds; no throttle time exceeds max.throttle.time.ms (the gateway's
    # name; throttle.max.time.ms is the published engine's, used when the former is unset).
    ConfigDef("quota.window.num", int, 11, minimum=1),
    ConfigDef("quota.window.size.seconds", int, 1, minimum=1),
    ConfigDef("max.throttle.time.ms", int, None, minimum=0),
    # Replication throttling (kaflet/quota/replication.py): the throttled rates are measured over
    # replication.quota.window.num windows of replication.quota.window.size.seconds.
    ConfigDef("replication.quota.window.num", int, 11, minimum=1),
    ConfigDef("replication.quota.window.size.seconds", int, 1, minimum=1),
    ConfigDef("throttle.max.time.ms", int, 10000, minimum=0),
    # The Logi-Kafka gateway (kaflet/gateway, docs/gateway.md): Logi-Kafka's names and defaults.
    # An empty gateway.url turns the gateway off. The gateway.*.interval.ms and
    # gateway.request.timeout.ms keys are kaflet's (Logi-Kafka hard-codes 60 s, 4 h and 10 s).
    ConfigDef("gateway.url", str, ""),
    ConfigDef("cluster.id", int, -1),
    ConfigDef("cluster.id.update", parse_bool, False),
    ConfigDef("session.report.ms", int, 300000, minimum=1),
    ConfigDef("max.sessions.per.user", int, 2000, minimum=1),
    ConfigDef("kafkaexmetrics.enable", parse_bool, False),
    ConfigDef("diskloadprotector.enable", parse_bool, True),
    # Disk load protection (kaflet/log/disk_load.py): kaflet's settings, Logi-Kafka tunes it inside.
    ConfigDef("diskloadprotector.util.threshold", _parse_fraction, 0.9),
    ConfigDef("diskloadprotector.cold.fetch.rate", _parse_rate, 10.0),
    ConfigDef("diskloadprotector.throttle.ms", int, 500, minimum=0),
    ConfigDef("diskloadprotector.sample.interval.ms", int, 100, minimum=1),
    ConfigDef("gateway.sync.interval.ms", int, 60000, minimum=1),
    ConfigDef("gateway.check.interval.ms", int, 14400000, minimum=1),
    ConfigDef("gateway.request.timeout.ms", int, 10000, minimum=1),
    # The gateway's authentication and authorization: clients log in as <cluster.id>.<appId>;
    # static users and ACLs, the denials log.
    ConfigDef("gateway.default.users", str, None),
    ConfigDef("gateway.default.acls", str, None),
    ConfigDef("gateway.denials.log.file", str, None),
    # The descriptor budget (kaflet/server/descriptors.py): -1 derives each from the open file
    # limit. max.broker.partitions is KIP-578's name (not in a Kafka release).
    ConfigDef("log.segment.open.files.max", int, -1, minimum=-1),
    ConfigDef("max.broker.partitions", int, -1, minimum=-1),
    # Metrics (kaflet/metrics): kaflet's own keys; an empty metrics.listener exposes nothing.
    ConfigDef("metrics.listener", str, ""),
    ConfigDef("kafkaexmetrics.max.series", int, 10000, minimum=1),
)

# Security configs that hold secrets: used (kaflet/security reads them from the originals), but
# kept out of BROKER_CONFIGS because they need no parsing; Kafka types them PASSWORD, so
# DescribeConfigs reports them as sensitive, without their value.
SECRET_SECURITY_CONFIGS = frozenset({"sasl.jaas.config", "ssl.key.password", "ssl.keystore.key"})

# Kafka keys kaflet does not act on because it does that job differently by design, with why.
# (Any other Kafka key kaflet does not act on is reported with the generic reason.)
NOT_APPLICABLE = {
    "num.network.threads": "kaflet serves the network from one event loop",
    "num.io.threads": "kaflet handles requests on one event loop",
    "num.recovery.threads.per.data.dir": "kaflet recovers logs one at a time at start-up",
    "queued.max.requests": "requests are read one at a time per connection",
    "background.threads": "background work runs on the broker's event loop and its executors",
    "ssl.keystore.password": "kaflet reads PEM key stores, which have no store password",
    "ssl.truststore.password": "kaflet reads PEM trust stores, which have no store password",
}


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java .properties text: key=value or key:value, # and ! comments, \\ continuations."""
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = raw.strip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1]
            continue
        line = pending + line
        pending = ""
        m = re.match(r"^((?:\\.|[^=:\s])+)\s*[=:\s]\s*(.*)$", line)
        if m:
            props[m.group(1).replace("\\", "")] = m.group(2).strip()
        else:
            props[line] = ""
    return props


class BrokerConfig:
    """Typed broker configuration built from properties and overrides."""

    def __init__(self, props: dict[str, str] | None = None) -> None:
        self.originals: dict[str, str] = dict(props or {})
        self.values: dict[str, Any] = {}
        self.unknown: list[str] = []  # not Kafka configs at all
        self.not_acted_on: list[str] = []  # Kafka configs kaflet accepts but does not act on
        for name, d in BROKER_CONFIGS.items():
            raw = self.originals.get(name)
            self.values[name] = d.default if raw is None else self._parse(d, raw)
        for key, raw in self.originals.items():
            kind = classify_static_key(key)
            if kind == UNKNOWN:
                self.unknown.append(key)
            elif kind == NOT_ACTED_ON:
                self.not_acted_on.append(key)
            kafka = broker_config_key(key) if kind != UNKNOWN else None
            if kafka is not None and key not in BROKER_CONFIGS and not key.startswith(LISTENER_PREFIX):
                # Parsed by nobody else: Kafka would refuse to start with a bad value, so does kaflet.
                try:
                    check_value(kafka, raw)
                except InvalidConfigError as exc:
                    raise ConfigError(str(exc)) from None
        if self.values["log.dirs"] is None:
            self.values["log.dirs"] = [self.values["log.dir"]]
        if not self.values["log.dirs"]:
            raise ConfigError("log.dirs must name at least one directory")
        # Kafka's own cross-checks (KafkaConfig.validateValues).
        if self.values["replica.fetch.wait.max.ms"] > self.values["replica.socket.timeout.ms"]:
            raise ConfigError("replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms to "
                              "prevent unnecessary socket timeouts")
        if self.values["replica.fetch.wait.max.ms"] > self.values["replica.lag.time.max.ms"]:
            raise ConfigError("replica.fetch.wait.max.ms should always be less than or equal to "
                              "replica.lag.time.max.ms to prevent frequent changes in ISR")
        try:
            ConsumerGroupConfig.from_broker(self.values)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    @staticmethod
    def _parse(d: ConfigDef, raw: str) -> Any:
        try:
            value = d.parse(raw)
        except ValueError:
            kind = {int: "an integer", parse_bool: "true or false"}.get(d.parse, "a valid value")
            raise ConfigError(f"Invalid value {raw!r} for configuration {d.name}: expected {kind}") from None
        if d.minimum is not None and isinstance(value, int) and value < d.minimum:
            raise ConfigError(f"Invalid value {raw} for configuration {d.name}: must be at least {d.minimum}")
        if d.choices is not None and value not in d.choices:
            raise ConfigError(
                f"Invalid value {raw!r} for configuration {d.name}: must be one of {', '.join(d.choices)}"
            )
        return value

    @classmethod
    def load(cls, path: str | None, overrides: Iterable[str] = ()) -> BrokerConfig:
        """Read a server.properties file (optional) and apply `key=value` overrides."""
        props: dict[str, str] = {}
        if path:
            try:
                with open(path, encoding="utf-8") as f:
                    props = parse_properties(f.read())
            except OSError as exc:
                raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        for ov in overrides:
            if "=" not in ov:
                raise ConfigError(f"--override expects key=value, got {ov!r}")
            k, v = ov.split("=", 1)
            props[k.strip()] = v.strip()
        return cls(props)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @classmethod
    def parse_value(cls, name: str, raw: str) -> Any:
        """One value of a key kaflet acts on, parsed and checked as at start-up (ConfigError)."""
        return cls._parse(BROKER_CONFIGS[name], raw)

    def report_unknown(self) -> None:
        """Log one line per supplied key that kaflet does not act on: Kafka's keys that kaflet
        ignores, and (as Kafka words it) keys that are not Kafka configs at all."""
        for key in self.not_acted_on:
            log_not_acted_on(key)
        for key in self.unknown:
            log.warning("The configuration '%s' was supplied but isn't a known config.", key)

    @property
    def roll_ms(self) -> int:
        ms = self.values["log.roll.ms"]
        return ms if ms is not None else self.values["log.roll.hours"] * 3600 * 1000

    @property
    def retention_ms(self) -> int:
        """log.retention.ms, else .minutes, else .hours, in ms; any negative value means -1."""
        v = self.values
        if v["log.retention.ms"] is not None:
            ms = v["log.retention.ms"]
        elif v["log.retention.minutes"] is not None:
            ms = v["log.retention.minutes"] * 60 * 1000
        else:
            ms = v["log.retention.hours"] * 3600 * 1000
        return -1 if ms < 0 else ms

    def topic_defaults(self) -> dict[str, str]:
        """Broker-level defaults of topic configs, under the topic config names.

        The typed keys below, then any other broker-level synonym supplied in server.properties
        (log.preallocate, log.message.timestamp.difference.max.ms, ...), already validated.
        """
        from kaflet.server.topic_config import TOPIC_CONFIGS

        supplied = {}
        for tname, d in TOPIC_CONFIGS.items():
            for bname in topic_synonyms(tname):
                raw = self.originals.get(bname)
                if raw is not None and d.broker_key is not None and d.broker_key not in BROKER_CONFIGS:
                    supplied[tname] = str(_to_topic_unit(bname, raw.strip()))
                    break
        v = self.values
        out = {
            "segment.bytes": v["log.segment.bytes"],
            "segment.ms": self.roll_ms,
            "segment.index.bytes": v["log.index.size.max.bytes"],
            "index.interval.bytes": v["log.index.interval.bytes"],
            "max.message.bytes": v["message.max.bytes"],
            "message.timestamp.type": v["log.message.timestamp.type"],
            "compression.type": v["compression.type"],
            "flush.messages": v["log.flush.interval.messages"],
            "file.delete.delay.ms": v["log.segment.delete.delay.ms"],
            "min.insync.replicas": v["min.insync.replicas"],
            "retention.ms": self.retention_ms,
            "retention.bytes": v["log.retention.bytes"],
            "cleanup.policy": v["log.cleanup.policy"],
            "min.cleanable.dirty.ratio": v["log.cleaner.min.cleanable.ratio"],
            "delete.retention.ms": v["log.cleaner.delete.retention.ms"],
            "min.compaction.lag.ms": v["log.cleaner.min.compaction.lag.ms"],
            "max.compaction.lag.ms": v["log.cleaner.max.compaction.lag.ms"],
        }
        if v["log.flush.interval.ms"] is not None:
            out["flush.ms"] = v["log.flush.interval.ms"]
        return {**supplied, **{k: str(x) for k, x in out.items()}}


# Kafka's synonyms of a topic config's broker-level name, most specific first, with the factor
# that turns each into the topic config's unit (ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS).
UNIT_SYNONYMS = {
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", 3600000)),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3600000)),
    "retention.ms": (("log.retention.ms", 1), ("log.retention.minutes", 60000), ("log.retention.hours", 3600000)),
    "flush.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
}
_UNIT_FACTOR = {b: f for syns in UNIT_SYNONYMS.values() for b, f in syns}


def topic_synonyms(topic_config: str) -> list[str]:
    """The broker configs that supply a topic config's default, most specific first."""
    from kaflet.server.topic_config import TOPIC_CONFIGS

    if topic_config in UNIT_SYNONYMS:
        return [b for b, _ in UNIT_SYNONYMS[topic_config]]
    d = TOPIC_CONFIGS.get(topic_config)
    return [d.broker_key] if d is not None and d.broker_key else []


def _to_topic_unit(broker_name: str, raw: str) -> str:
    factor = _UNIT_FACTOR.get(broker_name, 1)
    return raw if factor == 1 else str(int(raw) * factor)


# How kaflet treats a supplied server.properties key.
ACTED_ON, NOT_ACTED_ON, UNKNOWN = "acted-on", "not-acted-on", "unknown"


@cache
def _acted_topic_synonyms() -> frozenset[str]:
    """Broker configs that reach the logs as the default of a topic config kaflet enforces."""
    from kaflet.server.topic_config import TOPIC_CONFIGS

    return frozenset(b for t, d in TOPIC_CONFIGS.items() if d.enforced for b in topic_synonyms(t))


def classify_static_key(key: str) -> str:
    """ACTED_ON, NOT_ACTED_ON (a Kafka config kaflet ignores) or UNKNOWN (not a Kafka config)."""
    base = listener_base(key)
    name = base[1] if base is not None else key
    if name in BROKER_CONFIGS or name in SECRET_SECURITY_CONFIGS or name in _acted_topic_synonyms():
        return ACTED_ON
    kafka = broker_config_key(key)
    # DynamicConfig.Broker's keys (replication throttle rates) are not server.properties keys.
    if kafka is None or kafka.mode == DYNAMIC_ONLY:
        return UNKNOWN
    return NOT_ACTED_ON


_reported: set[str] = set()


def _topic_reason(broker_name: str) -> str | None:
    """Why kaflet ignores the topic config this broker config is the default of, if it does."""
    from kaflet.server.topic_config import NOT_ENFORCED, TOPIC_CONFIGS

    for tname in TOPIC_CONFIGS:
        if tname in NOT_ENFORCED and broker_name in topic_synonyms(tname):
            return f"the default of topic config {tname}, which kaflet does not act on ({NOT_ENFORCED[tname]})"
    return None


def log_unknown_dynamic(key: str) -> None:
    """Log once that a dynamic broker config is not a Kafka config (Kafka keeps such custom
    configs for its plugins; kaflet has none that reads them)."""
    if key not in _reported:
        _reported.add(key)
        log.warning("The configuration '%s' was supplied but isn't a known config; stored as a dynamic "
                    "broker config, it has no effect", key)


def log_not_acted_on(key: str, dynamic: bool = False) -> None:
    """Log, once per key and process, that kaflet accepts a Kafka config but does not act on it."""
    if key in _reported:
        return
    _reported.add(key)
    kafka = broker_config_key(key)
    base = listener_base(key)
    name = base[1] if base else key
    why = NOT_APPLICABLE.get(name) or _topic_reason(name)
    if kafka is not None and kafka.removed_in:
        what = f"a Kafka config removed in Kafka {kafka.removed_in}"
    else:
        what = "a Kafka broker config"
    where = "stored as a dynamic broker config" if dynamic else "accepted"
    if dynamic and classify_static_key(key) == ACTED_ON:
        log.warning("config %s is read by kaflet from server.properties only; the dynamic value is stored and "
                    "described, but it has no effect", key)
    elif why:
        log.info("config %s is %s that kaflet does not act on: %s; %s, it has no effect", key, what, why, where)
    else:
        log.warning("config %s is %s that kaflet does not act on; %s, it has no effect", key, what, where)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener: name, security protocol, host, port."""

    listener: str
    protocol: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


def parse_endpoints(values: list[str], protocol_map: str) -> list[Endpoint]:
    """Parse `NAME://host:port` entries, resolving each name's security protocol."""
    pmap: dict[str, str] = {}
    for item in parse_list(protocol_map):
        if ":" not in item:
            raise ConfigError(f"Invalid listener.security.protocol.map entry {item!r}")
        name, proto = item.split(":", 1)
        pmap[name.strip().upper()] = proto.strip().upper()
    out = []
    for v in values:
        m = re.match(r"^([A-Za-z0-9_]+)://(\[[0-9a-fA-F:]+\]|[^:]*):(\d+)$", v.strip())
        if not m:
            raise ConfigError(f"Invalid listener {v!r}: expected NAME://host:port")
        name = m.group(1).upper()
        if name not in pmap:
            raise ConfigError(f"Listener {name} has no entry in listener.security.protocol.map")
        port = int(m.group(3))
        if port > 65535:
            raise ConfigError(f"Invalid listener {v!r}: port out of range")
        out.append(Endpoint(name, pmap[name], m.group(2).strip("[]"), port))
    names = [e.listener for e in out]
    if len(set(names)) != len(names):
        raise ConfigError("Each listener must have a distinct name")
    return out
