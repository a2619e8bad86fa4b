"""The command-line tools and the cluster harness on a real 3-broker ZooKeeper-mode cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cli import CLI, free_port_range, run
from tests.support.cluster import Cluster, processes_mentioning
from tests.support.netns import Network

pytestmark = pytest.mark.timeout(300)


def new_topic(cluster: Cluster, assignment: list[list[int]], configs: dict[str, str] | None = None) -> str:
    """A topic with an explicit replica assignment, created through the cluster."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # confluent-kafka wants the partition count with an assignment (and no replication factor).
    futures = admin.create_topics([NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment,
                                           config=configs or {})],
                                  request_timeout=30)
    futures[name].result(timeout=40)
    for p, replicas in enumerate(assignment):
        cluster.wait_for_isr(name, p, replicas, timeout=30)
    return name


def tool(cluster: Cluster, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run(command, "--bootstrap-server", cluster.bootstrap, "--timeout", "15", *args)


def describe(cluster: Cluster, topic: str, *report: str) -> list[str]:
    proc = tool(cluster, "topics", "--describe", "--topic", topic, *report)
    assert proc.returncode == 0, proc
    return proc.stdout.splitlines()


def test_cluster_forms_and_fails_over(cluster: Cluster) -> None:
    cluster.wait_for_registered([1, 2, 3])
    for bid, broker in cluster.brokers.items():
        reg = cluster.broker_registration(bid)
        assert reg is not None and reg.endpoint("PLAINTEXT") is not None
        assert reg.endpoint("PLAINTEXT").port == broker.port  # type: ignore[union-attr]
    first = cluster.wait_for_controller()
    epoch = cluster.controller_epoch()
    assert epoch is not None
    cluster.kill(first)
    second = cluster.wait_for_controller(exclude=(first,))
    cluster.wait_for_registered(sorted({1, 2, 3} - {first}))
    assert (cluster.controller_epoch() or 0) > epoch
    cluster.restart(first)
    cluster.wait_for_registered([1, 2, 3])
    assert cluster.controller_id() == second  # a returning broker does not take the controller back


def test_describe_reports_with_a_dead_broker(cluster: Cluster) -> None:
    at_two = new_topic(cluster, [[1, 2, 3], [2, 3, 1]], {"min.insync.replicas": "2"})
    needs_three = new_topic(cluster, [[1, 2, 3]], {"min.insync.replicas": "3"})
    assert describe(cluster, at_two, "--under-replicated-partitions") == []
    cluster.kill(3)
    for topic, parts in ((at_two, 2), (needs_three, 1)):
        for p in range(parts):
            cluster.wait_until(lambda t=topic, q=p: 3 not in cluster.isr(t, q), 30, f"3 out of the ISR of {topic}-{p}")
    # Clients see the brokers' metadata (UpdateMetadata), which follows ZooKeeper shortly.
    def two_under_replicated() -> list[str] | None:
        lines = describe(cluster, at_two, "--under-replicated-partitions")
        return lines if len(lines) == 2 else None

    for line in cluster.wait_until(two_under_replicated, 30, f"two under-replicated partitions of {at_two}"):
        assert line.startswith(f"\tTopic: {at_two}\tPartition: ") and line.endswith("\tOffline: 3"), line
        isr = line.split("\tIsr: ")[1].split("\t")[0].split(",")
        assert "3" not in isr and len(isr) == 2, line
    assert len(describe(cluster, at_two, "--at-min-isr-partitions")) == 2
    assert describe(cluster, at_two, "--under-min-isr-partitions") == []
    assert len(describe(cluster, needs_three, "--under-min-isr-partitions")) == 1
    assert describe(cluster, at_two, "--unavailable-partitions") == []
    cluster.restart(3, hard=True)
    cluster.wait_for_isr(at_two, 0, [1, 2, 3])
    cluster.wait_for_isr(at_two, 1, [1, 2, 3])
    cluster.wait_until(lambda: describe(cluster, at_two, "--under-replicated-partitions") == [], 30,
                       "no under-replicated partitions after the restart")


def test_leader_election_preferred(cluster: Cluster, tmp_path: Path) -> None:
    topic = new_topic(cluster, [[1, 2, 3]])
    assert cluster.wait_for_leader(topic, 0) == 1
    cluster.kill(1)
    moved = cluster.wait_for_leader(topic, 0, exclude=(1,))
    assert moved in (2, 3)
    cluster.start_broker(1)
    cluster.wait_for_isr(topic, 0, [1, 2, 3])
    assert cluster.leader(topic, 0) == moved  # no automatic move back within the test

    proc = tool(cluster, "leader-election", "--election-type", "preferred", "--topic", topic, "--partition", "0")
    assert (proc.returncode, proc.stderr) == (0, ""), proc
    assert proc.stdout == f"Successfully completed leader election (PREFERRED) for partitions {topic}-0\n"
    assert cluster.wait_for_leader(topic, 0) == 1
    path = tmp_path / "elect.json"
    path.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0}]}))
    again = tool(cluster, "leader-election", "--election-type", "preferred", "--path-to-json-file", str(path))
    assert (again.returncode, again.stdout) == (0, f"Valid replica already elected for partitions {topic}-0\n")
    everything = tool(cluster, "leader-election", "--election-type", "preferred", "--all-topic-partitions")
    assert everything.returncode == 0 and topic not in everything.stdout


def test_leader_election_unclean(cluster: Cluster) -> None:
    topic = new_topic(cluster, [[1, 2]], {"unclean.leader.election.enable": "false"})
    cluster.kill(2)
    cluster.wait_for_isr(topic, 0, [1])
    cluster.kill(1)
    cluster.wait_until(lambda: cluster.leader(topic, 0) is None, 30, f"{topic}-0 without a leader")
    cluster.start_broker(2)  # out of the ISR: a clean election cannot pick it
    cluster.wait_for_registered([2, 3])
    assert cluster.leader(topic, 0) is None
    unavailable = describe(cluster, topic, "--unavailable-partitions")
    assert len(unavailable) == 1 and "\tLeader: none\t" in unavailable[0]

    proc = tool(cluster, "leader-election", "--election-type", "unclean", "--topic", topic, "--partition", "0")
    assert (proc.returncode, proc.stderr) == (0, ""), proc
    assert proc.stdout == f"Successfully completed leader election (UNCLEAN) for partitions {topic}-0\n"
    assert cluster.wait_for_leader(topic, 0) == 2


def test_harness_broker_overrides_reach_zookeeper(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, broker_overrides={2: {"broker.rack": "rack-b"}}, ensemble=3)
    cluster.wait_for_registered([1, 2, 3])
    assert cluster.broker_registration(2).rack == "rack-b"  # type: ignore[union-attr]
    assert cluster.broker_registration(1).rack is None  # type: ignore[union-attr]
    # The brokers ride out the loss of the ZooKeeper leader (a quorum of two remains).
    ensemble = cluster.zookeeper
    leader = ensemble.leader_id()  # type: ignore[union-attr]
    ensemble.kill(leader)  # type: ignore[union-attr]
    ensemble.wait_for_leader(exclude=(leader,))  # type: ignore[union-attr]
    topic = new_topic(cluster, [[1, 2, 3]])
    assert cluster.wait_for_leader(topic, 0) == 1


def test_partitioned_controller_is_replaced_and_rejoins(network: Network, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "c", 3, network=network, overrides={"zookeeper.session.timeout.ms": "6000"})
    try:
        cluster.start(timeout=90)
        cluster.wait_for_registered([1, 2, 3])
        old = cluster.wait_for_controller()
        network.cut(old)  # its ZooKeeper session expires: /controller and its registration go
        new = cluster.wait_for_controller(timeout=60, exclude=(old,))
        cluster.wait_for_registered(sorted({1, 2, 3} - {old}), timeout=60)
        network.restore(old)
        cluster.wait_for_registered([1, 2, 3], timeout=60)
        assert cluster.controller_id() == new
    finally:
        cluster.close()


def test_dev_cluster_serves_and_restarts_on_its_data(tmp_path: Path) -> None:
    data = tmp_path / "dc"
    base = free_port_range(3)
    bootstrap = ",".join(f"127.0.0.1:{base + i}" for i in range(3))

    def start() -> subprocess.Popen[str]:
        proc = subprocess.Popen([*CLI, "dev-cluster", "--brokers", "3", "--port", str(base), "--data-dir", str(data)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("Bootstrap servers: "):
                assert line.strip() == f"Bootstrap servers: {bootstrap}"
                return proc
        proc.wait(30)
        err = proc.stderr.read() if proc.stderr else ""
        raise AssertionError(f"dev-cluster did not come up: {''.join(lines)}{err}")

    def stop(proc: subprocess.Popen[str]) -> str:
        os.kill(proc.pid, signal.SIGTERM)
        out, _err = proc.communicate(timeout=90)
        assert proc.returncode == 0
        return out

    proc = start()
    try:
        created = run("topics", "--bootstrap-server", bootstrap, "--create", "--topic", "kept",
                      "--partitions", "2", "--replication-factor", "3")
        assert created.returncode == 0, created
        assert stop(proc).rstrip().endswith("Stopped.")
        assert processes_mentioning(str(data)) == []
        proc = start()
        described = run("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", "kept")
        assert described.returncode == 0, described
        assert "PartitionCount: 2\tReplicationFactor: 3" in described.stdout
        stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert processes_mentioning(str(data)) == []
