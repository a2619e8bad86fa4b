"""The quota manager: what the broker asks about quotas, and Kafka's answer to it.

The broker only talks to the `QuotaManager` interface: record what a request used, get back
how long to throttle the client. `KafkaQuotaManager` is Kafka's ClientQuotaManager and
ClientRequestQuotaManager together: quotas from /config/users and /config/clients resolved in
Kafka's precedence order, rates over quota.window.num x quota.window.size.seconds. The
Logi-Kafka gateway will bring a second implementation (per-user quotas from its management
service) behind the same interface.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kaflet.quota.entity import QuotaEntity, QuotaType, resolve
from kaflet.quota.rate import WindowedRate, throttle_time_ms

#: Rates of clients idle this long are dropped (Kafka expires quota sensors after an hour).
INACTIVE_RATE_EXPIRY_MS = 3600 * 1000
_PURGE_INTERVAL_MS = 60 * 1000


class QuotaManager(abc.ABC):
    """The broker's view of client quotas.

    `user` is the authenticated principal's name (``ANONYMOUS`` on unauthenticated
    listeners), `client_id` the request header's client id ("" when absent). Values are bytes
    for PRODUCE and FETCH and percent-seconds of one request thread for REQUEST (100 per second
    of handler time), so a request_percentage quota of 50 allows half a thread.
    """

    @abc.abstractmethod
    def active(self, quota_type: QuotaType) -> bool:
        """False when no quota of this type can apply to anyone (so nothing need be measured)."""

    @abc.abstractmethod
    def record(self, quota_type: QuotaType, user: str, client_id: str, value: float, now_ms: float) -> int:
        """Record what a request used; the throttle time in ms it earns the client (0: none)."""

    @abc.abstractmethod
    def unrecord(self, quota_type: QuotaType, user: str, client_id: str, value: float, now_ms: float) -> None:
        """Take back a recorded value (a throttled fetch returns no data, so it used none)."""

    @abc.abstractmethod
    def quota(self, quota_type: QuotaType, user: str, client_id: str) -> float | None:
        """The quota that applies to the client, or None when it is unlimited."""

    @abc.abstractmethod
    def update_quotas(self, entity: QuotaEntity, quotas: Mapping[str, float]) -> None:
        """The entity's stored quota configs changed: `quotas` is its whole new set."""

    # Quotas per user and topic (the Logi-Kafka gateway's); Kafka has none, so these default
    # to "nothing to measure".

    def active_per_topic(self, quota_type: QuotaType) -> bool:
        """True when a quota of this type may apply to some user's traffic on some topic."""
        return False

    def record_topics(self, quota_type: QuotaType, user: str, traffic: Mapping[str, int], now_ms: float) -> int:
        """Record a request's bytes per topic; the throttle time in ms they earn the user (0: none)."""
        return 0

    def unrecord_topics(self, quota_type: QuotaType, user: str, traffic: Mapping[str, int], now_ms: float) -> None:
        """Take back bytes recorded by `record_topics` (a throttled fetch sends none)."""
        return None


@dataclass(frozen=True, slots=True)
class QuotaSettings:
    """Broker configs that shape the measurement and the throttling."""

    window_num: int = 11
    window_size_s: int = 1
    #: No throttle time is ever longer (the gateway's max.throttle.time.ms).
    max_throttle_ms: int = 10000

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> QuotaSettings:
        """From a BrokerConfig's values; max.throttle.time.ms wins over throttle.max.time.ms when set."""
        bound = config["max.throttle.time.ms"]
        if bound is None:
            bound = config["throttle.max.time.ms"]
        return cls(config["quota.window.num"], config["quota.window.size.seconds"], bound)


class KafkaQuotaManager(QuotaManager):
    """Kafka's client quotas: user, client-id and (user, client-id) entities with defaults."""

    def __init__(self, settings: QuotaSettings | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.settings = settings or QuotaSettings()
        self.clock = clock or (lambda: time.monotonic() * 1000)
        # quota type -> entity -> quota; only entities that set that type (Kafka resolves each
        # type on its own, so a user's producer quota does not hide a client's consumer quota).
        self._quotas: dict[QuotaType, dict[QuotaEntity, float]] = {t: {} for t in QuotaType}
        # quota type -> (user, client id) -> resolved (rate key, quota) or None; cleared on changes.
        self._resolved: dict[QuotaType, dict[tuple[str, str], tuple[tuple[str, str], float] | None]] = {
            t: {} for t in QuotaType}
        self._rates: dict[QuotaType, dict[tuple[str, str], WindowedRate]] = {t: {} for t in QuotaType}
        self._last_purge = self.clock()

    # -- configuration ------------------------------------------------------------------------

    def update_quotas(self, entity: QuotaEntity, quotas: Mapping[str, float]) -> None:
        for qt in QuotaType:
            value = quotas.get(qt.value)
            if value is None:
                self._quotas[qt].pop(entity, None)
            else:
                self._quotas[qt][entity] = float(value)
            self._resolved[qt].clear()

    def active(self, quota_type: QuotaType) -> bool:
        return bool(self._quotas[quota_type])

    def _lookup(self, quota_type: QuotaType, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        cache = self._resolved[quota_type]
        key = (user, client_id)
        try:
            return cache[key]
        except KeyError:
            found = cache[key] = resolve(self._quotas[quota_type], user, client_id)
            return found

    def quota(self, quota_type: QuotaType, user: str, client_id: str) -> float | None:
        found = self._lookup(quota_type, user, client_id)
        return None if found is None else found[1]

    # -- measurement --------------------------------------------------------------------------

    def _rate(self, quota_type: QuotaType, key: tuple[str, str], now_ms: float) -> WindowedRate:
        rates = self._rates[quota_type]
        rate = rates.get(key)
        if rate is None:
            s = self.settings
            rate = rates[key] = WindowedRate(s.window_num, s.window_size_s * 1000, now_ms)
        return rate

    def record(self, quota_type: QuotaType, user: str, client_id: str, value: float, now_ms: float) -> int:
        self._maybe_purge(now_ms)
        found = self._lookup(quota_type, user, client_id)
        if found is None:
            return 0
        key, quota = found
        rate = self._rate(quota_type, key, now_ms)
        rate.record(value, now_ms)
        throttle = throttle_time_ms(rate, quota, now_ms)
        if quota_type is QuotaType.REQUEST:
            # Kafka bounds request-time throttling by one window: a single slow request must
            # not lock its client out for long.
            throttle = min(throttle, self.settings.window_size_s * 1000)
        return min(throttle, self.settings.max_throttle_ms)

    def unrecord(self, quota_type: QuotaType, user: str, client_id: str, value: float, now_ms: float) -> None:
        found = self._lookup(quota_type, user, client_id)
        if found is not None:
            self._rate(quota_type, found[0], now_ms).record(-value, now_ms)

    def measured_rate(self, quota_type: QuotaType, user: str, client_id: str, now_ms: float) -> float | None:
        """The client's current measured rate (for tests and metrics), or None if unmeasured."""
        found = self._lookup(quota_type, user, client_id)
        rate = None if found is None else self._rates[quota_type].get(found[0])
        return None if rate is None else rate.rate(now_ms)

    def _maybe_purge(self, now_ms: float) -> None:
        if now_ms - self._last_purge < _PURGE_INTERVAL_MS:
            return
        self._last_purge = now_ms
        for cache in self._resolved.values():
            if len(cache) > 100_000:  # many short-lived client ids: resolve them again later
                cache.clear()
        for rates in self._rates.values():
            for key in [k for k, r in rates.items() if now_ms - r.last_record_ms >= INACTIVE_RATE_EXPIRY_MS]:
                del rates[key]
