"""Partition reassignment on a real ZooKeeper + 3-broker cluster, with unmodified clients.

The moves are started by `kaflet reassign-partitions` (its own process), kafka-python's
KafkaAdminClient (AlterPartitionReassignments / ListPartitionReassignments, sent to the
controller) or the legacy /admin/reassign_partitions node (written with kazoo, as Kafka 2.x's
tool with --zookeeper does). A broker is paused (SIGSTOP) where a reassignment must stay in
progress for a moment: its new replica cannot catch up while it is stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    InvalidReplicationAssignmentError,
    UnknownTopicOrPartitionError,
)

from kaflet.metadata import zkdata
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from tests.cluster.test_cli_cluster import tool
from tests.cluster.test_faults import assert_replicas_identical, new_topic, producers, verify
from tests.support.cli import run
from tests.support.cluster import Cluster
from tests.support.faults import FAST_FAILOVER, AckedProducer, read_partitions
from tests.support.raw_client import RawClient

__all__ = ["producers"]  # fixture

pytestmark = pytest.mark.timeout(240)


@contextmanager
def admin(cluster: Cluster) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=15000)
    try:
        yield client
    finally:
        client.close()


@contextmanager
def paused(cluster: Cluster, broker_id: int) -> Iterator[None]:
    """The broker's process stopped (SIGSTOP) for the block: alive to ZooKeeper (for less than
    its session timeout), but it answers nothing."""
    pid = cluster.broker(broker_id).pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def reassignment_node(cluster: Cluster) -> dict[tuple[str, int], list[int]] | None:
    got = cluster.zk.exists(zkdata.REASSIGN_PARTITIONS_PATH)
    if got is None:
        return None
    data, _ = cluster.zk.get(zkdata.REASSIGN_PARTITIONS_PATH)
    return zkdata.parse_reassign_partitions(data)


def topic_node(cluster: Cluster, topic: str) -> zkdata.TopicAssignment:
    data, _ = cluster.zk.get(zkdata.topic_path(topic))
    return zkdata.parse_topic(topic, data)


def partition_dir(cluster: Cluster, broker_id: int, topic: str, partition: int = 0) -> Path:
    return Path(cluster.broker(broker_id).data_dir) / f"{topic}-{partition}"


def wait_moved(cluster: Cluster, topic: str, replicas: list[int], timeout: float = 60) -> None:
    """The reassignment is complete: the topic znode holds just the target replicas, all in sync."""
    def done() -> bool:
        t = topic_node(cluster, topic)
        return (t.partitions.get(0) == replicas and not t.adding_replicas and not t.removing_replicas
                and sorted(cluster.isr(topic, 0)) == sorted(replicas))
    cluster.wait_until(done, timeout, f"{topic}-0 moved to {replicas}", topics=[topic])


def test_move_while_producing_loses_nothing(cluster_factory: Callable[..., Cluster],
                                            producers: Callable[..., AckedProducer], tmp_path: Path) -> None:
    """[1,2] -> [2,3] with the CLI while an acks=all producer writes: the leader (1) leaves its
    broker, broker 3 ends with the same log as broker 2, broker 1's copy is deleted."""
    cluster = cluster_factory(3, overrides=FAST_FAILOVER)
    topic = new_topic(cluster, [[1, 2]], min_isr=2)
    assert cluster.wait_for_leader(topic, 0) == 1
    producer = producers(cluster, topic, 1)
    producer.wait_acked(500)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2, 3]}]}))

    proc = tool(cluster, "reassign-partitions", "--reassignment-json-file", str(plan), "--execute")
    assert (proc.returncode, proc.stderr) == (0, ""), proc
    current = json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]}]}, separators=(",", ":"))
    assert proc.stdout == (f"Current partition replica assignment\n\n{current}\n\nSave this to use as the "
                           f"--reassignment-json-file option during rollback\n"
                           f"Successfully started partition reassignment for {topic}-0\n")
    wait_moved(cluster, topic, [2, 3])
    assert cluster.wait_for_leader(topic, 0) == 2  # the first in-sync target replica
    producer.wait_more(300)  # the producer follows the leader to broker 2
    verify(cluster, producer, topic, 1)
    assert_replicas_identical(cluster, topic, [[2, 3]])
    cluster.wait_until(lambda: not partition_dir(cluster, 1, topic).exists(), 30,
                       f"broker 1's copy of {topic}-0 deleted", topics=[topic])
    # Every broker's metadata shows the new replicas.
    with admin(cluster) as a:
        assert a.list_partition_reassignments() == {}
    for b in (1, 2, 3):
        with closing(RawClient(cluster.broker(b).bootstrap)) as c:
            M = codec.request_class(ApiKey.METADATA)
            resp = c.request(ApiKey.METADATA, 1, M(topics=[M.MetadataRequestTopic(name=topic)]))
            assert [sorted(p.replica_nodes) for p in resp.topics[0].partitions] == [[2, 3]]
    verified = tool(cluster, "reassign-partitions", "--reassignment-json-file", str(plan), "--verify")
    assert verified.returncode == 0, verified
    assert verified.stdout == (f"Status of partition reassignment:\nReassignment of partition {topic}-0 is complete.\n"
                               f"Clearing broker-level throttles on brokers 1,2,3\n"
                               f"Clearing topic-level throttles on topic {topic}\n")
    listed = tool(cluster, "reassign-partitions", "--list")
    assert (listed.returncode, listed.stdout) == (0, "No partition reassignments found.\n")


def test_in_progress_listed_then_cancelled(cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    """While the new replica's broker is paused the reassignment stays in progress (listed, also
    in the Metadata answer); cancelling returns the partition to its original replicas and the
    new replica is deleted once its broker runs again. The clients talk to the controller only
    (a client asking the paused broker would wait for it)."""
    cluster = cluster_factory(3)
    c = cluster.wait_for_controller()
    a, x = (b for b in (1, 2, 3) if b != c)
    topic = new_topic(cluster, [[c, a]], min_isr=1)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [a, x]}]}))
    at_controller = cluster.broker(c).bootstrap

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run("reassign-partitions", "--bootstrap-server", at_controller, "--timeout", "15", *args)

    with paused(cluster, x), closing(RawClient(at_controller)) as raw:
        assert alter(raw, topic, [a, x]) == (0, [(0, None)])
        assert ongoing(raw) == {(topic, 0): ([a, x, c], [x], [c])}
        t = topic_node(cluster, topic)
        assert (t.partitions, t.adding_replicas, t.removing_replicas) == ({0: [a, x, c]}, {0: [x]}, {0: [c]})
        cluster.wait_until(lambda: _metadata_replicas(cluster, c, topic) == [a, x, c], 15,
                           "Metadata shows the replicas being moved", topics=[topic])
        listed = cli("--list")
        assert listed.stdout == (f"Current partition reassignments:\n{topic}-0: replicas: {a},{x},{c}. "
                                 f"adding: {x}. removing: {c}.\n"), listed
        progress = cli("--reassignment-json-file", str(plan), "--verify")
        assert progress.stdout.endswith(f"Reassignment of partition {topic}-0 is still in progress.\n"), progress
        # --preserve-throttles: clearing them would alter the paused broker's own configs.
        cancelled = cli("--reassignment-json-file", str(plan), "--cancel", "--preserve-throttles")
        assert (cancelled.returncode, cancelled.stdout) == (
            0, f"Successfully cancelled partition reassignment for: {topic}-0\n"), cancelled
        t = topic_node(cluster, topic)
        assert (sorted(t.partitions[0]), t.adding_replicas, t.removing_replicas) == (sorted([c, a]), {}, {})
        assert ongoing(raw) == {}
        assert alter(raw, topic, None) == (0, [(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)])
        again = cli("--reassignment-json-file", str(plan), "--cancel", "--preserve-throttles")
        assert again.stdout == "None of the specified partition reassignments are active.\n"
    # The paused broker runs again: it gets the LeaderAndIsr, then the StopReplica that deletes
    # its copy.
    cluster.wait_until(lambda: not partition_dir(cluster, x, topic).exists(), 30,
                       f"broker {x}'s copy of {topic}-0 deleted", topics=[topic])
    assert sorted(cluster.isr(topic, 0)) == sorted([c, a])
    assert cluster.leader(topic, 0) == c


def alter(raw: RawClient, topic: str, replicas: list[int] | None) -> tuple[int, list[tuple[int, str | None]]]:
    """AlterPartitionReassignments of ``topic``-0: (error, [(partition error, message)])."""
    AR = codec.request_class(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
    resp = raw.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, AR(timeout_ms=5000, topics=[
        AR.ReassignableTopic(name=topic, partitions=[AR.ReassignableTopic.ReassignablePartition(
            partition_index=0, replicas=replicas)])]))
    return resp.error_code, [(p.error_code, p.error_message) for t in resp.responses for p in t.partitions]


def ongoing(raw: RawClient) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    LR = codec.request_class(ApiKey.LIST_PARTITION_REASSIGNMENTS)
    resp = raw.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, LR(timeout_ms=5000, topics=None))
    assert resp.error_code == 0
    return {(t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
            for t in resp.topics for p in t.partitions}


def _metadata_replicas(cluster: Cluster, broker_id: int, topic: str) -> list[int]:
    with closing(RawClient(cluster.broker(broker_id).bootstrap)) as c:
        M = codec.request_class(ApiKey.METADATA)
        resp = c.request(ApiKey.METADATA, 1, M(topics=[M.MetadataRequestTopic(name=topic)]))
        return list(resp.topics[0].partitions[0].replica_nodes)


def test_bad_requests_get_kafkas_errors(cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    cluster = cluster_factory(3)
    topic = new_topic(cluster, [[1, 2]], min_isr=1)
    tp = TopicPartition(topic, 0)
    with admin(cluster) as a:
        got = a.alter_partition_reassignments({
            TopicPartition("no-such-topic", 0): [1, 2],
            TopicPartition(topic, 5): [1, 2],
            tp: [1, 7],   # broker 7 does not exist
        })
        assert got == {TopicPartition("no-such-topic", 0): UnknownTopicOrPartitionError,
                       TopicPartition(topic, 5): UnknownTopicOrPartitionError,
                       tp: InvalidReplicationAssignmentError}
        assert a.alter_partition_reassignments({tp: [2, 2]}) == {tp: InvalidReplicationAssignmentError}
        assert a.list_partition_reassignments() == {}
    # An empty list (which kafka-python refuses to send) and a negative id, over a raw connection.
    controller = cluster.wait_for_controller()
    LR = codec.request_class(ApiKey.LIST_PARTITION_REASSIGNMENTS)

    def alter_at(broker: int, replicas: list[int]) -> tuple[int, list[tuple[int, str | None]]]:
        with closing(RawClient(cluster.broker(broker).bootstrap)) as c:
            return alter(c, topic, replicas)

    assert alter_at(controller, []) == (0, [(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                          "Empty replica list specified in partition reassignment.")])
    assert alter_at(controller, [1, -3]) == (0, [(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                               "Invalid broker id in replica list: [1, -3]")])
    assert topic_node(cluster, topic).partitions == {0: [1, 2]}
    # The APIs are the controller's: any other broker answers NOT_CONTROLLER.
    other = next(b for b in (1, 2, 3) if b != controller)
    assert alter_at(other, [2, 3]) == (ErrorCode.NOT_CONTROLLER, [])
    with closing(RawClient(cluster.broker(other).bootstrap)) as c:
        assert c.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, LR(timeout_ms=5000, topics=None)).error_code == \
            ErrorCode.NOT_CONTROLLER
    # The CLI checks the plan before sending it, as Kafka's tool does.
    plan = tmp_path / "bad.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 9]}]}))
    proc = tool(cluster, "reassign-partitions", "--reassignment-json-file", str(plan), "--execute")
    assert (proc.returncode, proc.stderr) == (1, "Error: Unknown broker id 9\n")
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 1]}]}))
    proc = tool(cluster, "reassign-partitions", "--reassignment-json-file", str(plan), "--execute")
    assert proc.returncode == 1 and "may not contain duplicate entries" in proc.stderr
    assert topic_node(cluster, topic).partitions == {0: [1, 2]}
    # --generate proposes a plan over the given brokers (same partitions and replication factor).
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    proc = tool(cluster, "reassign-partitions", "--generate", "--topics-to-move-json-file", str(topics),
                "--broker-list", "2,3")
    assert proc.returncode == 0, proc
    lines = proc.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment" and lines[3] == "Proposed partition reassignment configuration"
    assert json.loads(lines[1])["partitions"] == [
        {"topic": topic, "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]}]
    proposed = json.loads(lines[4])["partitions"]
    assert [(e["topic"], e["partition"], sorted(e["replicas"])) for e in proposed] == [(topic, 0, [2, 3])]


def test_controller_killed_mid_reassignment_then_it_completes(cluster_factory: Callable[..., Cluster]) -> None:
    """A reassignment written to /admin/reassign_partitions (Kafka 2.x's --zookeeper tool) is in
    progress when the controller is SIGKILLed; the next controller resumes it from the topic
    znode, completes it and deletes the node."""
    cluster = cluster_factory(3, overrides={**FAST_FAILOVER, "zookeeper.session.timeout.ms": "8000"})
    controller = cluster.wait_for_controller()
    a, b = (x for x in (1, 2, 3) if x != controller)
    topic = new_topic(cluster, [[controller, a]], min_isr=1)
    client_topic_records(cluster, topic, 200)
    node = zkdata.REASSIGN_PARTITIONS_PATH
    with paused(cluster, b):
        cluster.zk.create(node, zkdata.reassign_partitions_json({(topic, 0): [a, b]}))
        cluster.wait_until(lambda: topic_node(cluster, topic).adding_replicas == {0: [b]}, 15,
                           "reassignment started", topics=[topic])
        cluster.kill(controller)
    assert cluster.wait_for_controller(exclude=(controller,)) in (a, b)
    wait_moved(cluster, topic, [a, b])
    cluster.wait_until(lambda: reassignment_node(cluster) is None, 30, f"{node} deleted", topics=[topic])
    assert cluster.wait_for_leader(topic, 0) in (a, b)
    stored = read_partitions(cluster.bootstrap, topic, [0])
    assert [v for _o, v in stored[0]] == [b"r%d" % i for i in range(200)]
    assert_replicas_identical(cluster, topic, [[a, b]])


def client_topic_records(cluster: Cluster, topic: str, n: int) -> None:
    """``n`` records r0..r(n-1) to partition 0, acknowledged by all in-sync replicas."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    failed: list[str] = []
    for i in range(n):
        p.produce(topic, b"r%d" % i, partition=0,
                  on_delivery=lambda err, _m: failed.append(str(err)) if err is not None else None)
    assert p.flush(30) == 0 and not failed, failed


def test_move_to_another_broker_into_a_chosen_log_dir(cluster_factory: Callable[..., Cluster],
                                                      producers: Callable[..., AckedProducer], tmp_path: Path) -> None:
    """[1] -> [2] with `log_dirs` naming broker 2's second log dir (not the one its placement
    rule picks): the tool sends AlterReplicaLogDirs to broker 2 until the replica exists there
    (REPLICA_NOT_AVAILABLE until then, the dir remembered), and broker 2 ends with the
    partition in that dir; nothing acknowledged is lost and --verify reports both moves done."""
    d2a, d2b = tmp_path / "b2-a", tmp_path / "b2-b"
    cluster = cluster_factory(2, overrides=FAST_FAILOVER, broker_overrides={2: {"log.dirs": f"{d2a},{d2b}"}})
    topic = new_topic(cluster, [[1]], min_isr=1)
    producer = producers(cluster, topic, 1)
    producer.wait_acked(300)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [2], "log_dirs": [str(d2b)]}]}))
    proc = tool(cluster, "reassign-partitions", "--reassignment-json-file", str(plan), "--execute")
    assert proc.returncode == 0, proc
    assert f"Successfully started moving log directory to {d2b} for replica {topic}-0 with broker 2" in proc.stdout
    wait_moved(cluster, topic, [2])
    cluster.wait_until(lambda: (d2b / f"{topic}-0").is_dir() and not [
        p for p in d2b.iterdir() if p.name.endswith("-future")], 30, f"{topic}-0 in {d2b}", topics=[topic])
    assert not (d2a / f"{topic}-0").exists()
    out = tool(cluster, "reassign-partitions", "--reassignment-json-file", str(plan), "--verify").stdout
    assert f"Reassignment of partition {topic}-0 is complete." in out
    assert f"Reassignment of replica {topic}-0-2 completed successfully." in out
    producer.wait_more(200)
    verify(cluster, producer, topic, 1)
