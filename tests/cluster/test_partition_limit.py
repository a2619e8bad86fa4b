"""A broker of a cluster at its partition limit (``max.broker.partitions``).

The controller's broker accepts a CreateTopics whose replicas on itself fit (it checks only its
own); the other broker, at its limit, refuses its new replicas in LeaderAndIsr with
KAFKA_STORAGE_ERROR and keeps its log dir online; the controller marks them offline, so those
partitions have no leader, while the broker serves the partitions it holds. (The CreateTopics
answer itself is not checked: as in Kafka it may come while the metadata still shows the
leader the controller chose first; tests/integration/test_descriptor_limit.py checks the
REQUEST_TIMED_OUT of partitions that never got a leader on one broker.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import Cluster
from tests.support.topics import round_trip

pytestmark = pytest.mark.timeout(240)

LIMIT = 4


def test_new_replicas_beyond_a_brokers_limit(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(2)
    controller = cluster.wait_for_controller()
    other = 3 - controller
    # The limit on the broker that is not the controller: CreateTopics goes to the controller,
    # which checks only its own replicas, so the other broker's LeaderAndIsr is what refuses.
    cluster.broker(other).overrides["max.broker.partitions"] = str(LIMIT)
    cluster.restart(other)
    cluster.wait_for_registered([1, 2])
    assert cluster.wait_for_controller() == controller
    admin = AdminClient({"bootstrap.servers": cluster.broker(controller).bootstrap})
    assignment = [[controller]] * 3 + [[other]] * (LIMIT + 2)
    topic = "limited"
    futures = admin.create_topics([NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)],
                                  operation_timeout=5, request_timeout=60)
    with contextlib.suppress(KafkaException):
        futures[topic].result(60)
    for p in range(3 + LIMIT):
        cluster.wait_for_leader(topic, p)
    refused = (3 + LIMIT, 4 + LIMIT)
    cluster.wait_until(lambda: all(cluster.leader(topic, p) in (None, -1) for p in refused), 30,
                       f"partitions {refused} without a leader")
    log = cluster.broker(other).new_log()
    assert "refused 2 new replicas" in log and f"may host at most {LIMIT}" in log, log[-3000:]
    assert "log directory" not in log  # no "log directory ... is offline": the dir stayed online
    # The other broker serves the partitions it holds; so does the controller's.
    round_trip(cluster.bootstrap, topic, 3)
    round_trip(cluster.bootstrap, topic, 2 + LIMIT)
    round_trip(cluster.bootstrap, topic, 0)
