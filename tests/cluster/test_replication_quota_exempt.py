"""Client quotas do not slow replication: Kafka answers a follower's fetch without charging it
to any fetch or request quota, so a default quota meant for consumers cannot hold acks=all
produce hostage to a throttled follower."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kaflet.metadata import zkdata
from tests.support.cluster import Cluster


def test_default_client_fetch_quota_does_not_throttle_followers(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(2)
    zk: Any = cluster.zk
    # 1 KB/s for every client id and every user: the follower would need ~1,000 s for 1 MB.
    for entity_type in (zkdata.ConfigType.CLIENT, zkdata.ConfigType.USER):
        name = f"{entity_type}/<default>"
        zk.create(zkdata.config_entity_path(entity_type, "<default>"),
                  zkdata.entity_config_json({"consumer_byte_rate": "1000", "request_percentage": "1"}),
                  makepath=True)
        zk.create(zkdata.config_change_prefix(), zkdata.config_change_json(name), sequence=True, makepath=True)
    topic = f"rqe-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2]], config={"min.insync.replicas": "2"})])[topic].result(30)
    cluster.wait_for_leader(topic, 0)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[Any] = []
    for _ in range(1000):
        producer.produce(topic, b"x" * 1024, on_delivery=lambda err, msg: errors.append(err) if err else None)
        producer.poll(0)
    # Generous: unthrottled this takes about a second; a throttled follower would take ~1,000 s.
    assert producer.flush(120) == 0
    assert errors == []
