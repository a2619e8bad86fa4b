"""`kaflet top`'s arithmetic: rates from two samples, replication problems, lag per group."""

from __future__ import annotations

from kaflet.cli.top_sample import Broker, PartitionState, Sample, view

OK = PartitionState(1, (1, 2), (1, 2))


def sample(at: float, ends: dict[tuple[str, int], int], groups: dict[str, dict[tuple[str, int], int]],
           partitions: dict[tuple[str, int], PartitionState] | None = None) -> Sample:
    parts = partitions or dict.fromkeys(ends, OK)
    return Sample(at, [Broker(1, "h", 9092, None), Broker(2, "h", 9093, "r2")], 1, parts, ends,
                  {g: ("Empty", c) for g, c in groups.items()})


def test_rates_come_from_growth_over_the_time_between_samples() -> None:
    before = sample(10.0, {("a", 0): 100, ("a", 1): 50, ("b", 0): 7}, {"g": {("a", 0): 10}})
    # a-1 went back (truncated): no traffic rather than a negative rate.
    after = sample(12.0, {("a", 0): 140, ("a", 1): 40, ("b", 0): 7}, {"g": {("a", 0): 30}, "new": {("b", 0): 3}})
    v = view(before, after)
    rates = {t.topic: (t.partitions, t.in_rate, t.out_rate) for t in v.topics}
    assert rates == {"a": (2, 20.0, 10.0), "b": (1, 0.0, 0.0)}
    assert [t.topic for t in v.topics] == ["a", "b"]  # busiest first
    assert [(g.group, g.lag, g.partitions) for g in v.groups] == [("g", 110, 1), ("new", 4, 1)]


def test_first_frame_has_no_rates_and_internal_topics_are_left_out() -> None:
    cur = sample(1.0, {("t", 0): 5, ("__consumer_offsets", 0): 9}, {})
    v = view(None, cur)
    assert [(t.topic, t.in_rate, t.out_rate) for t in v.topics] == [("t", None, None)]
    assert v.total_partitions == 2


def test_under_replicated_and_offline_partitions() -> None:
    parts = {("t", 0): OK, ("t", 1): PartitionState(2, (1, 2, 3), (2,)), ("t", 2): PartitionState(-1, (3,), ())}
    v = view(None, sample(1.0, {("t", 0): 0, ("t", 1): 0}, {}, parts))
    assert [tp for tp, _ in v.under_replicated] == [("t", 1)]
    assert [tp for tp, _ in v.offline] == [("t", 2)]
