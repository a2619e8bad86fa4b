"""kafka_exporter's series from a given cluster snapshot (kaflet/metrics/cluster_series.py) and
the scrape-time cache around them (kaflet/metrics/cluster_view.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from kaflet.metadata.metadata_cache import MetadataCache, PartitionInfo
from kaflet.metadata.zkdata import BrokerInfo, EndPoint
from kaflet.metrics.cluster_series import ClusterSnapshot, GroupRow, TextCache, cluster_text
from kaflet.metrics.cluster_view import ClusterSeries, ClusterView, LocalState, render

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(snap: ClusterSnapshot) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(cluster_text(snap)) for s in f.samples}


def get(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


def snapshot() -> ClusterSnapshot:
    return ClusterSnapshot(
        brokers=[(1, "h1:9092"), (2, "h2:9092"), (3, "h3:9092")],
        topics={
            "orders": [(0, 1, (1, 2, 3), (1, 2, 3)), (1, 3, (2, 3, 1), (3, 1)),
                       (2, -1, (3, 1, 2), ())],
            "__consumer_offsets": [(0, 2, (2,), (2,))],
        },
        offsets={("orders", 0): (100, 10), ("orders", 1): (50, 0), ("__consumer_offsets", 0): (7, 0)},
        groups={
            "billing": GroupRow(2, {("orders", 0): 58}),
            "idle": GroupRow(0, {}),
            "gone-topic": GroupRow(1, {("deleted", 0): 5}),
            "no-leader": GroupRow(1, {("orders", 2): 3}),
        })


def test_brokers_and_topics() -> None:
    s = samples(snapshot())
    assert get(s, "kafka_brokers") == 3
    assert get(s, "kafka_broker_info", id="2", address="h2:9092") == 1
    assert get(s, "kafka_topic_partitions", topic="orders") == 3
    # Internal topics are listed too, as kafka_exporter lists every topic of the metadata.
    assert get(s, "kafka_topic_partitions", topic="__consumer_offsets") == 1
    assert get(s, "kafka_topic_partition_current_offset", topic="orders", partition="0") == 100
    assert get(s, "kafka_topic_partition_oldest_offset", topic="orders", partition="0") == 10
    assert get(s, "kafka_topic_partition_leader", topic="orders", partition="1") == 3
    assert get(s, "kafka_topic_partition_replicas", topic="orders", partition="1") == 3
    assert get(s, "kafka_topic_partition_in_sync_replica", topic="orders", partition="1") == 2
    assert get(s, "kafka_topic_partition_under_replicated_partition", topic="orders", partition="1") == 1
    assert get(s, "kafka_topic_partition_under_replicated_partition", topic="orders", partition="0") == 0
    assert get(s, "kafka_topic_partition_leader_is_preferred", topic="orders", partition="0") == 1
    # Led by its second replica: not the preferred one.
    assert get(s, "kafka_topic_partition_leader_is_preferred", topic="orders", partition="1") == 0


def test_a_partition_without_leader_has_no_leader_or_offsets() -> None:
    s = samples(snapshot())
    for name in ("kafka_topic_partition_leader", "kafka_topic_partition_current_offset",
                 "kafka_topic_partition_oldest_offset"):
        assert get(s, name, topic="orders", partition="2") is None, name
    assert get(s, "kafka_topic_partition_leader_is_preferred", topic="orders", partition="2") == 0
    assert get(s, "kafka_topic_partition_in_sync_replica", topic="orders", partition="2") == 0
    assert get(s, "kafka_topic_partition_under_replicated_partition", topic="orders", partition="2") == 1


def test_group_offsets_lag_and_sums() -> None:
    s = samples(snapshot())
    g = {"consumergroup": "billing", "topic": "orders"}
    assert get(s, "kafka_consumergroup_members", consumergroup="billing") == 2
    assert get(s, "kafka_consumergroup_current_offset", **g, partition="0") == 58
    assert get(s, "kafka_consumergroup_lag", **g, partition="0") == 42
    # Every readable partition of a topic the group committed on: -1 where it committed nothing,
    # counted in the offset sum (as kafka_exporter does) and not in the lag sum.
    assert get(s, "kafka_consumergroup_current_offset", **g, partition="1") == -1
    assert get(s, "kafka_consumergroup_lag", **g, partition="1") == -1
    assert get(s, "kafka_consumergroup_current_offset_sum", **g) == 57
    assert get(s, "kafka_consumergroup_lag_sum", **g) == 42
    # Partitions whose offsets were not read (no leader) are not asked for.
    assert get(s, "kafka_consumergroup_current_offset", **g, partition="2") is None


def test_groups_without_offsets_on_known_topics_have_members_only() -> None:
    s = samples(snapshot())
    for group in ("idle", "gone-topic", "no-leader"):
        assert get(s, "kafka_consumergroup_members", consumergroup=group) is not None
        assert not [k for k in s if k[0].startswith("kafka_consumergroup_") and k[0] != "kafka_consumergroup_members"
                    and ("consumergroup", group) in k[1]], group


def test_the_text_parses_with_kafka_exporter_names_and_help() -> None:
    text = render(snapshot()).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["kafka_consumergroup_lag"].documentation == \
        "Current Approximate Lag of a ConsumerGroup at Topic/Partition"
    assert {f.type for f in families.values()} == {"gauge"}
    assert set(families) == {
        "kafka_brokers", "kafka_broker_info", "kafka_topic_partitions", "kafka_topic_partition_current_offset",
        "kafka_topic_partition_oldest_offset", "kafka_topic_partition_leader", "kafka_topic_partition_replicas",
        "kafka_topic_partition_in_sync_replica", "kafka_topic_partition_leader_is_preferred",
        "kafka_topic_partition_under_replicated_partition", "kafka_consumergroup_members",
        "kafka_consumergroup_current_offset", "kafka_consumergroup_current_offset_sum", "kafka_consumergroup_lag",
        "kafka_consumergroup_lag_sum"}
    # A group id may hold any character; the label is escaped.
    odd = ClusterSnapshot([], {"t": [(0, 1, (1,), (1,))]}, {("t", 0): (5, 0)},
                          {'we"ird\\\n': GroupRow(0, {("t", 0): 1})})
    [lag] = [s for f in text_string_to_metric_families(render(odd).decode()) if f.name == "kafka_consumergroup_lag"
             for s in f.samples]
    assert lag.labels["consumergroup"] == 'we"ird\\\n' and lag.value == 4


class CountingView(ClusterView):
    """A view whose snapshot takes a while and counts how often it is read."""

    def __init__(self) -> None:
        self.reads = 0

    async def snapshot(self) -> ClusterSnapshot:
        self.reads += 1
        await asyncio.sleep(0.05)
        return snapshot()

    def close(self) -> None:
        pass


async def test_parallel_scrapes_share_one_snapshot_and_reuse_it_while_young() -> None:
    now = [0.0]
    view = CountingView()
    active = [True]
    series = ClusterSeries(view, lambda: active[0], max_age_s=1.0, clock=lambda: now[0])
    bodies = await asyncio.gather(*(series.text() for _ in range(5)))
    assert view.reads == 1 and len(set(bodies)) == 1 and b"kafka_consumergroup_lag_sum" in bodies[0]
    now[0] = 0.9
    await series.text()
    assert view.reads == 1
    now[0] = 1.1
    await series.text()
    assert view.reads == 2
    # A broker that is not (or no longer) the active controller serves none of them.
    active[0] = False
    assert await series.text() == b""
    assert view.reads == 2


def test_the_text_cache_rewrites_what_changed_and_pauses_in_large_snapshots() -> None:
    cache = TextCache()
    first = snapshot()
    assert cache.text(first) == cluster_text(first)
    # New offsets under the same metadata: the reused families and the new offsets.
    moved = snapshot()
    moved.offsets = {**moved.offsets, ("orders", 0): (120, 10)}
    assert cache.text(moved) == cluster_text(moved)
    assert get(samples(moved), "kafka_topic_partition_current_offset", topic="orders", partition="0") == 120
    # A group's lines follow the newest offsets of its topics, its commits and its members.
    assert get(samples(moved), "kafka_consumergroup_lag", consumergroup="billing", topic="orders", partition="0") == 62
    committed = snapshot()
    committed.offsets = moved.offsets
    committed.groups = {**committed.groups, "billing": GroupRow(3, {("orders", 0): 100, ("orders", 1): 40})}
    text = cache.text(committed)
    assert text == cluster_text(committed)
    assert 'kafka_consumergroup_lag{consumergroup="billing",topic="orders",partition="1"} 10\n' in text
    assert 'kafka_consumergroup_members{consumergroup="billing"} 3\n' in text
    assert cache.text(committed) == text
    # The ISR shrank: the metadata's families are written again.
    shrunk = snapshot()
    shrunk.topics = {**shrunk.topics, "orders": [(0, 1, (1, 2, 3), (1,)), *shrunk.topics["orders"][1:]]}
    text = cache.text(shrunk)
    assert text == cluster_text(shrunk)
    assert 'kafka_topic_partition_in_sync_replica{topic="orders",partition="0"} 1\n' in text
    # 2,000 partitions and 200 groups: the writer offers pauses all along, not only at its ends.
    big = ClusterSnapshot([(1, "h:1")], {f"t{i}": [(p, 1, (1,), (1,)) for p in range(10)] for i in range(200)},
                          {(f"t{i}", p): (5, 0) for i in range(200) for p in range(10)},
                          {f"g{i}": GroupRow(0, {(f"t{i}", 0): 1}) for i in range(200)})
    cache = TextCache()
    pieces = list(cache.pieces(big))
    pauses = [i for i, piece in enumerate(pieces) if piece is None]
    assert len(pauses) >= 2000 // 500 * 2 + 200 // 50
    assert "".join(p for p in pieces if p is not None) == cluster_text(big)
    # Unchanged, it is only compared, with fewer pauses; one topic's offsets moved are written again.
    assert 1 <= sum(piece is None for piece in cache.pieces(big)) < len(pauses)
    big.offsets = {**big.offsets, ("t7", 3): (9, 1)}
    assert cache.text(big) == cluster_text(big)


async def test_the_view_keeps_what_did_not_change_since_the_last_scrape() -> None:
    md = MetadataCache()
    md.brokers = {1: BrokerInfo(1, (EndPoint("PLAINTEXT", "h1", 9092),))}
    md.put_topic("orders", "", {i: PartitionInfo(i, 1, 0, [1], [1]) for i in range(3)})
    committed = {"billing": {("orders", 0): 5}, "audit": {("orders", 1): 7}}
    hw = [10]

    def groups() -> dict[str, GroupRow]:
        return {g: GroupRow(1, dict(offsets)) for g, offsets in committed.items()}

    async def connect(broker_id: int) -> Any:
        raise AssertionError("a broker alone asks no other broker")

    view = ClusterView(LocalState(1, "PLAINTEXT", md, lambda t, p: (hw[0], 0), groups, connect))
    first = await view.snapshot()
    assert first.topics == {"orders": [(0, 1, (1,), (1,)), (1, 1, (1,), (1,)), (2, 1, (1,), (1,))]}
    hw[0] = 12
    committed["audit"] = {("orders", 1): 9}
    second = await view.snapshot()
    # The same metadata: the same rows (not copies); offsets are read again.
    assert second.topics is first.topics and second.offsets[("orders", 0)] == (12, 0)
    # An unchanged group keeps its row; a moved one has a new row.
    assert second.groups["billing"] is first.groups["billing"]
    assert second.groups["audit"] == GroupRow(1, {("orders", 1): 9})
    # A change of the metadata is copied again.
    md.put_topic("orders", "", {0: PartitionInfo(0, 1, 1, [1], [])})
    third = await view.snapshot()
    assert third.topics == {"orders": [(0, 1, (1,), ())]} and third.offsets == {("orders", 0): (12, 0)}
