"""The gateway's synchronized caches on a real cluster: three broker processes on ZooKeeper and
a scripted management service. Watched from outside, through ZooKeeper and the brokers' logs:
every broker registers under sync/, commit never passes a timestamp some broker has not
fetched, all brokers apply the same commit, reload reaches only the broker it names, and the
commit goes on when the leader leaves."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator

import pytest

from kaflet.gateway.data_cache import paths
from tests.support.cluster import Cluster
from tests.support.management_service import ScriptedManagementService, scripted_management_service

SYNC, COMMIT, RELOAD = paths("kafka_authorizer")


@pytest.fixture
def service() -> Iterator[ScriptedManagementService]:
    with scripted_management_service() as svc:
        yield svc


def commit_and_fetched(cluster: Cluster) -> tuple[int, dict[int, int]]:
    """commit, then every broker's fetched timestamp (read in that order: fetched ones only grow,
    so a commit read first can be compared with them)."""
    data, _ = cluster.zk.get(COMMIT)
    commit = int(data)
    fetched = {}
    for child in cluster.zk.get_children(SYNC):
        value, _ = cluster.zk.get(f"{SYNC}/{child}")
        fetched[int(child)] = int(value)
    return commit, fetched


def wait_for_commit_past(cluster: Cluster, timestamp: int, brokers: set[int]) -> int:
    """Poll until commit > ``timestamp``, checking at each step that commit is no later than
    what every registered broker has fetched."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        commit, fetched = commit_and_fetched(cluster)
        assert set(fetched) == brokers
        assert commit <= min(fetched.values()), (commit, fetched)
        if commit > timestamp:
            return commit
        time.sleep(0.05)
    raise AssertionError(f"commit did not pass {timestamp}: {commit_and_fetched(cluster)}")


def log_of(cluster: Cluster, broker_id: int) -> str:
    return cluster.broker(broker_id).log_path.read_text(errors="replace")


def commits_logged(cluster: Cluster, broker_id: int) -> list[int]:
    pattern = rf"DataCache kafka_authorizer node {broker_id} committed \d+ rows at (\d+)"
    return [int(x) for x in re.findall(pattern, log_of(cluster, broker_id))]


def wait_until(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_three_brokers_commit_together_reload_one_and_survive_the_leader_leaving(
        cluster_factory: Callable[..., Cluster], service: ScriptedManagementService) -> None:
    service.add_acl("orders", "app_a", 3, timestamp=1000)
    cluster = cluster_factory(3, overrides={
        "gateway.url": service.url, "cluster.id": "9", "gateway.sync.interval.ms": "300"})
    assert sorted(int(c) for c in cluster.zk.get_children(SYNC)) == [1, 2, 3]
    assert cluster.zk.exists(f"{SYNC}/1").ephemeralOwner != 0

    # A grant while running: commit passes it only once all three have fetched it.
    granted = service.add_acl("audit", "app_a", 1)["timestamp"]
    wait_for_commit_past(cluster, granted, {1, 2, 3})
    for bid in (1, 2, 3):
        # The grant is the only row after start-up: each broker applies it once, at a commit past it.
        wait_until(lambda b=bid: commits_logged(cluster, b) != [], f"broker {bid} to apply the grant")
        (applied,) = commits_logged(cluster, bid)
        assert applied > granted

    # reload names broker 2: only it loads from scratch.
    reloads = {b: log_of(cluster, b).count("reload requested") for b in (1, 2, 3)}
    cluster.zk.create(RELOAD, b"2")
    wait_until(lambda: log_of(cluster, 2).count("reload requested") == reloads[2] + 1, "broker 2 to reload")
    wait_until(lambda: log_of(cluster, 2).count("DataCache kafka_authorizer node 2 loaded") == 2,
               "broker 2's second full load")
    assert all(log_of(cluster, b).count("reload requested") == reloads[b] for b in (1, 3))
    assert all(log_of(cluster, b).count(f"DataCache kafka_authorizer node {b} loaded") == 1 for b in (1, 3))

    # The leader (1) stops: its sync node goes, 2 leads, and commit moves on without it.
    cluster.stop(1)
    wait_until(lambda: sorted(int(c) for c in cluster.zk.get_children(SYNC)) == [2, 3], "broker 1 to leave sync/")
    revoked = service.add_acl("audit", "app_a", 1, operation=2)["timestamp"]
    wait_for_commit_past(cluster, revoked, {2, 3})
    for bid in (2, 3):
        wait_until(lambda b=bid: any(c > revoked for c in commits_logged(cluster, b)),
                   f"broker {bid} to apply the revoke")
