"""The broker's view of the cluster: live brokers, topics, partitions, leaders.

Filled from the metadata tree by watches; read by every request that needs topology (Metadata,
Produce and Fetch leadership checks, CreateTopics answers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kaflet.metadata.zkdata import BrokerInfo, uuid_from_str

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass(slots=True)
class PartitionInfo:
    """Leader, epoch and replica sets of one partition."""

    index: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]


@dataclass(slots=True)
class TopicInfo:
    """A topic's id (16 raw bytes and its base64 form) and partitions."""

    name: str
    topic_id: bytes
    topic_id_str: str
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class MetadataCache:
    """Topology snapshot; replaced piecewise as watches fire."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topics_by_id: dict[bytes, str] = {}
        self.controller_id: int = -1

    def put_topic(self, name: str, topic_id_str: str, partitions: dict[int, PartitionInfo]) -> TopicInfo:
        old = self.topics.get(name)
        if old is not None:
            self.topics_by_id.pop(old.topic_id, None)
        raw = uuid_from_str(topic_id_str) if topic_id_str else bytes(16)
        info = TopicInfo(name, raw, topic_id_str, partitions)
        self.topics[name] = info
        self.topics_by_id[raw] = name
        return info

    def partition_count(self, name: str) -> int:
        """How many partitions the topic has here (0: unknown topic)."""
        info = self.topics.get(name)
        return len(info.partitions) if info is not None else 0

    def remove_topic(self, name: str) -> None:
        info = self.topics.pop(name, None)
        if info is not None:
            self.topics_by_id.pop(info.topic_id, None)

    def topic_by_id(self, topic_id: bytes) -> TopicInfo | None:
        name = self.topics_by_id.get(topic_id)
        return self.topics.get(name) if name else None
