"""What `kaflet top` shows, read from a cluster and compared between two refreshes.

One ``Sample`` is what the cluster says at one moment (DescribeCluster, Metadata, ListOffsets
of every partition's end, each consumer group's committed offsets); a ``View`` is two samples
turned into rates (offsets' growth over the time between them), replication problems and lag.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TypeVar

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from kaflet.cli.common import Admin

Partition = tuple[str, int]
T = TypeVar("T")


@dataclass(frozen=True)
class Broker:
    """One broker as DescribeCluster names it."""

    id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True)
class PartitionState:
    """Leader (-1: offline), replicas and in-sync replicas of one partition."""

    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass
class Sample:
    """The cluster at one moment (``at``: time.monotonic())."""

    at: float
    brokers: list[Broker]
    controller: int | None
    partitions: dict[Partition, PartitionState]
    end_offsets: dict[Partition, int]
    #: group id -> its state name and its committed offsets.
    groups: dict[str, tuple[str, dict[Partition, int]]] = field(default_factory=dict)


def collect(admin: Admin) -> Sample:
    """Read one Sample; a cluster that does not answer is a CliError."""
    cluster = admin.result(admin.client.describe_cluster(request_timeout=admin.timeout_s), what="DescribeCluster")
    brokers = sorted((Broker(n.id, n.host, n.port, n.rack) for n in cluster.nodes), key=lambda b: b.id)
    controller = cluster.controller.id if cluster.controller is not None else None
    meta = admin.metadata()
    partitions = {(name, p.id): PartitionState(p.leader, tuple(p.replicas), tuple(p.isrs))
                  for name, t in meta.topics.items() if t.error is None for p in t.partitions.values()}
    # An offline partition has no leader to answer ListOffsets: asking would only fail.
    online = [tp for tp, st in partitions.items() if st.leader >= 0]
    end_offsets = _offsets(admin, online)
    groups = _groups(admin)
    return Sample(time.monotonic(), brokers, controller, partitions, end_offsets, groups)


def _settled(admin: Admin, future: Future[T]) -> T | None:
    """A future's result, or None when that one item failed: one partition or group that cannot
    answer right now must not blank out the rest of the screen."""
    try:
        return future.result(timeout=admin.timeout_s + 5)
    except (KafkaException, TimeoutError):
        return None


def _offsets(admin: Admin, parts: list[Partition]) -> dict[Partition, int]:
    """The end offset (high watermark) of each partition that answered."""
    if not parts:
        return {}
    futures = admin.client.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in parts},
                                        request_timeout=admin.timeout_s)
    out: dict[Partition, int] = {}
    for tp, fut in futures.items():
        res = _settled(admin, fut)
        if res is not None and res.offset >= 0:
            out[(tp.topic, tp.partition)] = res.offset
    return out


def _groups(admin: Admin) -> dict[str, tuple[str, dict[Partition, int]]]:
    """Every consumer group's state and committed offsets (OffsetFetch, one request per group)."""
    listed = admin.result(admin.client.list_consumer_groups(request_timeout=admin.timeout_s),
                          what="ListGroups")
    states = {g.group_id: g.state.name.title() if g.state is not None else "" for g in listed.valid}
    # librdkafka takes one group per call; sending them all before waiting overlaps the round trips.
    futures = {g: admin.client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)],
                                                           request_timeout=admin.timeout_s)[g]
               for g in sorted(states)}
    out: dict[str, tuple[str, dict[Partition, int]]] = {}
    for group, fut in futures.items():
        res = _settled(admin, fut)
        committed = {(tp.topic, tp.partition): tp.offset for tp in (res.topic_partitions or []) if tp.offset >= 0} \
            if res is not None else {}
        out[group] = (states[group], committed)
    return out


@dataclass(frozen=True)
class TopicRate:
    """Records per second into a topic (its end offsets' growth) and out of it (committed offsets')."""

    topic: str
    partitions: int
    in_rate: float | None
    out_rate: float | None


@dataclass(frozen=True)
class GroupLag:
    """A consumer group's total lag over the partitions it has committed offsets for."""

    group: str
    state: str
    lag: int
    partitions: int


@dataclass
class View:
    """What one frame of `kaflet top` shows."""

    brokers: list[Broker]
    controller: int | None
    topics: list[TopicRate]
    under_replicated: list[tuple[Partition, PartitionState]]
    offline: list[tuple[Partition, PartitionState]]
    groups: list[GroupLag]
    total_partitions: int


def _growth(before: dict[Partition, int], after: dict[Partition, int]) -> dict[str, int]:
    """Per topic, how far the offsets of the partitions seen both times moved forward."""
    out: dict[str, int] = {}
    for tp, now in after.items():
        then = before.get(tp)
        if then is not None:
            # A partition that went back (truncated, offsets reset) counts as no traffic, not negative.
            out[tp[0]] = out.get(tp[0], 0) + max(now - then, 0)
    return out


def view(prev: Sample | None, cur: Sample, *, internal: bool = False) -> View:
    """The frame for ``cur``; rates need ``prev`` (None on the first frame: no rates yet)."""
    counts: dict[str, int] = {}
    for topic, _ in cur.partitions:
        counts[topic] = counts.get(topic, 0) + 1
    elapsed = cur.at - prev.at if prev is not None else 0.0
    produced = _growth(prev.end_offsets, cur.end_offsets) if prev is not None else {}
    consumed: dict[str, int] = {}
    if prev is not None:
        for group, (_, committed) in cur.groups.items():
            before = prev.groups.get(group, ("", {}))[1]
            for topic, n in _growth(before, committed).items():
                consumed[topic] = consumed.get(topic, 0) + n

    def rate(moved: dict[str, int], topic: str) -> float | None:
        return moved.get(topic, 0) / elapsed if elapsed > 0 else None

    topics = [TopicRate(t, n, rate(produced, t), rate(consumed, t)) for t, n in counts.items()
              if internal or not t.startswith("__")]
    topics.sort(key=lambda r: (-(r.in_rate or 0.0), -(r.out_rate or 0.0), r.topic))
    ordered = sorted(cur.partitions.items())
    offline = [(tp, st) for tp, st in ordered if st.leader < 0]
    under = [(tp, st) for tp, st in ordered if st.leader >= 0 and len(st.isr) < len(st.replicas)]
    lags = []
    for group, (state, committed) in cur.groups.items():
        lag = sum(max(cur.end_offsets[tp] - off, 0) for tp, off in committed.items() if tp in cur.end_offsets)
        lags.append(GroupLag(group, state, lag, len(committed)))
    lags.sort(key=lambda g: (-g.lag, g.group))
    return View(cur.brokers, cur.controller, topics, under, offline, lags, len(cur.partitions))
