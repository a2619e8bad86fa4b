"""kafka_exporter's series (danielqsj/kafka_exporter 1.7) computed from a snapshot of the cluster.

kafka_exporter runs beside a Kafka cluster, reads its metadata, the offsets of every partition
and the groups of every coordinator over the Kafka protocol, and serves:

==================================================================  ============================================
series                                                              value
==================================================================  ============================================
``kafka_brokers``                                                   brokers in the metadata
``kafka_broker_info{id,address}``                                   1 per broker
``kafka_topic_partitions{topic}``                                   partitions of the topic
``kafka_topic_partition_current_offset{topic,partition}``           high watermark (ListOffsets latest)
``kafka_topic_partition_oldest_offset{topic,partition}``            log start offset (ListOffsets earliest)
``kafka_topic_partition_leader{topic,partition}``                   leader's broker id
``kafka_topic_partition_replicas{topic,partition}``                 number of assigned replicas
``kafka_topic_partition_in_sync_replica{topic,partition}``          number of replicas in the ISR
``kafka_topic_partition_leader_is_preferred{topic,partition}``      1 when the leader is the first replica
``kafka_topic_partition_under_replicated_partition{topic,partition}``  1 when the ISR is smaller than the replicas
``kafka_consumergroup_members{consumergroup}``                      members of the group
``kafka_consumergroup_current_offset{consumergroup,topic,partition}``  committed offset (-1: none)
``kafka_consumergroup_current_offset_sum{consumergroup,topic}``     sum of those (its -1s included, as there)
``kafka_consumergroup_lag{consumergroup,topic,partition}``          high watermark - committed (-1: none committed)
``kafka_consumergroup_lag_sum{consumergroup,topic}``                sum of the lags of committed partitions
==================================================================  ============================================

Its choices are kept, since dashboards and alerts are written against them: every topic is
listed, internal ones included; a partition without a leader (or whose offsets could not be
read) has no leader and no offset series, and its group offsets are not asked for; a group's
offsets are shown for every partition of each topic it committed any offset on (the
``--offset.show-all`` default), others not at all. This module only computes; what the cluster
holds is gathered by kaflet/metrics/cluster_view.py.

The text is written here rather than by prometheus_client's writer: at 10,000 partitions and
1,000 groups a scrape has ~100,000 of these samples, which its families and writer take ~30 us
each to make and write (3 s), and plain string formatting ~1 us.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

#: One partition as the metadata says: (partition, leader (-1: none), replicas, ISR). A plain tuple
#: of numbers and tuples of numbers, which the garbage collector stops tracking at its first look
#: (a NamedTuple's instances it tracks for ever, and the view keeps 10,000 of them between
#: scrapes: see cluster_view.py's ClusterView for why that matters); sorted, rows sort by partition.
PartitionRow = tuple[int, int, tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One group as its coordinator answered: its members and committed offsets."""

    members: int
    committed: Mapping[tuple[str, int], int]


@dataclass(slots=True)
class ClusterSnapshot:
    """What the series are computed from, read at one scrape."""

    #: (broker id, host:port) of each live broker.
    brokers: Sequence[tuple[int, str]]
    #: Every topic's partitions.
    topics: Mapping[str, Sequence[PartitionRow]]
    #: (newest, oldest) offsets of the partitions whose leader answered.
    offsets: Mapping[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    #: The groups of the coordinators that answered.
    groups: Mapping[str, GroupRow] = field(default_factory=dict)


#: name -> help, kafka_exporter's words.
HELP = {
    "kafka_brokers": "Number of Brokers in the Kafka Cluster.",
    "kafka_broker_info": "Information about the Kafka Broker.",
    "kafka_topic_partitions": "Number of partitions for this Topic",
    "kafka_topic_partition_current_offset": "Current Offset of a Broker at Topic/Partition",
    "kafka_topic_partition_oldest_offset": "Oldest Offset of a Broker at Topic/Partition",
    "kafka_topic_partition_leader": "Leader Broker ID of this Topic/Partition",
    "kafka_topic_partition_replicas": "Number of Replicas for this Topic/Partition",
    "kafka_topic_partition_in_sync_replica": "Number of In-Sync Replicas for this Topic/Partition",
    "kafka_topic_partition_leader_is_preferred": "1 if Topic/Partition is using the Preferred Broker",
    "kafka_topic_partition_under_replicated_partition": "1 if Topic/Partition is under Replicated",
    "kafka_consumergroup_members": "Amount of members in a consumer group",
    "kafka_consumergroup_current_offset": "Current Offset of a ConsumerGroup at Topic/Partition",
    "kafka_consumergroup_current_offset_sum": "Current Offset of a ConsumerGroup at Topic for all partitions",
    "kafka_consumergroup_lag": "Current Approximate Lag of a ConsumerGroup at Topic/Partition",
    "kafka_consumergroup_lag_sum": "Current Approximate Lag of a ConsumerGroup at Topic for all partitions",
}


#: Rows (partitions) and groups written between two pauses of `TextCache.pieces` (~5 ms of work).
ROWS_PER_PAUSE = 500
GROUPS_PER_PAUSE = 50


def _label(value: str) -> str:
    """A label value as the text format escapes it (topic names never need it; group ids may)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _family(name: str, lines: list[str]) -> str:
    return f"# HELP {name} {HELP[name]}\n# TYPE {name} gauge\n" + "".join(lines)


def cluster_text(snap: ClusterSnapshot) -> str:
    """kafka_exporter's series for `snap` in Prometheus' text format, its names, labels, help and meanings."""
    return TextCache().text(snap)


class TextCache:
    """Writes the text of successive snapshots, reusing the families that depend only on the
    partitions' metadata (partition count, leader, replicas, ISR, preferred leader, under-
    replicated: 60,000 of the 94,000 lines at 10,000 partitions) while it has not changed, as it
    mostly has not from one scrape to the next. Not thread-safe: one writer at a time."""

    def __init__(self) -> None:
        self._topics: Mapping[str, Sequence[PartitionRow]] | None = None
        self._metadata: tuple[str, str] = ("", "")

    def text(self, snap: ClusterSnapshot) -> str:
        """The exposition text of `snap`."""
        return "".join(piece for piece in self.pieces(snap) if piece is not None)

    def pieces(self, snap: ClusterSnapshot) -> Iterator[str | None]:
        """The text of `snap` in pieces, with a None after every ``ROWS_PER_PAUSE`` rows where the
        caller may pause (the broker hands its event loop back there)."""
        # The view hands the same mapping back while the metadata is unchanged (`is`: no compare).
        if self._topics is not snap.topics and (self._topics is None or self._topics != snap.topics):
            metadata = yield from _metadata_families(snap.topics)
            self._metadata, self._topics = metadata, snap.topics
        partitions, rest = self._metadata
        yield from _broker_lines(snap)
        yield partitions
        yield from _offset_lines(snap)
        yield rest
        yield from _group_lines(snap)


def _broker_lines(snap: ClusterSnapshot) -> Iterator[str]:
    yield _family("kafka_brokers", [f"kafka_brokers {len(snap.brokers)}\n"])
    yield _family("kafka_broker_info", [f'kafka_broker_info{{id="{broker_id}",address="{_label(address)}"}} 1\n'
                                             for broker_id, address in sorted(snap.brokers)])


def _offset_lines(snap: ClusterSnapshot) -> Iterator[str | None]:
    current: list[str] = []
    oldest: list[str] = []
    offsets = snap.offsets
    for topic in sorted(snap.topics):
        if len(current) % ROWS_PER_PAUSE < len(snap.topics[topic]):
            yield None
        for row in sorted(snap.topics[topic]):
            partition = row[0]
            got = offsets.get((topic, partition))
            if got is not None:
                labels = f'{{topic="{topic}",partition="{partition}"}}'
                current.append(f"kafka_topic_partition_current_offset{labels} {got[0]}\n")
                oldest.append(f"kafka_topic_partition_oldest_offset{labels} {got[1]}\n")
    yield _family("kafka_topic_partition_current_offset", current)
    yield _family("kafka_topic_partition_oldest_offset", oldest)


def _metadata_families(topics: Mapping[str, Sequence[PartitionRow]]) -> Generator[None, None, tuple[str, str]]:
    """(kafka_topic_partitions, the per-partition metadata families), as text; pauses (None)
    between topics every ``ROWS_PER_PAUSE`` partitions."""
    partitions: list[str] = []
    leader: list[str] = []
    replicas: list[str] = []
    isr: list[str] = []
    preferred: list[str] = []
    under: list[str] = []
    for topic in sorted(topics):
        rows = topics[topic]
        if len(replicas) % ROWS_PER_PAUSE < len(rows):
            yield None
        partitions.append(f'kafka_topic_partitions{{topic="{topic}"}} {len(rows)}\n')
        # Rows sort by partition first (tuples): no key function to call.
        for partition, leader_id, assigned, in_sync in sorted(rows):
            labels = f'{{topic="{topic}",partition="{partition}"}}'
            has_leader = leader_id >= 0
            if has_leader:
                leader.append(f"kafka_topic_partition_leader{labels} {leader_id}\n")
            replicas.append(f"kafka_topic_partition_replicas{labels} {len(assigned)}\n")
            isr.append(f"kafka_topic_partition_in_sync_replica{labels} {len(in_sync)}\n")
            is_preferred = has_leader and bool(assigned) and assigned[0] == leader_id
            preferred.append(f"kafka_topic_partition_leader_is_preferred{labels} {int(is_preferred)}\n")
            under.append(f"kafka_topic_partition_under_replicated_partition{labels} "
                         f"{int(len(in_sync) < len(assigned))}\n")
    rest = [_family("kafka_topic_partition_leader", leader),
            _family("kafka_topic_partition_replicas", replicas),
            _family("kafka_topic_partition_in_sync_replica", isr),
            _family("kafka_topic_partition_leader_is_preferred", preferred),
            _family("kafka_topic_partition_under_replicated_partition", under)]
    return _family("kafka_topic_partitions", partitions), "".join(rest)


def _group_lines(snap: ClusterSnapshot) -> Iterator[str | None]:
    members: list[str] = []
    current: list[str] = []
    current_sum: list[str] = []
    lag: list[str] = []
    lag_sum: list[str] = []
    # kafka_exporter asks a group's offsets of the partitions whose newest offset it read.
    by_topic: dict[str, list[int]] = {}
    for (topic, partition) in snap.offsets:
        if topic in snap.topics:
            by_topic.setdefault(topic, []).append(partition)
    # Tuples of numbers, which the garbage collector stops tracking at its first look: these
    # live through the pauses below, and 1,000 lists a scrape were promoted to its oldest
    # generation (see cluster_view.py's ClusterView).
    readable = {topic: tuple(sorted(indexes)) for topic, indexes in by_topic.items()}
    del by_topic
    for group_id in sorted(snap.groups):
        group = snap.groups[group_id]
        if len(members) % GROUPS_PER_PAUSE == 0:
            yield None
        g = _label(group_id)
        members.append(f'kafka_consumergroup_members{{consumergroup="{g}"}} {group.members}\n')
        for topic in sorted({t for t, _ in group.committed}):
            if topic not in readable:
                continue
            committed = [(p, group.committed.get((topic, p), -1)) for p in readable[topic]]
            if all(offset == -1 for _, offset in committed):
                continue
            offset_total = lag_total = 0
            for partition, offset in committed:
                labels = f'{{consumergroup="{g}",topic="{topic}",partition="{partition}"}}'
                # As kafka_exporter: the sum counts the -1 of a partition without a commit.
                offset_total += offset
                current.append(f"kafka_consumergroup_current_offset{labels} {offset}\n")
                if offset == -1:
                    lag.append(f"kafka_consumergroup_lag{labels} -1\n")
                else:
                    behind = snap.offsets[(topic, partition)][0] - offset
                    lag_total += behind
                    lag.append(f"kafka_consumergroup_lag{labels} {behind}\n")
            labels = f'{{consumergroup="{g}",topic="{topic}"}}'
            current_sum.append(f"kafka_consumergroup_current_offset_sum{labels} {offset_total}\n")
            lag_sum.append(f"kafka_consumergroup_lag_sum{labels} {lag_total}\n")
    yield _family("kafka_consumergroup_members", members)
    yield _family("kafka_consumergroup_current_offset", current)
    yield _family("kafka_consumergroup_current_offset_sum", current_sum)
    yield _family("kafka_consumergroup_lag", lag)
    yield _family("kafka_consumergroup_lag_sum", lag_sum)
