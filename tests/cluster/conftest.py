"""Fixtures for tests against a real ZooKeeper.

* ``zk_server`` (session scope): one ZooKeeper server process for the whole run, started on a
  free 127.0.0.1 port with its own temp data dir and stopped by PID at the end. Without Java or
  the ZooKeeper jars (CI installs both) the tests fail, saying which is missing.
* ``zk_connect``: a connect string with a fresh chroot (``127.0.0.1:<port>/kaflet-<n>``), so
  tests sharing the server never see each other's nodes.
* ``zk_tree``: a connected :class:`~kaflet.metadata.zookeeper.ZooKeeperTree` on ``zk_connect``,
  closed after the test.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator

import pytest

from kaflet.metadata.zk_testing import ZooKeeperServer

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
