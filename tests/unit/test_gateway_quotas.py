"""The gateway's per-application-per-topic quotas (kaflet/gateway/quotas.py) on a fake clock."""

from __future__ import annotations

from kaflet.gateway.quotas import TopicQuotaManager, app_id, topic_quota_key
from kaflet.quota.entity import CLIENT_ID, USER, QuotaEntity, QuotaType
from kaflet.quota.manager import KafkaQuotaManager, QuotaSettings

P, F = QuotaType.PRODUCE, QuotaType.FETCH


class Shares:
    """Leader shares by topic, changeable by the test."""

    def __init__(self) -> None:
        self.by_topic: dict[str, tuple[int, int]] = {}
        self.calls = 0

    def __call__(self, topic: str) -> tuple[int, int]:
        self.calls += 1
        return self.by_topic.get(topic, (0, 0))


def manager(shares: Shares, max_throttle_ms: int = 10_000) -> tuple[TopicQuotaManager, KafkaQuotaManager]:
    settings = QuotaSettings(window_num=2, window_size_s=1, max_throttle_ms=max_throttle_ms)
    inner = KafkaQuotaManager(settings, clock=lambda: 0.0)
    return TopicQuotaManager(inner, settings, shares, cluster_id=7, clock=lambda: 0.0), inner


def client(name: str) -> QuotaEntity:
    return QuotaEntity.of({CLIENT_ID: name})


def test_entity_names_and_principals() -> None:
    assert topic_quota_key(client("app_1.orders.eu")) == ("app_1", "orders.eu")
    assert topic_quota_key(client("nodot")) is None
    assert topic_quota_key(client(".topic")) is None
    assert topic_quota_key(QuotaEntity.of({CLIENT_ID: None})) is None
    assert topic_quota_key(QuotaEntity.of({USER: "app", CLIENT_ID: "app.t"})) is None
    assert app_id("7.app_1", 7) == "app_1"
    assert app_id("app_1", 7) == "app_1"
    assert app_id("8.app_1", 7) == "8.app_1"


def test_quota_applies_to_the_app_on_that_topic_only() -> None:
    shares = Shares()
    shares.by_topic = {"t": (1, 1), "other": (1, 1)}
    m, _ = manager(shares)
    assert not m.active_per_topic(P)
    m.update_quotas(client("app.t"), {"producer_byte_rate": 1000.0})
    assert m.active_per_topic(P) and not m.active_per_topic(F)
    # Two windows of 1 s, measured over at least one: 2000 bytes is 2000/s, twice the quota -> 1 s.
    assert m.record_topics(P, "7.app", {"t": 2000}, 0.0) == 1000
    # Other topics, other applications and the fetch direction are not limited.
    assert m.record_topics(P, "app", {"other": 10**6}, 0.0) == 0
    assert m.record_topics(P, "another", {"t": 10**6}, 0.0) == 0
    assert m.record_topics(F, "app", {"t": 10**6}, 0.0) == 0
    # Removing the quota lifts it.
    m.update_quotas(client("app.t"), {})
    assert not m.active_per_topic(P)
    assert m.record_topics(P, "app", {"t": 10**6}, 0.0) == 0


def test_quota_is_split_by_leader_share() -> None:
    shares = Shares()
    shares.by_topic = {"t": (1, 4)}
    m, _ = manager(shares)
    m.update_quotas(client("app.t"), {"consumer_byte_rate": 4000.0})
    assert m.topic_quota(F, "app", "t", 0.0) == 1000.0
    # 1000 bytes over the 1 s floor (windows - 1) = 1000/s: exactly this broker's quarter.
    assert m.record_topics(F, "app", {"t": 1000}, 0.0) == 0
    assert m.record_topics(F, "app", {"t": 1000}, 0.0) == 1000
    # The share is re-read after its time to live: leading 3 of 4 now allows 3000/s.
    shares.by_topic = {"t": (3, 4)}
    assert m.topic_quota(F, "app", "t", 0.0) == 1000.0  # still the cached share
    assert m.topic_quota(F, "app", "t", 1500.0) == 3000.0
    # A broker leading none still gives one partition's part; an unknown topic the whole quota.
    shares.by_topic = {"t": (0, 4)}
    assert m.topic_quota(F, "app", "t", 5000.0) == 1000.0
    shares.by_topic = {}
    assert m.topic_quota(F, "app", "t", 10_000.0) == 4000.0


def test_throttle_is_bounded_and_unrecord_takes_back() -> None:
    shares = Shares()
    shares.by_topic = {"t": (1, 1)}
    m, _ = manager(shares, max_throttle_ms=300)
    m.update_quotas(client("app.t"), {"consumer_byte_rate": 100.0})
    assert m.record_topics(F, "app", {"t": 10**6}, 0.0) == 300
    m.unrecord_topics(F, "app", {"t": 10**6}, 0.0)
    assert m.measured_rate(F, "app", "t", 0.0) == 0.0
    assert m.record_topics(F, "app", {"t": 100}, 0.0) == 0


def test_kafka_quotas_still_apply_beside() -> None:
    shares = Shares()
    m, inner = manager(shares)
    m.update_quotas(QuotaEntity.of({USER: "alice"}), {"producer_byte_rate": 10.0})
    m.update_quotas(client("app.t"), {"producer_byte_rate": 10.0})
    assert m.active(P) and inner.active(P)
    assert m.quota(P, "alice", "x") == 10.0
    assert m.record(P, "alice", "x", 1000, 0.0) > 0
    # The node stays a client-id quota too, for a client that uses that very client id.
    assert m.quota(P, "bob", "app.t") == 10.0
    assert m.quota(P, "bob", "other") is None
