"""Replication throttling (KIP-73): Kafka's ReplicationQuotaManager, one for each side.

A broker has a leader quota and a follower quota. Each has a bound in bytes per second (the
dynamic broker configs ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate``; unset, there is none) and a set of throttled
partitions, from the topic configs ``leader.replication.throttled.replicas`` and
``follower.replication.throttled.replicas``: ``partition:broker`` pairs, of which a broker takes
the partitions paired with its own id, or ``*`` for all of the topic's partitions.

* Leader side (the read path, ``ReplicaManager.fetch_messages``): the bytes of throttled partitions sent to followers are
  recorded, whether the follower is in sync or not; while the rate is over the bound, a
  throttled partition is answered without records to a follower that is not in the ISR
  (Kafka's ``shouldLeaderThrottle``: in-sync followers are never held back, to avoid ISR
  thrashing).
* Follower side (the replica fetchers): the bytes fetched for throttled partitions are
  recorded; while over the bound, a throttled partition whose replica is not caught up
  (lag > 0 or unknown) is left out of the next fetch (Kafka's ``shouldFollowerThrottle``).

A third quota bounds the copies of replicas moving between this broker's log dirs
(``replica.alter.log.dirs.io.max.bytes.per.second``, Kafka's alterLogDirs quota): every such
partition counts, and while it is over its bound the move reads nothing.

The rate is Kafka's SimpleRate over ``replication.quota.window.num`` samples of
``replication.quota.window.size.seconds`` (11 of 1 s by default).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from kaflet.quota.rate import WindowedRate

LEADER = "LeaderReplication"
FOLLOWER = "FollowerReplication"
ALTER_LOG_DIRS = "AlterLogDirsReplication"
#: The config keys, as Kafka names them (QuotaConfig).
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
ALTER_LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
#: Kafka's default bound: Long.MAX_VALUE, i.e. no throttle.
UNBOUNDED = 2**63 - 1


def _now_ms() -> float:
    return time.monotonic() * 1000


def throttled_partitions(value: str, broker_id: int) -> frozenset[int] | None:
    """The partitions a throttled-replicas value throttles on ``broker_id``; None for ``*``
    (all of them). The value is already validated (Kafka's parseThrottledPartitions)."""
    value = value.strip()
    if value == "*":
        return None
    out = set()
    for item in value.split(","):
        partition, sep, broker = item.strip().partition(":")
        if sep and broker.strip().isdigit() and int(broker) == broker_id and partition.strip().isdigit():
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuota:
    """One side's replication quota: a bound, the throttled partitions and the measured rate."""

    def __init__(self, kind: str, samples: int = 11, window_ms: int = 1000,
                 clock: Callable[[], float] = _now_ms) -> None:
        self.kind = kind
        self._clock = clock
        self._rate = WindowedRate(samples, window_ms, clock(), simple=True)
        #: bytes/s; UNBOUNDED when the rate config is unset.
        self.bound = UNBOUNDED
        #: topic -> throttled partitions (None: all of them).
        self._throttled: dict[str, frozenset[int] | None] = {}

    def set_bound(self, bytes_per_s: int | None) -> None:
        self.bound = UNBOUNDED if bytes_per_s is None else bytes_per_s

    def mark_throttled(self, topic: str, partitions: Iterable[int] | None) -> None:
        """Throttle these partitions of the topic (None: all), replacing what it had."""
        self._throttled[topic] = None if partitions is None else frozenset(partitions)

    def remove_throttle(self, topic: str) -> None:
        self._throttled.pop(topic, None)

    def update_topic(self, topic: str, value: str | None, broker_id: int) -> None:
        """Apply a topic's throttled-replicas config (None or empty: none throttled)."""
        if value is None or not value.strip():
            self.remove_throttle(topic)
        else:
            self.mark_throttled(topic, throttled_partitions(value, broker_id))

    def is_throttled(self, topic: str, partition: int) -> bool:
        if topic not in self._throttled:
            return False
        parts = self._throttled[topic]
        return parts is None or partition in parts

    @property
    def throttles_any(self) -> bool:
        """Whether some topic has throttled partitions here."""
        return bool(self._throttled)

    @property
    def throttled_topics(self) -> dict[str, frozenset[int] | None]:
        return dict(self._throttled)

    def record(self, nbytes: int) -> None:
        """Count bytes of throttled partitions, even when over the bound (Kafka records them all)."""
        if nbytes > 0:
            self._rate.record(nbytes, self._clock())

    def byte_rate(self) -> float:
        """The measured rate of throttled replication, bytes per second."""
        return self._rate.rate(self._clock())

    def is_quota_exceeded(self) -> bool:
        """Whether the measured rate is above the bound (never, without a bound)."""
        return self.bound != UNBOUNDED and self.byte_rate() > self.bound


class ReplicationQuotas:
    """The broker's replication quotas (leader, follower, alter-log-dirs), fed by its dynamic
    and topic configs."""

    def __init__(self, broker_id: int, samples: int = 11, window_ms: int = 1000,
                 clock: Callable[[], float] = _now_ms) -> None:
        self.broker_id = broker_id
        self.leader = ReplicationQuota(LEADER, samples, window_ms, clock)
        self.follower = ReplicationQuota(FOLLOWER, samples, window_ms, clock)
        self.alter_log_dirs = ReplicationQuota(ALTER_LOG_DIRS, samples, window_ms, clock)

    @property
    def all(self) -> tuple[ReplicationQuota, ReplicationQuota, ReplicationQuota]:
        return self.leader, self.follower, self.alter_log_dirs

    def update_rates(self, leader: str | None, follower: str | None, alter_log_dirs: str | None = None) -> None:
        """The (validated) rate configs' current values; None: unset."""
        self.leader.set_bound(None if leader is None else int(leader))
        self.follower.set_bound(None if follower is None else int(follower))
        self.alter_log_dirs.set_bound(None if alter_log_dirs is None else int(alter_log_dirs))

    def update_topic(self, topic: str, overrides: dict[str, str] | None) -> None:
        """A topic's overrides as last read (None: the topic is gone)."""
        o = overrides or {}
        self.leader.update_topic(topic, o.get(LEADER_REPLICAS), self.broker_id)
        self.follower.update_topic(topic, o.get(FOLLOWER_REPLICAS), self.broker_id)
