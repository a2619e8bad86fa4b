"""The cluster test harness (tests/support/cluster.py) itself, against a real ZooKeeper.

The state readers are checked on nodes written in Kafka's layout by kaflet's own serializers;
the process side on real broker processes. Tests that need brokers to form a cluster are in
test_cli_cluster.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from kaflet.metadata import zkdata
from tests.support.cluster import Cluster, processes_mentioning

pytestmark = pytest.mark.timeout(120)


def write_kafka_layout(cluster: Cluster) -> None:
    """Nodes as Kafka 2.8's controller writes them: two brokers, a controller, one topic."""
    zk = cluster.zk
    zk.ensure_path(zkdata.BROKER_IDS_PATH)
    for bid in (1, 2):
        info = zkdata.BrokerInfo(bid, [zkdata.EndPoint("PLAINTEXT", "127.0.0.1", 9090 + bid, "PLAINTEXT")],
                                 rack="r1" if bid == 1 else None)
        zk.create(zkdata.broker_path(bid), zkdata.broker_json(info), ephemeral=True)
    zk.create(zkdata.CONTROLLER_EPOCH_PATH, zkdata.controller_epoch_bytes(3))
    zk.create(zkdata.CONTROLLER_PATH, zkdata.controller_json(2, 1700000000000), ephemeral=True)
    zk.create(zkdata.topic_path("orders"), zkdata.topic_json({0: [1, 2], 1: [2, 1]}, zkdata.random_uuid()),
              makepath=True)
    for p, leader in ((0, 1), (1, 2)):
        state = zkdata.LeaderAndIsr(leader=leader, leader_epoch=4, isr=[leader], controller_epoch=3)
        zk.create(zkdata.partition_state_path("orders", p), zkdata.partition_state_json(state), makepath=True)


def test_state_readers_and_waits(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(0)  # ZooKeeper only
    assert cluster.zk_connect == cluster.zookeeper.connect_string + cluster.chroot
    assert cluster.controller_id() is None and cluster.registered_brokers() == [] and cluster.topics() == []
    write_kafka_layout(cluster)
    assert cluster.controller_id() == 2 and cluster.controller_epoch() == 3
    assert cluster.registered_brokers() == [1, 2]
    reg = cluster.broker_registration(1)
    assert reg is not None and reg.rack == "r1" and reg.endpoints[0].port == 9091
    assert cluster.topics() == ["orders"]
    assert cluster.assignment("orders") == {0: [1, 2], 1: [2, 1]}
    state = cluster.partition_state("orders", 0)
    assert state is not None and (state.leader, state.leader_epoch, state.isr, state.zk_version) == (1, 4, [1], 0)
    assert cluster.leader("orders", 1) == 2 and cluster.isr("orders", 1) == [2]
    assert cluster.partition_state("orders", 7) is None and cluster.assignment("nope") is None
    assert cluster.wait_for_controller(timeout=5) == 2
    cluster.wait_for_registered([1, 2], timeout=5)

    # A change made while the harness waits: a new leader, an expanded ISR.
    def elect() -> None:
        moved = zkdata.LeaderAndIsr(leader=2, leader_epoch=5, isr=[2, 1], controller_epoch=3)
        cluster.zk.set(zkdata.partition_state_path("orders", 0), zkdata.partition_state_json(moved))

    timer = threading.Timer(0.5, elect)
    timer.start()
    try:
        assert cluster.wait_for_leader("orders", 0, timeout=10, exclude=(1,)) == 2
    finally:
        timer.join()
    assert cluster.wait_for_isr("orders", 0, [1, 2], timeout=5) == [1, 2]
    assert cluster.partition_state("orders", 0).zk_version == 1  # type: ignore[union-attr]

    text = str(cluster.state())
    assert "controller: 2 (epoch 3)" in text and "registered brokers (/brokers/ids): [1, 2]" in text
    assert "orders-0: replicas=[1, 2] leader=2 leader_epoch=5 isr=[2, 1]" in text


def test_wait_until_failure_shows_last_state(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(0)
    write_kafka_layout(cluster)
    assert cluster.wait_until(lambda: cluster.leader("orders", 1), timeout=1) == 2

    def broken() -> bool:
        raise KeyError("no such thing")

    with pytest.raises(AssertionError) as failed:
        cluster.wait_until(broken, timeout=0.3, what="the impossible")
    message = str(failed.value)
    assert message.startswith("timed out after 0.3s waiting for the impossible")
    assert "last error: KeyError" in message
    assert "controller: 2 (epoch 3)" in message and "orders-1: replicas=[2, 1] leader=2" in message
    with pytest.raises(AssertionError, match=r"a leader of orders-1 other than \[2\]"):
        cluster.wait_for_leader("orders", 1, timeout=0.3, exclude=(2,))


def test_failed_start_stops_every_process(tmp_path: Path) -> None:
    base = tmp_path / "failing"
    # Broker 2 cannot start (an invalid config value); whichever broker fails first, nothing of
    # the cluster may be left running.
    cluster = Cluster(base, 3, broker_overrides={2: {"log.segment.bytes": "not-a-number"}})
    with pytest.raises(RuntimeError, match=r"broker \d") as failed:
        cluster.start(timeout=60)
    assert "exited with" in str(failed.value)
    assert processes_mentioning(str(base)) == []
    assert all(not b.alive for b in cluster.brokers.values())
    assert cluster.zookeeper.pid is None
    # Each broker had its own data dir and log beside it.
    assert {p.name for p in base.iterdir()} >= {"zookeeper", "broker-1", "broker-1.log", "broker-2.log"}


def test_cluster_configures_each_broker(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "c", 3, overrides={"num.partitions": "2"},
                      broker_overrides={3: {"broker.rack": "rack-c"}})
    assert [b.overrides["broker.id"] for b in cluster.brokers.values()] == ["1", "2", "3"]
    assert all(b.overrides["num.partitions"] == "2" for b in cluster.brokers.values())
    assert cluster.brokers[3].overrides["broker.rack"] == "rack-c" and "broker.rack" not in cluster.brokers[1].overrides
    assert len({b.data_dir for b in cluster.brokers.values()}) == 3
    with pytest.raises(ValueError, match="unknown broker ids"):
        Cluster(tmp_path / "d", 2, broker_overrides={3: {}})
    with pytest.raises(ValueError, match="chroot"):
        Cluster(tmp_path / "e", 1, chroot="kaflet")
    cluster.close()  # never started: nothing to stop, and no error
