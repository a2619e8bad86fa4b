"""The broker's view of the cluster: live brokers, topics, partitions, leaders.

Filled by the controller's UpdateMetadata requests only (``update_metadata``, Kafka's
MetadataCache.updateMetadata), a broker that runs alone included; read by every request that
needs topology (Metadata, Produce and Fetch leadership checks, CreateTopics answers).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kaflet.metadata.zkdata import BrokerInfo, EndPoint, uuid_from_str, uuid_to_str
from kaflet.protocol.controller_messages import UpdateMetadataRequest

log = logging.getLogger("kaflet.metadata_cache")

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

#: UpdateMetadata's leader of a partition whose topic is being deleted (LeaderAndIsr.LeaderDuringDelete).
LEADER_DURING_DELETE = -2
#: Security protocol ids as UpdateMetadata carries them (Kafka's SecurityProtocol.id).
SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


@dataclass(slots=True)
class PartitionInfo:
    """Leader, epoch, replica sets and state-znode version of one partition."""

    index: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int] = field(default_factory=list)
    zk_version: int = -1
    controller_epoch: int = -1


@dataclass(slots=True)
class TopicInfo:
    """A topic's id (16 raw bytes and its base64 form) and partitions."""

    name: str
    topic_id: bytes
    topic_id_str: str
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    #: The topic's encoded part of a Metadata answer, by (version, authorized operations; None
    #: for the partitions alone), kept until the topic changes (protocol/metadata_response.py).
    wire: dict[tuple[int, int | None], bytes] = field(default_factory=dict, repr=False, compare=False)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class MetadataCache:
    """Topology snapshot; replaced piecewise by UpdateMetadata requests."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topics_by_id: dict[bytes, str] = {}
        self.controller_id: int = -1
        #: Bumped at every change of the topics or their partitions (readers that copy the
        #: partitions, such as kafka_exporter's series, reuse their copy while it is unchanged).
        self.version = 0

    def put_topic(self, name: str, topic_id_str: str, partitions: dict[int, PartitionInfo]) -> TopicInfo:
        old = self.topics.get(name)
        if old is not None:
            self.topics_by_id.pop(old.topic_id, None)
        raw = uuid_from_str(topic_id_str) if topic_id_str else bytes(16)
        info = TopicInfo(name, raw, topic_id_str, partitions)
        self.topics[name] = info
        self.version += 1
        if raw != bytes(16):  # the zero id names no topic
            self.topics_by_id[raw] = name
        return info

    def partition_count(self, name: str) -> int:
        """How many partitions the topic has here (0: unknown topic)."""
        info = self.topics.get(name)
        return len(info.partitions) if info is not None else 0

    def remove_topic(self, name: str) -> None:
        info = self.topics.pop(name, None)
        if info is not None:
            self.version += 1
            self.topics_by_id.pop(info.topic_id, None)

    def topic_by_id(self, topic_id: bytes) -> TopicInfo | None:
        name = self.topics_by_id.get(topic_id)
        return self.topics.get(name) if name else None

    def live_brokers(self) -> list[BrokerInfo]:
        """The brokers the last UpdateMetadata listed as alive."""
        return list(self.brokers.values())

    def partition(self, topic: str, index: int) -> PartitionInfo | None:
        """The cached state of one partition, or None."""
        info = self.topics.get(topic)
        return info.partitions.get(index) if info is not None else None

    def update_metadata(self, request: UpdateMetadataRequest) -> list[tuple[str, int]]:
        """Apply an UpdateMetadata request (v7 codec object; the caller has checked its epochs),
        as Kafka's MetadataCache.updateMetadata: the live brokers (with every listener's
        endpoint and the rack) and the controller id are replaced, partition states are
        added or replaced one by one, and a partition whose leader is -2 (its topic is being
        deleted) leaves the cache, its topic with its last partition. Returns the partitions
        removed.
        """
        brokers: dict[int, BrokerInfo] = {}
        for b in request.live_brokers:
            endpoints = tuple(
                EndPoint(ep.listener, ep.host or None, ep.port, SECURITY_PROTOCOLS.get(ep.security_protocol, "PLAINTEXT"))
                for ep in b.endpoints)
            brokers[b.id] = BrokerInfo(id=b.id, endpoints=endpoints, rack=b.rack)
        self.brokers = brokers
        self.controller_id = request.controller_id if request.controller_id >= 0 else -1
        deleted: list[tuple[str, int]] = []
        if request.topic_states:
            self.version += 1
        for t in request.topic_states:
            name = t.topic_name
            raw_id = t.topic_id.bytes if t.topic_id is not None else bytes(16)
            info = self.topics.get(name)
            if raw_id != bytes(16) and (info is None or info.topic_id != raw_id):
                # A new id (or a topic recreated under the same name): Kafka keeps the latest.
                partitions = info.partitions if info is not None else {}
                if info is not None:
                    self.topics_by_id.pop(info.topic_id, None)
                info = self.put_topic(name, uuid_to_str(raw_id), partitions)
            for ps in t.partition_states:
                if ps.leader == LEADER_DURING_DELETE:
                    if info is not None and info.partitions.pop(ps.partition_index, None) is not None:
                        info.wire.clear()
                        deleted.append((name, ps.partition_index))
                    continue
                if info is None:
                    info = self.put_topic(name, "", {})
                info.wire.clear()
                info.partitions[ps.partition_index] = PartitionInfo(
                    ps.partition_index, ps.leader, ps.leader_epoch, list(ps.replicas), list(ps.isr),
                    list(ps.offline_replicas), ps.zk_version, ps.controller_epoch)
            if info is not None and not info.partitions:
                self.remove_topic(name)
        if deleted:
            log.info("deleted %d partitions from the metadata cache (UpdateMetadata from controller %d epoch %d)",
                     len(deleted), request.controller_id, request.controller_epoch)
        return deleted
