"""Short descriptions of topic and broker configs, as DescribeConfigs v3+ reports them.

The wording is kaflet's own: one sentence that tells an operator what the setting changes.
Broker configs that supply a topic config's default reuse the topic sentence through
:func:`broker_doc`, so the two never drift apart.
"""

from __future__ import annotations

TOPIC_DOCS: dict[str, str] = {
    "cleanup.policy": "How old log segments are disposed of: 'delete' removes them by age or size, "
    "'compact' keeps the latest record of each key; both may be given.",
    "compression.gzip.level": "Compression level used when the broker recompresses batches with gzip.",
    "compression.lz4.level": "Compression level used when the broker recompresses batches with lz4.",
    "compression.zstd.level": "Compression level used when the broker recompresses batches with zstd.",
    "compression.type": "Codec the broker stores batches with; 'producer' keeps whatever codec the producer used, "
    "'uncompressed' stores them uncompressed.",
    "delete.retention.ms": "How long tombstones (null values) of a compacted topic stay readable after cleaning.",
    "file.delete.delay.ms": "How long a segment marked for deletion stays on disk before it is removed.",
    "flush.messages": "Force an fsync of the log after this many messages have been appended.",
    "flush.ms": "Force an fsync of the log when this many milliseconds have passed since the last one.",
    "follower.replication.throttled.replicas": "Replicas (partition:broker pairs, or '*') whose follower-side "
    "replication is throttled.",
    "index.interval.bytes": "How many bytes of records are appended between two entries of the offset index.",
    "leader.replication.throttled.replicas": "Replicas (partition:broker pairs, or '*') whose leader-side "
    "replication is throttled.",
    "local.retention.bytes": "With tiered storage, how large the local part of a partition may grow; -2 follows "
    "retention.bytes.",
    "local.retention.ms": "With tiered storage, how long segments stay on local disk; -2 follows retention.ms.",
    "max.compaction.lag.ms": "Longest time a record may stay uncompacted in a compacted log.",
    "max.message.bytes": "Largest record batch (after compression) the topic accepts.",
    "message.downconversion.enable": "Whether the broker converts batches to an older format for old consumers.",
    "message.format.version": "Record format version used on disk; ignored by brokers at 3.0 or later.",
    "message.timestamp.after.max.ms": "Largest allowed distance by which a record's CreateTime timestamp may be "
    "ahead of the broker's clock.",
    "message.timestamp.before.max.ms": "Largest allowed distance by which a record's CreateTime timestamp may be "
    "behind the broker's clock.",
    "message.timestamp.difference.max.ms": "Largest allowed distance between a record's CreateTime timestamp "
    "and the broker's clock.",
    "message.timestamp.type": "Whether record timestamps are the producer's (CreateTime) or the broker's append "
    "time (LogAppendTime).",
    "min.cleanable.dirty.ratio": "Share of a compacted log that must be uncleaned before the cleaner picks it.",
    "min.compaction.lag.ms": "Shortest time a record stays uncompacted in a compacted log.",
    "min.insync.replicas": "Fewest in-sync replicas that must have a write for an acks=all produce to succeed.",
    "preallocate": "Whether new segment files are preallocated on disk.",
    "remote.log.copy.disable": "With tiered storage, stop copying segments to remote storage (remote data stays "
    "readable).",
    "remote.log.delete.on.disable": "With tiered storage, delete the remote data when remote storage is turned off.",
    "remote.storage.enable": "Whether the topic's segments are copied to tiered (remote) storage.",
    "retention.bytes": "Largest size a partition may grow to before its oldest segments are deleted; -1 for no limit.",
    "retention.ms": "How long records are kept before their segment is deleted; -1 for no time limit.",
    "segment.bytes": "Size at which the active log segment is closed and a new one started.",
    "segment.index.bytes": "Size of the offset and time index files of each segment.",
    "segment.jitter.ms": "Largest random offset subtracted from segment.ms, so segments do not all roll at once.",
    "segment.ms": "Age after which the active segment is rolled even if it is not full.",
    "unclean.leader.election.enable": "Whether a replica outside the ISR may become leader (risking data loss).",
}

BROKER_DOCS: dict[str, str] = {
    "authorizer.class.name": "Authorizer that checks every request against ACLs; Kafka's AclAuthorizer and "
    "StandardAuthorizer class names select kaflet's built-in one, Logi-Kafka's DidiAuthorizer (or "
    "kaflet.gateway.GatewayAuthorizer) the gateway's, empty disables authorization.",
    "super.users": "Principals (User:name, separated by semicolons) that may do everything, whatever the ACLs say.",
    "cluster.id": "Logi-Kafka's numeric id of this cluster: clients of gateway listeners log in as "
    "<cluster.id>.<appId> (Kafka's generated cluster id string is separate and unchanged).",
    "max.sessions.per.user": "Most connections one gateway user may have authenticated to this broker at once; "
    "further logins are refused.",
    "gateway.default.users": "Gateway users known before (and besides) the management service's, as "
    "name:password:isSuper entries separated by commas.",
    "gateway.default.acls": "Gateway topic permissions known before (and besides) the management service's, as "
    "topic:user:Read|Write:Allow|Deny entries separated by commas (topic or user may be *).",
    "gateway.denials.log.file": "File the gateway's refused logins and denied requests are written to (the "
    "kaflet.gateway.denials logger); unset: the broker's log.",
    "allow.everyone.if.no.acl.found": "Whether a resource without any ACL is open to everyone "
    "(otherwise only super users may use it).",
    "broker.id": "This broker's id; -1 generates one when broker.id.generation.enable is true.",
    "broker.id.generation.enable": "Whether a broker without broker.id gets a generated one.",
    "reserved.broker.max.id": "Highest id reserved for configured broker ids; generated ids start above it.",
    "broker.rack": "Rack of this broker, used for rack-aware replica placement.",
    "listeners": "Addresses the broker listens on, as NAME://host:port.",
    "advertised.listeners": "Addresses clients are told to connect to; the listeners when unset.",
    "listener.security.protocol.map": "Security protocol of each listener name.",
    "log.dirs": "Directories the partitions are stored in.",
    "log.dir": "Directory for log data, used when log.dirs is not set.",
    "num.partitions": "Partition count of topics created without one.",
    "default.replication.factor": "Replication factor of topics created without one.",
    "auto.create.topics.enable": "Whether a metadata request for an unknown topic creates it.",
    "max.request.partition.size.limit": "Most partitions one DescribeTopicPartitions answer lists.",
    "delete.topic.enable": "Whether topics may be deleted.",
    "log.roll.hours": "Age in hours after which a segment is rolled; log.roll.ms takes precedence.",
    "log.roll.jitter.hours": "Roll jitter in hours; log.roll.jitter.ms takes precedence.",
    "log.retention.minutes": "Retention in minutes; log.retention.ms takes precedence.",
    "log.retention.hours": "Retention in hours; log.retention.minutes and log.retention.ms take precedence.",
    "log.flush.scheduler.interval.ms": "How often the flusher checks whether a log needs an fsync.",
    "log.flush.offset.checkpoint.interval.ms": "How often the recovery points are checkpointed.",
    "log.flush.start.offset.checkpoint.interval.ms": "How often the log start offsets are checkpointed.",
    "replica.high.watermark.checkpoint.interval.ms": "How often the high watermarks are checkpointed.",
    "replica.lag.time.max.ms": "A follower that has not caught up with the leader for this long leaves the ISR.",
    "replica.fetch.wait.max.ms": "Longest time a follower's fetch waits at the leader for data.",
    "replica.fetch.min.bytes": "Bytes a follower's fetch waits for at the leader before it is answered.",
    "replica.fetch.max.bytes": "Bytes a follower fetches per partition per request (a larger first batch still comes).",
    "replica.fetch.response.max.bytes": "Bytes a follower accepts in one fetch response (a larger first batch still comes).",
    "replica.fetch.backoff.ms": "Pause of a follower's fetcher after a failed fetch.",
    "replica.socket.timeout.ms": "How long a follower waits for the leader to answer a request.",
    "log.retention.check.interval.ms": "How often the broker looks for segments to delete.",
    "log.cleaner.enable": "Whether the log cleaner runs (it is needed by compacted topics).",
    "log.cleaner.threads": "Number of background threads that compact logs.",
    "log.cleaner.dedupe.buffer.size": "Memory the cleaner uses for its key-to-offset map.",
    "log.cleaner.io.buffer.size": "Memory the cleaner uses for its read and write buffers.",
    "log.cleaner.io.buffer.load.factor": "Fill ratio of the cleaner's key-to-offset map.",
    "log.cleaner.io.max.bytes.per.second": "Throttle on the cleaner's combined read and write rate.",
    "log.cleaner.backoff.ms": "Pause of the cleaner when no log needs cleaning.",
    "socket.request.max.bytes": "Largest request the broker reads from a socket.",
    "socket.send.buffer.bytes": "SO_SNDBUF of the broker's sockets; -1 for the OS default.",
    "socket.receive.buffer.bytes": "SO_RCVBUF of the broker's sockets; -1 for the OS default.",
    "connections.max.idle.ms": "Idle time after which a client connection is closed.",
    "fetch.max.bytes": "Largest response the broker builds for one fetch request.",
    "max.incremental.fetch.session.cache.slots": "Most incremental fetch sessions (KIP-227) the broker keeps.",
    "request.timeout.ms": "How long the broker waits on behalf of a request before giving up.",
    "zookeeper.connect": "ZooKeeper connection string; unset for a self-contained single broker.",
    "num.network.threads": "Threads that serve the network (kaflet: one event loop).",
    "num.io.threads": "Threads that handle requests (kaflet: one event loop).",
    "num.recovery.threads.per.data.dir": "Threads per data directory that recover logs at start-up.",
    "num.replica.fetchers": "Fetchers (connections) per leader broker that replicate its partitions to this one.",
    "background.threads": "Threads for background tasks.",
    "queued.max.requests": "Requests queued before the network stops reading.",
    "gateway.url": "Base URL of the Logi-Kafka management service (e.g. http://km:8080/gateway); "
    "empty turns the gateway features off.",
    "cluster.id.update": "Whether a broker may start with a cluster.id different from the one the cluster "
    "has stored (the stored one is then replaced).",
    "session.report.ms": "How often the broker reports which connections produced to and fetched from "
    "each topic to the management service.",
    "kafkaexmetrics.enable": "Whether per-application, per-topic metrics are recorded (gateway): for the "
    "topics the management service lists at report/jmx/topics, or for every topic without gateway.url; "
    "exposed on metrics.listener.",
    "kafkaexmetrics.max.series": "Most (application, topic) pairs kafkaexmetrics.enable records at once; "
    "further pairs wait for the daily clear (kaflet's setting).",
    "metrics.listener": "http://host:port where the broker serves its metrics for Prometheus at /metrics; "
    "empty serves none (kaflet's setting).",
    "log.segment.open.files.max": "Most segment files (.log) the broker keeps open at once; the least recently "
    "used is closed to open another and reopened when next used. -1: what the open file limit leaves after "
    "the descriptors open at start-up and a reserve for connections (kaflet's setting).",
    "max.broker.partitions": "Most partitions (replicas) this broker hosts; new ones beyond it are refused "
    "(CreateTopics and CreatePartitions: POLICY_VIOLATION, LeaderAndIsr: KAFKA_STORAGE_ERROR). -1: twice "
    "the descriptors log.segment.open.files.max derives from the open file limit (KIP-578's name).",
    "diskloadprotector.enable": "Whether consumer fetches of cold data (not in the page cache) are throttled "
    "while the disk under their log dir is overloaded (gateway; also on without the gateway when set).",
    "diskloadprotector.util.threshold": "Disk utilisation (0 to 1, from /proc/diskstats) at or above which a "
    "log dir's disk counts as overloaded (kaflet's setting; 0 treats the disk as always overloaded).",
    "diskloadprotector.cold.fetch.rate": "Consumer reads of cold data admitted per second per overloaded disk "
    "at the threshold, falling to none at 100% utilisation (kaflet's setting).",
    "diskloadprotector.throttle.ms": "Throttle time of a fetch response whose cold read was refused; the "
    "broker stops reading that connection for as long (kaflet's setting, bounded by max.throttle.time.ms).",
    "diskloadprotector.sample.interval.ms": "How often the disks' utilisation is sampled (kaflet's setting).",
    "gateway.sync.interval.ms": "How often each broker pulls new users, ACLs and disabled partitions from "
    "the management service (kaflet's setting; Logi-Kafka pulls every 60 s).",
    "gateway.check.interval.ms": "How often each broker compares its gateway caches with everything the "
    "management service holds and reloads on a difference (kaflet's setting; Logi-Kafka: 4 h).",
    "gateway.request.timeout.ms": "How long one call to the management service may take before it counts "
    "as failed (kaflet's setting).",
}


def topic_doc(name: str) -> str | None:
    """The description of a topic config, or None."""
    return TOPIC_DOCS.get(name)


def broker_doc(name: str, topic_synonym: str | None = None) -> str | None:
    """The description of a broker config; a topic default's own sentence if it has none."""
    doc = BROKER_DOCS.get(name)
    if doc is None and topic_synonym is not None and topic_synonym in TOPIC_DOCS:
        return f"Default for topics without an override: {TOPIC_DOCS[topic_synonym][0].lower()}{TOPIC_DOCS[topic_synonym][1:]}"
    return doc
