"""The metrics counters (kaflet/metrics/stats.py), the jmx topic list and the listener setting."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Mapping
from typing import Any

import pytest

from kaflet.gateway.model import ManagementServiceError
from kaflet.metrics.exporter import ListenerError, parse_listener
from kaflet.metrics.jmx_topics import parse_topic_list, refresh
from kaflet.metrics.stats import (
    TIME_BUCKETS_MS,
    AppTopicStats,
    BrokerMetrics,
    Histogram,
    ZooKeeperSessionStats,
    request_name,
)
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode


def test_request_names_are_kafkas() -> None:
    assert request_name(ApiKey.PRODUCE) == "Produce"
    assert request_name(ApiKey.FETCH) == "FetchConsumer"
    assert request_name(ApiKey.FETCH, follower=True) == "FetchFollower"
    assert request_name(ApiKey.LIST_OFFSETS) == "ListOffsets"
    assert request_name(ApiKey.API_VERSIONS) == "ApiVersions"
    assert request_name(ApiKey.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"


def test_histogram_buckets_are_less_or_equal() -> None:
    h = Histogram()
    for v in (0.5, 1.0, 1.5, 30000.0, 30001.0):
        h.observe(v)
    assert h.counts[0] == 2  # 0.5 and 1.0 are <= 1
    assert h.counts[1] == 1  # 1.5 <= 2
    assert h.counts[len(TIME_BUCKETS_MS) - 1] == 1  # 30000 <= 30000
    assert h.counts[-1] == 1  # above every bound
    assert h.count == 5 and h.sum == pytest.approx(60004.0)


def test_produce_outcomes_counted_as_kafka_counts_them() -> None:
    m = BrokerMetrics()
    m.produced("t", 100, 3, "alice")
    m.produce_failed("t", ErrorCode.TOPIC_AUTHORIZATION_FAILED, 50)  # refused before the log: not counted
    m.produce_failed("t", ErrorCode.NOT_LEADER_OR_FOLLOWER, 50)  # routine: a request, not a failure
    m.produce_failed("t", ErrorCode.MESSAGE_TOO_LARGE, 70)  # rejected bytes, not a failure
    m.produce_failed("t", ErrorCode.INVALID_PRODUCER_EPOCH, 40)  # a failure
    c = m.topics["t"]
    assert (c.produce_requests, c.failed_produce, c.bytes_in, c.messages_in, c.bytes_rejected) == (4, 1, 100, 3, 70)
    a = m.all_topics
    assert (a.produce_requests, a.failed_produce, a.bytes_rejected) == (4, 1, 70)
    m.produce_failed("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 10)
    assert "nope" not in m.topics  # no counters for names a client made up


def test_fetch_failures_and_throttled_fetches_send_no_bytes() -> None:
    m = BrokerMetrics()
    m.fetched("t", ErrorCode.NONE)
    m.fetched("t", ErrorCode.OFFSET_OUT_OF_RANGE)
    m.fetched("t", ErrorCode.CORRUPT_MESSAGE)
    assert (m.topics["t"].fetch_requests, m.topics["t"].failed_fetch) == (3, 1)
    m.on_request(ApiKey.FETCH, 12, False, "alice", {"t": 500}, 0, 2.0)
    m.on_request(ApiKey.FETCH, 12, False, "alice", {"t": 800}, 120, 2.0)  # throttled: answered without data
    m.on_request(ApiKey.FETCH, 12, True, "follower", {"t": 900}, 0, 2.0)  # replication is not BytesOut
    assert m.topics["t"].bytes_out == 500 and m.all_topics.bytes_out == 500
    assert m.requests == {(ApiKey.FETCH, 12, False): 2, (ApiKey.FETCH, 12, True): 1}
    assert m.request_times[(ApiKey.FETCH, False)].count == 2


def test_app_topic_series_only_for_listed_topics_and_bounded() -> None:
    apps = AppTopicStats(cluster_id=7, max_series=2, topics=["a", "b", "c"])
    m = BrokerMetrics(apps)
    m.produced("a", 100, 2, "7.app1")  # <clusterId>.<appId> logins count for the appId
    m.produced("z", 100, 2, "7.app1")  # not listed
    m.on_request(ApiKey.PRODUCE, 9, False, "7.app1", {"a": 100, "z": 100}, 30, 4.0)
    m.on_request(ApiKey.FETCH, 12, False, "7.app2", {"b": 40}, 0, 1.0)
    m.produced("c", 10, 1, "7.app3")  # a third pair: over max_series, not kept
    assert set(apps.series) == {("app1", "a"), ("app2", "b")}
    s = apps.series[("app1", "a")]
    assert (s.bytes_in, s.messages_in, s.produce_requests, s.throttle_ms) == (100, 2, 1, 30)
    assert apps.series[("app2", "b")].bytes_out == 40
    assert apps.topic_requests[("Produce", "a")].throttle_time.sum == 30
    assert ("Produce", "z") not in apps.topic_requests
    apps.clear()
    assert not apps.series and not apps.topic_requests
    m.produced("c", 10, 1, "7.app3")  # room again after the clear
    assert ("app3", "c") in apps.series


def test_without_a_topic_list_every_topic_is_recorded() -> None:
    apps = AppTopicStats(cluster_id=0, max_series=10, topics=None)
    assert apps.wants("anything")
    apps.set_topics([])
    assert not apps.wants("anything")


def test_daily_clear_time() -> None:
    apps = AppTopicStats(0, 10)
    before = datetime.datetime(2026, 12, 1, 22, 0, 0)
    assert apps.seconds_to_next_clear(before) == 3600
    after = datetime.datetime(2026, 12, 1, 23, 0, 0)
    assert apps.seconds_to_next_clear(after) == 24 * 3600


def test_topic_list_parsing() -> None:
    assert parse_topic_list("t1, t2,,t3 ") == {"t1", "t2", "t3"}
    assert parse_topic_list("") == frozenset()
    assert parse_topic_list(None) == frozenset()
    assert parse_topic_list(["t1", " t2"]) == {"t1", "t2"}  # data "[...]" arrives decoded
    for garbage in ({"rows": []}, 42, ["t1", 2]):
        with pytest.raises(ManagementServiceError):
            parse_topic_list(garbage)


class _Answers:
    """A ManagementService whose get() answers from a list (the HTTP side is tested against
    the scripted service in tests/integration/test_metrics.py)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.queries: list[Mapping[str, Any] | None] = []

    async def post(self, path: str, body: Mapping[str, Any], query: Mapping[str, Any] | None = None) -> Any:
        raise AssertionError("not used")

    async def get(self, path: str, query: Mapping[str, Any] | None = None) -> Any:
        self.queries.append(query)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_a_failed_refresh_keeps_the_last_list() -> None:
    apps = AppTopicStats(3, 10, topics=())
    service = _Answers("a,b", ManagementServiceError("down"), 42)

    async def run() -> None:
        await refresh(apps, service, 3)
        for _ in range(2):
            with pytest.raises(ManagementServiceError):
                await refresh(apps, service, 3)

    asyncio.run(run())
    assert apps.topics == {"a", "b"}
    assert service.queries == [{"clusterId": 3}] * 3


@pytest.mark.parametrize("value", ["127.0.0.1:9404", "https://h:1", "http://h", "http://h:1/metrics", "http://h:x"])
def test_metrics_listener_must_be_http_host_port(value: str) -> None:
    with pytest.raises(ListenerError):
        parse_listener(value)
    assert parse_listener("http://0.0.0.0:9404") == ("0.0.0.0", 9404)
    assert parse_listener("http://127.0.0.1:0/") == ("127.0.0.1", 0)


def test_zookeeper_session_counts_disconnects_and_expiries() -> None:
    zk = ZooKeeperSessionStats()
    assert (zk.state, zk.disconnects, zk.expires) == ("CONNECTED", 0, 0)
    for state in ("SUSPENDED", "CONNECTED", "SUSPENDED", "LOST", "CONNECTED"):
        zk.on_state(state)
    assert (zk.state, zk.disconnects, zk.expires) == ("CONNECTED", 2, 1)
