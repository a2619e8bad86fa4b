"""Fixtures for tests against a real ZooKeeper.

* ``zk_server`` (session scope): one ZooKeeper server process for the whole run, started on a
  free 127.0.0.1 port with its own temp data dir and stopped by PID at the end. Without Java or
  the ZooKeeper jars (CI installs both) the tests fail, saying which is missing.
* ``zk_connect``: a connect string with a fresh chroot (``127.0.0.1:<port>/kaflet-<n>``), so
  tests sharing the server never see each other's nodes.
* ``zk_tree``: a connected :class:`~kaflet.metadata.zookeeper.ZooKeeperTree` on ``zk_connect``,
  closed after the test.
* ``zk_ensemble``: a 3-node ZooKeeper ensemble of the test's own (tickTime 500 ms).
* ``cluster_factory``: ``make(brokers=3, **kwargs)`` starts a :class:`tests.support.cluster.Cluster`
  (brokers 1..N; on ``zk_server`` under a chroot of its own unless ``kwargs`` bring a ZooKeeper,
  an ensemble or a network) in the test's tmp dir; every cluster made is closed, by PID, after
  the test, whatever happened. ``cluster`` is ``make(3)``.
* ``network``: a started tests.support.netns.Network of 4 hosts (3 brokers + ZooKeeper), torn
  down after the test. Networks share the root namespace's guard route for 10.200.0.0/24, so
  tests holding one take a file lock and run one at a time even under pytest-xdist; skipped, with the reason, where namespaces cannot be made (not root, no
  ``ip``). ``netns_reason`` is that reason (None when they can).
"""

from __future__ import annotations

import fcntl
import itertools
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kaflet.metadata.zk_testing import ZooKeeperEnsemble, ZooKeeperServer
from tests.support.cluster import Cluster
from tests.support.netns import Network, netns_unavailable_reason

_chroots = itertools.count(1)


@pytest.fixture(scope="session")
def zk_server() -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer().start()  # fails, saying what is missing, without Java or the jars
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_connect(zk_server: ZooKeeperServer) -> str:
    return f"{zk_server.connect_string}/kaflet-{next(_chroots)}"


@pytest.fixture
async def zk_tree(zk_connect: str) -> AsyncIterator[object]:
    from kaflet.metadata.zookeeper import ZooKeeperTree

    tree = await ZooKeeperTree.connect(zk_connect, session_timeout=6.0)
    try:
        yield tree
    finally:
        await tree.close()


@pytest.fixture
def zk_ensemble(tmp_path: Path) -> Iterator[ZooKeeperEnsemble]:
    ensemble = ZooKeeperEnsemble(3, tick_time_ms=500, base_dir=tmp_path / "zk-ensemble").start()
    try:
        yield ensemble
    finally:
        ensemble.stop()


@pytest.fixture
def cluster_factory(tmp_path: Path, zk_server: ZooKeeperServer) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(brokers: int = 3, **kwargs: Any) -> Cluster:
        if not {"zookeeper", "ensemble", "network"} & set(kwargs):
            # The run's one server under a chroot of the cluster's own: a JVM start saved per test.
            kwargs.update(zookeeper=zk_server, chroot=kwargs.get("chroot", f"/kaflet-c{next(_chroots)}"))
        cluster = Cluster(tmp_path / f"cluster-{len(made) + 1}", brokers, **kwargs)
        made.append(cluster)
        return cluster.start()

    try:
        yield make
    finally:
        errors = []
        for cluster in made:
            try:
                cluster.close()
            except Exception as exc:  # close the other clusters before reporting
                errors.append(exc)
        if errors:
            raise errors[0]


@pytest.fixture
def cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    return cluster_factory(3)


@pytest.fixture(scope="session")
def netns_reason() -> str | None:
    return netns_unavailable_reason()


@pytest.fixture
def network(netns_reason: str | None) -> Iterator[Network]:
    if netns_reason:
        pytest.skip(netns_reason)
    with open(Path(tempfile.gettempdir()) / "kaflet-tests-netns.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if the worker dies
        net = Network(4).start()
        try:
            yield net
        finally:
            net.close()
