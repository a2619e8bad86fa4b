"""MetadataCache.update_metadata: the controller's UpdateMetadata as Kafka's MetadataCache applies it."""

from __future__ import annotations

import uuid
from typing import Any

from kaflet.metadata.metadata_cache import MetadataCache
from kaflet.metadata.zkdata import EndPoint, uuid_to_str
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.metadata_response import NO_OPERATIONS, MetadataAnswer
from kaflet.protocol.response import encode_body
from kaflet.server.handlers import metadata as metadata_handler

R = codec.request_class(ApiKey.UPDATE_METADATA)
T = R.UpdateMetadataTopicState
P = T.UpdateMetadataPartitionState
B = R.UpdateMetadataBroker
E = B.UpdateMetadataEndpoint
ORDERS = uuid.UUID(int=0x1234)


def _partition(index: int, leader: int, epoch: int = 1, isr: list[int] | None = None,
               replicas: list[int] | None = None, offline: list[int] | None = None) -> Any:
    return P(partition_index=index, controller_epoch=5, leader=leader, leader_epoch=epoch, isr=isr or [1, 2],
             zk_version=7, replicas=replicas or [1, 2, 3], offline_replicas=offline or [])


def _brokers() -> list[Any]:
    return [
        B(id=1, rack="r1", endpoints=[E(port=9092, host="h1", listener="PLAINTEXT", security_protocol=0),
                                      E(port=9093, host="h1", listener="INTERNAL", security_protocol=3)]),
        B(id=2, rack=None, endpoints=[E(port=9092, host="h2", listener="PLAINTEXT", security_protocol=0)]),
    ]


def _request(topics: list[Any], brokers: list[Any] | None = None, controller_id: int = 2) -> Any:
    return R(controller_id=controller_id, controller_epoch=5, broker_epoch=-1, topic_states=topics,
             live_brokers=_brokers() if brokers is None else brokers)


def test_brokers_partitions_and_controller_are_cached() -> None:
    cache = MetadataCache()
    deleted = cache.update_metadata(_request([T(topic_name="orders", topic_id=ORDERS, partition_states=[
        _partition(0, 1, offline=[3]), _partition(1, 2, epoch=4, isr=[2])])]))
    assert deleted == []
    assert cache.controller_id == 2
    assert set(cache.brokers) == {1, 2}
    one = cache.brokers[1]
    assert one.rack == "r1" and cache.brokers[2].rack is None
    assert one.endpoint("INTERNAL") == EndPoint("INTERNAL", "h1", 9093, "SASL_SSL")
    assert one.endpoint("PLAINTEXT") == EndPoint("PLAINTEXT", "h1", 9092, "PLAINTEXT")
    info = cache.topics["orders"]
    assert info.topic_id == ORDERS.bytes and info.topic_id_str == uuid_to_str(ORDERS.bytes)
    assert cache.topic_by_id(ORDERS.bytes) is info and cache.partition_count("orders") == 2
    p0 = cache.partition("orders", 0)
    assert p0 is not None
    assert (p0.leader, p0.leader_epoch, p0.isr, p0.replicas, p0.offline_replicas, p0.zk_version,
            p0.controller_epoch) == (1, 1, [1, 2], [1, 2, 3], [3], 7, 5)
    assert cache.partition("orders", 1).leader_epoch == 4  # type: ignore[union-attr]
    assert cache.partition("orders", 2) is None and cache.partition("other", 0) is None


def test_partial_updates_keep_other_partitions_and_replace_brokers() -> None:
    cache = MetadataCache()
    cache.update_metadata(_request([T(topic_name="orders", topic_id=ORDERS, partition_states=[
        _partition(0, 1), _partition(1, 2)])]))
    # A later request about partition 1 only, with broker 2 gone and no controller.
    cache.update_metadata(_request([T(topic_name="orders", topic_id=ORDERS, partition_states=[
        _partition(1, 1, epoch=2, isr=[1], offline=[2])])], brokers=_brokers()[:1], controller_id=-1))
    assert set(cache.brokers) == {1} and cache.controller_id == -1
    assert cache.partition("orders", 0).leader == 1  # type: ignore[union-attr]
    p1 = cache.partition("orders", 1)
    assert p1 is not None and (p1.leader, p1.leader_epoch, p1.offline_replicas) == (1, 2, [2])
    # Brokers only, no partitions: partitions stay.
    cache.update_metadata(_request([], brokers=_brokers()))
    assert set(cache.brokers) == {1, 2} and cache.partition_count("orders") == 2


def test_leader_minus_two_deletes_partitions_and_then_the_topic() -> None:
    cache = MetadataCache()
    cache.update_metadata(_request([
        T(topic_name="orders", topic_id=ORDERS, partition_states=[_partition(0, 1), _partition(1, 2)]),
        T(topic_name="keep", topic_id=uuid.UUID(int=9), partition_states=[_partition(0, 1)])]))
    deleted = cache.update_metadata(_request([T(topic_name="orders", topic_id=ORDERS, partition_states=[
        _partition(0, -2, epoch=0)])]))
    assert deleted == [("orders", 0)] and cache.partition_count("orders") == 1
    deleted = cache.update_metadata(_request([T(topic_name="orders", topic_id=ORDERS, partition_states=[
        _partition(1, -2, epoch=0)])]))
    assert deleted == [("orders", 1)]
    assert "orders" not in cache.topics and cache.topic_by_id(ORDERS.bytes) is None
    assert cache.partition_count("keep") == 1
    # Deleting what is not cached is no change.
    assert cache.update_metadata(_request([T(topic_name="orders", topic_id=ORDERS, partition_states=[
        _partition(1, -2)])])) == []


def test_recreated_topic_takes_the_new_id() -> None:
    cache = MetadataCache()
    cache.update_metadata(_request([T(topic_name="orders", topic_id=ORDERS, partition_states=[_partition(0, 1)])]))
    new_id = uuid.UUID(int=0x99)
    cache.update_metadata(_request([T(topic_name="orders", topic_id=new_id, partition_states=[_partition(0, 2)])]))
    assert cache.topics["orders"].topic_id == new_id.bytes
    assert cache.topic_by_id(ORDERS.bytes) is None and cache.topic_by_id(new_id.bytes) is cache.topics["orders"]
    # A state without an id (zero) keeps the known one.
    cache.update_metadata(_request([T(topic_name="orders", topic_id=uuid.UUID(int=0),
                                      partition_states=[_partition(0, 1)])]))
    assert cache.topics["orders"].topic_id == new_id.bytes
    assert cache.topic_by_id(bytes(16)) is None


def test_topic_without_an_id() -> None:
    cache = MetadataCache()
    cache.update_metadata(_request([T(topic_name="old", topic_id=uuid.UUID(int=0), partition_states=[_partition(0, 1)])]))
    assert cache.partition_count("old") == 1 and cache.topics["old"].topic_id == bytes(16)
    assert cache.topic_by_id(bytes(16)) is None  # the zero id names no topic
    cache.update_metadata(_request([T(topic_name="orders", topic_id=ORDERS, partition_states=[_partition(0, 1)])]))
    assert set(cache.topics) == {"old", "orders"}


def test_a_topics_encoded_answer_is_kept_until_the_topic_changes() -> None:
    cache = MetadataCache()
    cache.update_metadata(_request([T(topic_name="orders", topic_id=ORDERS, partition_states=[_partition(0, 1)])]))
    info = cache.topics["orders"]
    first = metadata_handler._topic_wire(12, (info, None))
    assert metadata_handler._topic_wire(12, (info, None)) is first  # reused, not encoded again
    assert metadata_handler._topic_wire(12, (info, {2})) != first  # another principal's operations
    assert set(info.wire) == {(12, None), (12, NO_OPERATIONS), (12, 4)}
    cache.update_metadata(_request([T(topic_name="orders", topic_id=ORDERS, partition_states=[
        _partition(0, 2, epoch=2, isr=[2])])]))
    assert info.wire == {}
    body = encode_body(ApiKey.METADATA, 12, MetadataAnswer(12, [], "c", 2, [metadata_handler._topic_wire(12, (info, None))]), 0)
    p = codec.response_class(ApiKey.METADATA).decode(body, version=12).topics[0].partitions[0]
    assert (p.leader_id, p.leader_epoch, list(p.isr_nodes)) == (2, 2, [2])
    # A partition added or deleted drops it too.
    metadata_handler._topic_wire(12, (info, None))
    cache.update_metadata(_request([T(topic_name="orders", topic_id=ORDERS, partition_states=[_partition(1, 2)])]))
    assert info.wire == {}
    metadata_handler._topic_wire(12, (info, None))
    cache.update_metadata(_request([T(topic_name="orders", topic_id=ORDERS, partition_states=[_partition(1, -2)])]))
    assert info.wire == {} and list(info.partitions) == [0]
