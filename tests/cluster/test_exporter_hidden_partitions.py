"""kafka_exporter's series of a topic whose partitions the gateway hides: the real partitions.

Two broker processes with the gateway (a scripted management service disables partition 1 of a
four-partition topic). The topic and the group live on the broker that is not the controller, so
the controller's exporter reads them over the wire: its ListOffsets and OffsetFetch must see the
real partitions, while a client's see the renumbered ones (0, 2, 3 as 0, 1, 2).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kaflet.coordinator.group.hashing import partition_for
from kaflet.metadata.zk_testing import free_ports
from tests.support.cluster import Cluster
from tests.support.management_service import ScriptedManagementService, scripted_management_service
from tests.support.metrics import Samples, scrape


@pytest.fixture
def service() -> Iterator[ScriptedManagementService]:
    with scripted_management_service() as svc:
        yield svc


def test_exporter_reports_the_real_partitions_while_clients_see_them_renumbered(
        cluster_factory: Callable[..., Cluster], service: ScriptedManagementService) -> None:
    ports = free_ports(2)
    cluster = cluster_factory(2, overrides={"gateway.url": service.url, "cluster.id": "9",
                                            "gateway.sync.interval.ms": "300", "offsets.topic.num.partitions": "2",
                                            "offsets.topic.replication.factor": "1"},
                              broker_overrides={bid: {"metrics.listener": f"http://127.0.0.1:{port}"}
                                                for bid, port in zip((1, 2), ports, strict=True)})
    controller = cluster.wait_for_controller()
    other = 3 - controller
    metrics_port = dict(zip((1, 2), ports, strict=True))[controller]
    b = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": b})
    admin.describe_consumer_groups(["probe"])["probe"].exception(60)  # creates __consumer_offsets
    coordinators = {p: cluster.wait_for_leader("__consumer_offsets", p) for p in range(2)}
    assert other in coordinators.values(), f"both __consumer_offsets partitions on the controller: {coordinators}"
    group = next(g for g in (f"hidden-group-{i}" for i in range(100)) if coordinators[partition_for(g, 2)] == other)
    topic = f"hidden-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 4, replica_assignment=[[other]] * 4)])[topic].result(30)
    for p in range(4):
        cluster.wait_for_leader(topic, p)

    service.add_partitions(topic, "1")
    cluster.wait_until(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3,
                       what="the client's view to lose partition 1")
    producer = Producer({"bootstrap.servers": b, "linger.ms": 0})
    for client_partition, count in ((0, 3), (1, 5), (2, 7)):
        for i in range(count):
            producer.produce(topic, f"{client_partition}-{i}".encode(), partition=client_partition)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": b, "group.id": group, "enable.auto.commit": False})
    try:
        # The client's partition 1 is the real partition 2.
        consumer.commit(offsets=[TopicPartition(topic, 1, 4)], asynchronous=False)

        # The client still sees the renumbered view.
        assert [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(3)] == [
            (0, 3), (0, 5), (0, 7)]
        (committed,) = consumer.committed([TopicPartition(topic, 1)], timeout=10)
        assert committed.offset == 4
    finally:
        consumer.close()

    # The controller's exporter series name the real partitions: the hidden 1 empty, 2 and 3 as written.
    def series() -> Samples:
        return scrape(metrics_port)

    def current(samples: Samples) -> dict[str, float]:
        return {dict(labels)["partition"]: v for (name, labels), v in samples.items()
                if name == "kafka_topic_partition_current_offset" and dict(labels)["topic"] == topic}

    cluster.wait_until(lambda: current(series()) == {"0": 3, "1": 0, "2": 5, "3": 7},
                       what="the real offsets in the series")
    samples = series()
    assert samples[("kafka_topic_partitions", frozenset({("topic", topic)}))] == 4
    committed_series = {dict(labels)["partition"]: v for (name, labels), v in samples.items()
                        if name == "kafka_consumergroup_current_offset" and dict(labels)["consumergroup"] == group}
    assert committed_series == {"0": -1, "1": -1, "2": 4, "3": -1}
    assert samples[("kafka_consumergroup_lag", frozenset({("consumergroup", group), ("topic", topic),
                                                         ("partition", "2")}))] == 1
