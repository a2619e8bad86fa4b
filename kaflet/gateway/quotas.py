"""Quotas per application and topic, as Logi-Kafka's management service sets them.

The management service does not send quotas over HTTP: it writes Kafka's client-id quota node
``/config/clients/<appId>.<topic>`` (``producer_byte_rate`` / ``consumer_byte_rate``) and a
``/config/changes`` notification, which the broker's QuotaConfigStore already reads. With the
gateway on, such a node limits the application's bytes on that topic, whatever client id its
connections use: `TopicQuotaManager` measures each (appId, topic) on its own and answers with a
throttle time when the rate is over the quota.

The quota is for the whole cluster, so each broker enforces its part of it: the quota times its
share of the topic's partition leaders (a broker leading 2 of 6 partitions allows a third).
Throttle times never exceed max.throttle.time.ms (QuotaSettings.max_throttle_ms).

Kafka's own quotas (users, client ids) keep working beside these: every other call goes to the
wrapped manager, and a ``<appId>.<topic>`` node still is a client-id quota for a client that
really uses that client id.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from kaflet.quota.entity import CLIENT_ID, QuotaEntity, QuotaType
from kaflet.quota.manager import INACTIVE_RATE_EXPIRY_MS, QuotaManager, QuotaSettings
from kaflet.quota.rate import WindowedRate, throttle_time_ms

log = logging.getLogger("kaflet.gateway.quotas")

#: How long a topic's leader share is reused before it is counted again from the metadata.
SHARE_TTL_MS = 1000.0
_PURGE_INTERVAL_MS = 60 * 1000

#: (partitions of the topic led by this broker, partitions of the topic); (0, 0) when unknown.
LeaderShare = Callable[[str], tuple[int, int]]


def app_id(principal: str, cluster_id: int) -> str:
    """The application of a connection's principal: its name, without a ``<clusterId>.`` prefix
    (Logi-Kafka clients log in as ``<clusterId>.<appId>``)."""
    prefix = f"{cluster_id}."
    return principal[len(prefix):] if principal.startswith(prefix) else principal


def topic_quota_key(entity: QuotaEntity) -> tuple[str, str] | None:
    """(appId, topic) of a ``/config/clients/<appId>.<topic>`` entity, or None for any other.

    The appId ends at the first dot: appIds have none, topic names may.
    """
    if entity.types != (CLIENT_ID,):
        return None
    name = entity.name(CLIENT_ID)
    if name is None:
        return None
    app, dot, topic = name.partition(".")
    return (app, topic) if dot and app and topic else None


class TopicQuotaManager(QuotaManager):
    """Kafka's quotas (the wrapped manager) plus the gateway's per-application-per-topic ones."""

    def __init__(self, inner: QuotaManager, settings: QuotaSettings, leader_share: LeaderShare,
                 cluster_id: int = -1, clock: Callable[[], float] | None = None) -> None:
        self.inner = inner
        self.settings = settings
        self.leader_share = leader_share
        self.cluster_id = cluster_id
        self.clock = clock or (lambda: time.monotonic() * 1000)
        self._quotas: dict[QuotaType, dict[tuple[str, str], float]] = {QuotaType.PRODUCE: {}, QuotaType.FETCH: {}}
        self._rates: dict[QuotaType, dict[tuple[str, str], WindowedRate]] = {QuotaType.PRODUCE: {},
                                                                             QuotaType.FETCH: {}}
        self._shares: dict[str, tuple[float, int, int]] = {}
        self._last_purge = self.clock()

    # -- Kafka's quotas -----------------------------------------------------------------------

    def active(self, quota_type: QuotaType) -> bool:
        return self.inner.active(quota_type)

    def record(self, quota_type: QuotaType, user: str, client_id: str, value: float, now_ms: float) -> int:
        return self.inner.record(quota_type, user, client_id, value, now_ms)

    def unrecord(self, quota_type: QuotaType, user: str, client_id: str, value: float, now_ms: float) -> None:
        self.inner.unrecord(quota_type, user, client_id, value, now_ms)

    def quota(self, quota_type: QuotaType, user: str, client_id: str) -> float | None:
        return self.inner.quota(quota_type, user, client_id)

    def update_quotas(self, entity: QuotaEntity, quotas: Mapping[str, float]) -> None:
        self.inner.update_quotas(entity, quotas)
        key = topic_quota_key(entity)
        if key is None:
            return
        for qt, table in self._quotas.items():
            value = quotas.get(qt.value)
            if value is None:
                table.pop(key, None)
            else:
                table[key] = float(value)
        log.info("application %s on topic %s: producer_byte_rate=%s consumer_byte_rate=%s (cluster-wide)",
                 key[0], key[1], quotas.get(QuotaType.PRODUCE.value, "unlimited"),
                 quotas.get(QuotaType.FETCH.value, "unlimited"))

    # -- the gateway's quotas -----------------------------------------------------------------

    def active_per_topic(self, quota_type: QuotaType) -> bool:
        return bool(self._quotas.get(quota_type))

    def topic_quota(self, quota_type: QuotaType, user: str, topic: str, now_ms: float | None = None) -> float | None:
        """This broker's part of the application's quota on the topic, or None (unlimited)."""
        quota = self._quotas.get(quota_type, {}).get((app_id(user, self.cluster_id), topic))
        if quota is None:
            return None
        leaders, partitions = self._share(topic, self.clock() if now_ms is None else now_ms)
        if partitions <= 0:
            return quota
        # A broker that leads none of the partitions still gets one partition's part: what
        # reaches it (before the client learns of a new leader) is then limited, not refused.
        return quota * max(leaders, 1) / partitions

    def _share(self, topic: str, now_ms: float) -> tuple[int, int]:
        cached = self._shares.get(topic)
        if cached is not None and now_ms < cached[0]:
            return cached[1], cached[2]
        leaders, partitions = self.leader_share(topic)
        self._shares[topic] = (now_ms + SHARE_TTL_MS, leaders, partitions)
        return leaders, partitions

    def record_topics(self, quota_type: QuotaType, user: str, traffic: Mapping[str, int], now_ms: float) -> int:
        table = self._quotas.get(quota_type)
        if not table:
            return 0
        self._maybe_purge(now_ms)
        app = app_id(user, self.cluster_id)
        rates = self._rates[quota_type]
        throttle = 0
        for topic, size in traffic.items():
            if (app, topic) not in table:
                continue
            quota = self.topic_quota(quota_type, user, topic, now_ms)
            if quota is None:
                continue
            rate = rates.get((app, topic))
            if rate is None:
                s = self.settings
                rate = rates[(app, topic)] = WindowedRate(s.window_num, s.window_size_s * 1000, now_ms)
            rate.record(size, now_ms)
            throttle = max(throttle, throttle_time_ms(rate, quota, now_ms))
        return min(throttle, self.settings.max_throttle_ms)

    def unrecord_topics(self, quota_type: QuotaType, user: str, traffic: Mapping[str, int], now_ms: float) -> None:
        app = app_id(user, self.cluster_id)
        rates = self._rates.get(quota_type, {})
        for topic, size in traffic.items():
            rate = rates.get((app, topic))
            if rate is not None:
                rate.record(-size, now_ms)

    def measured_rate(self, quota_type: QuotaType, user: str, topic: str, now_ms: float) -> float | None:
        """The application's measured rate on the topic (bytes/s), or None if unmeasured."""
        rate = self._rates.get(quota_type, {}).get((app_id(user, self.cluster_id), topic))
        return None if rate is None else rate.rate(now_ms)

    def _maybe_purge(self, now_ms: float) -> None:
        if now_ms - self._last_purge < _PURGE_INTERVAL_MS:
            return
        self._last_purge = now_ms
        self._shares.clear()
        for rates in self._rates.values():
            for key in [k for k, r in rates.items() if now_ms - r.last_record_ms >= INACTIVE_RATE_EXPIRY_MS]:
                del rates[key]
