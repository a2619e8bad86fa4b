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


#: Rows (partitions) and groups written between two places where `TextCache.pieces` may pause
#: (~0.5 ms of work on an idle core; the caller pauses there once its time slice is used up).
ROWS_PER_PAUSE = 50
GROUPS_PER_PAUSE = 5
#: What writing a row or group costs, in rows or groups only compared with the last scrape's.
_REWRITE = 5


def _label(value: str) -> str:
    """A label value as the text format escapes it (topic names never need it; group ids may)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _family(name: str, lines: list[str]) -> str:
    return f"# HELP {name} {HELP[name]}\n# TYPE {name} gauge\n" + "".join(lines)


def cluster_text(snap: ClusterSnapshot) -> str:
    """kafka_exporter's series for `snap` in Prometheus' text format, its names, labels, help and meanings."""
    return TextCache().text(snap)


#: A topic's offsets as last written: (each partition's (newest, oldest) or None, its
#: current-offset lines, its oldest-offset lines).
_TopicText = tuple[tuple[tuple[int, int] | None, ...], str, str]
#: A group's lines as last written: (its row, what else they were written from, its members,
#: current offset, current offset sum, lag and lag sum lines).
_GroupText = tuple["GroupRow", tuple[object, ...], str, str, str, str, str]


class TextCache:
    """Writes the text of successive snapshots, reusing what did not change since the last one:
    the families that depend only on the partitions' metadata (partition count, leader,
    replicas, ISR, preferred leader, under-replicated: 60,000 of the 94,000 lines at 10,000
    partitions) while it is the same, a topic's offset lines while its partitions' offsets are,
    and a group's lines while its row and the newest offsets of its topics are (idle topics and
    groups, as most of a large cluster's are from one scrape to the next). Not thread-safe: one
    writer at a time."""

    def __init__(self) -> None:
        self._topics: Mapping[str, Sequence[PartitionRow]] | None = None
        self._metadata: tuple[str, str] = ("", "")
        self._topic_text: dict[str, _TopicText] = {}
        self._group_text: dict[str, _GroupText] = {}

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
        self._topic_text = yield from _offset_lines(snap, self._topic_text)
        yield rest
        self._group_text = yield from _group_lines(snap, self._group_text)


def _broker_lines(snap: ClusterSnapshot) -> Iterator[str]:
    yield _family("kafka_brokers", [f"kafka_brokers {len(snap.brokers)}\n"])
    yield _family("kafka_broker_info", [f'kafka_broker_info{{id="{broker_id}",address="{_label(address)}"}} 1\n'
                                             for broker_id, address in sorted(snap.brokers)])


def _offset_lines(snap: ClusterSnapshot, last: dict[str, _TopicText]) -> Generator[str | None, None, dict[str, _TopicText]]:
    """The two offset families; returns each topic's text for the next scrape."""
    current: list[str] = []
    oldest: list[str] = []
    kept: dict[str, _TopicText] = {}
    offsets = snap.offsets
    # A row written costs ~5 times one only compared; a pause every ROWS_PER_PAUSE written.
    work = _REWRITE * ROWS_PER_PAUSE
    for topic in sorted(snap.topics):
        if work >= _REWRITE * ROWS_PER_PAUSE:
            work = 0
            yield None
        rows = sorted(snap.topics[topic])
        got = tuple(offsets.get((topic, row[0])) for row in rows)
        entry = last.get(topic)
        work += len(rows)
        if entry is None or entry[0] != got:
            work += (_REWRITE - 1) * len(rows)
            topic_current: list[str] = []
            topic_oldest: list[str] = []
            for row, offset in zip(rows, got, strict=True):
                if offset is not None:
                    labels = f'{{topic="{topic}",partition="{row[0]}"}}'
                    topic_current.append(f"kafka_topic_partition_current_offset{labels} {offset[0]}\n")
                    topic_oldest.append(f"kafka_topic_partition_oldest_offset{labels} {offset[1]}\n")
            entry = (got, "".join(topic_current), "".join(topic_oldest))
        kept[topic] = entry
        current.append(entry[1])
        oldest.append(entry[2])
    yield _family("kafka_topic_partition_current_offset", current)
    yield _family("kafka_topic_partition_oldest_offset", oldest)
    return kept


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


def _group_lines(snap: ClusterSnapshot, last: dict[str, _GroupText]) -> Generator[str | None, None, dict[str, _GroupText]]:
    """The five group families; returns each group's text for the next scrape."""
    members: list[str] = []
    current: list[str] = []
    current_sum: list[str] = []
    lag: list[str] = []
    lag_sum: list[str] = []
    kept: dict[str, _GroupText] = {}
    offsets = snap.offsets
    # kafka_exporter asks a group's offsets of the partitions whose newest offset it read.
    by_topic: dict[str, list[int]] = {}
    for (topic, partition) in offsets:
        if topic in snap.topics:
            by_topic.setdefault(topic, []).append(partition)
    # Tuples of numbers, which the garbage collector stops tracking at its first look: these
    # live through the pauses below, and 1,000 lists a scrape were promoted to its oldest
    # generation (see cluster_view.py's ClusterView).
    readable = {topic: tuple(sorted(indexes)) for topic, indexes in by_topic.items()}
    del by_topic
    work = _REWRITE * GROUPS_PER_PAUSE
    for group_id in sorted(snap.groups):
        if work >= _REWRITE * GROUPS_PER_PAUSE:
            work = 0
            yield None
        group = snap.groups[group_id]
        topics = [t for t in sorted({t for t, _ in group.committed}) if t in readable]
        # What the lines depend on besides the row: the partitions read and their newest offsets.
        source = tuple((t, readable[t], tuple(offsets[(t, p)][0] for p in readable[t])) for t in topics)
        entry = last.get(group_id)
        work += 1
        if entry is None or entry[0] != group or entry[1] != source:
            work += _REWRITE - 1
            entry = (group, source, *_one_group(group_id, group, source))
        kept[group_id] = entry
        members.append(entry[2])
        current.append(entry[3])
        current_sum.append(entry[4])
        lag.append(entry[5])
        lag_sum.append(entry[6])
    yield _family("kafka_consumergroup_members", members)
    yield _family("kafka_consumergroup_current_offset", current)
    yield _family("kafka_consumergroup_current_offset_sum", current_sum)
    yield _family("kafka_consumergroup_lag", lag)
    yield _family("kafka_consumergroup_lag_sum", lag_sum)
    return kept


def _one_group(group_id: str, group: GroupRow, source: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...]
               ) -> tuple[str, str, str, str, str]:
    """A group's members, current offset, current offset sum, lag and lag sum lines."""
    g = _label(group_id)
    current: list[str] = []
    current_sum: list[str] = []
    lag: list[str] = []
    lag_sum: list[str] = []
    for topic, partitions, newest in source:
        committed = [group.committed.get((topic, p), -1) for p in partitions]
        if all(offset == -1 for offset in committed):
            continue
        offset_total = lag_total = 0
        for partition, offset, end in zip(partitions, committed, newest, strict=True):
            labels = f'{{consumergroup="{g}",topic="{topic}",partition="{partition}"}}'
            # As kafka_exporter: the sum counts the -1 of a partition without a commit.
            offset_total += offset
            current.append(f"kafka_consumergroup_current_offset{labels} {offset}\n")
            if offset == -1:
                lag.append(f"kafka_consumergroup_lag{labels} -1\n")
            else:
                behind = end - offset
                lag_total += behind
                lag.append(f"kafka_consumergroup_lag{labels} {behind}\n")
        labels = f'{{consumergroup="{g}",topic="{topic}"}}'
        current_sum.append(f"kafka_consumergroup_current_offset_sum{labels} {offset_total}\n")
        lag_sum.append(f"kafka_consumergroup_lag_sum{labels} {lag_total}\n")
    return (f'kafka_consumergroup_members{{consumergroup="{g}"}} {group.members}\n', "".join(current),
            "".join(current_sum), "".join(lag), "".join(lag_sum))
