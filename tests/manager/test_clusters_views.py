"""The pure parts of the cluster views: session-report rows and the per-topic connections view,
message rates from high-watermark samples, and the SVG line chart."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from kaflet.manager.charts import PALETTE, line_chart, nice_ticks, time_ticks
from kaflet.manager.cluster_console import name_filter, page_number, paged
from kaflet.manager.clusters import (
    BrokerInfo,
    ClusterOverview,
    LogDirInfo,
    PartitionInfo,
    PartitionLag,
    TopicInfo,
    log_dirs_from_answers,
    replica_sizes_from_log_dirs,
    sizes_from_log_dirs,
)
from kaflet.manager.sampling import ClusterSnapshot, MessageRates
from kaflet.manager.services import InvalidInput
from kaflet.manager.topic_connections import (
    CONNECTION_WINDOW_MS,
    ConnectionRow,
    connections_by_topic,
    rows_from_heartbeat,
)

SVG = "{http://www.w3.org/2000/svg}"

# -- session reports --------------------------------------------------------------------------


def test_heartbeat_body_becomes_one_row_per_connection() -> None:
    body = {"produce": {"orders": ["app_a#10.0.0.5#2.8#billing", "app_a#10.0.0.5#2.8#billing",
                                   "app_b#10.0.0.6#3.7"]},
            "fetch": {"orders": ["app_c#10.0.0.7#2.7#reader-1", "garbage", "a#b"]}}
    rows = rows_from_heartbeat(body, 7, 1_000)
    assert sorted(rows, key=lambda r: r.key) == [
        ConnectionRow("app_a", 7, "orders", "produce", "10.0.0.5", "2.8", 1_000, "billing"),
        ConnectionRow("app_b", 7, "orders", "produce", "10.0.0.6", "3.7", 1_000, None),
        ConnectionRow("app_c", 7, "orders", "fetch", "10.0.0.7", "2.7", 1_000, "reader-1"),
    ]
    assert rows_from_heartbeat({}, 7, 1) == [] and rows_from_heartbeat(None, 7, 1) == []


@pytest.mark.parametrize("body", [[], "produce", {"produce": ["t"]}, {"produce": {"t": "a#b#c"}},
                                  {"produce": {"t": [1, 2]}}, {"fetch": None}])
def test_malformed_heartbeat_bodies_are_refused(body: object) -> None:
    with pytest.raises(ValueError):
        rows_from_heartbeat(body, 1, 1)


def test_connections_view_keeps_live_rows_drops_brokers_and_unknown_duplicates() -> None:
    now = 10 * CONNECTION_WINDOW_MS
    rows = [
        ConnectionRow("app_a", 1, "orders", "produce", "10.0.0.5", "2.8", now - 1_000, "p"),
        # The same client also reported before its version was known: the known one wins.
        ConnectionRow("app_a", 1, "orders", "produce", "10.0.0.5", "unknown", now - 2_000),
        # A client seen only without a version stays.
        ConnectionRow("app_b", 1, "orders", "fetch", "10.0.0.6", "unknown", now - 3_000),
        # Too old: gone.
        ConnectionRow("app_c", 1, "orders", "fetch", "10.0.0.7", "2.8", now - CONNECTION_WINDOW_MS - 1),
        # A broker's own address (replica traffic): left out.
        ConnectionRow("ANONYMOUS", 1, "audit", "fetch", "10.0.0.1", "2.8", now),
        ConnectionRow("app_d", 1, "audit", "fetch", "10.0.0.8", "3.1", now),
    ]
    view = connections_by_topic(rows, now, exclude_hosts=["10.0.0.1"])
    assert list(view) == ["audit", "orders"]
    assert [(c.app_id, c.role, c.ip, c.client_version) for c in view["orders"]] == [
        ("app_b", "consumer", "10.0.0.6", "unknown"),
        ("app_a", "producer", "10.0.0.5", "2.8"),
    ]
    assert view["orders"][1].client_id == "p" and view["orders"][1].last_seen_ms == now - 1_000
    assert [c.app_id for c in view["audit"]] == ["app_d"]
    assert connections_by_topic(rows, now + 2 * CONNECTION_WINDOW_MS) == {}


# -- records ---------------------------------------------------------------------------------


def test_topic_and_lag_records_derive_their_figures() -> None:
    t = TopicInfo("t", False, (PartitionInfo(0, 1, (1, 2, 3), (1, 2, 3), 100),
                               PartitionInfo(1, None, (2, 3), (), 50),
                               PartitionInfo(2, 3, (3, 1), (3,), 0)))
    assert (t.partition_count, t.replication_factor, t.under_replicated, t.offline, t.size_bytes) == (3, 3, 2, 1, 150)
    assert TopicInfo("u", False, (PartitionInfo(0, 1, (1,), (1,), None),)).size_bytes is None
    assert PartitionLag("t", 0, 5, 12, None).lag == 7
    assert PartitionLag("t", 0, None, 12, None).lag is None
    # A committed offset past the end (the log was truncated) is no negative lag.
    assert PartitionLag("t", 0, 20, 12, None).lag == 0


def test_sizes_sum_replicas_from_describe_log_dirs_answers() -> None:
    """The answers in the shape kafka-python's describe_log_dirs() gives them, built from its
    own DescribeLogDirsResponse classes."""
    from kafka.protocol.admin import DescribeLogDirsResponse as R

    Topic = R.DescribeLogDirsResult.DescribeLogDirsTopic
    Part = Topic.DescribeLogDirsPartition

    def result(log_dir: str, topics: dict[str, list[tuple[int, int, bool]]], error: int = 0) -> dict:  # type: ignore[type-arg]
        return R.DescribeLogDirsResult(error_code=error, log_dir=log_dir, topics=[
            Topic(name=t, partitions=[Part(partition_index=p, partition_size=size, offset_lag=0, is_future_key=fut)
                                      for p, size, fut in parts]) for t, parts in topics.items()]).to_dict()

    answers = [
        {"broker": 1, "log_dirs": [result("/a", {"t": [(0, 100, False), (1, 50, False)]}),
                                   result("/b", {"t": [(1, 999, True)]}),          # a future log
                                   result("/c", {"u": [(0, 7, False)]}, error=56)]},  # offline dir
        {"broker": 2, "log_dirs": [result("/a", {"t": [(0, 101, False)], "u": [(0, 3, False)]})]},
    ]
    assert replica_sizes_from_log_dirs(answers) == {("t", 0): {1: 100, 2: 101}, ("t", 1): {1: 50}, ("u", 0): {2: 3}}
    assert sizes_from_log_dirs(answers) == {("t", 0): 201, ("t", 1): 50, ("u", 0): 3}
    assert sizes_from_log_dirs([]) == {}
    # The log dirs themselves; -1 (not told, as before v4) is unknown; an offline dir names its error.
    answers[1]["log_dirs"][0].update(total_bytes=1000, usable_bytes=400)
    assert log_dirs_from_answers(answers) == {
        1: (LogDirInfo("/a", None, None, None), LogDirInfo("/b", None, None, None),
            LogDirInfo("/c", "KAFKA_STORAGE_ERROR", None, None)),
        2: (LogDirInfo("/a", None, 1000, 400),)}


# -- message rates --------------------------------------------------------------------------


def test_rates_are_differences_of_summed_high_watermarks() -> None:
    rates = MessageRates(capacity=3)
    rates.record(100.0, {("a", 0): 0, ("a", 1): 0, ("b", 0): 10})
    assert rates.series("a") == [] and rates.latest("a") is None
    rates.record(110.0, {("a", 0): 50, ("a", 1): 50, ("b", 0): 10})
    rates.record(120.0, {("a", 0): 60, ("a", 1): 90, ("b", 0): 30})
    assert rates.series("a") == [(110.0, 10.0), (120.0, 5.0)]
    assert rates.series("b") == [(110.0, 0.0), (120.0, 2.0)]
    # The ring keeps the last 3 samples only.
    rates.record(130.0, {("a", 0): 60, ("a", 1): 90, ("b", 0): 30})
    assert rates.series("a") == [(120.0, 5.0), (130.0, 0.0)]
    assert rates.latest("a") == 0.0


def test_rates_survive_missing_partitions_deleted_and_recreated_topics() -> None:
    rates = MessageRates()
    rates.record(0.0, {("a", 0): 100, ("a", 1): 100}, {"a": 2, "b": 1})
    # Partition 1's leader did not answer: its last offset stands in, so no false dip.
    rates.record(10.0, {("a", 0): 200}, {"a": 2, "b": 1})
    assert rates.series("a") == [(10.0, 10.0)]
    # "b" had no answer at all yet: it counts from 0.
    assert rates.series("b") == [(10.0, 0.0)]
    # "a" deleted and created again: offsets restart, the old ring is dropped.
    rates.record(20.0, {("a", 0): 5, ("a", 1): 0}, {"a": 2})
    assert rates.series("a") == [] and rates.topics() == ["a"]
    rates.record(30.0, {("a", 0): 25, ("a", 1): 0}, {"a": 2})
    assert rates.series("a") == [(30.0, 2.0)]
    with pytest.raises(ValueError):
        MessageRates(capacity=1)


# -- charts ----------------------------------------------------------------------------------


def test_nice_ticks_cover_the_range_with_round_steps() -> None:
    assert nice_ticks(0, 97) == [0, 20, 40, 60, 80, 100]
    assert nice_ticks(0, 0.37) == [0, 0.1, 0.2, 0.3, 0.4]
    assert nice_ticks(5, 5) == [5, 5.2, 5.4, 5.6, 5.8, 6]
    assert time_ticks(1000, 1300) == [1020.0, 1080.0, 1140.0, 1200.0, 1260.0]


def test_line_chart_is_valid_svg_with_a_line_per_series_and_escaped_names() -> None:
    a = [(1_700_000_000.0 + 10 * i, float(i * i)) for i in range(30)]
    b = [(1_700_000_000.0 + 10 * i, 5.0) for i in range(30)]
    svg = line_chart({"<orders & co>": a, "audit": b}, title='rate of "orders"', unit="msg/s")
    root = ET.fromstring(svg)  # raises on anything not well-formed
    assert root.tag == SVG + "svg"
    lines = root.findall(f"{SVG}polyline")
    assert [ln.get("stroke") for ln in lines] == [PALETTE[0], PALETTE[1]]
    assert lines[0].find(f"{SVG}title").text == "<orders & co>"  # type: ignore[union-attr]
    pts = [tuple(map(float, p.split(","))) for p in lines[0].get("points", "").split()]
    assert len(pts) == 30
    xs = [x for x, _ in pts]
    ys = [y for _, y in pts]
    assert xs == sorted(xs) and len(set(xs)) == 30
    assert ys == sorted(ys, reverse=True)  # growing values go up (smaller y)
    assert all(0 <= x <= 640 for x in xs) and all(0 <= y <= 240 for y in ys)
    # The flat series sits on one height.
    assert len({p.split(",")[1] for p in lines[1].get("points", "").split()}) == 1
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert 'rate of "orders"' in texts and "msg/s (UTC)" in texts
    assert any(re.fullmatch(r"\d\d:\d\d(:\d\d)?", t or "") for t in texts)


def test_line_chart_legend_shortens_long_names_and_stays_inside() -> None:
    pts = [(1_700_000_000.0 + i, 1.0) for i in range(3)]
    series = {f"topic-with-a-rather-long-name-{i}": pts for i in range(6)}
    root = ET.fromstring(line_chart(series, width=640))
    legend = [t for t in root.iter(f"{SVG}text") if (t.text or "").startswith("topic-with")]
    assert legend and all(len(t.text or "") <= 24 for t in legend)
    assert all(float(t.get("x", "0")) >= 64 for t in legend)
    assert len(root.findall(f"{SVG}polyline")) == 6


def test_line_chart_without_points_says_so_and_rejects_tiny_sizes() -> None:
    root = ET.fromstring(line_chart({"t": []}, title="t"))
    assert "no data yet" in [t.text for t in root.iter(f"{SVG}text")]
    one = ET.fromstring(line_chart({"t": [(1_700_000_000.0, float("nan")), (1_700_000_000.0, 3.0)]}))
    assert len(one.findall(f"{SVG}circle")) == 1
    with pytest.raises(ValueError):
        line_chart({"t": []}, width=20, height=20)


# -- broker totals ------------------------------------------------------------------------------


def test_broker_sizes_sum_the_replicas_each_broker_holds() -> None:
    brokers = tuple(BrokerInfo(i, "h", 9092, None, i == 1, True) for i in (1, 2, 3))
    parts = (PartitionInfo(0, 1, (1, 2), (1, 2), 30, ((1, 10), (2, 20))),
             PartitionInfo(1, 2, (2, 1), (2,), 5, ((2, 5),)))  # broker 1 did not answer for it
    topics = {"t": TopicInfo("t", False, parts)}
    snap = ClusterSnapshot(0.0, 0.1, ClusterOverview("c", 1, brokers), topics, (), None)
    assert snap.broker_sizes() == {1: 10, 2: 25, 3: 0}
    assert parts[0].replica_size(2) == 20 and parts[1].replica_size(1) is None
    unknown = ClusterSnapshot(0.0, 0.1, ClusterOverview("c", 1, brokers), topics, (), "DescribeLogDirs: refused")
    assert unknown.broker_sizes() is None


# -- paging of the cluster page's lists -----------------------------------------------------------


@pytest.mark.parametrize("text", ["-1", "0", "+0", "000", "abc", "1.5", "1e3", "٣", " - 2"])
def test_page_numbers_other_than_whole_numbers_from_1_are_refused(text: str) -> None:
    with pytest.raises(InvalidInput, match="page must be a whole number from 1"):
        page_number(text, "page")


def test_page_numbers_default_to_1_and_huge_ones_stay_numbers() -> None:
    assert [page_number(t, "page") for t in ("", None, " 7 ", "+3")] == [1, 1, 7, 3]
    assert page_number("9" * 5000, "page") >= 10**18  # paged() shows the last page for it


def test_name_filters_are_bounded() -> None:
    assert name_filter("  ab ", "topic", 249) == "ab"
    with pytest.raises(InvalidInput, match="250 characters long; at most 249"):
        name_filter("x" * 250, "topic", 249)


def test_pages_hold_100_rows_and_link_to_nearby_pages_with_gaps() -> None:
    items = list(range(1050))  # 11 pages
    page = paged(items, 6, lambda n: f"?page={n}")
    assert (page.rows[0], page.rows[-1], page.first, page.last, page.pages, page.total) == (500, 599, 501, 600, 11, 1050)
    assert page.links == [("previous", "?page=5"), ("1", "?page=1"), ("…", None), ("4", "?page=4"),
                          ("5", "?page=5"), ("6", None), ("7", "?page=7"), ("8", "?page=8"), ("…", None),
                          ("11", "?page=11"), ("next", "?page=7")]
    last = paged(items, 10**18, lambda n: f"?page={n}")
    assert (last.number, last.rows, last.first, last.last) == (11, list(range(1000, 1050)), 1001, 1050)
    assert paged(items[:100], 1, str).links == []  # one page: no links
    empty = paged([], 3, str)
    assert (empty.number, empty.pages, empty.first, empty.last, empty.links) == (1, 1, 0, 0, [])
