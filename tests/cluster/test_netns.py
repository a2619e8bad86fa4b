"""Network partitions with namespaces (tests/support/netns.py), with real processes: a ZooKeeper
in one namespace and kazoo clients, each a process in another namespace."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kaflet.metadata.zk_testing import ZooKeeperServer, zookeeper_unavailable_reason
from tests.support.netns import (
    GUARD,
    LineReader,
    Network,
    guard_in_place,
    namespaces,
    process_running,
)

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
SESSION_TIMEOUT_S = 6.0


def zookeeper_in(net: Network, index: int, tmp_path: Path) -> ZooKeeperServer:
    host = net.host(index)
    return ZooKeeperServer(
        port=2181, tick_time_ms=500, data_dir=tmp_path / f"zk-{index}", host=host.ip,
        command_prefix=host.exec_prefix,
        socket_factory=lambda addr, port, timeout: net.connect(index, addr, port, timeout),
    )


def probe(net: Network, index: int, zk: ZooKeeperServer) -> LineReader:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = net.popen(index, [sys.executable, "-m", "tests.support.zk_probe", zk.connect_string, str(SESSION_TIMEOUT_S)],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                     cwd=REPO, env=env)
    reader = LineReader(proc)
    reader.expect(r"^SESSION ", timeout=30)
    return reader


def test_guard_and_addresses(network: Network) -> None:
    assert guard_in_place()
    # From the root namespace the private subnet is unreachable locally: nothing leaves the machine.
    root = subprocess.run(["ip", "route", "get", "10.200.0.1"], capture_output=True, text=True, timeout=10)
    assert root.returncode != 0 and "no route to host" in root.stderr.lower(), root
    inside = network.run(2, ["ip", "route", "get", "10.200.0.1"])
    assert inside.returncode == 0 and "dev eth0" in inside.stdout, inside
    # Nothing outside the test network is routed from inside.
    outside = network.run(2, ["ip", "route", "get", "192.0.2.1"])
    assert outside.returncode != 0 and "unreachable" in outside.stderr.lower(), outside
    assert {h.ns for h in network.hosts} | {network.bridge_ns} <= set(namespaces())
    with pytest.raises(ValueError, match="outside the test network"):
        network.connect(1, "192.0.2.1", 80, timeout=1)


def test_zookeeper_client_loses_and_regains_connection(network: Network, tmp_path: Path) -> None:
    if zookeeper_unavailable_reason():
        pytest.fail(zookeeper_unavailable_reason() or "")
    zk = zookeeper_in(network, 1, tmp_path)
    zk.start(timeout=60)
    try:
        assert zk.pid in network.pids()  # `ip netns exec` execs: the PID is java's, inside n1
        near, far = probe(network, 2, zk), probe(network, 3, zk)

        # Only n1<->n2 is cut: the client in n2 is suspended, the one in n3 still gets answers.
        network.cut_pair(1, 2)
        near.expect(r"^STATE SUSPENDED", timeout=30)
        far.send("ping")
        far.expect(r"^PONG ", timeout=10)
        network.restore_pair(1, 2)
        near.expect(r"^STATE CONNECTED", timeout=30)
        near.send("ping")
        near.expect(r"^PONG ", timeout=10)

        # n1 is cut from everyone: both clients are suspended, then both come back.
        network.cut(1)
        near.expect(r"^STATE SUSPENDED", timeout=30)
        far.expect(r"^STATE SUSPENDED", timeout=30)
        network.restore(1)
        near.expect(r"^STATE CONNECTED", timeout=30)
        far.expect(r"^STATE CONNECTED", timeout=30)
        for client in (near, far):
            client.send("ping")
            client.expect(r"^PONG ", timeout=10)
            client.send("quit")
            assert client.proc.wait(15) == 0
    finally:
        zk.stop()


def test_close_kills_every_process_and_deletes_namespaces(netns_reason: str | None) -> None:
    if netns_reason:
        pytest.skip(netns_reason)
    net = Network(2).start()
    try:
        tracked = net.popen(1, ["sleep", "300"])
        # A process the harness never saw (started in the background by a shell that exits).
        shell = net.run(2, ["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"])
        untracked = int(shell.stdout.strip())
        assert untracked in net.pids() and tracked.pid in net.pids()
        raise KeyError("the test failed here")
    except KeyError:
        pass
    finally:
        created = [h.ns for h in net.hosts] + [net.bridge_ns]
        net.close()
    assert tracked.poll() is not None
    assert not process_running(untracked)  # an orphan: killed, perhaps not yet reaped by init
    assert not set(created) & set(namespaces())
    if not namespaces():  # other runs' namespaces keep the guard in place for them
        assert not guard_in_place(), f"the {GUARD} guard outlived every namespace"
    net.close()  # a second close is harmless


def test_broker_partitioned_from_its_clients(network: Network, tmp_path: Path) -> None:
    """A broker process inside host 1, a librdkafka admin client inside host 3: the client's
    I/O threads start in the namespace of the thread that created it."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from tests.support.broker_process import BrokerProcess

    host = network.host(1)
    broker = BrokerProcess(tmp_path / "data", host=host.ip, command_prefix=host.exec_prefix,
                           socket_factory=network.socket_factory(3))
    try:
        broker.start(timeout=60)
        assert broker.bootstrap.startswith("10.200.0.1:") and broker.pid in network.pids()
        admin = network.call_in(3, AdminClient, {"bootstrap.servers": broker.bootstrap,
                                                 "reconnect.backoff.max.ms": 500})
        assert admin.list_topics(timeout=15).brokers  # reachable inside the network
        network.cut(1)
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=3)
        network.restore(1)
        assert admin.list_topics(timeout=20).brokers
        # A pair cut between the client's host and the broker's does the same.
        network.cut_pair(3, 1)
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=3)
        network.restore_pair(1, 3)
        assert admin.list_topics(timeout=20).brokers
        assert broker.stop(timeout=30) == 0
    finally:
        broker.kill()


def test_cluster_zookeeper_inside_a_network(network: Network, tmp_path: Path) -> None:
    from tests.support.cluster import Cluster

    cluster = Cluster(tmp_path / "c", brokers=2, network=network)
    assert cluster.client_host == 3 and cluster.zk_connect == "10.200.0.3:2181/kaflet"
    assert [b.host for b in cluster.brokers.values()] == ["10.200.0.1", "10.200.0.2"]
    try:
        cluster.zookeeper.start(timeout=60)
        assert cluster.zookeeper.pid in network.pids()
        # The harness's own client works from the client host, and reads Kafka's layout.
        cluster.zk.create("/controller", b'{"version":1,"brokerid":2,"timestamp":"1"}', ephemeral=True)
        assert cluster.controller_id() == 2
        zk_pid = cluster.zookeeper.pid
    finally:
        cluster.close()
    assert zk_pid is not None and not process_running(zk_pid)
    with pytest.raises(ValueError, match="need 5 hosts"):
        Cluster(tmp_path / "d", brokers=4, network=network)
