"""Topic ids and the Java client's Admin against a 3-broker cluster (real ZooKeeper and brokers).

A topic's id is Kafka's: in its `/brokers/topics/<t>` znode and every replica's
`partition.metadata`, so every broker answers the same id, before and after a restart.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kaflet.metadata.zkdata import uuid_from_str
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from tests.support.cluster import Cluster
from tests.support.java import JavaPrograms, check_admin, check_transactional_copy
from tests.support.raw_client import RawClient

pytestmark = pytest.mark.timeout(240)


def _ids_seen(cluster: Cluster, topic: str) -> dict[int, tuple[uuid.UUID, uuid.UUID]]:
    """Per running broker: the topic's id in its Metadata v12 and DescribeTopicPartitions answers."""
    M, D = codec.request_class(ApiKey.METADATA), codec.request_class(ApiKey.DESCRIBE_TOPIC_PARTITIONS)
    seen = {}
    for bid in cluster.running():
        c = RawClient(cluster.broker(bid).bootstrap)
        try:
            md = c.request(ApiKey.METADATA, 12, M(topics=[M.MetadataRequestTopic(name=topic, topic_id=None)],
                                                  allow_auto_topic_creation=False)).topics[0]
            dtp = c.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, D(
                topics=[D.TopicRequest(name=topic)], response_partition_limit=10, cursor=None)).topics[0]
            seen[bid] = (md.topic_id, dtp.topic_id)
        finally:
            c.close()
    return seen


def test_a_topic_has_one_id_on_every_broker_in_zookeeper_and_on_disk_across_restarts(
        cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    cluster.wait_for_registered([1, 2, 3])
    topic = f"ids-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=3)])[topic].result(60)
    for p in (0, 1):
        cluster.wait_for_isr(topic, p, [1, 2, 3], timeout=60)
    raw, _ = cluster.zk.get(f"/brokers/topics/{topic}")
    in_zk = uuid.UUID(bytes=uuid_from_str(json.loads(raw)["topic_id"]))

    def everywhere() -> bool:
        return all(ids == (in_zk, in_zk) for ids in _ids_seen(cluster, topic).values())

    cluster.wait_until(everywhere, timeout=30, what="every broker answering the znode's topic id")
    for bid in (1, 2, 3):
        for p in (0, 1):
            on_disk = (cluster.broker(bid).data_dir / f"{topic}-{p}" / "partition.metadata").read_text()
            assert on_disk == f"version: 0\ntopic_id: {json.loads(raw)['topic_id']}"
    cluster.restart(2, hard=True)
    cluster.wait_until(lambda: set(_ids_seen(cluster, topic)) == {1, 2, 3} and everywhere(), timeout=60,
                       what="the restarted broker answering the same topic id")


def test_java_admin_against_three_brokers(cluster_factory: Callable[..., Cluster], java: JavaPrograms) -> None:
    cluster = cluster_factory(3)
    cluster.wait_for_registered([1, 2, 3])
    check_admin(java, cluster.bootstrap, [1, 2, 3], 3)


def test_java_admin_elects_preferred_leaders(cluster_factory: Callable[..., Cluster], java: JavaPrograms) -> None:
    # No automatic rebalancing: only the Admin call may move the leader back.
    cluster = cluster_factory(3, overrides={"auto.leader.rebalance.enable": "false"})
    cluster.wait_for_registered([1, 2, 3])
    topic = f"elect-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replica_assignment=[[1, 2, 3], [2, 3, 1]])])[topic].result(60)
    for p in (0, 1):
        cluster.wait_for_isr(topic, p, [1, 2, 3], timeout=60)
    # Broker 1 goes and comes back: partition 0 is then led by another replica, partition 1 still by 2.
    cluster.kill(1)
    cluster.wait_until(lambda: cluster.leader(topic, 0) in (2, 3), timeout=30, what="a new leader for partition 0")
    cluster.start_broker(1)
    cluster.wait_for_isr(topic, 0, [1, 2, 3], timeout=60)
    moved = cluster.leader(topic, 0)
    lines = java.run("ElectLeaders", cluster.bootstrap, topic)
    facts = {(w[0], w[1]) if len(w) == 3 else (w[0],): w[-1] for w in lines}
    assert facts[("before",)] == f"0:{moved}/1,1:2/2"
    assert facts[("preferred", f"{topic}-0")] == "elected"
    assert facts[("preferred", f"{topic}-1")] == "ElectionNotNeededException"
    assert facts[("after",)] == "0:1/1,1:2/2"
    assert cluster.leader(topic, 0) == 1
    assert facts[("unclean", f"{topic}-0")] == "ElectionNotNeededException"


def test_java_transactions_against_three_brokers(cluster_factory: Callable[..., Cluster], java: JavaPrograms) -> None:
    cluster = cluster_factory(3, overrides={"transaction.state.log.num.partitions": "3",
                                            "offsets.topic.num.partitions": "3"})
    cluster.wait_for_registered([1, 2, 3])
    check_transactional_copy(java, cluster.bootstrap, 3)
