"""`kaflet top --once` on a real 3-broker cluster: every broker, the controller, and the
under-replicated partitions a killed broker leaves behind."""

from __future__ import annotations

import pytest

from tests.cluster.test_cli_cluster import new_topic, tool
from tests.integration.test_cli_top import section
from tests.support.cluster import Cluster

pytestmark = pytest.mark.timeout(300)


def snapshot(cluster: Cluster) -> str:
    proc = tool(cluster, "top", "--once", "--interval", "0.2")
    assert proc.returncode == 0, proc
    assert proc.stderr == ""
    return proc.stdout


def test_top_shows_brokers_and_under_replicated_partitions(cluster: Cluster) -> None:
    topic = new_topic(cluster, [[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    controller = cluster.wait_for_controller()
    out = snapshot(cluster)
    brokers = {int(row[0]): row for row in section(out, "BROKERS")}
    assert sorted(brokers) == [1, 2, 3], out
    for bid, row in brokers.items():
        assert row[1] == f"127.0.0.1:{cluster.broker(bid).port}", out
        assert (row[-1] == "controller") == (bid == controller), out
    assert not [row for row in section(out, "REPLICATION:") if row[0] == topic], out

    victim = 3 if controller != 3 else 2
    cluster.kill(victim)
    for p in range(3):
        cluster.wait_until(lambda q=p: victim not in cluster.isr(topic, q), 30, f"{victim} out of the ISR of {p}")

    def under_replicated() -> tuple[str, list[list[str]]] | None:
        out = snapshot(cluster)
        rows = [row for row in section(out, "REPLICATION:") if row[0] == topic]
        return (out, rows) if len(rows) == 3 else None

    out, rows = cluster.wait_until(under_replicated, 30, f"three under-replicated partitions of {topic}")
    for row in rows:
        # TOPIC PARTITION LEADER REPLICAS ISR STATE
        assert row[-1] == "under-replicated" and row[2] != str(victim), row
        assert sorted(row[3].split(",")) == ["1", "2", "3"] and str(victim) not in row[4].split(","), row
    assert sorted(int(row[0]) for row in section(out, "BROKERS")) == sorted({1, 2, 3} - {victim}), out
    assert "0 offline" in out
