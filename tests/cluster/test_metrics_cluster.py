"""Metrics of a leader with a follower, on ZooKeeper: the follower's fetches count as
FetchFollower and in TotalFetchRequests but not in BytesOut; a dead follower makes the
partition under-replicated, and its return expands the ISR again."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kaflet.metadata.zk_testing import free_ports
from tests.support.cluster import Cluster
from tests.support.metrics import scrape


def test_follower_fetches_under_replication_and_isr_expansion(cluster_factory: Callable[..., Cluster]) -> None:
    ports = free_ports(2)
    cluster = cluster_factory(2, broker_overrides={
        bid: {"metrics.listener": f"http://127.0.0.1:{port}"} for bid, port in zip((1, 2), ports, strict=True)})
    leader_port = ports[0]
    topic = f"mc-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2]])])[topic].result(30)
    cluster.wait_for_leader(topic, 0)
    cluster.wait_for_isr(topic, 0, [1, 2])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    errors: list[Any] = []
    for _ in range(20):
        producer.produce(topic, b"x" * 200, on_delivery=lambda err, _m: errors.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(30) == 0 and not errors

    def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
        return samples.get((name, frozenset(labels.items())), 0.0)

    s = scrape(leader_port)
    follower_fetches = sum(v for (name, labels), v in s.items()
                           if name == "kafka_network_requestmetrics_requests_total"
                           and ("request", "FetchFollower") in labels)
    assert follower_fetches >= 1
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 20
    assert value(s, "kafka_server_brokertopicmetrics_totalfetchrequests_total", topic=topic) >= 1
    # Replication is not BytesOut: no consumer read the topic.
    assert value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) == 0
    assert value(s, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    # The follower has the data too, and its log says so.
    cluster.wait_until(lambda: value(scrape(ports[1]), "kafka_log_log_logendoffset", topic=topic, partition="0") == 20,
                       what="the follower's log end offset at 20")

    cluster.kill(2)
    cluster.wait_for_isr(topic, 0, [1])
    cluster.wait_until(lambda: value(scrape(leader_port), "kafka_server_replicamanager_underreplicatedpartitions") >= 1,
                       what="the leader reports the partition under-replicated")
    expands_before = value(scrape(leader_port), "kafka_server_replicamanager_isrexpands_total")

    cluster.start_broker(2)
    cluster.wait_for_isr(topic, 0, [1, 2])
    cluster.wait_until(lambda: value(scrape(leader_port), "kafka_server_replicamanager_underreplicatedpartitions") == 0,
                       what="the leader reports the partition fully replicated again")
    after = scrape(leader_port)
    assert value(after, "kafka_server_replicamanager_isrexpands_total") >= expands_before + 1
    assert value(after, "kafka_server_replicamanager_leadercount") >= 1
