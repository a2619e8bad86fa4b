"""Replication throttling (KIP-73): the quota window, the throttled-replicas lists, and where the
leader and the follower consult them (kaflet/quota/replication.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from kaflet.protocol.errors import ErrorCode
from kaflet.quota.rate import WindowedRate
from kaflet.quota.replication import (
    FOLLOWER,
    LEADER,
    UNBOUNDED,
    ReplicationQuota,
    ReplicationQuotas,
    throttled_partitions,
)
from kaflet.replication.config import ReplicationConfig
from kaflet.replication.fetcher import BrokerEndpoint, PartitionFetchState, ReplicaFetcher, ReplicaState
from kaflet.replication.follower_fetch import should_leader_throttle
from kaflet.server.dynamic_config import ConfigRequestError, validate_broker_update
from kaflet.server.topic_config import InvalidConfigError, validate_topic_config


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000.0

    def __call__(self) -> float:
        return self.ms


def test_throttled_partitions_takes_this_brokers_pairs() -> None:
    assert throttled_partitions("0:1,1:2,3:1, 4:10", 1) == frozenset({0, 3})
    assert throttled_partitions("0:1,1:2", 2) == frozenset({1})
    assert throttled_partitions("0:1", 3) == frozenset()
    assert throttled_partitions(" * ", 3) is None


def test_quotas_follow_topic_configs() -> None:
    q = ReplicationQuotas(2)
    q.update_topic("t", {"leader.replication.throttled.replicas": "0:1,1:2",
                         "follower.replication.throttled.replicas": "*"})
    assert [q.leader.is_throttled("t", p) for p in (0, 1, 2)] == [False, True, False]
    assert all(q.follower.is_throttled("t", p) for p in (0, 1, 7))
    assert not q.leader.is_throttled("other", 1)
    q.update_topic("t", {"leader.replication.throttled.replicas": ""})
    assert not q.leader.is_throttled("t", 1) and not q.follower.is_throttled("t", 0)
    q.update_topic("t", {"follower.replication.throttled.replicas": "5:2"})
    assert q.follower.throttles_any and not q.leader.throttles_any
    q.update_topic("t", None)  # the topic is gone
    assert q.follower.throttled_topics == {} and not q.follower.throttles_any


def test_rates_from_dynamic_configs() -> None:
    q = ReplicationQuotas(1)
    assert q.leader.bound == q.follower.bound == UNBOUNDED
    q.update_rates("1000", None)
    assert (q.leader.bound, q.follower.bound) == (1000, UNBOUNDED)
    q.update_rates(None, "9223372036854775807")
    assert (q.leader.bound, q.follower.bound) == (UNBOUNDED, UNBOUNDED)
    assert (q.leader.kind, q.follower.kind) == (LEADER, FOLLOWER)


def test_quota_window_is_kafkas_simple_rate() -> None:
    clock = Clock()
    q = ReplicationQuota(LEADER, samples=11, window_ms=1000, clock=clock)
    q.record(10_000_000)
    assert not q.is_quota_exceeded()  # no bound: never exceeded, whatever the rate
    q.set_bound(1000)
    # SimpleRate: measured over at least one window, with no (samples - 1) floor, so a burst is
    # over the bound at once (Rate would spread it over 10 windows).
    q = ReplicationQuota(LEADER, samples=11, window_ms=1000, clock=clock)
    q.set_bound(1000)
    q.record(900)
    assert q.byte_rate() == pytest.approx(900)
    assert not q.is_quota_exceeded()
    q.record(200)
    assert q.is_quota_exceeded()  # 1100 bytes over 1 s
    clock.ms += 1500
    assert q.byte_rate() == pytest.approx(1100 / 1.5)
    assert not q.is_quota_exceeded()
    # Samples older than samples x window are dropped: a long-idle quota starts again from 0.
    clock.ms += 20_000
    assert q.byte_rate() == 0
    q.record(5000)
    assert q.is_quota_exceeded()


def test_simple_and_plain_windowed_rates_differ_only_in_the_floor() -> None:
    plain = WindowedRate(11, 1000, 0.0)
    simple = WindowedRate(11, 1000, 0.0, simple=True)
    for r in (plain, simple):
        r.record(1000, 500.0)
    assert plain.window_size_ms(500.0) == 10_500.0
    assert simple.window_size_ms(500.0) == 1000.0
    assert simple.window_size_ms(4000.0) == 4000.0


def _partition(isr: list[int]) -> Any:
    return SimpleNamespace(topic="t", index=0, isr=isr)


def test_leader_throttles_only_lagging_followers_of_throttled_partitions() -> None:
    clock = Clock()
    quota = ReplicationQuota(LEADER, clock=clock)
    quota.set_bound(100)
    quota.mark_throttled("t", [0])
    quota.record(1000)
    assert quota.is_quota_exceeded()
    assert should_leader_throttle(quota, _partition([1]), replica_id=2)
    # In sync: never held back (Kafka avoids ISR thrashing).
    assert not should_leader_throttle(quota, _partition([1, 2]), replica_id=2)
    quota.remove_throttle("t")
    assert not should_leader_throttle(quota, _partition([1]), replica_id=2)
    quota.mark_throttled("t", None)
    clock.ms += 60_000  # the rate falls back under the bound
    assert not should_leader_throttle(quota, _partition([1]), replica_id=2)


def test_follower_leaves_throttled_lagging_partitions_out_of_its_fetch() -> None:
    clock = Clock()
    quota = ReplicationQuota(FOLLOWER, clock=clock)
    quota.set_bound(100)
    quota.mark_throttled("t", [0, 1])
    lookup = cast(Any, lambda topic, index: SimpleNamespace(log=SimpleNamespace(log_start_offset=0)))

    async def no_connection(_: BrokerEndpoint) -> Any:
        raise AssertionError("not connected in this test")

    fetcher = ReplicaFetcher("f", BrokerEndpoint(1, "127.0.0.1", 1), 2, ReplicationConfig(), lookup, no_connection,
                             quota)
    fetcher.states = {
        ("t", 0): PartitionFetchState(10, 0, ReplicaState.FETCHING, lag=50),    # throttled, lagging
        ("t", 1): PartitionFetchState(10, 0, ReplicaState.FETCHING, lag=0),     # throttled, in sync
        ("t", 2): PartitionFetchState(10, 0, ReplicaState.FETCHING, lag=50),    # not throttled
        ("u", 0): PartitionFetchState(10, 0, ReplicaState.FETCHING, lag=None),  # not throttled
    }

    def sent() -> set[tuple[str, int]]:
        built = fetcher.build_fetch()
        assert built is not None
        fetcher._session.handle_error()  # each build a full fetch again
        return set(built[1])

    assert sent() == set(fetcher.states)  # under the bound: everything
    quota.record(1000)
    assert sent() == {("t", 1), ("t", 2), ("u", 0)}
    quota.mark_throttled("u", None)  # a partition without a known lag counts as lagging
    assert sent() == {("t", 1), ("t", 2)}
    clock.ms += 60_000
    assert sent() == set(fetcher.states)


def test_follower_records_throttled_bytes_it_appends() -> None:
    clock = Clock()
    quota = ReplicationQuota(FOLLOWER, clock=clock)
    quota.mark_throttled("t", [0])
    appended = SimpleNamespace(last_offset=19, flush_needed=False)
    log = SimpleNamespace(log_end_offset=10)
    part = SimpleNamespace(log=log, append_as_follower=lambda records: appended,
                           follow_leader_offsets=lambda hw, start: False)
    lookup = cast(Any, lambda topic, index: part)

    async def no_connection(_: BrokerEndpoint) -> Any:
        raise AssertionError("not connected in this test")

    fetcher = ReplicaFetcher("f", BrokerEndpoint(1, "127.0.0.1", 1), 2, ReplicationConfig(), lookup, no_connection,
                             quota)
    data = cast(Any, SimpleNamespace(error_code=ErrorCode.NONE, records=memoryview(b"x" * 700), high_watermark=30,
                                     log_start_offset=0))
    for tp in (("t", 0), ("t", 1)):
        st = PartitionFetchState(10, 0, ReplicaState.FETCHING)
        fetcher.states[tp] = st
        assert asyncio.run(fetcher._append(tp, st, data)) is False
    assert fetcher.states[("t", 0)].fetch_offset == 20
    assert quota.byte_rate() == pytest.approx(700)  # only the throttled partition's bytes


@pytest.mark.parametrize("name,value,message", [
    ("leader.replication.throttled.rate", "-1", "Value must be at least 0"),
    ("follower.replication.throttled.rate", "fast", "Not a number of type LONG"),
    ("follower.replication.throttled.rate", "1.5", "Not a number of type LONG"),
])
def test_bad_rates_refused_with_invalid_config(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigRequestError) as exc:
        validate_broker_update({name: value}, "1", per_broker=True)
    assert exc.value.code == ErrorCode.INVALID_CONFIG
    assert exc.value.message == f"Invalid value {value} for configuration {name}: {message}"


@pytest.mark.parametrize("value", ["all", "0-1", "0:1:2", "0:x", "*,0:1"])
def test_bad_throttled_replicas_refused(value: str) -> None:
    with pytest.raises(InvalidConfigError, match="must be the literal"):
        validate_topic_config("leader.replication.throttled.replicas", value)


def test_good_values_accepted() -> None:
    assert validate_broker_update({"leader.replication.throttled.rate": "200000"}, "1", per_broker=True) == {
        "leader.replication.throttled.rate": "200000"}
    # Also at the cluster-wide default, as in Kafka (the rates are not per-broker-only configs).
    assert validate_broker_update({"follower.replication.throttled.rate": "0"}, "", per_broker=False)
    assert validate_topic_config("follower.replication.throttled.replicas", "0:1, 1:2") == "0:1,1:2"
    assert validate_topic_config("follower.replication.throttled.replicas", "*") == "*"


def test_byte_rates_exported_as_kafkas_replication_metrics() -> None:
    from kaflet.metrics.exporter import BrokerState, KafkaCollector
    from kaflet.metrics.stats import BrokerMetrics

    clock = Clock()
    quotas = ReplicationQuotas(1, clock=clock)
    quotas.leader.record(3000)
    clock.ms += 2000
    state = BrokerState(partitions=list, active_controller=lambda: False, group_count=lambda: 0, connections=dict,
                        topic_exists=lambda t: True, isr_shrinks=lambda: 0, isr_expands=lambda: 0,
                        replication_rates=lambda: {q.kind: q.byte_rate() for q in quotas.all})
    families = {f.name: f for f in KafkaCollector(BrokerMetrics(), state).collect()}
    assert families["kafka_server_leaderreplication_byte_rate"].samples[0].value == pytest.approx(1500)
    assert families["kafka_server_followerreplication_byte_rate"].samples[0].value == 0
    assert families["kafka_server_alterlogdirsreplication_byte_rate"].samples[0].value == 0


def test_alter_log_dirs_bound_from_its_dynamic_config() -> None:
    """replica.alter.log.dirs.io.max.bytes.per.second: validated as Kafka does, and the bound of
    the third quota (every move between log dirs counts; unset, no bound)."""
    name = "replica.alter.log.dirs.io.max.bytes.per.second"
    assert validate_broker_update({name: "50000000"}, "1", per_broker=True) == {name: "50000000"}
    with pytest.raises(ConfigRequestError):
        validate_broker_update({name: "-1"}, "1", per_broker=True)
    clock = Clock()
    quotas = ReplicationQuotas(1, clock=clock)
    quotas.update_rates(None, None, "1000")
    assert quotas.alter_log_dirs.bound == 1000 and not quotas.alter_log_dirs.is_quota_exceeded()
    quotas.alter_log_dirs.record(5000)
    assert quotas.alter_log_dirs.is_quota_exceeded()
    clock.ms += 10_000
    assert not quotas.alter_log_dirs.is_quota_exceeded()
    quotas.update_rates(None, None, None)
    quotas.alter_log_dirs.record(10**9)
    assert not quotas.alter_log_dirs.is_quota_exceeded()
