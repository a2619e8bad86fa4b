"""Counters the request path updates: Kafka's BrokerTopicMetrics and RequestMetrics, and the
Logi-Kafka gateway's per-application, per-topic metrics (``kafkaexmetrics.enable``).

The hot path pays for plain integer additions in ``__slots__`` objects, once per partition of a
Produce or Fetch and once per request, never per record; nothing is formatted, locked or
allocated per request. The exporter (``exporter.py``) reads these objects when Prometheus
scrapes, on the same event loop, so no lock is needed.

What Kafka counts, and kaflet with it (ReplicaManager.appendToLocalLog / readFromLocalLog):

* ``TotalProduceRequestsPerSec`` / ``TotalFetchRequestsPerSec``: once per partition of a
  request that reaches the log (authorized, of a known topic), whatever the outcome; a
  follower's fetch counts too.
* ``FailedProduceRequestsPerSec`` / ``FailedFetchRequestsPerSec``: partitions that failed for a
  reason other than the routine ones (not leader, unknown partition, too large, corrupt,
  storage error; for fetches also offset out of range and leader epoch errors).
* ``BytesInPerSec`` / ``MessagesInPerSec``: appended batches' sizes and record counts;
  ``BytesRejectedPerSec``: batches refused as larger than max.message.bytes.
* ``BytesOutPerSec``: record bytes answered to consumers (not to followers, and not when a quota
  throttles the answer, which then goes out without data).
"""

from __future__ import annotations

import datetime
import logging
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping

from kaflet.gateway.quotas import app_id
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode

log = logging.getLogger("kaflet.metrics")

#: Upper bounds (ms) of the request-time histogram buckets; one more bucket holds the rest.
TIME_BUCKETS_MS: tuple[float, ...] = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)

# Produce partitions refused before the log (Kafka answers them in KafkaApis, uncounted).
_PRODUCE_NOT_ATTEMPTED = frozenset({
    ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ErrorCode.INVALID_REQUIRED_ACKS, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
})
# Routine outcomes Kafka does not count as failed requests.
_PRODUCE_NOT_FAILED = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
    ErrorCode.CORRUPT_MESSAGE, ErrorCode.KAFKA_STORAGE_ERROR,
})
_REJECTED = frozenset({ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE})
_FETCH_NOT_FAILED = frozenset({
    ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.OFFSET_OUT_OF_RANGE,
})


def request_name(api_key: int, follower: bool = False) -> str:
    """Kafka's name of an API in RequestMetrics (``Produce``, ``FetchConsumer``, ``ListOffsets``...)."""
    if api_key == ApiKey.FETCH:
        return "FetchFollower" if follower else "FetchConsumer"
    try:
        return "".join(part.capitalize() for part in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)



class Histogram:
    """Counts per bucket of TIME_BUCKETS_MS (the last one unbounded) and the sum of observations."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(TIME_BUCKETS_MS) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # Prometheus buckets are "less than or equal": bisect_left finds the first bound >= value.
        self.counts[bisect_left(TIME_BUCKETS_MS, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)


class TopicCounters:
    """Kafka's BrokerTopicMetrics of one topic (or of all topics)."""

    __slots__ = ("bytes_in", "bytes_out", "bytes_rejected", "failed_fetch", "failed_produce", "fetch_conversions",
                 "fetch_requests", "messages_in", "produce_conversions", "produce_requests")

    def __init__(self) -> None:
        self.bytes_in = self.bytes_out = self.bytes_rejected = self.messages_in = 0
        self.produce_requests = self.fetch_requests = self.failed_produce = self.failed_fetch = 0
        self.produce_conversions = self.fetch_conversions = 0


class AppTopicCounters:
    """One application's traffic on one topic (Logi-Kafka's AppIdTopicMetrics)."""

    __slots__ = ("bytes_in", "bytes_out", "fetch_requests", "messages_in", "produce_requests", "throttle_ms")

    def __init__(self) -> None:
        self.bytes_in = self.bytes_out = self.messages_in = 0
        self.produce_requests = self.fetch_requests = 0
        self.throttle_ms = 0


class TopicRequestTimes:
    """Produce or Fetch request times and throttle times of requests naming one topic
    (Logi-Kafka's TopicRequestMetrics TotalTimeMs / ThrottleTimeMs)."""

    __slots__ = ("throttle_time", "total_time")

    def __init__(self) -> None:
        self.total_time = Histogram()
        self.throttle_time = Histogram()


class AppTopicStats:
    """The per-(appId, topic) metrics of kafkaexmetrics.enable, for a chosen set of topics.

    ``topics`` is the set the management service lists at ``report/jmx/topics`` (None: every
    topic, when there is no management service). At most ``max_series`` (appId, topic) pairs are
    kept, so clients cannot grow the broker's memory without bound; the recorded pairs are
    forgotten every day at ``clear_at`` local time, as Logi-Kafka does (23:00), so pairs that
    stopped sending or topics no longer listed disappear.
    """

    def __init__(self, cluster_id: int, max_series: int, topics: Iterable[str] | None = None,
                 clear_at: datetime.time = datetime.time(23, 0)) -> None:
        self.cluster_id = cluster_id
        self.max_series = max_series
        self.topics: frozenset[str] | None = None if topics is None else frozenset(topics)
        self.clear_at = clear_at
        self.series: dict[tuple[str, str], AppTopicCounters] = {}
        self.topic_requests: dict[tuple[str, str], TopicRequestTimes] = {}
        # The same counters by (principal, topic), so the request path skips app_id().
        self._by_principal: dict[tuple[str, str], AppTopicCounters] = {}
        self._full_logged = False

    def wants(self, topic: str) -> bool:
        topics = self.topics
        return topics is None or topic in topics

    def set_topics(self, topics: Iterable[str] | None) -> None:
        """Record from now on the topics listed (None: all); recorded series stay until cleared."""
        self.topics = None if topics is None else frozenset(topics)

    def counters(self, principal: str, topic: str) -> AppTopicCounters | None:
        """The counters of the principal's application on a wanted topic; None when not wanted
        or when max_series pairs are already kept."""
        topics = self.topics
        if topics is not None and topic not in topics:
            return None
        found = self._by_principal.get((principal, topic))
        if found is not None:
            return found
        key = (app_id(principal, self.cluster_id), topic)
        found = self.series.get(key)
        if found is None:
            if len(self.series) >= self.max_series:
                if not self._full_logged:
                    self._full_logged = True
                    log.warning("kafkaexmetrics: %d (appId, topic) series kept (kafkaexmetrics.max.series); "
                                "new pairs are not recorded until the daily clear", self.max_series)
                return None
            found = self.series[key] = AppTopicCounters()
        if len(self._by_principal) < 2 * self.max_series:
            # Two principals may name one application (with and without the cluster prefix).
            self._by_principal[(principal, topic)] = found
        return found

    def request_times(self, request: str, topic: str) -> TopicRequestTimes:
        key = (request, topic)
        found = self.topic_requests.get(key)
        if found is None:
            found = self.topic_requests[key] = TopicRequestTimes()
        return found

    def clear(self) -> None:
        """Forget every recorded series (the daily clear)."""
        self.series = {}
        self.topic_requests = {}
        self._by_principal = {}
        self._full_logged = False

    def seconds_to_next_clear(self, now: datetime.datetime | None = None) -> float:
        """Seconds from ``now`` (local time) to the next ``clear_at``."""
        now = now or datetime.datetime.now()
        at = datetime.datetime.combine(now.date(), self.clear_at)
        if at <= now:
            at += datetime.timedelta(days=1)
        return (at - now).total_seconds()


class ZooKeeperSessionStats:
    """The broker's ZooKeeper session as Kafka's SessionExpireListener MBean counts it."""

    __slots__ = ("state", "expires", "disconnects")

    def __init__(self) -> None:
        #: "CONNECTED", "SUSPENDED" (connection lost, session may live) or "LOST" (expired).
        self.state = "CONNECTED"
        self.expires = 0
        self.disconnects = 0

    def on_state(self, state: str) -> None:
        """A state change of the ZooKeeper client."""
        if state == "SUSPENDED":
            self.disconnects += 1
        elif state == "LOST":
            self.expires += 1
        self.state = state


class BrokerMetrics:
    """Everything the request path records; the broker holds one when metrics are exposed."""

    def __init__(self, app_topics: AppTopicStats | None = None) -> None:
        self.topics: dict[str, TopicCounters] = {}
        self.all_topics = TopicCounters()
        #: Requests per (API key, version, from a follower); request_name() names them.
        self.requests: dict[tuple[int, int, bool], int] = {}
        #: Total time (receipt to encoded response) per (API key, from a follower).
        self.request_times: dict[tuple[int, bool], Histogram] = {}
        #: kafkaexmetrics.enable's per-application metrics; None when off.
        self.app_topics = app_topics
        #: The ZooKeeper session (a broker in a cluster); None for a broker alone.
        self.zookeeper: ZooKeeperSessionStats | None = None

    def _topic(self, topic: str) -> TopicCounters:
        found = self.topics.get(topic)
        if found is None:
            found = self.topics[topic] = TopicCounters()
        return found

    # -- Produce ------------------------------------------------------------------------------

    def produced(self, topic: str, nbytes: int, messages: int, principal: str) -> None:
        """A batch of ``messages`` records, ``nbytes`` long, appended to a partition of ``topic``."""
        c = self._topic(topic)
        c.produce_requests += 1
        c.bytes_in += nbytes
        c.messages_in += messages
        a = self.all_topics
        a.produce_requests += 1
        a.bytes_in += nbytes
        a.messages_in += messages
        apps = self.app_topics
        if apps is not None:
            s = apps.counters(principal, topic)
            if s is not None:
                s.bytes_in += nbytes
                s.messages_in += messages

    def produce_failed(self, topic: str, error: int, nbytes: int) -> None:
        """A partition of a Produce answered with ``error`` (the batch was ``nbytes`` long)."""
        if error in _PRODUCE_NOT_ATTEMPTED:
            return
        c, a = self._topic(topic), self.all_topics
        c.produce_requests += 1
        a.produce_requests += 1
        if error in _REJECTED:
            c.bytes_rejected += nbytes
            a.bytes_rejected += nbytes
        if error not in _PRODUCE_NOT_FAILED:
            c.failed_produce += 1
            a.failed_produce += 1

    # -- Fetch --------------------------------------------------------------------------------

    def converted(self, topic: str, records: int, produce: bool) -> None:
        """``records`` records of ``topic`` converted between message formats: up-converted from
        a Produce v0-2 message set, or down-converted for a Fetch v0-3."""
        c, a = self._topic(topic), self.all_topics
        if produce:
            c.produce_conversions += records
            a.produce_conversions += records
        else:
            c.fetch_conversions += records
            a.fetch_conversions += records

    def fetched(self, topic: str, error: int) -> None:
        """A partition of ``topic`` was read for a Fetch (a consumer's or a follower's)."""
        c, a = self._topic(topic), self.all_topics
        c.fetch_requests += 1
        a.fetch_requests += 1
        if error not in _FETCH_NOT_FAILED:
            c.failed_fetch += 1
            a.failed_fetch += 1

    # -- every request ------------------------------------------------------------------------

    def on_request(self, api_key: int, version: int, follower: bool, principal: str,
                   traffic: Mapping[str, int] | None, throttle_ms: int, elapsed_ms: float) -> None:
        """A request is answered after ``elapsed_ms``; ``traffic`` holds a Produce's or a
        consumer's Fetch bytes per topic (appended / read), ``throttle_ms`` its throttle time."""
        key = (api_key, version, follower)
        self.requests[key] = self.requests.get(key, 0) + 1
        times = self.request_times.get(key[::2])
        if times is None:
            times = self.request_times[(api_key, follower)] = Histogram()
        times.observe(elapsed_ms)
        if not traffic or follower:
            return
        fetch = api_key == ApiKey.FETCH
        if fetch and not throttle_ms:
            # A throttled fetch is answered without data: nothing went out.
            a = self.all_topics
            for topic, nbytes in traffic.items():
                if nbytes:
                    self._topic(topic).bytes_out += nbytes
                    a.bytes_out += nbytes
        apps = self.app_topics
        if apps is None:
            return
        kind = "Fetch" if fetch else "Produce"
        for topic, nbytes in traffic.items():
            s = apps.counters(principal, topic)
            if s is None:
                continue
            if fetch:
                s.fetch_requests += 1
                if not throttle_ms:
                    s.bytes_out += nbytes
            else:
                s.produce_requests += 1
            s.throttle_ms += throttle_ms
            t = apps.request_times(kind, topic)
            t.total_time.observe(elapsed_ms)
            t.throttle_time.observe(throttle_ms)

    def forget_topics(self, known: Callable[[str], bool]) -> None:
        """Drop the counters of topics that no longer exist (Kafka removes a deleted topic's
        metrics); the all-topics counters keep what they counted."""
        for topic in [t for t in self.topics if not known(t)]:
            del self.topics[topic]
