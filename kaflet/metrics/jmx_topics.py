"""Which topics get per-application metrics: the management service's ``report/jmx/topics``.

``GET /api/v1/report/jmx/topics?clusterId=`` answers a comma-joined string of topic names
(``"t1,t2"``, ``""`` for none). The broker asks every sync period; a failed call keeps the last
list (one log line per failure, retried sooner with back-off, and one line when it recovers).
Until the first answer no topic is recorded, as Logi-Kafka starts with an empty set. Every day
at the clear time the recorded (appId, topic) series are forgotten.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kaflet.gateway.model import ManagementService, ManagementServiceError
from kaflet.metrics.stats import AppTopicStats

log = logging.getLogger("kaflet.metrics")

PATH = "/api/v1/report/jmx/topics"
_FIRST_RETRY_S = 1.0


def parse_topic_list(data: Any) -> frozenset[str]:
    """The topics of the endpoint's ``data`` (the published "t1,t2", or a JSON list of names);
    ManagementServiceError for anything else."""
    if data is None:
        return frozenset()
    if isinstance(data, list) and all(isinstance(t, str) for t in data):
        parts = data
    elif isinstance(data, str):
        parts = data.split(",")
    else:
        raise ManagementServiceError(f"{PATH}: data is not a comma-separated string: {str(data)[:200]!r}")
    return frozenset(t for t in (part.strip() for part in parts) if t)


async def refresh(stats: AppTopicStats, service: ManagementService, cluster_id: int) -> frozenset[str]:
    """Ask once and apply the answer; raises ManagementServiceError."""
    topics = parse_topic_list(await service.get(PATH, {"clusterId": cluster_id}))
    if topics != stats.topics:
        log.info("kafkaexmetrics: per-application metrics for %d topic(s): %s", len(topics),
                 ", ".join(sorted(topics)[:20]) + (" ..." if len(topics) > 20 else ""))
    stats.set_topics(topics)
    return topics


async def run_refresh(stats: AppTopicStats, service: ManagementService, cluster_id: int, period_ms: int,
                      stop: asyncio.Event) -> None:
    """Refresh now and every ``period_ms`` until ``stop`` is set."""
    failing = False
    delay = _FIRST_RETRY_S
    while not stop.is_set():
        try:
            await refresh(stats, service, cluster_id)
        except ManagementServiceError as exc:
            wait = min(delay, period_ms / 1000)
            log.warning("kafkaexmetrics: topic list not refreshed (keeping the last one; retry in %.0f s): %s",
                        wait, exc)
            failing, delay = True, delay * 2
        else:
            if failing:
                log.info("kafkaexmetrics: topic list refreshed again")
            failing, delay = False, _FIRST_RETRY_S
            wait = period_ms / 1000
        try:
            await asyncio.wait_for(stop.wait(), wait)
        except TimeoutError:
            pass


async def run_daily_clear(stats: AppTopicStats, stop: asyncio.Event) -> None:
    """Forget the recorded series every day at ``stats.clear_at`` until ``stop`` is set."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), stats.seconds_to_next_clear())
            return
        except TimeoutError:
            pass
        kept = len(stats.series)
        stats.clear()
        log.info("kafkaexmetrics: daily clear, %d (appId, topic) series forgotten", kept)
