"""The hand-written Metadata response encoder against the generic codec, for every version."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from kaflet.metadata.metadata_cache import PartitionInfo
from kaflet.protocol import codec
from kaflet.protocol.metadata_response import (
    MAX_VERSION,
    NO_OPERATIONS,
    MetadataAnswer,
    MetadataBroker,
    encode_partitions,
    encode_topic,
    operations_bits,
)

R = codec.response_class(3)
P = R.MetadataResponseTopic.MetadataResponsePartition

node = st.integers(-1, 2**31 - 1)
nodes = st.lists(st.integers(0, 2**31 - 1), max_size=4)
partition = st.builds(PartitionInfo, index=st.integers(0, 10_000), leader=node, leader_epoch=st.integers(-1, 2**31 - 1),
                      replicas=nodes, isr=nodes, offline_replicas=nodes)
ops = st.one_of(st.none(), st.sets(st.integers(0, 14), max_size=6))
text = st.text(min_size=1, max_size=12)
topic = st.tuples(st.integers(0, 120), text, st.binary(min_size=16, max_size=16), st.booleans(),
                  st.lists(partition, max_size=5, unique_by=lambda p: p.index), ops)
broker = st.builds(MetadataBroker, node_id=st.integers(0, 2**31 - 1), host=st.text(max_size=20),
                   port=st.integers(0, 65535), rack=st.one_of(st.none(), text))


@settings(max_examples=300, deadline=None)
@given(version=st.integers(0, MAX_VERSION), brokers=st.lists(broker, max_size=3), topics=st.lists(topic, max_size=4),
       cluster_id=st.one_of(st.none(), text), controller=node, cluster_ops=ops,
       throttle=st.integers(0, 2**31 - 1))
def test_own_encoding_is_the_generic_codecs(version: int, brokers: list[MetadataBroker],
                                            topics: list[tuple[int, str, bytes, bool, list[PartitionInfo], set[int] | None]],
                                            cluster_id: str | None, controller: int, cluster_ops: set[int] | None,
                                            throttle: int) -> None:
    wires = []
    generic_topics = []
    for code, name, tid, internal, parts, top_ops in topics:
        pairs = [(p.index, p) for p in parts]
        wires.append(encode_topic(version, code, name, tid, internal, encode_partitions(version, pairs),
                                  operations_bits(top_ops)))
        generic_topics.append(R.MetadataResponseTopic(
            error_code=code, name=name, topic_id=uuid.UUID(bytes=tid), is_internal=internal,
            authorized_operations=top_ops,
            partitions=[P(error_code=0 if p.leader >= 0 else 5, partition_index=p.index, leader_id=p.leader,
                          leader_epoch=p.leader_epoch, replica_nodes=p.replicas, isr_nodes=p.isr,
                          offline_replicas=p.offline_replicas) for p in parts]))
    generic = R(brokers=[R.MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
                         for b in brokers],
                cluster_id=cluster_id, controller_id=controller, topics=generic_topics)
    generic.authorized_operations = cluster_ops
    own = MetadataAnswer(version, brokers, cluster_id, controller, wires, operations_bits(cluster_ops))
    assert own.encode(throttle) == codec.encode_response(3, version, generic, throttle)


def test_operations_bits() -> None:
    assert operations_bits(None) == NO_OPERATIONS == -(2**31)
    assert operations_bits(set()) == 0
    assert operations_bits({2, 3}) == 12
    assert operations_bits({31}) == -(2**31)
