"""unclean.leader.election.enable turned on at run time brings an offline partition back, as in
Kafka: through the cluster-wide broker default, or through the topic's own config."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tests.support.cli import run
from tests.support.cluster import Cluster

pytestmark = pytest.mark.timeout(240)


def _offline_partition(cluster: Cluster, admin: AdminClient) -> str:
    """A topic on brokers 1 and 2 whose only in-sync replica (1) is down while 2 is up."""
    topic = f"u-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2]])])[topic].result(60)
    cluster.wait_for_isr(topic, 0, [1, 2], timeout=60)
    cluster.stop(2)  # controlled shutdown takes 2 out of the ISR
    cluster.wait_for_isr(topic, 0, [1], timeout=60)
    cluster.kill(1)  # the last in-sync replica dies: no clean leader is left
    cluster.start_broker(2)
    cluster.wait_for_registered([2, 3], timeout=60)
    cluster.wait_until(lambda: cluster.leader(topic, 0) in (None, -1), 30, f"{topic}-0 offline", topics=[topic])
    return topic


@pytest.mark.parametrize("scope", ["broker-default", "topic"])
def test_enabling_unclean_election_at_run_time(cluster_factory: Callable[..., Cluster], scope: str) -> None:
    cluster = cluster_factory(3)
    cluster.wait_for_registered([1, 2, 3])
    admin = AdminClient({"bootstrap.servers": cluster.broker(3).bootstrap})
    topic = _offline_partition(cluster, admin)
    if scope == "broker-default":
        # The cluster-wide default (kafka-configs --entity-default), which the client library
        # cannot name.
        proc = run("configs", "--bootstrap-server", cluster.broker(3).bootstrap, "--entity-type", "brokers",
                   "--entity-default", "--alter", "--add-config", "unclean.leader.election.enable=true")
        assert proc.returncode == 0, proc
    else:
        # A client that starts now knows broker 1 is gone (one made before may still pick it).
        admin = AdminClient({"bootstrap.servers": cluster.broker(3).bootstrap})
        resource = ConfigResource("TOPIC", topic)
        resource.add_incremental_config(ConfigEntry("unclean.leader.election.enable", "true",
                                                    incremental_operation=AlterConfigOpType.SET))
        for fut in admin.incremental_alter_configs([resource]).values():
            fut.result(30)
    assert cluster.wait_for_leader(topic, 0, timeout=60) == 2
