"""A KIP-848 consumer group (librdkafka, ``group.protocol=consumer``) on a 3-broker cluster
whose group coordinator is SIGKILLed while 3 members consume and a producer runs: the next
leader of the group's __consumer_offsets partition loads the group from its records, members
and epochs included, the members carry on without rejoining, every record is consumed with
commits, and no partition is ever held by two members."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kaflet.coordinator.group.hashing import partition_for
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from tests.support.cluster import Cluster
from tests.support.consumer_protocol import Ownership, ProtocolMember, SteadyProducer, wait_for
from tests.support.faults import FAST_FAILOVER
from tests.support.raw_client import RawClient

OVERRIDES = {**FAST_FAILOVER, "group.consumer.heartbeat.interval.ms": "500",
             "group.consumer.min.heartbeat.interval.ms": "500"}


def _epochs(cluster: Cluster, group: str) -> dict[str, int] | None:
    """Each member's epoch as the group's coordinator reports it (ConsumerGroupDescribe); None
    while no live broker answers for the group."""
    for broker in cluster.brokers.values():
        if not broker.alive:
            continue
        c = RawClient(broker.bootstrap)
        try:
            described = c.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, codec.request_class(
                ApiKey.CONSUMER_GROUP_DESCRIBE)(group_ids=[group], include_authorized_operations=False)).groups[0]
        except OSError:
            continue
        finally:
            c.close()
        if described.error_code == 0:
            return {m.member_id: m.member_epoch for m in described.members}
    return None


def test_a_consumer_group_survives_the_loss_of_its_coordinator(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, overrides=OVERRIDES)
    topic, group = f"kc-{uuid.uuid4().hex[:8]}", f"kg-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 6, 3, config={"min.insync.replicas": "2"})])[topic].result(40)
    ownership = Ownership()
    producer = SteadyProducer(cluster.bootstrap, topic, 6, pause=0.01)
    members = [ProtocolMember(f"m{i}", cluster.bootstrap, group, topic, ownership) for i in range(3)]
    producer.start()
    for m in members:
        m.start()
    try:
        try:
            wait_for(lambda: sorted(len(m.parts()) for m in members) == [2, 2, 2], 60, "3 members with 2 partitions")
            wait_for(lambda: sum(len(m.values) for m in members) > 300, 60, "the group consuming")
            before = _epochs(cluster, group)
            assert before is not None and len(before) == 3
            coordinator = cluster.wait_for_leader(
                "__consumer_offsets", partition_for(group, int(OVERRIDES["offsets.topic.num.partitions"])))
            cluster.kill(coordinator)
            # The new coordinator has the group as it was: same members, same epochs.
            wait_for(lambda: _epochs(cluster, group) == before, 60, "the group loaded by the next coordinator")
            consumed = sum(len(m.values) for m in members)
            wait_for(lambda: sum(len(m.values) for m in members) > consumed + 300, 60, "consuming after the failover")
        finally:
            sent = producer.stop()
        wait_for(lambda: sent <= {v for m in members for v in m.values}, 90, "every record consumed")
        assert _epochs(cluster, group) == before, "the members rejoined instead of carrying on"
    finally:
        for m in members:
            if m.is_alive():
                m.stop()
    assert ownership.violations == []
    # What the group committed is where the partitions end.
    committed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"probe-{uuid.uuid4().hex}"})
    try:
        ends = {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(6)}
    finally:
        probe.close()
    assert {tp.partition: tp.offset for tp in committed.topic_partitions} == ends

