"""Cluster observation and operations for the management console, over the Kafka protocol.

A :class:`ClusterClient` is given how to reach one cluster (:class:`ClusterAccess`: bootstrap
servers, optionally ZooKeeper and SASL credentials) and answers with typed, immutable records:
brokers (controller, rack, up/down), topics (leader, replicas, ISR, under-replicated, size on
disk), topic configs, consumer groups (state, members, lag per partition); and it performs the
operations an operator may: create, expand and delete topics, change topic configs
incrementally, reset a group's offsets (only while the group is empty, as Kafka's
``kafka-consumer-groups.sh --reset-offsets`` insists).

It talks to the cluster as any Kafka tool would: confluent-kafka's AdminClient for everything
the Admin API has, kafka-python's admin client for DescribeLogDirs (the one request
confluent-kafka does not expose), and kazoo for the ZooKeeper view of which brokers are
registered. It imports nothing of the broker: the manager is a separate service.

Errors from the cluster become :class:`ClusterError`, carrying Kafka's error name (e.g.
``TOPIC_ALREADY_EXISTS``) so the console can show it.

The live connections the brokers' session reports name are in :mod:`kaflet.manager.topic_connections`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    ElectionType,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

#: Topics Kafka itself creates and marks internal (Metadata's is_internal).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

log = logging.getLogger("kaflet.manager.clusters")

ResetTarget = Literal["earliest", "latest", "timestamp", "offset"]

#: Bytes on disk per (topic, partition), per id of a broker holding a replica of it.
ReplicaSizes = dict[tuple[str, int], dict[int, int]]


class ClusterError(Exception):
    """A request to the cluster failed; ``code`` is Kafka's error name (or a local reason)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ClusterAccess:
    """How to reach a cluster. The password is kept out of ``repr`` (it ends up in logs)."""

    bootstrap_servers: str
    zookeeper_connect: str | None = None
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    request_timeout_s: float = 15.0

    def confluent_config(self) -> dict[str, Any]:
        """librdkafka properties for an AdminClient."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "security.protocol": self.security_protocol,
                "socket.timeout.ms": str(int(self.request_timeout_s * 1000))}
        if self.sasl_mechanism:
            conf["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            conf["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            conf["sasl.password"] = self.sasl_password
        return conf

    def kafka_python_config(self) -> dict[str, Any]:
        """kafka-python keyword arguments for its KafkaAdminClient."""
        conf: dict[str, Any] = {"bootstrap_servers": self.bootstrap_servers.split(","),
                                "security_protocol": self.security_protocol,
                                "request_timeout_ms": int(self.request_timeout_s * 1000),
                                "client_id": "kaflet-manager"}
        if self.sasl_mechanism:
            conf["sasl_mechanism"] = self.sasl_mechanism
            conf["sasl_plain_username"] = self.sasl_username
            conf["sasl_plain_password"] = self.sasl_password
        return conf


# -- records ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerInfo:
    """One broker as the cluster knows it; ``up`` False: replicas name it but it is not registered."""

    id: int
    host: str | None
    port: int | None
    rack: str | None
    controller: bool
    up: bool


@dataclass(frozen=True)
class ClusterOverview:
    """The brokers of a cluster and who controls it (None while there is no controller)."""

    cluster_id: str | None
    controller_id: int | None
    brokers: tuple[BrokerInfo, ...]

    @property
    def up(self) -> tuple[BrokerInfo, ...]:
        return tuple(b for b in self.brokers if b.up)

    @property
    def down(self) -> tuple[BrokerInfo, ...]:
        return tuple(b for b in self.brokers if not b.up)


@dataclass(frozen=True)
class PartitionInfo:
    """One partition: ``leader`` None when it has none (offline); ``size_bytes`` (over every
    replica) None when unknown; ``replica_sizes`` the bytes each broker holds of it, as
    (broker id, bytes) by broker id (a replica whose broker did not answer is missing)."""

    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    size_bytes: int | None = None
    replica_sizes: tuple[tuple[int, int], ...] = ()

    def replica_size(self, broker: int) -> int | None:
        """The bytes ``broker`` holds of this partition (None: not known)."""
        return dict(self.replica_sizes).get(broker)

    @property
    def under_replicated(self) -> bool:
        """Kafka's UnderReplicatedPartitions: fewer in-sync replicas than assigned ones."""
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader is None


@dataclass(frozen=True)
class TopicInfo:
    """One topic and its partitions (sorted by id)."""

    name: str
    internal: bool
    partitions: tuple[PartitionInfo, ...]

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def under_replicated(self) -> int:
        return sum(1 for p in self.partitions if p.under_replicated)

    @property
    def offline(self) -> int:
        return sum(1 for p in self.partitions if p.offline)

    @property
    def size_bytes(self) -> int | None:
        """Bytes on disk over every replica, or None when a partition's size is unknown."""
        sizes = [p.size_bytes for p in self.partitions]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)


@dataclass(frozen=True)
class LogDirInfo:
    """One log dir of a broker: ``error`` is Kafka's error name when it is offline; the volume's
    total and usable bytes are None when the broker does not tell (DescribeLogDirs before v4)."""

    path: str
    error: str | None
    total_bytes: int | None
    usable_bytes: int | None


@dataclass(frozen=True)
class LogDirs:
    """What DescribeLogDirs told of a cluster: replica sizes and each broker's log dirs."""

    replica_sizes: ReplicaSizes
    dirs: Mapping[int, tuple[LogDirInfo, ...]]


@dataclass(frozen=True)
class TopicConfig:
    """One config of a topic as DescribeConfigs gives it (a sensitive value is None)."""

    name: str
    value: str | None
    source: str
    default: bool
    read_only: bool
    sensitive: bool


@dataclass(frozen=True)
class GroupSummary:
    """One consumer group as ListGroups names it."""

    group_id: str
    state: str
    simple: bool


@dataclass(frozen=True)
class MemberInfo:
    """A member of a group and the partitions assigned to it."""

    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None
    assignment: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class PartitionLag:
    """A group's position on one partition: ``lag`` = log end offset - committed offset."""

    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    member_id: str | None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.log_end is None:
            return None
        return max(0, self.log_end - self.committed)


@dataclass(frozen=True)
class GroupDetail:
    """A group's state, members and lag on every partition it committed or is assigned."""

    group_id: str
    state: str
    protocol: str
    coordinator: int | None
    members: tuple[MemberInfo, ...]
    partitions: tuple[PartitionLag, ...]

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    def topics(self) -> list[str]:
        return sorted({p.topic for p in self.partitions})


@dataclass(frozen=True)
class PartitionOffsets:
    """A partition's log start and log end offsets; ``end - start`` records are in it (fewer when
    compacted or transactional markers are among them)."""

    partition: int
    start: int | None
    end: int | None

    @property
    def records(self) -> int | None:
        return None if self.start is None or self.end is None else self.end - self.start


@dataclass(frozen=True)
class OffsetChange:
    """One partition's committed offset before and after a reset (``before`` None: none committed)."""

    topic: str
    partition: int
    before: int | None
    after: int


# -- the client ---------------------------------------------------------------------------------


def _error_of(exc: BaseException) -> ClusterError:
    if isinstance(exc, ClusterError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        err: KafkaError = exc.args[0]
        return ClusterError(err.name(), err.str())
    return ClusterError(type(exc).__name__, str(exc))


def _state_name(state: Any) -> str:
    """``ConsumerGroupState.STABLE`` -> ``Stable`` (Kafka's spelling of group states)."""
    name = getattr(state, "name", str(state))
    return {"PREPARING_REBALANCING": "PreparingRebalance", "COMPLETING_REBALANCING": "CompletingRebalance"}.get(
        name, name.title())


class ClusterClient:
    """Observation and operations on one cluster; thread-safe, one AdminClient kept open.

    Every call waits at most ``access.request_timeout_s`` per request and raises
    :class:`ClusterError` on failure.
    """

    def __init__(self, access: ClusterAccess) -> None:
        self.access = access
        # librdkafka's own log lines go through Python logging, not to the service's stderr.
        conf: dict[str, Any] = {**access.confluent_config(), "logger": log}
        self._admin = AdminClient(conf)
        self._zk: Any = None
        self._zk_lock = threading.Lock()
        #: Every broker id seen registered, so a broker that leaves shows as down.
        self._seen: dict[int, BrokerInfo] = {}
        self._seen_lock = threading.Lock()
        #: Why partition sizes are unknown (None once DescribeLogDirs answered).
        self.sizes_unavailable: str | None = None

    @property
    def _timeout(self) -> float:
        return self.access.request_timeout_s

    def _wait(self, future: Future[Any]) -> Any:
        try:
            return future.result(self._timeout + 5)
        except Exception as exc:
            raise _error_of(exc) from exc

    def close(self) -> None:
        """Release the ZooKeeper session (the AdminClient goes with the object)."""
        with self._zk_lock:
            if self._zk is not None:
                self._zk.stop()
                self._zk.close()
                self._zk = None

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- metadata -----------------------------------------------------------------------------

    def metadata(self) -> Any:
        """One Metadata request for every topic (confluent-kafka's ClusterMetadata)."""
        try:
            return self._admin.list_topics(timeout=self._timeout)
        except Exception as exc:
            raise _error_of(exc) from exc

    def overview(self, metadata: Any = None) -> ClusterOverview:
        """Brokers with rack, controller and up/down.

        Up means registered: in ``/brokers/ids`` when ZooKeeper is known, otherwise in the
        Metadata answer (a Kafka broker lists only live brokers). Down brokers are those that
        were seen before or that replicas name but that are not registered now.
        """
        md = metadata if metadata is not None else self.metadata()
        nodes: dict[int, Any] = dict(md.brokers)
        controller = md.controller_id if md.controller_id is not None and md.controller_id >= 0 else None
        cluster_id = md.cluster_id
        try:
            # DescribeCluster for the racks (confluent-kafka's Metadata brokers have none).
            described = self._wait(self._admin.describe_cluster(request_timeout=self._timeout))
        except ClusterError as exc:
            # librdkafka waits for a controller to send it to; while a new one is elected the
            # Metadata answer still says which brokers live.
            log.info("DescribeCluster of %s failed, using Metadata: %s", self.access.bootstrap_servers, exc)
        else:
            nodes = {n.id: n for n in described.nodes}
            controller = described.controller.id if described.controller is not None else None
            cluster_id = described.cluster_id
        live = set(nodes)
        registrations: dict[int, dict[str, Any]] = {}
        if self.access.zookeeper_connect:
            registrations, zk_controller = self._zk_brokers()
            live = set(registrations)
            controller = zk_controller
        referenced = {r for t in md.topics.values() for p in t.partitions.values() for r in p.replicas}
        brokers: dict[int, BrokerInfo] = {}
        for bid in live:
            node = nodes.get(bid)
            reg = registrations.get(bid, {})
            host = node.host if node is not None else reg.get("host")
            port = node.port if node is not None else reg.get("port")
            rack = getattr(node, "rack", None) if node is not None else reg.get("rack")
            if rack is None and node is not None and not hasattr(node, "rack"):
                with self._seen_lock:
                    old = self._seen.get(bid)
                rack = old.rack if old is not None else None
            brokers[bid] = BrokerInfo(bid, host, port, rack or None, bid == controller, True)
        with self._seen_lock:
            self._seen.update(brokers)
            for bid in (set(self._seen) | referenced) - live:
                old = self._seen.get(bid)
                brokers[bid] = BrokerInfo(bid, old.host if old else None, old.port if old else None,
                                          old.rack if old else None, False, False)
        return ClusterOverview(cluster_id, controller, tuple(brokers[b] for b in sorted(brokers)))

    def _zk_client(self) -> Any:
        from kazoo.client import KazooClient

        with self._zk_lock:
            if self._zk is None:
                zk = KazooClient(hosts=self.access.zookeeper_connect, timeout=self._timeout, read_only=True)
                try:
                    zk.start(timeout=self._timeout)
                except Exception as exc:
                    zk.close()
                    raise ClusterError("ZOOKEEPER_UNREACHABLE", str(exc)) from exc
                self._zk = zk
            return self._zk

    def _zk_brokers(self) -> tuple[dict[int, dict[str, Any]], int | None]:
        """Registered brokers (``/brokers/ids/<id>`` JSON) and the ``/controller`` broker id."""
        from kazoo.exceptions import KazooException, NoNodeError

        zk = self._zk_client()
        out: dict[int, dict[str, Any]] = {}
        try:
            try:
                ids = zk.get_children("/brokers/ids")
            except NoNodeError:
                ids = []
            for child in ids:
                try:
                    data, _ = zk.get(f"/brokers/ids/{child}")
                    out[int(child)] = json.loads(data)
                except (NoNodeError, ValueError):
                    continue  # left between the listing and the read, or not a broker's node
            try:
                data, _ = zk.get("/controller")
                controller: int | None = int(json.loads(data)["brokerid"])
            except (NoNodeError, ValueError, KeyError, TypeError):
                controller = None
        except KazooException as exc:
            raise ClusterError("ZOOKEEPER_ERROR", f"{type(exc).__name__}: {exc}") from exc
        return out, controller

    def topics(self, metadata: Any = None, sizes: ReplicaSizes | None = None) -> list[TopicInfo]:
        """Every topic with its partitions, by name; ``sizes`` from :meth:`log_dir_sizes`."""
        md = metadata if metadata is not None else self.metadata()
        out = []
        for name in sorted(md.topics):
            t = md.topics[name]
            if t.error is not None and not t.partitions:
                continue  # being deleted or not authorized: nothing to show
            parts = []
            for p in sorted(t.partitions.values(), key=lambda p: p.id):
                held = {} if sizes is None else sizes.get((name, p.id), {})
                parts.append(PartitionInfo(p.id, p.leader if p.leader >= 0 else None, tuple(p.replicas),
                                           tuple(p.isrs), None if sizes is None else sum(held.values()),
                                           tuple(sorted(held.items()))))
            out.append(TopicInfo(name, name in INTERNAL_TOPICS, tuple(parts)))
        return out

    def topic(self, name: str) -> TopicInfo:
        """One topic; ClusterError UNKNOWN_TOPIC_OR_PART when it does not exist.

        DescribeTopics, not a Metadata request naming the topic: that one would create the
        topic on a broker with auto.create.topics.enable.
        """
        futures = self._admin.describe_topics(TopicCollection([name]), request_timeout=self._timeout)
        desc = self._wait(futures[name])
        parts = tuple(
            PartitionInfo(p.id, p.leader.id if p.leader is not None and p.leader.id >= 0 else None,
                          tuple(n.id for n in p.replicas), tuple(n.id for n in p.isr))
            for p in sorted(desc.partitions, key=lambda p: p.id))
        return TopicInfo(name, bool(desc.is_internal), parts)

    def log_dir_sizes(self) -> ReplicaSizes | None:
        """Bytes on disk per partition and broker holding a replica of it (see :meth:`log_dirs`)."""
        found = self.log_dirs()
        return None if found is None else found.replica_sizes

    def log_dirs(self) -> LogDirs | None:
        """Every broker's log dirs and the bytes of each replica in them, from DescribeLogDirs
        (one request per broker, all partitions).

        None, with the reason in :attr:`sizes_unavailable`, when the brokers do not answer
        DescribeLogDirs (a broker that does not implement it says so in ApiVersions).
        """
        from kafka.admin import KafkaAdminClient
        from kafka.errors import KafkaError as PyKafkaError

        try:
            admin = KafkaAdminClient(**self.access.kafka_python_config())
        except PyKafkaError as exc:
            self.sizes_unavailable = f"{type(exc).__name__}: {exc}"
            return None
        try:
            answers = admin.describe_log_dirs()
        except PyKafkaError as exc:
            self.sizes_unavailable = f"DescribeLogDirs: {type(exc).__name__}: {exc}"
            return None
        finally:
            admin.close()
        self.sizes_unavailable = None
        return LogDirs(replica_sizes_from_log_dirs(answers), log_dirs_from_answers(answers))

    def topic_configs(self, name: str) -> list[TopicConfig]:
        """The topic's configs (defaults included), by name."""
        resource = ConfigResource(ResourceType.TOPIC, name)
        entries = self._wait(self._admin.describe_configs([resource], request_timeout=self._timeout)[resource])
        out = []
        for key in sorted(entries):
            e = entries[key]
            out.append(TopicConfig(key, None if e.is_sensitive else e.value, _source_name(e.source),
                                   bool(e.is_default), bool(e.is_read_only), bool(e.is_sensitive)))
        return out

    def end_offsets(self, partitions: Iterable[tuple[str, int]], spec: str = "latest") -> dict[tuple[str, int], int]:
        """The log end (``latest``), log start (``earliest``) offset per partition (ListOffsets).

        A partition whose leader cannot answer is left out rather than failing the rest.
        """
        offset_spec = OffsetSpec.latest() if spec == "latest" else OffsetSpec.earliest()
        request = {TopicPartition(t, p): offset_spec for t, p in partitions}
        return self._list_offsets(request)

    def topic_offsets(self, name: str) -> list[PartitionOffsets]:
        """Log start and end offset of each partition of one topic (None where the leader is away)."""
        keys = [(name, p.partition) for p in self.topic(name).partitions]
        starts = self.end_offsets(keys, "earliest")
        ends = self.end_offsets(keys, "latest")
        return [PartitionOffsets(p, starts.get((t, p)), ends.get((t, p))) for t, p in keys]

    def _list_offsets(self, request: dict[TopicPartition, Any]) -> dict[tuple[str, int], int]:
        if not request:
            return {}
        futures = self._admin.list_offsets(request, request_timeout=self._timeout)
        out: dict[tuple[str, int], int] = {}
        first_error: ClusterError | None = None
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = fut.result(self._timeout + 5).offset
            except Exception as exc:
                first_error = first_error or _error_of(exc)
        if not out and first_error is not None:
            raise first_error
        return out

    # -- topic operations ---------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, replication_factor: int = -1,
                     configs: Mapping[str, str] | None = None) -> None:
        """CreateTopics; ``replication_factor`` -1 takes the broker's default."""
        topic = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                         config=dict(configs or {}))
        self._wait(self._admin.create_topics([topic], request_timeout=self._timeout)[name])

    def expand_topic(self, name: str, total_partitions: int) -> None:
        """CreatePartitions: grow the topic to ``total_partitions`` (Kafka never shrinks one)."""
        self._wait(self._admin.create_partitions([NewPartitions(name, total_partitions)],
                                                 request_timeout=self._timeout)[name])

    def delete_topic(self, name: str) -> None:
        """DeleteTopics."""
        self._wait(self._admin.delete_topics([name], request_timeout=self._timeout)[name])

    def alter_topic_configs(self, name: str, set_configs: Mapping[str, str] | None = None,
                            delete_configs: Iterable[str] = ()) -> None:
        """IncrementalAlterConfigs: set some configs, return others to their default; the rest stay."""
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in (set_configs or {}).items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete_configs]
        if not entries:
            return
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        self._wait(self._admin.incremental_alter_configs([resource], request_timeout=self._timeout)[resource])

    def elect_preferred_leaders(self, partitions: Iterable[tuple[str, int]] | None = None) -> dict[tuple[str, int], str]:
        """ElectLeaders (preferred): move leadership back to each partition's first replica
        (Logi-KafkaManager's "leader rebalance"); None means every partition of the cluster.

        Returns the partitions whose election failed, with Kafka's error name; partitions
        already led by their preferred replica (ELECTION_NOT_NEEDED) are not failures.
        """
        wanted = None if partitions is None else [TopicPartition(t, p) for t, p in partitions]
        # No timeout keywords: confluent-kafka 2.16 passes them on to a C function that takes
        # none (TypeError); socket.timeout.ms (the access's timeout) bounds the request instead.
        results = self._wait(self._admin.elect_leaders(ElectionType.PREFERRED, wanted))
        failed: dict[tuple[str, int], str] = {}
        for tp, err in results.items():
            if err is None:
                continue
            code = _error_of(err).code if isinstance(err, BaseException) else \
                (err.name() if isinstance(err, KafkaError) else str(err))
            if code != "ELECTION_NOT_NEEDED":
                failed[(tp.topic, tp.partition)] = code
        return failed

    # -- consumer groups ----------------------------------------------------------------------

    def groups(self) -> list[GroupSummary]:
        """Every consumer group the brokers coordinate, by id."""
        result = self._wait(self._admin.list_consumer_groups(request_timeout=self._timeout))
        if result.errors and not result.valid:
            raise _error_of(result.errors[0])
        for err in result.errors:
            # A broker that did not answer ListGroups: its groups are missing from this list.
            log.warning("listing the groups of %s: %s", self.access.bootstrap_servers, _error_of(err))
        out = [GroupSummary(g.group_id, _state_name(g.state), bool(g.is_simple_consumer_group))
               for g in result.valid]
        return sorted(out, key=lambda g: g.group_id)

    def group_members(self, group_ids: Iterable[str]) -> dict[str, int]:
        """How many members each group has (one DescribeGroups for all); a group whose
        coordinator did not answer is left out."""
        ids = list(dict.fromkeys(group_ids))
        if not ids:
            return {}
        futures = self._admin.describe_consumer_groups(ids, request_timeout=self._timeout)
        out: dict[str, int] = {}
        for g, fut in futures.items():
            try:
                out[g] = len(self._wait(fut).members)
            except ClusterError as exc:
                log.info("describing group %s: %s", g, exc)
        return out

    def group(self, group_id: str) -> GroupDetail:
        """State, members and lag per partition of one group (DescribeGroups, OffsetFetch, ListOffsets)."""
        desc = self._wait(self._admin.describe_consumer_groups([group_id],
                                                               request_timeout=self._timeout)[group_id])
        members = tuple(
            MemberInfo(m.member_id, m.client_id, m.host, m.group_instance_id,
                       tuple(sorted((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions or []))))
            for m in desc.members)
        owner = {tp: m.member_id for m in members for tp in m.assignment}
        committed = self._committed(group_id)
        keys = sorted(set(committed) | set(owner))
        ends = self.end_offsets(keys)
        partitions = tuple(PartitionLag(t, p, committed.get((t, p)), ends.get((t, p)), owner.get((t, p)))
                           for t, p in keys)
        coordinator = desc.coordinator.id if desc.coordinator is not None else None
        return GroupDetail(group_id, _state_name(desc.state), desc.partition_assignor or "", coordinator,
                           members, partitions)

    def _committed(self, group_id: str) -> dict[tuple[str, int], int]:
        return self.committed_offsets([group_id])[group_id]

    def committed_offsets(self, group_ids: Iterable[str]) -> dict[str, dict[tuple[str, int], int]]:
        """Every committed offset of each group (OffsetFetch, one request per group, all in flight
        at once); a group whose coordinator cannot answer is left out unless it is the only one."""
        ids = list(dict.fromkeys(group_ids))
        futures = {g: self._admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)],
                                                              request_timeout=self._timeout)[g] for g in ids}
        out: dict[str, dict[tuple[str, int], int]] = {}
        first_error: ClusterError | None = None
        for g, fut in futures.items():
            try:
                result = self._wait(fut)
            except ClusterError as exc:
                first_error = first_error or exc
                continue
            out[g] = {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions
                      if tp.error is None and tp.offset >= 0}
        if first_error is not None and len(ids) == 1:
            raise first_error
        return out

    def reset_offsets(self, group_id: str, topic: str, to: ResetTarget, value: int | None = None,
                      partitions: Iterable[int] | None = None, *, dry_run: bool = False) -> list[OffsetChange]:
        """Move the group's committed offsets on ``topic`` (all partitions, or ``partitions``).

        ``to``: ``earliest``/``latest``; ``timestamp`` (``value`` ms: the first offset at or after
        it, the log end when there is none, as Kafka's tool); ``offset`` (``value``, clamped into
        [log start, log end] as Kafka's tool does). Only an empty group (no members) may be reset,
        else ClusterError GROUP_NOT_EMPTY: its consumers would overwrite the offsets at once.
        ``dry_run`` computes the changes without committing them.
        """
        if to not in ("earliest", "latest", "timestamp", "offset"):
            raise ValueError(f"unknown reset target {to!r}")
        if to in ("timestamp", "offset") and value is None:
            raise ValueError(f"a reset to {to} needs a value")
        state, members = self.group_state(group_id)
        if members or state not in ("Empty", "Dead"):
            raise ClusterError("GROUP_NOT_EMPTY", f"group {group_id!r} is {state}: stop its consumers first")
        info = self.topic(topic)
        ids = [p.partition for p in info.partitions]
        if partitions is not None:
            wanted = sorted(set(partitions))
            missing = [p for p in wanted if p not in ids]
            if missing:
                raise ClusterError("UNKNOWN_TOPIC_OR_PART", f"{topic} has no partitions {missing}")
            ids = wanted
        keys = [(topic, p) for p in ids]
        starts = self.end_offsets(keys, "earliest")
        ends = self.end_offsets(keys, "latest")
        if to == "earliest":
            target = starts
        elif to == "latest":
            target = ends
        elif to == "timestamp":
            assert value is not None
            found = self._list_offsets({TopicPartition(t, p): OffsetSpec.for_timestamp(value) for t, p in keys})
            target = {k: (o if o >= 0 else ends[k]) for k, o in found.items() if k in ends}
        else:
            assert value is not None
            target = {k: min(max(value, starts[k]), ends[k]) for k in keys if k in starts and k in ends}
        unknown = [p for t, p in keys if (t, p) not in target]
        if unknown:
            raise ClusterError("LEADER_NOT_AVAILABLE", f"no offsets for {topic} partitions {unknown}")
        before = self._committed(group_id)
        changes = [OffsetChange(t, p, before.get((t, p)), target[(t, p)]) for t, p in keys]
        if not dry_run:
            request = [ConsumerGroupTopicPartitions(group_id, [TopicPartition(c.topic, c.partition, c.after)
                                                               for c in changes])]
            result = self._wait(self._admin.alter_consumer_group_offsets(
                request, request_timeout=self._timeout)[group_id])
            for tp in result.topic_partitions:
                if tp.error is not None:
                    raise _error_of(KafkaException(tp.error))
        return changes

    def group_state(self, group_id: str) -> tuple[str, int]:
        """The group's state and how many members it has."""
        desc = self._wait(self._admin.describe_consumer_groups([group_id],
                                                               request_timeout=self._timeout)[group_id])
        return _state_name(desc.state), len(desc.members)


def replica_sizes_from_log_dirs(answers: Iterable[Mapping[str, Any]]) -> ReplicaSizes:
    """Bytes per (topic, partition) and broker from the brokers' DescribeLogDirs answers, as
    kafka-python's ``describe_log_dirs()`` returns them (``[{"broker": id, "log_dirs": [...]}]``).

    A log dir that answers an error (offline) counts nothing; a future log (a replica being moved
    between a broker's dirs) is not yet the partition's and counts nothing either.
    """
    sizes: ReplicaSizes = {}
    for answer in answers:
        broker = int(answer["broker"])
        for log_dir in answer.get("log_dirs") or ():
            if log_dir.get("error_code"):
                continue
            for topic in log_dir.get("topics") or ():
                for part in topic.get("partitions") or ():
                    if part.get("is_future_key"):
                        continue
                    held = sizes.setdefault((topic["name"], int(part["partition_index"])), {})
                    held[broker] = held.get(broker, 0) + int(part["partition_size"])
    return sizes


def log_dirs_from_answers(answers: Iterable[Mapping[str, Any]]) -> dict[int, tuple[LogDirInfo, ...]]:
    """Each broker's log dirs (by path) from the same answers as :func:`replica_sizes_from_log_dirs`."""
    from kafka.errors import for_code

    out: dict[int, tuple[LogDirInfo, ...]] = {}
    for answer in answers:
        dirs = []
        for log_dir in answer.get("log_dirs") or ():
            code = int(log_dir.get("error_code") or 0)
            # v4 answers carry the volume's bytes; -1 (and older versions' absence) means unknown.
            total, usable = log_dir.get("total_bytes", -1), log_dir.get("usable_bytes", -1)
            dirs.append(LogDirInfo(str(log_dir.get("log_dir")), for_code(code).message if code else None,
                                   total if total is not None and total >= 0 else None,
                                   usable if usable is not None and usable >= 0 else None))
        out[int(answer["broker"])] = tuple(sorted(dirs, key=lambda d: d.path))
    return dict(sorted(out.items()))


def sizes_from_log_dirs(answers: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], int]:
    """Bytes per (topic, partition) summed over its replicas (see :func:`replica_sizes_from_log_dirs`)."""
    return {key: sum(held.values()) for key, held in replica_sizes_from_log_dirs(answers).items()}


_SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
            4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG", 8: "GROUP_CONFIG"}


def _source_name(source: Any) -> str:
    if isinstance(source, int):
        return _SOURCES.get(source, str(source))
    return str(getattr(source, "name", source))
