"""The Broker: composition root that wires config, metadata, logs, partitions and listeners.

It is the one module that knows every part, and start-up order, shutdown order and the
callbacks between parts all sit here, so it runs a little over the usual size; what a start-up
step decides on its own lives beside it (cluster_identity.py, controlled_shutdown.py,
broker_metrics.py, inter_broker_security.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kaflet.controller.channel import ControllerChannel
from kaflet.controller.config import ControllerConfig
from kaflet.controller.controller import KafkaController
from kaflet.controller.topics import CreateOutcome, TopicRequest, ensure_persistent_paths
from kaflet.coordinator.group.consumer_coordinator import ConsumerGroupConfig
from kaflet.coordinator.group.coordinator import GroupConfig, GroupCoordinator
from kaflet.coordinator.group.store import GROUP_METADATA_TOPIC, OffsetsTopicStore
from kaflet.coordinator.group.topic import OffsetsTopic, OffsetsTopicConfig
from kaflet.coordinator.producer_id_manager import ProducerIdManager
from kaflet.coordinator.transaction.coordinator import MarkerJob, TransactionCoordinator, TxnConfig
from kaflet.coordinator.transaction.markers import TxnMarkerSender
from kaflet.coordinator.transaction.schemas import TRANSACTION_STATE_TOPIC, TopicPartition
from kaflet.coordinator.transaction.topic import transaction_topic_config
from kaflet.gateway.gateway import ClusterIdMismatchError, Gateway, GatewaySettings, check_cluster_id
from kaflet.gateway.model import ManagementService, PartitionView
from kaflet.gateway.partitions import PartitionRouter
from kaflet.gateway.quotas import TopicQuotaManager
from kaflet.gateway.session_report import SessionReport
from kaflet.gateway.static import StaticAcls, StaticUsers
from kaflet.log.disk_load import DiskLoadProtector, DiskLoadSettings
from kaflet.log.log_manager import LogManager
from kaflet.log.segment_files import SegmentFileCache
from kaflet.metadata import zkdata
from kaflet.metadata.embedded import EmbeddedTree
from kaflet.metadata.metadata_cache import MetadataCache
from kaflet.metadata.tree import MetadataTree, NodeExistsError, SessionLostError
from kaflet.metadata.zookeeper import ZooKeeperTree
from kaflet.metrics.exporter import MetricsExporter
from kaflet.metrics.stats import BrokerMetrics, ZooKeeperSessionStats
from kaflet.network.client import InterBrokerSettings
from kaflet.network.connector import InterBrokerConnector
from kaflet.network.listener import Listener
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.broker_connection import BrokerConnection
from kaflet.protocol.controller_messages import ControllerRequest, ControllerResponse, UpdateMetadataRequest
from kaflet.protocol.errors import ErrorCode
from kaflet.quota.manager import KafkaQuotaManager, QuotaManager, QuotaSettings
from kaflet.quota.store import QuotaConfigStore
from kaflet.replication.config import ReplicationConfig
from kaflet.replication.fetcher import BrokerEndpoint, LeaderConnection
from kaflet.replication.isr import ZkIsrManager
from kaflet.replication.partition import Partition
from kaflet.replication.replica_manager import ReplicaManager
from kaflet.security.authorizer import Authorizer, AuthorizerConfigError, create_authorizer
from kaflet.security.scram_store import ScramCredentialStore
from kaflet.server import broker_metrics, cluster_identity, descriptors, listener_security
from kaflet.server.config import BrokerConfig, ConfigError, Endpoint, parse_endpoints
from kaflet.server.config_admin import ConfigAdmin
from kaflet.server.controlled_shutdown import controlled_shutdown
from kaflet.server.controller_requests import ControllerRequests
from kaflet.server.dispatcher import Dispatcher
from kaflet.server.fetch_session import FetchManager, FetchSessionCache
from kaflet.server.gateway_auth import GatewayAuth
from kaflet.server.inter_broker_security import inter_broker_settings
from kaflet.server.resource_retry import ResourceRetry
from kaflet.server.services import (
    Accounting,
    Admin,
    Cluster,
    Coordinators,
    RunState,
    Services,
    Settings,
    Storage,
)
from kaflet.server.topic_admin import TopicAdmin, wait_until

log = logging.getLogger("kaflet.broker")


class BrokerStartError(Exception):
    """The broker cannot start; the message says why in one sentence."""


_Part = TypeVar("_Part")


def _started(part: _Part | None) -> _Part:
    """A part made by Broker.start(), or RuntimeError when start() has not made it yet."""
    if part is None:
        raise RuntimeError("broker not started")
    return part


class _Phases:
    """Where a shutdown's seconds went, for its last log line: at 10,000 partitions a stop
    takes seconds, and which step took them is what an operator (and issue 21) asks."""

    def __init__(self) -> None:
        self._start = self._last = time.monotonic()
        self._spans: list[tuple[str, float]] = []

    def mark(self, name: str) -> None:
        now = time.monotonic()
        self._spans.append((name, now - self._last))
        self._last = now

    def __str__(self) -> str:
        spans = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in self._spans)
        return f"{time.monotonic() - self._start:.2f} s ({spans})" if spans else f"{time.monotonic() - self._start:.2f} s"


class Broker:
    """One Kafka broker. `await start()`, serve, then `await stop()`."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.cluster_id = ""
        self.broker_id = config["broker.id"]
        #: The broker epoch, `stopping` and the gateway's partition numbering: what the handlers
        #: read at each request because it changes while the broker runs.
        self.state = RunState()
        self.started = False
        self.metadata_cache = MetadataCache()
        # The parts start() makes, in this order; None until then (read through the properties
        # below, which say so), and stop() closes those a failed start left behind.
        self._tree: MetadataTree | None = None
        self._scram_credentials: ScramCredentialStore | None = None
        self._quota_configs: QuotaConfigStore | None = None
        self._config_admin: ConfigAdmin | None = None
        self._log_manager: LogManager | None = None
        self._isr_manager: ZkIsrManager | None = None
        self._replica_manager: ReplicaManager | None = None
        self._topic_admin: TopicAdmin | None = None
        self._producer_ids: ProducerIdManager | None = None
        self._group_coordinator: GroupCoordinator | None = None
        self._txn_coordinator: TransactionCoordinator | None = None
        self._controller: KafkaController | None = None
        self._inter_broker: InterBrokerSettings | None = None
        self._connector: InterBrokerConnector | None = None
        #: True with zookeeper.connect: one broker of a cluster (else the embedded tree, alone).
        self.clustered = bool(config["zookeeper.connect"])
        self._session_lost = False
        self._session_task: asyncio.Task[None] | None = None
        self._txn_markers: TxnMarkerSender | None = None
        # authorizer.class.name's authorizer; None: no authorization (everything is allowed).
        self.authorizer: Authorizer | None = None
        # The Logi-Kafka gateway's authentication and authorization (gateway listeners, DidiAuthorizer).
        self.gateway_auth = GatewayAuth(config)
        # The Logi-Kafka gateway (users, ACLs, disabled partitions from the management service);
        # None unless gateway.url is set.
        self.gateway: Gateway | None = None
        # Client quotas: the manager the enforcer asks (an interface; Kafka's by default) and
        # the quota configs in /config/users, /config/clients and /config/ips feeding it.
        quota_settings = QuotaSettings.from_config(config.values)
        self.quota_manager: QuotaManager = KafkaQuotaManager(quota_settings)
        #: The Logi-Kafka gateway's features are on (gateway.url set).
        self.gateway_enabled = bool(config["gateway.url"])
        #: The counters behind the Prometheus endpoint (metrics.listener); None: none are kept.
        self.metrics: BrokerMetrics | None = broker_metrics.build_metrics(config)
        self.metrics_exporter: MetricsExporter | None = None
        #: Produce and Fetch report their bytes per topic (RequestContext.traffic).
        self.track_traffic = self.gateway_enabled or self.metrics is not None
        #: Connections per topic reported to the management service (start_session_report).
        self.session_report: SessionReport | None = None
        if self.gateway_enabled:
            self.session_report = SessionReport(config["cluster.id"], lambda: self.broker_id,
                                                config["session.report.ms"])
            # /config/clients/<appId>.<topic> quotas limit that application on that topic.
            self.quota_manager = TopicQuotaManager(self.quota_manager, quota_settings, self.leader_share,
                                                   config["cluster.id"])
        #: Disk load protection (diskloadprotector.enable); None: off.
        self.disk_load_protector: DiskLoadProtector | None = None
        # Incremental fetch sessions (KIP-227) of all clients and followers.
        self.fetch_manager = FetchManager(FetchSessionCache(config["max.incremental.fetch.session.cache.slots"]),
                                          lambda: time.monotonic() * 1000)
        self.listeners: list[Listener] = []
        self.advertised: list[Endpoint] = []
        self._metadata_changed = asyncio.Event()
        self._stop_background = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._resource_retry = ResourceRetry(self._ask_controller_again)
        self._stopped = asyncio.Event()
        #: Set when the broker stops by itself: every log dir failed (``halt_reason`` says why).
        self.halted = asyncio.Event()
        self.halt_reason: str | None = None

    # -- the parts start() makes ------------------------------------------------------------

    @property
    def tree(self) -> MetadataTree:
        """The metadata tree: ZooKeeper's, or the embedded one of a broker alone."""
        return _started(self._tree)

    @property
    def scram_credentials(self) -> ScramCredentialStore:
        """SCRAM credentials in /config/users (AlterUserScramCredentials, SASL/SCRAM logins)."""
        return _started(self._scram_credentials)

    @property
    def quota_configs(self) -> QuotaConfigStore:
        """The quota configs in /config/users, /config/clients and /config/ips."""
        return _started(self._quota_configs)

    @property
    def config_admin(self) -> ConfigAdmin:
        """Topic and broker configs at run time (DescribeConfigs, AlterConfigs, /config/changes)."""
        return _started(self._config_admin)

    @property
    def log_manager(self) -> LogManager:
        return _started(self._log_manager)

    @property
    def isr_manager(self) -> ZkIsrManager:
        return _started(self._isr_manager)

    @property
    def replica_manager(self) -> ReplicaManager:
        return _started(self._replica_manager)

    @property
    def topic_admin(self) -> TopicAdmin:
        return _started(self._topic_admin)

    @property
    def producer_ids(self) -> ProducerIdManager:
        return _started(self._producer_ids)

    @property
    def group_coordinator(self) -> GroupCoordinator:
        return _started(self._group_coordinator)

    @property
    def txn_coordinator(self) -> TransactionCoordinator:
        return _started(self._txn_coordinator)

    @property
    def controller(self) -> KafkaController:
        """Kafka's controller, on every broker; active on one of them (always this one when alone)."""
        return _started(self._controller)

    # -- start-up ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Recover logs, load metadata, register, and start serving; raises BrokerStartError."""
        cfg = self.config
        try:
            endpoints = parse_endpoints(cfg["listeners"], cfg["listener.security.protocol.map"])
            advertised = parse_endpoints(
                cfg["advertised.listeners"] or cfg["listeners"], cfg["listener.security.protocol.map"]
            )
        except ConfigError as exc:
            raise BrokerStartError(str(exc)) from None
        try:
            # Credentials are looked up at authentication time, once the metadata tree is open.
            security = listener_security.build(
                cfg, endpoints, lambda user, mech: self.scram_credentials.lookup(user, mech),
                self.gateway_auth.authenticator_for)
        except listener_security.SecurityConfigError as exc:
            raise BrokerStartError(str(exc)) from None
        try:
            broker_metrics.check_listener(cfg)
        except ConfigError as exc:
            raise BrokerStartError(str(exc)) from None
        url = cfg["gateway.url"]
        if url and not url.lower().startswith(("http://", "https://")):
            raise BrokerStartError(f"gateway.url {url!r} must be an http:// or https:// URL")
        try:
            self.authorizer = create_authorizer(cfg["authorizer.class.name"], cfg.originals)
            self.gateway_auth.start(self.authorizer)
        except (AuthorizerConfigError, ConfigError) as exc:
            raise BrokerStartError(str(exc)) from None
        if self.clustered:
            # Kafka's rules for the inter-broker listener; a broker alone only needs them once it
            # connects to another one, so the embedded default stays free of them.
            try:
                self._inter_broker = inter_broker_settings(cfg)
            except ConfigError as exc:
                raise BrokerStartError(str(exc)) from None
        log_dirs = [os.path.abspath(d) for d in cfg["log.dirs"]]
        for d in log_dirs:
            try:
                os.makedirs(d, exist_ok=True)
            except OSError as exc:
                raise BrokerStartError(f"cannot create log directory {d}: {exc.strerror}") from None
        self.log_dirs = log_dirs

        for ep in endpoints:
            lst = Listener(
                ep.listener, ep.host, ep.port,
                max_request_bytes=cfg["socket.request.max.bytes"], idle_ms=cfg["connections.max.idle.ms"],
                send_buf=cfg["socket.send.buffer.bytes"], recv_buf=cfg["socket.receive.buffer.bytes"],
                security=security[ep.listener],
            )
            try:
                lst.bind()
            except OSError as exc:
                for other in self.listeners:
                    other.stop_accepting()
                raise BrokerStartError(f"cannot listen on {ep}: {exc.strerror or exc}") from None
            self.listeners.append(lst)
        bound = {lst.name: lst.port for lst in self.listeners}
        self.advertised = [
            Endpoint(a.listener, a.protocol, a.host or socket.getfqdn(),
                     bound.get(a.listener, a.port) if a.port == 0 else a.port)
            for a in advertised
        ]

        tree = self._tree = await self._open_tree(log_dirs[0])
        self._scram_credentials = ScramCredentialStore(tree)
        self.cluster_id = await cluster_identity.cluster_id(tree)
        await ensure_persistent_paths(tree)
        try:
            self.broker_id = await cluster_identity.broker_id(tree, self.cluster_id, log_dirs, self.broker_id, cfg)
        except cluster_identity.ClusterIdentityError as exc:
            raise BrokerStartError(str(exc)) from None
        quota_configs = self._quota_configs = QuotaConfigStore(tree, self.quota_manager)
        config_admin = self._config_admin = ConfigAdmin(cfg, self.broker_id, tree, self.metadata_cache, quota_configs)
        await config_admin.load()  # dynamic broker configs, before the logs use them
        await quota_configs.load()
        # The logs found on disk open with their topics' configs (Kafka's LogManager.startup).
        await config_admin.load_topic_configs(self._local_topics())
        log_manager = config_admin.log_manager = self._open_logs(config_admin)
        isr_manager = self._isr_manager = ZkIsrManager(tree)
        self._connector = self._inter_broker_connector()
        replica_manager = self._replica_manager = ReplicaManager(
            self.broker_id, log_manager, config=ReplicationConfig.from_broker(cfg.values),
            isr_writer=isr_manager, connector=self._connect_to_leader, leader_endpoint=self.inter_broker.endpoint,
            partition_known=lambda topic, index: self.metadata_cache.partition(topic, index) is not None,
            follower_quota=config_admin.replication_quotas.follower,
            alter_log_dirs_quota=config_admin.replication_quotas.alter_log_dirs, stopping=lambda: self.state.stopping)
        replica_manager.metadata_updater = self._update_metadata
        replica_manager.on_leadership_change = self._on_leadership_change
        replica_manager.on_replicas_stopped = self._on_replicas_stopped
        replica_manager.on_resources_short = self._resource_retry.refused
        # Dirs that failed while loading are handed over now, the others as they fail.
        log_manager.failure_channel.set_listener(asyncio.get_running_loop(), self._on_log_dir_failure)
        producer_ids = self._producer_ids = ProducerIdManager(tree, self.broker_id)
        # The coordinators' topics are created with their own settings, also when a client's
        # Metadata request auto-creates them.
        offsets_topic = OffsetsTopic(OffsetsTopicConfig.from_broker(cfg.values), self._create_topic,
                                     self.metadata_cache.partition_count, lambda: len(self.live_brokers()),
                                     cap_replication_factor=not self.clustered)
        txn_topic = OffsetsTopic(transaction_topic_config(cfg.values), self._create_topic,
                                 self.metadata_cache.partition_count, lambda: len(self.live_brokers()),
                                 cap_replication_factor=not self.clustered)
        self._topic_admin = TopicAdmin(
            cfg, self.broker_id, tree, self.metadata_cache, config_admin, replica_manager, self.wait_for_metadata,
            internal_topics={GROUP_METADATA_TOPIC: offsets_topic.ensure, TRANSACTION_STATE_TOPIC: txn_topic.ensure})
        # Before the controller starts: leaderships hand the coordinator its __consumer_offsets partitions.
        group_coordinator = self._group_coordinator = GroupCoordinator(
            GroupConfig.from_broker(cfg.values),
            OffsetsTopicStore(replica_manager.get, cfg["offsets.commit.timeout.ms"]),
            ensure_topic=offsets_topic.ensure,
            consumer_config=ConsumerGroupConfig.from_broker(cfg.values),
            topics=lambda: self.metadata_cache.topics)
        group_coordinator.start()
        self._txn_markers = TxnMarkerSender(self._partition_leader, self._connect_for_markers,
                                            local=(self.broker_id, self._write_txn_markers_local))
        txn_coordinator = self._txn_coordinator = TransactionCoordinator(
            TxnConfig.from_broker(cfg.values),
            OffsetsTopicStore(replica_manager.get, cfg["request.timeout.ms"], topic=TRANSACTION_STATE_TOPIC),
            producer_ids.next_id, self._txn_markers.send, ensure_topic=txn_topic.ensure)
        txn_coordinator.start()
        replica_manager.start()
        isr_manager.start()
        await config_admin.start()
        await self._start_gateway()
        try:
            view = broker_metrics.broker_state(
                replica_manager, lambda: self._controller, group_coordinator, self.listeners, self.metadata_cache,
                config_admin.replication_quotas, lambda: self.disk_load_protector)
            self.metrics_exporter, tasks = await broker_metrics.start_metrics(
                cfg, self.metrics, view, self.gateway.service if self.gateway is not None else None,
                self._stop_background, lambda: broker_metrics.cluster_series(
                    self.broker_id, replica_manager, lambda: self._controller, group_coordinator,
                    self.metadata_cache, self.inter_broker, cfg["request.timeout.ms"] / 1000))
        except OSError as exc:
            raise BrokerStartError(f"cannot serve metrics on {cfg['metrics.listener']}: {exc.strerror or exc}") from None
        self._tasks.extend(tasks)
        if self.authorizer is not None:
            # ACLs are loaded before the first request is served, so none slips through unchecked.
            await self.authorizer.start(tree)
        await self._register_at_start()
        self._controller_requests = ControllerRequests(
            replica_manager, lambda topic, index: log_manager.get_log(topic, index) is not None,
            config_admin.load_topic_configs, lambda: self.state.broker_epoch)
        controller = self._controller = config_admin.controller = KafkaController(
            self.broker_id, tree, self._controller_channel,
            ControllerConfig.from_broker_config(cfg.values, self.inter_broker.listener))
        # Every part the handlers use exists now; they get them from here on, never the Broker.
        dispatcher = Dispatcher(self._services())
        await controller.startup()
        # Serving before the controller's requests arrive: in a cluster they come over these
        # listeners. The start-up line below still waits for them (bounded).
        for lst in self.listeners:
            lst.serve(dispatcher)
        await self._wait_until_ready()
        self._tasks.append(asyncio.create_task(log_manager.run_background(self._stop_background),
                                               name="log-manager"))
        self.started = True
        where = ", ".join(f"{a.listener}://{a.host}:{a.port}" for a in self.advertised)
        log.info("kaflet broker %d (cluster %s) listening on %s, data in %s",
                 self.broker_id, self.cluster_id, where, ", ".join(log_dirs))
        self.config.report_unknown()

    def _services(self) -> Services:
        """What the handlers are given (server/services.py)."""
        cfg = self.config
        return Services(
            cluster=Cluster(self.broker_id, self.cluster_id, self.metadata_cache, self.wait_for_metadata),
            settings=Settings(fetch_max_bytes=cfg["fetch.max.bytes"],
                              auto_create_topics_enable=cfg["auto.create.topics.enable"],
                              request_timeout_ms=cfg["request.timeout.ms"],
                              max_request_partition_size_limit=cfg["max.request.partition.size.limit"],
                              inter_broker_listener=self._inter_broker.listener if self._inter_broker else None),
            storage=Storage(self.replica_manager, self.log_manager, self.fetch_manager,
                            self.config_admin.replication_quotas.leader, self.disk_load_protector),
            coordinators=Coordinators(self.group_coordinator, self.txn_coordinator, self.producer_ids),
            admin=Admin(self.topic_admin, self.config_admin, self.controller, self._controller_requests,
                        self.quota_configs, self.scram_credentials),
            authorizer=self.authorizer,
            accounting=Accounting(self.metrics, self.quota_manager, self.track_traffic, self.session_report),
            state=self.state)

    async def _create_topic(self, req: TopicRequest, validate_only: bool, timeout_ms: int) -> CreateOutcome:
        """The coordinators' topics are created through the topic admin (made after them)."""
        return await self.topic_admin.create(req, validate_only, timeout_ms)

    def start_session_report(self, service: ManagementService) -> None:
        """Report the connections to `service` every session.report.ms until the broker stops."""
        if self.session_report is not None:
            self._tasks.append(asyncio.create_task(self.session_report.run(service, self._stop_background),
                                                   name="session-report"))

    def use_partition_view(self, view: PartitionView) -> None:
        """Hide the partitions `view` disables from clients (the gateway's partition cache)."""
        self.state.partition_router = PartitionRouter(view, self.metadata_cache.partition_count)

    def leader_share(self, topic: str) -> tuple[int, int]:
        """(partitions of the topic this broker leads, partitions of the topic); (0, 0): unknown."""
        info = self.metadata_cache.topics.get(topic)
        if info is None:
            return 0, 0
        me = self.broker_id
        return sum(1 for p in info.partitions.values() if p.leader == me), len(info.partitions)

    async def _start_gateway(self) -> None:
        """Check cluster.id, then (with gateway.url) load the gateway's caches before the first
        request is served; say which gateway features are asked for but not built."""
        cfg = self.config
        if cfg["cluster.id"] >= 0:
            try:
                await check_cluster_id(self.tree, cfg["cluster.id"], cfg["cluster.id.update"])
            except ClusterIdMismatchError as exc:
                raise BrokerStartError(str(exc)) from None
        gateway_on = bool(cfg["gateway.url"])
        if gateway_on:
            # The caches start from the static users and ACLs (built-in users, gateway.default.*).
            static_users, static_acls = self.gateway_auth.users, self.gateway_auth.acls
            self.gateway = Gateway(
                GatewaySettings.from_config(cfg.values), self.tree, self.broker_id,
                default_users=static_users.users() if isinstance(static_users, StaticUsers) else (),
                default_acls=static_acls.rows() if isinstance(static_acls, StaticAcls) else ())
            await self.gateway.start()
            # From now on logins, the authorizer, Metadata/Produce/Fetch numbering and the
            # connection report use the synchronized caches and the management service.
            self.gateway_auth.users = self.gateway.users
            self.gateway_auth.acls = self.gateway.acls
            self.use_partition_view(self.gateway.partitions)
            self.start_session_report(self.gateway.service)
        if cfg["diskloadprotector.enable"] and (gateway_on or "diskloadprotector.enable" in cfg.originals):
            self.start_disk_load_protector()

    def start_disk_load_protector(self) -> None:
        """Throttle consumers' reads of cold data while a log dir's disk is overloaded."""
        protector = DiskLoadProtector(self.log_dirs, DiskLoadSettings.from_config(self.config.values))
        protector.start(asyncio.get_running_loop().call_soon_threadsafe)
        self.disk_load_protector = protector

    def _local_topics(self) -> set[str]:
        """The topics with a partition directory in the log dirs."""
        from kaflet.log.local_log import parse_topic_partition

        topics = set()
        for d in self.log_dirs:
            # scandir: the entries' types come with the listing, not a stat each.
            with os.scandir(d) as listing:
                for entry in listing:
                    tp = parse_topic_partition(entry.name)
                    if tp is not None and entry.is_dir():
                        topics.add(tp[0])
        return topics

    def _open_logs(self, config_admin: ConfigAdmin) -> LogManager:
        from kaflet.log.cleaner import CleanerConfig
        from kaflet.log.log_manager import LogDirLockedError

        cfg = self.config
        try:
            # The dynamic log.cleaner.* configs too (loaded just before), as Kafka starts with them.
            cleaner_config = config_admin.cleaner_config()
        except ConfigError as exc:
            log.error("dynamic log cleaner configs not applied: %s", exc)
            cleaner_config = CleanerConfig.from_broker(cfg.values)
        budget = descriptors.plan(descriptors.soft_limit(), descriptors.open_descriptors(),
                                  cfg["log.segment.open.files.max"], cfg["max.broker.partitions"])
        log.info("%s", budget.describe())
        try:
            manager = LogManager(
                self.log_dirs,
                config_admin.topic_defaults(),
                topic_config=config_admin.topic_config,
                recovery_point_checkpoint_interval_ms=cfg["log.flush.offset.checkpoint.interval.ms"],
                log_start_offset_checkpoint_interval_ms=cfg["log.flush.start.offset.checkpoint.interval.ms"],
                high_watermark_checkpoint_interval_ms=cfg["replica.high.watermark.checkpoint.interval.ms"],
                # Started by the first LeaderAndIsr, as Kafka's ReplicaManager does.
                high_watermark_checkpoints=False,
                retention_check_interval_ms=cfg["log.retention.check.interval.ms"],
                producer_id_expiration_ms=self._producer_id_expiration_ms,
                producer_id_expiration_check_interval_ms=cfg["producer.id.expiration.check.interval.ms"],
                cleaner_config=cleaner_config,
                segment_files=None if budget.segment_files is None else SegmentFileCache(budget.segment_files),
            )
            manager.max_partitions = budget.max_partitions
            manager.partition_limit_reason = budget.reason
            manager.startup()
            room = manager.partition_room()
            if room is not None and room < 0:
                log.warning("the log dirs hold %d partitions more than the limit allows (%s): they are "
                            "served, new ones are refused", -room, budget.reason)
        except LogDirLockedError as exc:
            raise BrokerStartError(f"{exc}; is another broker using it?") from None
        except (OSError, ValueError) as exc:
            raise BrokerStartError(f"cannot open the log directories: {exc}") from None
        # Only a fully loaded manager may write the clean-shutdown marker at stop.
        self._log_manager = manager
        return manager

    async def _register_broker(self) -> None:
        info = zkdata.BrokerInfo(
            id=self.broker_id,
            endpoints=tuple(zkdata.EndPoint(a.listener, a.host, a.port, a.protocol) for a in self.advertised),
            rack=self.config["broker.rack"],
            timestamp_ms=int(time.time() * 1000),
        )
        path = zkdata.broker_path(self.broker_id)
        await self.tree.create(path, zkdata.broker_json(info), ephemeral=True, make_parents=True)
        stat = await self.tree.exists(path)
        if stat is not None:
            self.state.broker_epoch = stat.czxid
        self.metadata_cache.brokers = {self.broker_id: info}

    async def _register_at_start(self) -> None:
        """Register, waiting out a registration left by this broker's previous process.

        A broker restarted soon after a crash finds its old ephemeral ``/brokers/ids/<id>``
        still there until ZooKeeper expires the dead session (within the session timeout).
        Kafka refuses to start then ("node already exists and owner ... does not match current
        session"); kaflet waits up to twice zookeeper.session.timeout.ms for the node to go, so a
        supervisor's quick restart works, and refuses in the same words if it stays (a live broker
        with the same broker.id holds it).
        """
        path = zkdata.broker_path(self.broker_id)
        wait_s = 2 * self.config["zookeeper.session.timeout.ms"] / 1000 if self.clustered else 0.0
        deadline = asyncio.get_running_loop().time() + wait_s
        waiting = False
        while True:
            try:
                await self._register_broker()
                return
            except NodeExistsError:
                stat = await self.tree.exists(path)
                if stat is None:
                    continue  # expired meanwhile
                if asyncio.get_running_loop().time() >= deadline:
                    owner = getattr(self.tree, "session_id", None)
                    raise BrokerStartError(
                        f"Error while creating ephemeral at {path}, node already exists and owner "
                        f"'{stat.ephemeral_owner}' does not match current session '{owner}': is another broker "
                        f"running with broker.id {self.broker_id}?") from None
                if not waiting:
                    waiting = True
                    log.info("%s is still registered by session %#x (a previous run of this broker whose session "
                             "has not expired yet?); waiting up to %.0f s for it to go", path, stat.ephemeral_owner,
                             wait_s)
                await asyncio.sleep(0.2)

    async def _open_tree(self, first_log_dir: str) -> MetadataTree:
        if not self.clustered:
            return await EmbeddedTree.open(first_log_dir)
        cfg = self.config
        session_s = cfg["zookeeper.session.timeout.ms"] / 1000
        connection_ms = cfg["zookeeper.connection.timeout.ms"]
        try:
            tree = await ZooKeeperTree.connect(
                cfg["zookeeper.connect"], session_timeout=session_s,
                connection_timeout=connection_ms / 1000 if connection_ms is not None else session_s)
        except SessionLostError as exc:
            raise BrokerStartError(str(exc)) from None
        tree.on_state_change = self._on_zookeeper_state
        if self.metrics is not None:
            self.metrics.zookeeper = ZooKeeperSessionStats()
        return tree

    def _inter_broker_connector(self) -> InterBrokerConnector:
        """The one InterBrokerConnector: the fetchers, the controller channel, the marker writer
        and controlled shutdown all connect through it."""
        try:
            # Worked out here for a broker alone too, where it is no error if there is none: it
            # only needs one once it connects to another broker.
            settings = self._inter_broker or inter_broker_settings(self.config)
        except ConfigError as exc:
            # Alone, the controller only ever talks to this broker, in-process: any listener
            # serves as the name its requests carry.
            return InterBrokerConnector(InterBrokerSettings(listener=self.advertised[0].listener), unusable=str(exc))
        # Looked up at each call: an UpdateMetadata replaces the cache's broker map.
        return InterBrokerConnector(settings, broker_info=lambda broker_id: self.metadata_cache.brokers.get(broker_id))

    @property
    def inter_broker(self) -> InterBrokerConnector:
        """How this broker connects to the others (made during start())."""
        assert self._connector is not None, "the broker has not started"
        return self._connector

    def _controller_channel(self, config: ControllerConfig) -> ControllerChannel:
        """The channel factory of the controller: called each time this broker becomes it."""
        return ControllerChannel(self.broker_id, self.inter_broker, self.deliver_local,
                                 request_timeout_s=config.controller_socket_timeout_ms / 1000)

    def _ready(self) -> bool:
        """This broker knows the cluster (an UpdateMetadata arrived) and leads (or follows)
        every partition the controller gave it."""
        cache = self.metadata_cache
        if self.broker_id not in cache.brokers or not self.replica_manager.controller_epoch > 0:
            return False
        for topic in cache.topics.values():
            for p in topic.partitions.values():
                if p.leader == self.broker_id and self.replica_manager.get(topic.name, p.index) is None:
                    return False
        return True

    async def _wait_until_ready(self) -> None:
        # Until the controller's first requests arrive a broker answers every client with
        # NOT_LEADER_OR_FOLLOWER; kaflet reports itself started (the log line tools wait for)
        # only once it serves its partitions, or after a bound.
        timeout_ms = 60_000 if not self.clustered else self.config["zookeeper.session.timeout.ms"] * 2
        if not await self.wait_for_metadata(self._ready, timeout_ms):
            log.warning("no metadata from the controller within %d ms; serving anyway", timeout_ms)

    # -- reacting to metadata ---------------------------------------------------------------

    def _changed(self) -> None:
        event, self._metadata_changed = self._metadata_changed, asyncio.Event()
        event.set()

    async def wait_for_metadata(self, predicate: Callable[[], bool], timeout_ms: int) -> bool:
        """Wait (up to timeout_ms) until `predicate` holds for the broker's metadata."""
        return await wait_until(predicate, lambda: self._metadata_changed, timeout_ms)

    def live_brokers(self) -> list[zkdata.BrokerInfo]:
        return list(self.metadata_cache.brokers.values())

    # -- replication: the replica manager's connections to the broker -----------------------

    async def _connect_to_leader(self, leader: BrokerEndpoint) -> LeaderConnection:
        return await self.inter_broker.connect(leader.host, leader.port, client_id=f"broker-{self.broker_id}-fetcher",
                                               request_timeout_s=self.config["replica.socket.timeout.ms"] / 1000)

    def _producer_id_expiration_ms(self) -> int:
        """producer.id.expiration.ms as it is now (a dynamic broker config in Kafka 3.x)."""
        value = self.config_admin.dynamic.value("producer.id.expiration.ms")
        try:
            return int(value) if value is not None else int(self.config["producer.id.expiration.ms"])
        except ValueError:  # validated when altered; the static value stands otherwise
            return int(self.config["producer.id.expiration.ms"])

    def _partition_leader(self, topic: str, index: int) -> int | None:
        """The leader of a partition for the marker sender (-1: none now; None: no such partition)."""
        part = self.metadata_cache.partition(topic, index)
        return None if part is None else part.leader

    async def _write_txn_markers_local(self, job: MarkerJob, partitions: list[TopicPartition]
                                       ) -> dict[TopicPartition, ErrorCode]:
        """WriteTxnMarkers from this broker's transaction coordinator to itself, in-process."""
        from kaflet.server.handlers import write_txn_markers

        (codes,) = await write_txn_markers.write_markers(
            self.replica_manager, [(job.producer_id, job.producer_epoch, job.coordinator_epoch, job.commit,
                                    partitions)], self.config["request.timeout.ms"],
            self.group_coordinator.complete_txn)
        return dict(zip(partitions, codes, strict=True))

    async def _connect_for_markers(self, broker_id: int) -> BrokerConnection:
        """A connection to another broker's inter-broker listener for WriteTxnMarkers (markers
        for this broker's own partitions go in-process)."""
        return await self.inter_broker.connect_to(broker_id, client_id=f"broker-{self.broker_id}-txn-markers",
                                                  request_timeout_s=self.config["request.timeout.ms"] / 1000)

    def _update_metadata(self, request: UpdateMetadataRequest) -> list[tuple[str, int]]:
        deleted = self.metadata_cache.update_metadata(request)
        for topic in {t for t, _ in deleted} - self.metadata_cache.topics.keys():
            self.config_admin.forget_topic(topic)
        self._changed()
        return deleted

    def _on_leadership_change(self, leaders: Sequence[Partition], followers: Sequence[Partition]) -> None:
        # Kafka's onLeadershipChange: the coordinators load what they now lead (the transaction
        # coordinator at the partition's leader epoch, its coordinator epoch).
        count = self.metadata_cache.partition_count(GROUP_METADATA_TOPIC) or None
        txn_count = self.metadata_cache.partition_count(TRANSACTION_STATE_TOPIC) or None
        for part in leaders:
            if part.topic == GROUP_METADATA_TOPIC:
                self.group_coordinator.on_became_leader(part.index, count)
            elif part.topic == TRANSACTION_STATE_TOPIC:
                self.txn_coordinator.on_became_leader(part.index, part.leader_epoch, txn_count)
        for part in followers:
            if part.topic == GROUP_METADATA_TOPIC:
                self.group_coordinator.on_resigned(part.index)
            elif part.topic == TRANSACTION_STATE_TOPIC:
                self.txn_coordinator.on_resigned(part.index)

    # -- failed log dirs --------------------------------------------------------------------

    def _on_log_dir_failure(self, log_dir: str) -> None:
        """Kafka's LogDirFailureHandler: stop serving the dir's partitions, then tell the
        controller (a ``/log_dir_event_notification`` znode), which moves their leadership; with
        no dir left (or the dir of the embedded metadata gone) the broker stops."""
        if self.state.stopping:
            return
        self.replica_manager.handle_log_dir_failure(log_dir)
        self._changed()
        live = self.log_manager.live_log_dirs
        if not live or (not self.clustered and log_dir == self.log_dirs[0]):
            why = self.log_manager.failure_channel.offline_dirs.get(log_dir, "")
            self.halt_reason = (f"every log directory has failed ({log_dir}: {why})" if not live else
                                f"the log directory holding the metadata has failed ({log_dir}: {why})")
            log.error("shutting down broker %d: %s", self.broker_id, self.halt_reason)
            self.halted.set()
            # As Kafka halts: no controlled shutdown, and the failed dirs get no clean-shutdown mark.
            self._tasks.append(asyncio.create_task(self.stop(controlled=False), name="halt"))
            return
        self._tasks.append(asyncio.create_task(self._propagate_log_dir_event(), name="log-dir-event"))

    async def _propagate_log_dir_event(self) -> None:
        try:
            await self.tree.create(zkdata.log_dir_event_prefix(), zkdata.log_dir_event_json(self.broker_id),
                                   sequential=True, make_parents=True)
        except Exception:
            log.exception("cannot write a log dir event for the controller")

    async def _ask_controller_again(self) -> None:
        # The same event as a failed dir: the controller then sends LeaderAndIsr for every
        # replica here, and those it counted offline answer NONE now (resource_retry.py).
        if not self.state.stopping:
            await self._propagate_log_dir_event()

    def _on_replicas_stopped(self, stopped: Sequence[tuple[str, int, bool]]) -> None:
        for topic, index, deleted in stopped:
            if topic == GROUP_METADATA_TOPIC and deleted:
                self.group_coordinator.on_resigned(index)
            elif topic == TRANSACTION_STATE_TOPIC:
                self.txn_coordinator.on_resigned(index)  # Kafka resigns on every StopReplica
        self._changed()  # DeleteTopics waits for this broker's replicas to go

    async def deliver_local(self, api_key: ApiKey, request: ControllerRequest) -> ControllerResponse:
        """The controller's requests to this broker, in-process (a controller ``LocalDelivery``):
        the request object in, the response object out, as the handlers answer them."""
        return await self._controller_requests.process(api_key, request)

    # -- ZooKeeper session ------------------------------------------------------------------

    def _on_zookeeper_state(self, state: str) -> None:
        if self.metrics is not None and self.metrics.zookeeper is not None:
            self.metrics.zookeeper.on_state(state)
        if self.state.stopping:
            return
        if state == "LOST":
            # Kafka's session expiry: ephemeral nodes (registration, /controller) are gone.
            log.warning("ZooKeeper session expired; resigning and re-registering once reconnected")
            self._session_lost = True
            if self._controller is not None:  # else it starts in the new session
                self._controller.on_session_lost()
        elif state == "CONNECTED" and self._session_lost and self._session_task is None:
            self._session_task = asyncio.create_task(self._on_new_session(), name="zookeeper-session")

    async def _on_new_session(self) -> None:
        try:
            while not self.state.stopping:
                try:
                    await self._register_broker()
                    break
                except NodeExistsError:
                    # The old session's node lingers until ZooKeeper expires it.
                    await asyncio.sleep(0.5)
                except SessionLostError:
                    await asyncio.sleep(0.5)
            self._session_lost = False
            log.info("re-registered broker %d with broker epoch %d", self.broker_id, self.state.broker_epoch)
            self.controller.on_session_reestablished()
            await self.config_admin.resync()
            if self.gateway is not None:
                await self.gateway.resync()
            if self.authorizer is not None:
                await self.authorizer.resync()
        except Exception:
            log.exception("re-registering after a ZooKeeper session expiry failed")
        finally:
            self._session_task = None

    # -- shutdown ---------------------------------------------------------------------------

    async def stop(self, controlled: bool = True) -> None:
        """Stop accepting, finish in-flight requests, flush, checkpoint, mark a clean shutdown
        (``controlled``: in a cluster, move leaderships away first if controlled.shutdown.enable)."""
        if self.state.stopping:
            await self._stopped.wait()
            return
        self.state.stopping = True
        phases = _Phases()
        if controlled and self.clustered and self.started and self.config["controlled.shutdown.enable"]:
            # Still serving: clients follow the leaderships as they move away.
            await controlled_shutdown(self.config, self.broker_id, lambda: self.state.broker_epoch, self.controller,
                                      self.metadata_cache, self.inter_broker)
            phases.mark("controlled shutdown")
        for lst in self.listeners:
            lst.stop_accepting()
        if self._controller is not None:
            await self._controller.shutdown()  # another broker takes over at once
            phases.mark("controller resigned")
        if self._session_task is not None:
            self._session_task.cancel()
        if self._group_coordinator is not None:
            self._group_coordinator.shutdown()  # answers waiting JoinGroup/SyncGroup so draining is quick
        if self._txn_coordinator is not None:
            self._txn_coordinator.shutdown()
        if self._txn_markers is not None:
            self._txn_markers.close()
        if self._replica_manager is not None:
            self._replica_manager.shutdown()  # waiting fetches and acks=all produces are answered
        for lst in self.listeners:
            await lst.drain_and_close(timeout=5.0)
        phases.mark("connections closed")
        if self._replica_manager is not None:
            await self._replica_manager.stop()  # fetchers stop before the logs close
        if self._isr_manager is not None:
            await self._isr_manager.stop()
        phases.mark("fetchers stopped")
        self._stop_background.set()
        await self._resource_retry.stop()
        current = asyncio.current_task()
        for t in self._tasks:
            if t is current:
                continue  # the halt task runs this stop
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self._config_admin is not None:
            await self._config_admin.stop()
        if self.authorizer is not None:
            await self.authorizer.stop()
        self.gateway_auth.stop()
        if self.disk_load_protector is not None:
            self.disk_load_protector.stop()
        if self.gateway is not None:
            await self.gateway.stop()
        if self.metrics_exporter is not None:
            await self.metrics_exporter.stop()
        phases.mark("background tasks stopped")
        if self._log_manager is not None:
            self._log_manager.shutdown()
            phases.mark("logs closed")
        if self._tree is not None:
            await self._tree.close()
            phases.mark("metadata session closed")
        if self.started:
            log.info("kaflet broker %d stopped cleanly in %s", self.broker_id, phases)
        self._stopped.set()

    @property
    def bootstrap(self) -> str:
        """host:port of the first advertised listener."""
        a = self.advertised[0]
        return f"{a.host}:{a.port}"
