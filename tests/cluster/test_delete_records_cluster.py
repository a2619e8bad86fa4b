"""DeleteRecords on a replicated partition answers once every live follower has moved its log
start offset too (Kafka's DelayedDeleteRecords), so a new leader does not bring the records back."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import Cluster

pytestmark = pytest.mark.timeout(240)


def test_delete_records_reaches_the_followers(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    cluster.wait_for_registered([1, 2, 3])
    topic = f"dr-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 3]])])[topic].result(60)
    cluster.wait_for_isr(topic, 0, [1, 2, 3], timeout=60)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(100):
        p.produce(topic, str(i).encode())
    assert p.flush(60) == 0

    result = admin.delete_records([TopicPartition(topic, 0, 50)], request_timeout=30)
    deleted = next(iter(result.values())).result(40)
    assert deleted.low_watermark == 50  # over every replica

    # The old leader goes; its successor had already dropped the records below 50.
    cluster.kill(1)
    cluster.wait_for_leader(topic, 0, timeout=60, exclude=(1,))
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}"})
    try:
        # A survivor may still name broker 1 as leader until its UpdateMetadata lands; the
        # client then fails the query (handle destroyed), so ask again until the answer comes.
        low, high = cluster.wait_until(
            lambda: c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10), 60,
            "the watermarks from the new leader", topics=[topic])
        assert (low, high) == (50, 100)
    finally:
        c.close()
