"""The broker's side of kaflet/metrics: which counters to keep (from the config) and the
Prometheus endpoint with its view of the broker, plus kafkaexmetrics' topic list and daily clear.

``metrics.listener`` empty: no counters are kept at all (``broker.metrics`` is None, so the
request path pays one ``is None`` test). ``kafkaexmetrics.enable`` adds the per-application
metrics: for the topics the management service lists with ``gateway.url``, for every topic
without it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kaflet.metrics.exporter import BrokerState, ListenerError, MetricsExporter, parse_listener
from kaflet.metrics.jmx_topics import run_daily_clear, run_refresh
from kaflet.metrics.stats import AppTopicStats, BrokerMetrics
from kaflet.server.config import BrokerConfig, ConfigError

if TYPE_CHECKING:
    from kaflet.server.broker import Broker

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


def _state(broker: Broker) -> BrokerState:
    return BrokerState(
        partitions=lambda: list(broker.replica_manager.partitions.values()),
        active_controller=lambda: broker.controller is not None and broker.controller.is_active,
        group_count=lambda: len(broker.group_coordinator.groups) if broker.group_coordinator is not None else 0,
        connections=lambda: {lst.name: len(lst.connections) for lst in broker.listeners},
        topic_exists=lambda topic: topic in broker.metadata_cache.topics,
        isr_shrinks=lambda: broker.replica_manager.isr_shrinks,
        isr_expands=lambda: broker.replica_manager.isr_expands,
        disks=lambda: _disks(broker),
        replication_rates=lambda: _replication_rates(broker),
    )


def _replication_rates(broker: Broker) -> dict[str, float]:
    quotas = broker.config_admin.replication_quotas
    return {q.kind: q.byte_rate() for q in (quotas.leader, quotas.follower)}


def _disks(broker: Broker) -> dict[str, tuple[float, int, int]]:
    protector = broker.disk_load_protector
    if protector is None:
        return {}
    return {name: (d.util, d.admitted, d.refused) for name, d in protector.disks.items()}


async def start_metrics(broker: Broker, stop: asyncio.Event) -> tuple[MetricsExporter | None, list[asyncio.Task[Any]]]:
    """Open the endpoint (OSError when it cannot bind) and start kafkaexmetrics' background tasks."""
    stats = broker.metrics
    if stats is None:
        return None, []
    host, port = parse_listener(broker.config["metrics.listener"])
    exporter = MetricsExporter(stats, _state(broker), host, port)
    await exporter.start()
    tasks: list[asyncio.Task[Any]] = []
    apps = stats.app_topics
    if apps is not None:
        tasks.append(asyncio.create_task(run_daily_clear(apps, stop), name="kafkaexmetrics-clear"))
        if broker.gateway is not None:
            tasks.append(asyncio.create_task(
                run_refresh(apps, broker.gateway.service, broker.config["cluster.id"],
                            broker.config["gateway.sync.interval.ms"], stop), name="kafkaexmetrics-topics"))
        else:
            log.info("kafkaexmetrics: no gateway.url, per-application metrics for every topic")
    return exporter, tasks
