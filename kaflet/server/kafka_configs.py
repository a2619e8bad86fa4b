"""Kafka's catalogue of broker and topic configs, as data.

Facts about Kafka, not about kaflet: every config name a Kafka 3.9 broker defines (KafkaConfig,
with the dynamic-only broker quotas of DynamicConfig.Broker and the topic configs of LogConfig),
its ConfigDef type, its default as Kafka prints it, its validator as Kafka prints it, and how
DynamicBrokerConfig lets it change at run time:

* ``read-only``: only in server.properties (AlterConfigs: "Cannot update these configs dynamically");
* ``per-broker``: dynamically, but only on one broker (``/config/brokers/<id>``);
* ``cluster-wide``: dynamically, per broker or as the cluster default (``/config/brokers/<default>``);
* ``dynamic-only``: not a server.properties key at all, only a dynamic broker config.

A few keys that Kafka 2.8 still had and 3.x dropped are kept (``removed_in``), so a 2.8
server.properties is still recognised. Which of these keys kaflet acts on is decided by
config.py and topic_config.py; this module only answers "is this a Kafka key, and would Kafka
accept this value?" with Kafka's wording.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import TypeVar

T = TypeVar("T")

READ_ONLY = "read-only"
PER_BROKER = "per-broker"
CLUSTER_WIDE = "cluster-wide"
DYNAMIC_ONLY = "dynamic-only"

LISTENER_PREFIX = "listener.name."


class InvalidConfigError(ValueError):
    """A config name or value that Kafka would refuse (INVALID_CONFIG), in Kafka's words."""


@dataclass(frozen=True, slots=True)
class KafkaConfigKey:
    """One Kafka config: ConfigDef type, default and validator as Kafka prints them."""

    name: str
    kind: str  # boolean, string, int, short, long, double, list, class, password
    default: str | None  # None: Kafka's default is null
    validator: str = ""  # Kafka's Validator.toString(); "" when it has none
    mode: str = READ_ONLY  # broker configs: how DynamicBrokerConfig lets it change
    internal: bool = False  # defineInternal: accepted, but not listed unless set
    removed_in: str | None = None  # the Kafka release that dropped the key
    synonym: str | None = None  # topic configs: the broker config that supplies the default

    @property
    def dynamic(self) -> bool:
        """Whether AlterConfigs may set it on a broker at all."""
        return self.mode != READ_ONLY


# Kafka's ConfigDef.Type of each row, the default (None: null), the validator, the update mode.
BrokerRow = tuple[str, str, str | None, str, str]
# Topic rows: name, type, default, validator, the broker config that supplies the default.
TopicRow = tuple[str, str, str | None, str, str | None]

# The metadata versions MetadataVersionValidator accepts (message/inter-broker format versions).
VERSIONS = "VERSIONS"
METADATA_VERSIONS: tuple[str, ...] = (
    "0.8.0", "0.8.1", "0.8.2", "0.9.0", "0.10.0-IV0", "0.10.0-IV1", "0.10.1-IV0", "0.10.1-IV1", "0.10.1-IV2",
    "0.10.2-IV0", "0.11.0-IV0", "0.11.0-IV1", "0.11.0-IV2", "1.0-IV0", "1.1-IV0", "2.0-IV0", "2.0-IV1",
    "2.1-IV0", "2.1-IV1", "2.1-IV2", "2.2-IV0", "2.2-IV1", "2.3-IV0", "2.3-IV1", "2.4-IV0", "2.4-IV1",
    "2.5-IV0", "2.6-IV0", "2.7-IV0", "2.7-IV1", "2.7-IV2", "2.8-IV0", "2.8-IV1", "3.0-IV0", "3.0-IV1",
    "3.1-IV0", "3.2-IV0", "3.3-IV0", "3.3-IV1", "3.3-IV2", "3.3-IV3", "3.4-IV0", "3.5-IV0", "3.5-IV1",
    "3.5-IV2", "3.6-IV0", "3.6-IV1", "3.6-IV2", "3.7-IV0", "3.7-IV1", "3.7-IV2", "3.7-IV3", "3.7-IV4",
    "3.8-IV0", "3.9-IV0", "4.0-IV0", "4.0-IV1",
)

# Keys Kafka 2.8 defined that 3.x removed: (name, type, default, validator, removed in).
_REMOVED: tuple[tuple[str, str, str | None, str, str], ...] = (
    ("advertised.host.name", "string", None, "", "3.0"),
    ("advertised.port", "int", None, "", "3.0"),
    ("host.name", "string", "", "", "3.0"),
    ("port", "int", "9092", "", "3.0"),
    ("quota.consumer.default", "long", "9223372036854775807", "[1,...]", "3.0"),
    ("quota.producer.default", "long", "9223372036854775807", "[1,...]", "3.0"),
    ("zookeeper.sync.time.ms", "int", "2000", "", "3.1"),
)

# defineInternal keys: known to Kafka, but DescribeConfigs lists them only when they are set.
_INTERNAL = frozenset({
    "group.consumer.migration.policy",
    "group.coordinator.new.enable",
    "group.share.enable",
    "log.initial.task.delay.ms",
    "metadata.log.segment.min.bytes",
    "producer.id.expiration.check.interval.ms",
    "remote.log.manager.task.retry.backoff.max.ms",
    "remote.log.manager.task.retry.backoff.ms",
    "remote.log.manager.task.retry.jitter",
    "server.max.startup.time.ms",
    "unclean.leader.election.interval.ms",
    "unstable.api.versions.enable",
    "unstable.feature.versions.enable",
    "zookeeper.metadata.migration.min.batch.size",
})

# Kafka 3.9's KafkaConfig (and DynamicConfig.Broker's dynamic-only keys), sorted by name.
_BROKER: tuple[BrokerRow, ...] = (
    ("advertised.listeners", "string", None, "", PER_BROKER),
    ("alter.config.policy.class.name", "class", None, "", READ_ONLY),
    ("alter.log.dirs.replication.quota.window.num", "int", "11", "[1,...]", READ_ONLY),
    ("alter.log.dirs.replication.quota.window.size.seconds", "int", "1", "[1,...]", READ_ONLY),
    ("authorizer.class.name", "string", "", "non-null string", READ_ONLY),
    ("auto.create.topics.enable", "boolean", "true", "", READ_ONLY),
    ("auto.include.jmx.reporter", "boolean", "true", "", READ_ONLY),
    ("auto.leader.rebalance.enable", "boolean", "true", "", READ_ONLY),
    ("background.threads", "int", "10", "[1,...]", CLUSTER_WIDE),
    ("broker.heartbeat.interval.ms", "int", "2000", "", READ_ONLY),
    ("broker.id", "int", "-1", "", READ_ONLY),
    ("broker.id.generation.enable", "boolean", "true", "", READ_ONLY),
    ("broker.rack", "string", None, "", READ_ONLY),
    ("broker.session.timeout.ms", "int", "9000", "", READ_ONLY),
    ("client.quota.callback.class", "class", None, "", READ_ONLY),
    ("compression.gzip.level", "int", "-1", "[1,...,9] or -1", CLUSTER_WIDE),
    ("compression.lz4.level", "int", "9", "[1,...,17]", CLUSTER_WIDE),
    ("compression.type", "string", "producer", "[uncompressed, zstd, lz4, snappy, gzip, producer]", CLUSTER_WIDE),
    ("compression.zstd.level", "int", "3", "[-131072,...,22]", CLUSTER_WIDE),
    ("connection.failed.authentication.delay.ms", "int", "100", "[0,...]", READ_ONLY),
    ("connections.max.idle.ms", "long", "600000", "", READ_ONLY),
    ("connections.max.reauth.ms", "long", "0", "", READ_ONLY),
    ("control.plane.listener.name", "string", None, "", READ_ONLY),
    ("controlled.shutdown.enable", "boolean", "true", "", READ_ONLY),
    ("controlled.shutdown.max.retries", "int", "3", "", READ_ONLY),
    ("controlled.shutdown.retry.backoff.ms", "long", "5000", "", READ_ONLY),
    ("controller.listener.names", "string", None, "", READ_ONLY),
    ("controller.quorum.append.linger.ms", "int", "25", "", READ_ONLY),
    ("controller.quorum.bootstrap.servers", "list", "", "non-empty list", READ_ONLY),
    ("controller.quorum.election.backoff.max.ms", "int", "1000", "", READ_ONLY),
    ("controller.quorum.election.timeout.ms", "int", "1000", "", READ_ONLY),
    ("controller.quorum.fetch.timeout.ms", "int", "2000", "", READ_ONLY),
    ("controller.quorum.request.timeout.ms", "int", "2000", "", READ_ONLY),
    ("controller.quorum.retry.backoff.ms", "int", "20", "", READ_ONLY),
    ("controller.quorum.voters", "list", "", "non-empty list", READ_ONLY),
    ("controller.quota.window.num", "int", "11", "[1,...]", READ_ONLY),
    ("controller.quota.window.size.seconds", "int", "1", "[1,...]", READ_ONLY),
    ("controller.socket.timeout.ms", "int", "30000", "", READ_ONLY),
    ("create.topic.policy.class.name", "class", None, "", READ_ONLY),
    ("default.replication.factor", "int", "1", "", READ_ONLY),
    ("delegation.token.expiry.check.interval.ms", "long", "3600000", "[1,...]", READ_ONLY),
    ("delegation.token.expiry.time.ms", "long", "86400000", "[1,...]", READ_ONLY),
    ("delegation.token.master.key", "password", None, "", READ_ONLY),
    ("delegation.token.max.lifetime.ms", "long", "604800000", "[1,...]", READ_ONLY),
    ("delegation.token.secret.key", "password", None, "", READ_ONLY),
    ("delete.records.purgatory.purge.interval.requests", "int", "1", "", READ_ONLY),
    ("delete.topic.enable", "boolean", "true", "", READ_ONLY),
    ("early.start.listeners", "string", None, "", READ_ONLY),
    ("eligible.leader.replicas.enable", "boolean", "false", "", READ_ONLY),
    ("fetch.max.bytes", "int", "57671680", "[1024,...]", READ_ONLY),
    ("fetch.purgatory.purge.interval.requests", "int", "1000", "", READ_ONLY),
    ("group.consumer.assignors", "list", "org.apache.kafka.coordinator.group.assignor.UniformAssignor,org.apache.kafka.coordinator.group.assignor.RangeAssignor", "", READ_ONLY),
    ("group.consumer.heartbeat.interval.ms", "int", "5000", "[1,...]", READ_ONLY),
    ("group.consumer.max.heartbeat.interval.ms", "int", "15000", "[1,...]", READ_ONLY),
    ("group.consumer.max.session.timeout.ms", "int", "60000", "[1,...]", READ_ONLY),
    ("group.consumer.max.size", "int", "2147483647", "[1,...]", READ_ONLY),
    ("group.consumer.migration.policy", "string", "disabled", "(case insensitive) [DISABLED, DOWNGRADE, UPGRADE, BIDIRECTIONAL]", READ_ONLY),
    ("group.consumer.min.heartbeat.interval.ms", "int", "5000", "[1,...]", READ_ONLY),
    ("group.consumer.min.session.timeout.ms", "int", "45000", "[1,...]", READ_ONLY),
    ("group.consumer.session.timeout.ms", "int", "45000", "[1,...]", READ_ONLY),
    ("group.coordinator.append.linger.ms", "int", "10", "[0,...]", READ_ONLY),
    ("group.coordinator.new.enable", "boolean", "false", "", READ_ONLY),
    ("group.coordinator.rebalance.protocols", "list", "classic", "[consumer, classic, share, unknown]", READ_ONLY),
    ("group.coordinator.threads", "int", "1", "[1,...]", READ_ONLY),
    ("group.initial.rebalance.delay.ms", "int", "3000", "", READ_ONLY),
    ("group.max.session.timeout.ms", "int", "1800000", "", READ_ONLY),
    ("group.max.size", "int", "2147483647", "[1,...]", READ_ONLY),
    ("group.min.session.timeout.ms", "int", "6000", "", READ_ONLY),
    ("group.share.delivery.count.limit", "int", "5", "[2,...,10]", READ_ONLY),
    ("group.share.enable", "boolean", "false", "", READ_ONLY),
    ("group.share.heartbeat.interval.ms", "int", "5000", "[1,...]", READ_ONLY),
    ("group.share.max.groups", "short", "10", "[1,...,100]", READ_ONLY),
    ("group.share.max.heartbeat.interval.ms", "int", "15000", "[1,...]", READ_ONLY),
    ("group.share.max.record.lock.duration.ms", "int", "60000", "[30000,...,3600000]", READ_ONLY),
    ("group.share.max.session.timeout.ms", "int", "60000", "[1,...]", READ_ONLY),
    ("group.share.max.size", "short", "200", "[10,...,1000]", READ_ONLY),
    ("group.share.min.heartbeat.interval.ms", "int", "5000", "[1,...]", READ_ONLY),
    ("group.share.min.record.lock.duration.ms", "int", "15000", "[1000,...,30000]", READ_ONLY),
    ("group.share.min.session.timeout.ms", "int", "45000", "[1,...]", READ_ONLY),
    ("group.share.partition.max.record.locks", "int", "200", "[100,...,10000]", READ_ONLY),
    ("group.share.record.lock.duration.ms", "int", "30000", "[1000,...,60000]", READ_ONLY),
    ("group.share.session.timeout.ms", "int", "45000", "[1,...]", READ_ONLY),
    ("initial.broker.registration.timeout.ms", "int", "60000", "", READ_ONLY),
    ("inter.broker.listener.name", "string", None, "", READ_ONLY),
    ("inter.broker.protocol.version", "string", "3.9-IV0", VERSIONS, READ_ONLY),
    ("kafka.metrics.polling.interval.secs", "int", "10", "[1,...]", READ_ONLY),
    ("kafka.metrics.reporters", "list", "", "", READ_ONLY),
    ("leader.imbalance.check.interval.seconds", "long", "300", "[1,...]", READ_ONLY),
    ("leader.imbalance.per.broker.percentage", "int", "10", "", READ_ONLY),
    ("listener.security.protocol.map", "string", "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT", "", PER_BROKER),
    ("listeners", "string", "PLAINTEXT://:9092", "", PER_BROKER),
    ("log.cleaner.backoff.ms", "long", "15000", "[0,...]", CLUSTER_WIDE),
    ("log.cleaner.dedupe.buffer.size", "long", "134217728", "", CLUSTER_WIDE),
    ("log.cleaner.delete.retention.ms", "long", "86400000", "[0,...]", CLUSTER_WIDE),
    ("log.cleaner.enable", "boolean", "true", "", READ_ONLY),
    ("log.cleaner.io.buffer.load.factor", "double", "0.9", "", CLUSTER_WIDE),
    ("log.cleaner.io.buffer.size", "int", "524288", "[0,...]", CLUSTER_WIDE),
    ("log.cleaner.io.max.bytes.per.second", "double", "1.7976931348623157E308", "", CLUSTER_WIDE),
    ("log.cleaner.max.compaction.lag.ms", "long", "9223372036854775807", "[1,...]", CLUSTER_WIDE),
    ("log.cleaner.min.cleanable.ratio", "double", "0.5", "[0,...,1]", CLUSTER_WIDE),
    ("log.cleaner.min.compaction.lag.ms", "long", "0", "[0,...]", CLUSTER_WIDE),
    ("log.cleaner.threads", "int", "1", "[0,...]", CLUSTER_WIDE),
    ("log.cleanup.policy", "list", "delete", "[compact, delete]", CLUSTER_WIDE),
    ("log.dir", "string", "/tmp/kafka-logs", "", READ_ONLY),
    ("log.dir.failure.timeout.ms", "long", "30000", "[1,...]", READ_ONLY),
    ("log.dirs", "string", None, "", READ_ONLY),
    ("log.flush.interval.messages", "long", "9223372036854775807", "[1,...]", CLUSTER_WIDE),
    ("log.flush.interval.ms", "long", None, "", CLUSTER_WIDE),
    ("log.flush.offset.checkpoint.interval.ms", "int", "60000", "[0,...]", READ_ONLY),
    ("log.flush.scheduler.interval.ms", "long", "9223372036854775807", "", READ_ONLY),
    ("log.flush.start.offset.checkpoint.interval.ms", "int", "60000", "[0,...]", READ_ONLY),
    ("log.index.interval.bytes", "int", "4096", "[0,...]", CLUSTER_WIDE),
    ("log.index.size.max.bytes", "int", "10485760", "[4,...]", CLUSTER_WIDE),
    ("log.initial.task.delay.ms", "long", "30000", "[0,...]", READ_ONLY),
    ("log.local.retention.bytes", "long", "-2", "[-2,...]", CLUSTER_WIDE),
    ("log.local.retention.ms", "long", "-2", "[-2,...]", CLUSTER_WIDE),
    ("log.message.downconversion.enable", "boolean", "true", "", CLUSTER_WIDE),
    ("log.message.format.version", "string", "3.0-IV1", VERSIONS, READ_ONLY),
    ("log.message.timestamp.after.max.ms", "long", "9223372036854775807", "[0,...]", CLUSTER_WIDE),
    ("log.message.timestamp.before.max.ms", "long", "9223372036854775807", "[0,...]", CLUSTER_WIDE),
    ("log.message.timestamp.difference.max.ms", "long", "9223372036854775807", "[0,...]", CLUSTER_WIDE),
    ("log.message.timestamp.type", "string", "CreateTime", "[CreateTime, LogAppendTime]", CLUSTER_WIDE),
    ("log.preallocate", "boolean", "false", "", CLUSTER_WIDE),
    ("log.retention.bytes", "long", "-1", "", CLUSTER_WIDE),
    ("log.retention.check.interval.ms", "long", "300000", "[1,...]", READ_ONLY),
    ("log.retention.hours", "int", "168", "", READ_ONLY),
    ("log.retention.minutes", "int", None, "", READ_ONLY),
    ("log.retention.ms", "long", None, "", CLUSTER_WIDE),
    ("log.roll.hours", "int", "168", "[1,...]", READ_ONLY),
    ("log.roll.jitter.hours", "int", "0", "[0,...]", READ_ONLY),
    ("log.roll.jitter.ms", "long", None, "", CLUSTER_WIDE),
    ("log.roll.ms", "long", None, "", CLUSTER_WIDE),
    ("log.segment.bytes", "int", "1073741824", "[14,...]", CLUSTER_WIDE),
    ("log.segment.delete.delay.ms", "long", "60000", "[0,...]", CLUSTER_WIDE),
    ("max.connection.creation.rate", "int", "2147483647", "[0,...]", CLUSTER_WIDE),
    ("max.connections", "int", "2147483647", "[0,...]", CLUSTER_WIDE),
    ("max.connections.per.ip", "int", "2147483647", "[0,...]", CLUSTER_WIDE),
    ("max.connections.per.ip.overrides", "string", "", "", CLUSTER_WIDE),
    ("max.incremental.fetch.session.cache.slots", "int", "1000", "[0,...]", READ_ONLY),
    ("max.request.partition.size.limit", "int", "2000", "[1,...]", READ_ONLY),
    ("message.max.bytes", "int", "1048588", "[0,...]", CLUSTER_WIDE),
    ("metadata.log.dir", "string", None, "", READ_ONLY),
    ("metadata.log.max.record.bytes.between.snapshots", "long", "20971520", "[1,...]", READ_ONLY),
    ("metadata.log.max.snapshot.interval.ms", "long", "3600000", "[0,...]", READ_ONLY),
    ("metadata.log.segment.bytes", "int", "1073741824", "[12,...]", READ_ONLY),
    ("metadata.log.segment.min.bytes", "int", "8388608", "[12,...]", READ_ONLY),
    ("metadata.log.segment.ms", "long", "604800000", "", READ_ONLY),
    ("metadata.max.idle.interval.ms", "int", "500", "[0,...]", READ_ONLY),
    ("metadata.max.retention.bytes", "long", "104857600", "", READ_ONLY),
    ("metadata.max.retention.ms", "long", "604800000", "", READ_ONLY),
    ("metric.reporters", "list", "", "", CLUSTER_WIDE),
    ("metrics.num.samples", "int", "2", "[1,...]", READ_ONLY),
    ("metrics.recording.level", "string", "INFO", "", READ_ONLY),
    ("metrics.sample.window.ms", "long", "30000", "[1,...]", READ_ONLY),
    ("min.insync.replicas", "int", "1", "[1,...]", CLUSTER_WIDE),
    ("node.id", "int", "-1", "", READ_ONLY),
    ("num.io.threads", "int", "8", "[1,...]", CLUSTER_WIDE),
    ("num.network.threads", "int", "3", "[1,...]", CLUSTER_WIDE),
    ("num.partitions", "int", "1", "[1,...]", READ_ONLY),
    ("num.recovery.threads.per.data.dir", "int", "1", "[1,...]", CLUSTER_WIDE),
    ("num.replica.alter.log.dirs.threads", "int", None, "", READ_ONLY),
    ("num.replica.fetchers", "int", "1", "", CLUSTER_WIDE),
    ("offset.metadata.max.bytes", "int", "4096", "", READ_ONLY),
    ("offsets.commit.required.acks", "short", "-1", "", READ_ONLY),
    ("offsets.commit.timeout.ms", "int", "5000", "[1,...]", READ_ONLY),
    ("offsets.load.buffer.size", "int", "5242880", "[1,...]", READ_ONLY),
    ("offsets.retention.check.interval.ms", "long", "600000", "[1,...]", READ_ONLY),
    ("offsets.retention.minutes", "int", "10080", "[1,...]", READ_ONLY),
    ("offsets.topic.compression.codec", "int", "0", "", READ_ONLY),
    ("offsets.topic.num.partitions", "int", "50", "[1,...]", READ_ONLY),
    ("offsets.topic.replication.factor", "short", "3", "[1,...]", READ_ONLY),
    ("offsets.topic.segment.bytes", "int", "104857600", "[1,...]", READ_ONLY),
    ("password.encoder.cipher.algorithm", "string", "AES/CBC/PKCS5Padding", "", READ_ONLY),
    ("password.encoder.iterations", "int", "4096", "[1024,...]", READ_ONLY),
    ("password.encoder.key.length", "int", "128", "[8,...]", READ_ONLY),
    ("password.encoder.keyfactory.algorithm", "string", None, "", READ_ONLY),
    ("password.encoder.old.secret", "password", None, "", READ_ONLY),
    ("password.encoder.secret", "password", None, "", READ_ONLY),
    ("principal.builder.class", "class", "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder", "", PER_BROKER),
    ("process.roles", "list", "", "[broker, controller]", READ_ONLY),
    ("producer.id.expiration.check.interval.ms", "int", "600000", "[1,...]", READ_ONLY),
    ("producer.id.expiration.ms", "int", "86400000", "[1,...]", CLUSTER_WIDE),
    ("producer.purgatory.purge.interval.requests", "int", "1000", "", READ_ONLY),
    ("queued.max.request.bytes", "long", "-1", "", READ_ONLY),
    ("queued.max.requests", "int", "500", "[1,...]", READ_ONLY),
    ("quota.window.num", "int", "11", "[1,...]", READ_ONLY),
    ("quota.window.size.seconds", "int", "1", "[1,...]", READ_ONLY),
    ("remote.fetch.max.wait.ms", "int", "500", "[1,...]", CLUSTER_WIDE),
    ("remote.log.index.file.cache.total.size.bytes", "long", "1073741824", "[1,...]", CLUSTER_WIDE),
    ("remote.log.manager.copier.thread.pool.size", "int", "-1", "", READ_ONLY),
    ("remote.log.manager.copy.max.bytes.per.second", "long", "9223372036854775807", "[1,...]", CLUSTER_WIDE),
    ("remote.log.manager.copy.quota.window.num", "int", "11", "[1,...]", READ_ONLY),
    ("remote.log.manager.copy.quota.window.size.seconds", "int", "1", "[1,...]", READ_ONLY),
    ("remote.log.manager.expiration.thread.pool.size", "int", "-1", "", READ_ONLY),
    ("remote.log.manager.fetch.max.bytes.per.second", "long", "9223372036854775807", "[1,...]", CLUSTER_WIDE),
    ("remote.log.manager.fetch.quota.window.num", "int", "11", "[1,...]", READ_ONLY),
    ("remote.log.manager.fetch.quota.window.size.seconds", "int", "1", "[1,...]", READ_ONLY),
    ("remote.log.manager.task.interval.ms", "long", "30000", "[1,...]", READ_ONLY),
    ("remote.log.manager.task.retry.backoff.max.ms", "long", "30000", "[1,...]", READ_ONLY),
    ("remote.log.manager.task.retry.backoff.ms", "long", "500", "[1,...]", READ_ONLY),
    ("remote.log.manager.task.retry.jitter", "double", "0.2", "[0,...,0.5]", READ_ONLY),
    ("remote.log.manager.thread.pool.size", "int", "10", "[1,...]", READ_ONLY),
    ("remote.log.metadata.custom.metadata.max.bytes", "int", "128", "[0,...]", READ_ONLY),
    ("remote.log.metadata.manager.class.name", "string", "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager", "non-empty string", READ_ONLY),
    ("remote.log.metadata.manager.class.path", "string", None, "", READ_ONLY),
    ("remote.log.metadata.manager.impl.prefix", "string", "rlmm.config.", "non-empty string", READ_ONLY),
    ("remote.log.metadata.manager.listener.name", "string", None, "non-empty string", READ_ONLY),
    ("remote.log.reader.max.pending.tasks", "int", "100", "[1,...]", READ_ONLY),
    ("remote.log.reader.threads", "int", "10", "[1,...]", READ_ONLY),
    ("remote.log.storage.manager.class.name", "string", None, "non-empty string", READ_ONLY),
    ("remote.log.storage.manager.class.path", "string", None, "", READ_ONLY),
    ("remote.log.storage.manager.impl.prefix", "string", "rsm.config.", "non-empty string", READ_ONLY),
    ("remote.log.storage.system.enable", "boolean", "false", "", READ_ONLY),
    ("replica.fetch.backoff.ms", "int", "1000", "[0,...]", READ_ONLY),
    ("replica.fetch.max.bytes", "int", "1048576", "[0,...]", READ_ONLY),
    ("replica.fetch.min.bytes", "int", "1", "", READ_ONLY),
    ("replica.fetch.response.max.bytes", "int", "10485760", "[0,...]", READ_ONLY),
    ("replica.fetch.wait.max.ms", "int", "500", "", READ_ONLY),
    ("replica.high.watermark.checkpoint.interval.ms", "long", "5000", "", READ_ONLY),
    ("replica.lag.time.max.ms", "long", "30000", "", READ_ONLY),
    ("replica.selector.class", "string", None, "", READ_ONLY),
    ("replica.socket.receive.buffer.bytes", "int", "65536", "", READ_ONLY),
    ("replica.socket.timeout.ms", "int", "30000", "", READ_ONLY),
    ("replication.quota.window.num", "int", "11", "[1,...]", READ_ONLY),
    ("replication.quota.window.size.seconds", "int", "1", "[1,...]", READ_ONLY),
    ("request.timeout.ms", "int", "30000", "", READ_ONLY),
    ("reserved.broker.max.id", "int", "1000", "[0,...]", READ_ONLY),
    ("sasl.client.callback.handler.class", "class", None, "", READ_ONLY),
    ("sasl.enabled.mechanisms", "list", "GSSAPI", "", PER_BROKER),
    ("sasl.jaas.config", "password", None, "", PER_BROKER),
    ("sasl.kerberos.kinit.cmd", "string", "/usr/bin/kinit", "", PER_BROKER),
    ("sasl.kerberos.min.time.before.relogin", "long", "60000", "", PER_BROKER),
    ("sasl.kerberos.principal.to.local.rules", "list", "DEFAULT", "", PER_BROKER),
    ("sasl.kerberos.service.name", "string", None, "", PER_BROKER),
    ("sasl.kerberos.ticket.renew.jitter", "double", "0.05", "", PER_BROKER),
    ("sasl.kerberos.ticket.renew.window.factor", "double", "0.8", "", PER_BROKER),
    ("sasl.login.callback.handler.class", "class", None, "", READ_ONLY),
    ("sasl.login.class", "class", None, "", READ_ONLY),
    ("sasl.login.connect.timeout.ms", "int", None, "", READ_ONLY),
    ("sasl.login.read.timeout.ms", "int", None, "", READ_ONLY),
    ("sasl.login.refresh.buffer.seconds", "short", "300", "", PER_BROKER),
    ("sasl.login.refresh.min.period.seconds", "short", "60", "", PER_BROKER),
    ("sasl.login.refresh.window.factor", "double", "0.8", "", PER_BROKER),
    ("sasl.login.refresh.window.jitter", "double", "0.05", "", PER_BROKER),
    ("sasl.login.retry.backoff.max.ms", "long", "10000", "", READ_ONLY),
    ("sasl.login.retry.backoff.ms", "long", "100", "", READ_ONLY),
    ("sasl.mechanism.controller.protocol", "string", "GSSAPI", "", READ_ONLY),
    ("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI", "", PER_BROKER),
    ("sasl.oauthbearer.clock.skew.seconds", "int", "30", "", READ_ONLY),
    ("sasl.oauthbearer.expected.audience", "list", None, "", READ_ONLY),
    ("sasl.oauthbearer.expected.issuer", "string", None, "", READ_ONLY),
    ("sasl.oauthbearer.jwks.endpoint.refresh.ms", "long", "3600000", "", READ_ONLY),
    ("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "long", "10000", "", READ_ONLY),
    ("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "long", "100", "", READ_ONLY),
    ("sasl.oauthbearer.jwks.endpoint.url", "string", None, "", READ_ONLY),
    ("sasl.oauthbearer.scope.claim.name", "string", "scope", "", READ_ONLY),
    ("sasl.oauthbearer.sub.claim.name", "string", "sub", "", READ_ONLY),
    ("sasl.oauthbearer.token.endpoint.url", "string", None, "", READ_ONLY),
    ("sasl.server.callback.handler.class", "class", None, "", READ_ONLY),
    ("sasl.server.max.receive.size", "int", "524288", "", READ_ONLY),
    ("security.inter.broker.protocol", "string", "PLAINTEXT", "[PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL]", READ_ONLY),
    ("security.providers", "string", None, "", READ_ONLY),
    ("server.max.startup.time.ms", "long", "9223372036854775807", "[0,...]", READ_ONLY),
    ("socket.connection.setup.timeout.max.ms", "long", "30000", "", READ_ONLY),
    ("socket.connection.setup.timeout.ms", "long", "10000", "", READ_ONLY),
    ("socket.listen.backlog.size", "int", "50", "[1,...]", READ_ONLY),
    ("socket.receive.buffer.bytes", "int", "102400", "", READ_ONLY),
    ("socket.request.max.bytes", "int", "104857600", "[1,...]", READ_ONLY),
    ("socket.send.buffer.bytes", "int", "102400", "", READ_ONLY),
    ("ssl.allow.dn.changes", "boolean", "false", "", READ_ONLY),
    ("ssl.allow.san.changes", "boolean", "false", "", READ_ONLY),
    ("ssl.cipher.suites", "list", "", "", PER_BROKER),
    ("ssl.client.auth", "string", "none", "[required, requested, none]", PER_BROKER),
    ("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3", "", PER_BROKER),
    ("ssl.endpoint.identification.algorithm", "string", "https", "", PER_BROKER),
    ("ssl.engine.factory.class", "class", None, "", PER_BROKER),
    ("ssl.key.password", "password", None, "", PER_BROKER),
    ("ssl.keymanager.algorithm", "string", "SunX509", "", PER_BROKER),
    ("ssl.keystore.certificate.chain", "password", None, "", PER_BROKER),
    ("ssl.keystore.key", "password", None, "", PER_BROKER),
    ("ssl.keystore.location", "string", None, "", PER_BROKER),
    ("ssl.keystore.password", "password", None, "", PER_BROKER),
    ("ssl.keystore.type", "string", "JKS", "", PER_BROKER),
    ("ssl.principal.mapping.rules", "string", "DEFAULT", "", READ_ONLY),
    ("ssl.protocol", "string", "TLSv1.3", "", PER_BROKER),
    ("ssl.provider", "string", None, "", PER_BROKER),
    ("ssl.secure.random.implementation", "string", None, "", PER_BROKER),
    ("ssl.trustmanager.algorithm", "string", "PKIX", "", PER_BROKER),
    ("ssl.truststore.certificates", "password", None, "", PER_BROKER),
    ("ssl.truststore.location", "string", None, "", PER_BROKER),
    ("ssl.truststore.password", "password", None, "", PER_BROKER),
    ("ssl.truststore.type", "string", "JKS", "", PER_BROKER),
    ("telemetry.max.bytes", "int", "1048576", "[1,...]", READ_ONLY),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", "10000", "[1,...]", READ_ONLY),
    ("transaction.max.timeout.ms", "int", "900000", "[1,...]", READ_ONLY),
    ("transaction.partition.verification.enable", "boolean", "true", "", CLUSTER_WIDE),
    ("transaction.remove.expired.transaction.cleanup.interval.ms", "int", "3600000", "[1,...]", READ_ONLY),
    ("transaction.state.log.load.buffer.size", "int", "5242880", "[1,...]", READ_ONLY),
    ("transaction.state.log.min.isr", "int", "2", "[1,...]", READ_ONLY),
    ("transaction.state.log.num.partitions", "int", "50", "[1,...]", READ_ONLY),
    ("transaction.state.log.replication.factor", "short", "3", "[1,...]", READ_ONLY),
    ("transaction.state.log.segment.bytes", "int", "104857600", "[1,...]", READ_ONLY),
    ("transactional.id.expiration.ms", "int", "604800000", "[1,...]", READ_ONLY),
    ("unclean.leader.election.enable", "boolean", "false", "", CLUSTER_WIDE),
    ("unclean.leader.election.interval.ms", "long", "300000", "[1,...]", READ_ONLY),
    ("unstable.api.versions.enable", "boolean", "false", "", READ_ONLY),
    ("unstable.feature.versions.enable", "boolean", "false", "", READ_ONLY),
    ("zookeeper.clientCnxnSocket", "string", None, "", READ_ONLY),
    ("zookeeper.connect", "string", None, "", READ_ONLY),
    ("zookeeper.connection.timeout.ms", "int", None, "", READ_ONLY),
    ("zookeeper.max.in.flight.requests", "int", "10", "[1,...]", READ_ONLY),
    ("zookeeper.metadata.migration.enable", "boolean", "false", "", READ_ONLY),
    ("zookeeper.metadata.migration.min.batch.size", "int", "200", "[1,...]", READ_ONLY),
    ("zookeeper.session.timeout.ms", "int", "18000", "", READ_ONLY),
    ("zookeeper.set.acl", "boolean", "false", "", READ_ONLY),
    ("zookeeper.ssl.cipher.suites", "list", None, "", READ_ONLY),
    ("zookeeper.ssl.client.enable", "boolean", "false", "", READ_ONLY),
    ("zookeeper.ssl.crl.enable", "boolean", "false", "", READ_ONLY),
    ("zookeeper.ssl.enabled.protocols", "list", None, "", READ_ONLY),
    ("zookeeper.ssl.endpoint.identification.algorithm", "string", "HTTPS", "", READ_ONLY),
    ("zookeeper.ssl.keystore.location", "string", None, "", READ_ONLY),
    ("zookeeper.ssl.keystore.password", "password", None, "", READ_ONLY),
    ("zookeeper.ssl.keystore.type", "string", None, "", READ_ONLY),
    ("zookeeper.ssl.ocsp.enable", "boolean", "false", "", READ_ONLY),
    ("zookeeper.ssl.protocol", "string", "TLSv1.2", "", READ_ONLY),
    ("zookeeper.ssl.truststore.location", "string", None, "", READ_ONLY),
    ("zookeeper.ssl.truststore.password", "password", None, "", READ_ONLY),
    ("zookeeper.ssl.truststore.type", "string", None, "", READ_ONLY),
    ("follower.replication.throttled.rate", "long", "9223372036854775807", "[0,...]", DYNAMIC_ONLY),
    ("leader.replication.throttled.rate", "long", "9223372036854775807", "[0,...]", DYNAMIC_ONLY),
    ("replica.alter.log.dirs.io.max.bytes.per.second", "long", "9223372036854775807", "[0,...]", DYNAMIC_ONLY),
)

# Kafka 3.9's LogConfig: the topic configs.
_TOPIC: tuple[TopicRow, ...] = (
    ("cleanup.policy", "list", "delete", "[compact, delete]", "log.cleanup.policy"),
    ("compression.gzip.level", "int", "-1", "[1,...,9] or -1", "compression.gzip.level"),
    ("compression.lz4.level", "int", "9", "[1,...,17]", "compression.lz4.level"),
    ("compression.type", "string", "producer", "[uncompressed, zstd, lz4, snappy, gzip, producer]", "compression.type"),
    ("compression.zstd.level", "int", "3", "[-131072,...,22]", "compression.zstd.level"),
    ("delete.retention.ms", "long", "86400000", "[0,...]", "log.cleaner.delete.retention.ms"),
    ("file.delete.delay.ms", "long", "60000", "[0,...]", "log.segment.delete.delay.ms"),
    ("flush.messages", "long", "9223372036854775807", "[1,...]", "log.flush.interval.messages"),
    ("flush.ms", "long", "9223372036854775807", "[0,...]", "log.flush.interval.ms"),
    ("follower.replication.throttled.replicas", "list", "", "[partitionId]:[brokerId],[partitionId]:[brokerId],...", None),
    ("index.interval.bytes", "int", "4096", "[0,...]", "log.index.interval.bytes"),
    ("leader.replication.throttled.replicas", "list", "", "[partitionId]:[brokerId],[partitionId]:[brokerId],...", None),
    ("local.retention.bytes", "long", "-2", "[-2,...]", "log.local.retention.bytes"),
    ("local.retention.ms", "long", "-2", "[-2,...]", "log.local.retention.ms"),
    ("max.compaction.lag.ms", "long", "9223372036854775807", "[1,...]", "log.cleaner.max.compaction.lag.ms"),
    ("max.message.bytes", "int", "1048588", "[0,...]", "message.max.bytes"),
    ("message.downconversion.enable", "boolean", "true", "", "log.message.downconversion.enable"),
    ("message.format.version", "string", "3.0-IV1", VERSIONS, "log.message.format.version"),
    ("message.timestamp.after.max.ms", "long", "9223372036854775807", "[0,...]", "log.message.timestamp.after.max.ms"),
    ("message.timestamp.before.max.ms", "long", "9223372036854775807", "[0,...]", "log.message.timestamp.before.max.ms"),
    ("message.timestamp.difference.max.ms", "long", "9223372036854775807", "[0,...]", "log.message.timestamp.difference.max.ms"),
    ("message.timestamp.type", "string", "CreateTime", "[CreateTime, LogAppendTime]", "log.message.timestamp.type"),
    ("min.cleanable.dirty.ratio", "double", "0.5", "[0,...,1]", "log.cleaner.min.cleanable.ratio"),
    ("min.compaction.lag.ms", "long", "0", "[0,...]", "log.cleaner.min.compaction.lag.ms"),
    ("min.insync.replicas", "int", "1", "[1,...]", "min.insync.replicas"),
    ("preallocate", "boolean", "false", "", "log.preallocate"),
    ("remote.log.copy.disable", "boolean", "false", "", None),
    ("remote.log.delete.on.disable", "boolean", "false", "", None),
    ("remote.storage.enable", "boolean", "false", "", None),
    ("retention.bytes", "long", "-1", "", "log.retention.bytes"),
    ("retention.ms", "long", "604800000", "[-1,...]", "log.retention.ms"),
    ("segment.bytes", "int", "1073741824", "[14,...]", "log.segment.bytes"),
    ("segment.index.bytes", "int", "10485760", "[4,...]", "log.index.size.max.bytes"),
    ("segment.jitter.ms", "long", "0", "[0,...]", "log.roll.jitter.ms"),
    ("segment.ms", "long", "604800000", "[1,...]", "log.roll.ms"),
    ("unclean.leader.election.enable", "boolean", "false", "", "unclean.leader.election.enable"),
)


# Broker configs DynamicBrokerConfig accepts only with a listener prefix
# (listener.name.<listener>.<key>): the keystores and truststores, SslConfigs.RECONFIGURABLE_CONFIGS.
LISTENER_ONLY_SECURITY_CONFIGS = frozenset({
    "ssl.key.password", "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.keystore.location",
    "ssl.keystore.password", "ssl.keystore.type", "ssl.truststore.certificates", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.type",
})

# Listener configs that may still be set at the cluster-wide default (ClusterLevelListenerConfigs).
CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset({"max.connections", "max.connection.creation.rate", "num.network.threads"})

# Per-mechanism listener configs: listener.name.<listener>.<mechanism>.<key> (ListenerMechanismConfigs).
_MECHANISM_CONFIGS = ("sasl.jaas.config", "sasl.login.callback.handler.class", "sasl.login.class",
                      "sasl.server.callback.handler.class", "connections.max.reauth.ms")


@cache
def broker_catalogue() -> dict[str, KafkaConfigKey]:
    """Every broker config Kafka knows (2.8 to 3.9), by name."""
    out = {name: KafkaConfigKey(name, kind, default, validator, mode, internal=name in _INTERNAL)
           for name, kind, default, validator, mode in _BROKER}
    for name, kind, default, validator, removed in _REMOVED:
        out[name] = KafkaConfigKey(name, kind, default, validator, READ_ONLY, removed_in=removed)
    return out


@cache
def topic_catalogue() -> dict[str, KafkaConfigKey]:
    """Every topic config Kafka knows, by name."""
    return {name: KafkaConfigKey(name, kind, default, validator, synonym=synonym)
            for name, kind, default, validator, synonym in _TOPIC}


def listener_base(name: str) -> tuple[str, str] | None:
    """(listener, base config) of ``listener.name.<listener>.<config>``, else None.

    A per-mechanism config (``listener.name.l.plain.sasl.jaas.config``) has the mechanism-free
    base name, as Kafka's brokerConfigSynonyms gives it.
    """
    if not name.startswith(LISTENER_PREFIX):
        return None
    listener, _, rest = name[len(LISTENER_PREFIX):].partition(".")
    if not listener or not rest:
        return None
    for mech in _MECHANISM_CONFIGS:
        if rest.endswith("." + mech):
            return listener, mech
    return listener, rest


def lookup_config(table: Mapping[str, T], name: str) -> T | None:
    """``table``'s entry for ``name``, else for the config ``name`` is the listener override of."""
    found = table.get(name)
    if found is None:
        base = listener_base(name)
        if base is not None:
            found = table.get(base[1])
    return found


def broker_config_key(name: str) -> KafkaConfigKey | None:
    """The Kafka broker config ``name`` is, or is the listener override of; None if neither."""
    return lookup_config(broker_catalogue(), name)


# ------------------------------------------------------------------------------------------------
# values, with ConfigDef's parsing and the validators' messages

_INT_RE = re.compile(r"^[+-]?\d+$")
_DOUBLE_RE = re.compile(r"^[+-]?(NaN|Infinity|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[dDfF]?$")
_CLASS_RE = re.compile(r"^[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*$")
_BOUNDS = {"int": (-(2**31), 2**31 - 1), "short": (-(2**15), 2**15 - 1), "long": (-(2**63), 2**63 - 1)}
_RANGE_RE = re.compile(r"^\[(-?[\d.]+),\.\.\.(?:,(-?[\d.]+))?\](?: or (-?\d+))?$")
_THROTTLED_RE = re.compile(r"^([0-9]+:[0-9]+)?$")


def _invalid(name: str, value: str, message: str) -> InvalidConfigError:
    return InvalidConfigError(f"Invalid value {value} for configuration {name}: {message}")


def _parse(key: KafkaConfigKey, value: str) -> object:
    """ConfigDef.parseType: the typed value, or Kafka's error."""
    v = value.strip()
    kind = key.kind
    if kind == "boolean":
        if v.lower() not in ("true", "false"):
            raise _invalid(key.name, value, "Expected value to be either true or false")
        return v.lower() == "true"
    if kind in _BOUNDS:
        low, high = _BOUNDS[kind]
        if not _INT_RE.match(v) or not low <= int(v) <= high:
            raise _invalid(key.name, value, f"Not a number of type {kind.upper()}")
        return int(v)
    if kind == "double":
        if not _DOUBLE_RE.match(v):
            raise _invalid(key.name, value, "Not a number of type DOUBLE")
        return float(v.rstrip("dDfF").replace("Infinity", "inf"))
    if kind == "list":
        return [] if not v else [x.strip() for x in v.split(",")]
    if kind == "class" and v and not _CLASS_RE.match(v):
        # Kafka loads the class; kaflet can only tell that the name cannot be one.
        raise _invalid(key.name, value, f"Class {value} could not be found.")
    return v


def _validate(key: KafkaConfigKey, value: str, parsed: object) -> None:
    """The key's ConfigDef.Validator, with its message."""
    spec, name = key.validator, key.name
    if not spec:
        return
    if spec == VERSIONS:
        _check_version(name, value, str(parsed))
        return
    if spec.startswith("[partitionId]"):
        items = [x.strip() for x in str(value).split(",")]
        if not (all(_THROTTLED_RE.match(x) for x in items) or "".join(items) == "*"):
            raise _invalid(name, value, f"{name} must be the literal '*' or a list of replicas in the following "
                                        "format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")
        return
    if spec == "non-empty string":
        if parsed is not None and str(parsed) == "":
            raise _invalid(name, value, "String must be non-empty")
        return
    m = _RANGE_RE.match(spec)
    if m is not None and isinstance(parsed, (int, float)):
        low, high, also = m.group(1), m.group(2), m.group(3)
        if also is not None:  # a compression level: [min,...,max] or the codec's default
            if parsed != int(also) and not float(low) <= parsed <= float(high):
                raise _invalid(name, value, f"Value must be between {low} and {high} or equal to {also}")
            return
        if parsed < float(low):
            raise _invalid(name, value, f"Value must be at least {low}")
        if high is not None and parsed > float(high):
            raise _invalid(name, value, f"Value must be no more than {high}")
        return
    insensitive = spec.startswith("(case insensitive) [")
    if (spec.startswith("[") or insensitive) and spec.endswith("]"):
        choices = spec[spec.index("[") + 1:-1].split(", ")
        for item in parsed if isinstance(parsed, list) else [parsed]:
            if insensitive:
                if str(item).upper() not in choices:
                    raise _invalid(name, value, "String must be one of (case insensitive): " + ", ".join(choices))
            elif item not in choices:
                raise _invalid(name, str(item) if isinstance(parsed, list) else value,
                               "String must be one of: " + ", ".join(choices))
    # Other validators (the KRaft quorum lists, "non-null string") cannot fail on a string value.


def _check_version(name: str, value: str, v: str) -> None:
    """MetadataVersion.fromVersionString: a listed version, or its release ("3.6", "2.8.1")."""
    if v in METADATA_VERSIONS:
        return
    release = ".".join(v.split(".")[:2]) if not v.startswith("0.") else ".".join(v.split(".")[:3])
    if not any(mv.split("-")[0] == release for mv in METADATA_VERSIONS):
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Version {v} is not a valid version")


def check_value(key: KafkaConfigKey, value: str) -> str:
    """Validate ``value`` as Kafka would; return it normalised (trimmed, lists comma-joined,
    booleans lower case). Raises InvalidConfigError with Kafka's message."""
    parsed = _parse(key, value)
    _validate(key, value, parsed)
    if isinstance(parsed, bool):
        return "true" if parsed else "false"
    if isinstance(parsed, list):
        return ",".join(parsed)
    return value.strip()
