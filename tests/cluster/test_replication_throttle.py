"""Replication throttling (KIP-73) on a real ZooKeeper + 3-broker cluster.

`kaflet reassign-partitions --execute --throttle` adds a replica to a partition holding 16 MB:
the new follower copies at about the throttle rate (200 KB/s) instead of at disk speed, the
throttle is raised with ``--execute --additional --throttle``, the copy completes, and
``--verify`` removes every throttle config. /metrics shows the throttled byte rates. The bounds
are many times the expected values.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from kaflet.metadata.zk_testing import free_ports
from tests.cluster.test_cli_cluster import tool
from tests.cluster.test_faults import new_topic
from tests.support.cluster import Cluster
from tests.support.metrics import scrape

pytestmark = pytest.mark.timeout(240)

TOTAL = 16 * 1024 * 1024
THROTTLE = 200_000  # bytes/s


def _log_bytes(cluster: Cluster, broker_id: int, topic: str) -> int:
    d = Path(cluster.broker(broker_id).data_dir) / f"{topic}-0"
    if not d.exists():
        return 0
    return sum(f.stat().st_size for f in d.glob("*.log"))


def _configs(admin: AdminClient, rtype: ConfigResource.Type, name: str) -> dict[str, str | None]:
    res = ConfigResource(rtype, name)
    entries = admin.describe_configs([res], request_timeout=15)[res].result(20)
    return {k: e.value for k, e in entries.items() if not e.is_default}


def _alter(admin: AdminClient, rtype: ConfigResource.Type, name: str, **values: str | None) -> None:
    res = ConfigResource(rtype, name, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v,
                    incremental_operation=AlterConfigOpType.DELETE if v is None else AlterConfigOpType.SET)
        for k, v in values.items()])
    admin.incremental_alter_configs([res])[res].result(20)


def _topic_with_data(cluster: Cluster) -> str:
    topic = new_topic(cluster, [[1]], min_isr=1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20,
                         "compression.type": "none"})
    value = os.urandom(10_000)  # incompressible, though nothing compresses here
    for _ in range(TOTAL // len(value)):
        producer.produce(topic, value)
        producer.poll(0)
    assert producer.flush(120) == 0
    assert _log_bytes(cluster, 1, topic) >= TOTAL
    return topic


def test_throttled_reassignment_copies_slowly_then_completes(cluster_factory: Callable[..., Cluster],
                                                              tmp_path: Path) -> None:
    ports = free_ports(2)
    cluster = cluster_factory(3, broker_overrides={
        bid: {"metrics.listener": f"http://127.0.0.1:{port}"} for bid, port in zip((1, 2), ports, strict=True)})
    topic = _topic_with_data(cluster)

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 2]}]}))
    started = tool(cluster, "reassign-partitions", "--reassignment-json-file", str(plan), "--execute",
                   "--throttle", str(THROTTLE))
    assert started.returncode == 0, started
    t0 = time.monotonic()
    assert "The inter-broker throttle limit was set to 200000 B/s" in started.stdout, started
    assert "Warning: You must run --verify periodically" in started.stdout

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assert _configs(admin, ConfigResource.Type.TOPIC, topic) == {
        "leader.replication.throttled.replicas": "0:1", "follower.replication.throttled.replicas": "0:2",
        "min.insync.replicas": "1"}
    for b in (1, 2):
        broker_cfg = _configs(admin, ConfigResource.Type.BROKER, str(b))
        assert broker_cfg["leader.replication.throttled.rate"] == str(THROTTLE)
        assert broker_cfg["follower.replication.throttled.rate"] == str(THROTTLE)

    # The follower starts copying, then is held to about 200 KB/s: after ~4 s it has about
    # 1 MB (one fetch of replica.fetch.max.bytes may pass before the rate is over) plus 4 x 200 KB.
    # Unthrottled, the 16 MB are copied in a second or two; the bound is 6 MB, half of what is left.
    cluster.wait_until(lambda: _log_bytes(cluster, 2, topic) > 0, 30, "the new replica starts copying",
                       topics=[topic])
    time.sleep(4)
    copied = _log_bytes(cluster, 2, topic)
    elapsed = time.monotonic() - t0
    assert copied < 6 * 1024 * 1024, (copied, elapsed)
    # /metrics: the throttled byte rates, about the bound (unthrottled: some 80 times it).
    leader_rate = scrape(ports[0])[("kafka_server_leaderreplication_byte_rate", frozenset())]
    follower_rate = scrape(ports[1])[("kafka_server_followerreplication_byte_rate", frozenset())]
    for rate in (leader_rate, follower_rate):
        assert 0 < rate < 10 * THROTTLE, (leader_rate, follower_rate)
    still = tool(cluster, "reassign-partitions", "--reassignment-json-file", str(plan), "--verify")
    assert f"Reassignment of partition {topic}-0 is still in progress." in still.stdout, still
    assert "Clearing" not in still.stdout  # throttles stay while the move goes on
    assert _configs(admin, ConfigResource.Type.TOPIC, topic).get("follower.replication.throttled.replicas") == "0:2"

    # Raise the throttle (Kafka's way: resubmit with --additional); the copy then completes.
    raised = tool(cluster, "reassign-partitions", "--reassignment-json-file", str(plan), "--execute",
                  "--additional", "--throttle", str(1 << 40))
    assert raised.returncode == 0, raised
    cluster.wait_for_isr(topic, 0, [1, 2], timeout=90)
    cluster.wait_until(lambda: _log_bytes(cluster, 2, topic) >= TOTAL, 30, "the whole log copied", topics=[topic])

    done = tool(cluster, "reassign-partitions", "--reassignment-json-file", str(plan), "--verify")
    assert done.returncode == 0, done
    assert done.stdout == (f"Status of partition reassignment:\nReassignment of partition {topic}-0 is complete.\n"
                           f"Clearing broker-level throttles on brokers 1,2,3\n"
                           f"Clearing topic-level throttles on topic {topic}\n"), done
    assert _configs(admin, ConfigResource.Type.TOPIC, topic) == {"min.insync.replicas": "1"}
    for b in (1, 2, 3):
        broker_cfg = _configs(admin, ConfigResource.Type.BROKER, str(b))
        assert "leader.replication.throttled.rate" not in broker_cfg
        assert "follower.replication.throttled.rate" not in broker_cfg


@pytest.mark.parametrize("side", ["leader", "follower"])
def test_each_side_throttles_on_its_own(cluster_factory: Callable[..., Cluster], tmp_path: Path, side: str) -> None:
    """Only the leader (broker 1) or only the new follower (broker 2) has a rate and a throttled
    replica: either alone holds the copy back; deleting the rate lets it complete."""
    cluster = cluster_factory(3)
    topic = _topic_with_data(cluster)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    broker, replicas = ("1", "0:1") if side == "leader" else ("2", "0:2")
    _alter(admin, ConfigResource.Type.TOPIC, topic, **{f"{side}_replication_throttled_replicas": replicas})
    _alter(admin, ConfigResource.Type.BROKER, broker, **{f"{side}_replication_throttled_rate": str(THROTTLE)})
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 2]}]}))
    started = tool(cluster, "reassign-partitions", "--reassignment-json-file", str(plan), "--execute")
    assert started.returncode == 0, started
    cluster.wait_until(lambda: _log_bytes(cluster, 2, topic) > 0, 30, "the new replica starts copying",
                       topics=[topic])
    time.sleep(4)
    assert _log_bytes(cluster, 2, topic) < 6 * 1024 * 1024  # unthrottled: all 16 MB by now
    _alter(admin, ConfigResource.Type.BROKER, broker, **{f"{side}_replication_throttled_rate": None})
    cluster.wait_for_isr(topic, 0, [1, 2], timeout=90)
    assert _log_bytes(cluster, 2, topic) >= TOTAL
