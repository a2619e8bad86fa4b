"""The broker's side of kaflet/metrics: which counters to keep (from the config) and the
Prometheus endpoint with its view of the broker and, on the active controller, kafka_exporter's
view of the cluster, plus kafkaexmetrics' topic list and daily clear.

``metrics.listener`` empty: no counters are kept at all (``broker.metrics`` is None, so the
request path pays one ``is None`` test). ``kafkaexmetrics.enable`` adds the per-application
metrics: for the topics the management service lists with ``gateway.url``, for every topic
without it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from kaflet.coordinator.group.group import GroupState
from kaflet.metrics.cluster_series import GroupRow
from kaflet.metrics.cluster_view import ClusterSeries, ClusterView, LocalState
from kaflet.metrics.exporter import BrokerState, ListenerError, MetricsExporter, parse_listener
from kaflet.metrics.jmx_topics import run_daily_clear, run_refresh
from kaflet.metrics.stats import AppTopicStats, BrokerMetrics
from kaflet.server.config import BrokerConfig, ConfigError

if TYPE_CHECKING:
    from kaflet.controller.controller import KafkaController
    from kaflet.coordinator.group.coordinator import GroupCoordinator
    from kaflet.gateway.model import ManagementService
    from kaflet.log.disk_load import DiskLoadProtector
    from kaflet.metadata.metadata_cache import MetadataCache
    from kaflet.network.listener import Listener
    from kaflet.protocol.broker_connection import BrokerConnection, BrokerConnector
    from kaflet.quota.replication import ReplicationQuotas
    from kaflet.replication.replica_manager import ReplicaManager

log = logging.getLogger("kaflet.metrics")


def build_metrics(config: BrokerConfig) -> BrokerMetrics | None:
    """The counters the request path keeps, or None when metrics.listener is empty."""
    if not config["metrics.listener"]:
        if config["kafkaexmetrics.enable"]:
            log.warning("kafkaexmetrics.enable=true has no effect without metrics.listener: the "
                        "per-application metrics are served there, so none are recorded")
        return None
    apps = None
    if config["kafkaexmetrics.enable"]:
        # With a management service nothing is recorded until it lists topics (Logi-Kafka's start).
        apps = AppTopicStats(config["cluster.id"], config["kafkaexmetrics.max.series"],
                             topics=() if config["gateway.url"] else None)
    return BrokerMetrics(apps)


def check_listener(config: BrokerConfig) -> None:
    """Raise ConfigError when metrics.listener is set but not http://host:port."""
    value = config["metrics.listener"]
    if value:
        try:
            parse_listener(value)
        except ListenerError as exc:
            raise ConfigError(str(exc)) from None


def broker_state(replicas: ReplicaManager, controller: Callable[[], KafkaController | None],
                 groups: GroupCoordinator, listeners: Sequence[Listener], metadata: MetadataCache,
                 replication_quotas: ReplicationQuotas, disk_load: Callable[[], DiskLoadProtector | None]
                 ) -> BrokerState:
    """What the exporter reads of the broker at scrape time; the controller and disk load
    protection are looked up then, as they may start after the endpoint."""

    def active_controller() -> bool:
        c = controller()
        return c is not None and c.is_active

    def replication_rates() -> dict[str, float]:
        return {q.kind: q.byte_rate() for q in replication_quotas.all}

    def disks() -> dict[str, tuple[float, int, int]]:
        protector = disk_load()
        if protector is None:
            return {}
        return {name: (d.util, d.admitted, d.refused) for name, d in protector.disks.items()}

    return BrokerState(
        partitions=lambda: list(replicas.partitions.values()),
        active_controller=active_controller,
        group_count=lambda: len(groups.groups),
        connections=lambda: {lst.name: len(lst.connections) for lst in listeners},
        topic_exists=lambda topic: topic in metadata.topics,
        isr_shrinks=lambda: replicas.isr_shrinks,
        isr_expands=lambda: replicas.isr_expands,
        disks=disks,
        replication_rates=replication_rates,
    )


def cluster_series(broker_id: int, replicas: ReplicaManager, controller: Callable[[], KafkaController | None],
                   groups: GroupCoordinator, metadata: MetadataCache, connector: BrokerConnector,
                   request_timeout_s: float) -> ClusterSeries:
    """kafka_exporter's series, served while this broker is the active controller."""

    def offsets(topic: str, index: int) -> tuple[int, int] | None:
        part = replicas.get(topic, index)
        if part is None or not part.is_leader:
            return None
        return part.log.high_watermark, part.log.log_start_offset

    def coordinated() -> dict[str, GroupRow]:
        return {group_id: GroupRow(len(g.members), {tp: v.offset for tp, v in g.offsets.items()})
                for group_id, g in groups.groups.items() if not g.is_(GroupState.DEAD)}

    def connect(other: int) -> Awaitable[BrokerConnection]:
        return connector.connect_to(other, client_id=f"broker-{broker_id}-metrics",
                                    request_timeout_s=request_timeout_s)

    def active() -> bool:
        c = controller()
        return c is not None and c.is_active

    view = ClusterView(LocalState(broker_id, connector.listener, metadata, offsets, coordinated, connect))
    return ClusterSeries(view, active)


async def start_metrics(config: BrokerConfig, stats: BrokerMetrics | None, state: BrokerState,
                        service: ManagementService | None, stop: asyncio.Event,
                        cluster: Callable[[], ClusterSeries] | None = None,
                        ) -> tuple[MetricsExporter | None, list[asyncio.Task[None]]]:
    """Open the endpoint (OSError when it cannot bind) and start kafkaexmetrics' background tasks
    (the topic list from the management service `service`, or every topic without one)."""
    if stats is None:
        return None, []
    host, port = parse_listener(config["metrics.listener"])
    exporter = MetricsExporter(stats, state, host, port, cluster() if cluster is not None else None)
    await exporter.start()
    tasks: list[asyncio.Task[None]] = []
    apps = stats.app_topics
    if apps is not None:
        tasks.append(asyncio.create_task(run_daily_clear(apps, stop), name="kafkaexmetrics-clear"))
        if service is not None:
            tasks.append(asyncio.create_task(
                run_refresh(apps, service, config["cluster.id"], config["gateway.sync.interval.ms"], stop),
                name="kafkaexmetrics-topics"))
        else:
            log.info("kafkaexmetrics: no gateway.url, per-application metrics for every topic")
    return exporter, tasks
