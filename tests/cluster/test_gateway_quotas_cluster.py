"""The gateway's quota per application and topic on three brokers: written to ZooKeeper as the
management service writes it (/config/clients/<appId>.<topic> and a /config/changes
notification), and split so that each broker allows its share of the topic's partition leaders.
A producer spread over all partitions then gets about the quota in total, not three times it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from kaflet.metadata import zkdata
from tests.support.cluster import Cluster
from tests.support.gateway_apps import OVERRIDES, app_producer
from tests.support.quotas import MB
from tests.support.topics import create_topic


def test_quota_is_split_by_leader_share(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, overrides=OVERRIDES)
    topic = f"gqc-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, partitions=3)
    leaders = [cluster.wait_for_leader(topic, p) for p in range(3)]
    assert sorted(leaders) == [1, 2, 3]  # one leader per broker: each allows a third
    quota = 1.5 * MB
    name = f"app_quota.{topic}"
    zk: Any = cluster.zk
    zk.create(zkdata.config_entity_path(zkdata.ConfigType.CLIENT, name),
              zkdata.entity_config_json({"producer_byte_rate": str(int(quota))}), makepath=True)
    zk.create(zkdata.config_change_prefix(), zkdata.config_change_json(f"clients/{name}"), sequence=True,
              makepath=True)
    producer = app_producer(cluster.broker(leaders[0]), "app_quota", topic)
    try:
        producer.run(3, partitions=3)  # what the windows allow a new client at once: not measured
        rate = producer.run(15, partitions=3)
        throttles = [t for t in producer.throttles if t > 0]
        print(f"\n3 brokers, quota {quota / MB:.1f} MB/s for app_quota on {topic}: {rate:.3f} MB/s in total, "
              f"{len(throttles)} throttle events (max {max(throttles, default=0)} ms)")
        assert throttles and max(throttles) <= 2000
        assert 0.5 * quota / MB <= rate <= 1.2 * quota / MB  # a slow machine may not reach it; never over
    finally:
        producer.close()
