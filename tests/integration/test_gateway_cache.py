"""The synchronized caches (DataCache) on both metadata backends, fed by a scripted management
service over real HTTP: three "brokers" (caches with ids 1, 2, 3) switch together.

On the embedded backend the three share the one session a data directory allows; on ZooKeeper
each has its own session, as three brokers would.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from kaflet.gateway.caches import AclCache, PartitionCache, UserCache, build_caches
from kaflet.gateway.client import HttpManagementService
from kaflet.gateway.data_cache import paths
from kaflet.gateway.model import AclRow, GatewayUser, ManagementServiceError, Operation, UserRow
from kaflet.metadata.embedded import EmbeddedTree
from kaflet.metadata.tree import MetadataTree
from kaflet.metadata.zk_testing import ZooKeeperServer
from tests.support.controller import until
from tests.support.management_service import ScriptedManagementService, scripted_management_service

HOUR_MS = 3600 * 1000
_chroot = itertools.count(1)


@pytest.fixture(scope="module")
def zk_server() -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def service() -> Iterator[ScriptedManagementService]:
    with scripted_management_service() as svc:
        yield svc


class Cluster:
    """Three brokers' caches over one backend and one service."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest,
                 service: ScriptedManagementService) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.service = service
        self.connect = ""
        if kind == "zookeeper":
            self.connect = f"{request.getfixturevalue('zk_server').connect_string}/gateway-{next(_chroot)}"
        self.trees: list[MetadataTree] = []
        self.clients: list[HttpManagementService] = []
        self.caches: list[tuple[UserCache, AclCache, PartitionCache]] = []
        self._embedded: MetadataTree | None = None

    async def tree(self) -> MetadataTree:
        if self.kind == "embedded":
            if self._embedded is None:
                self._embedded = await EmbeddedTree.open(self.tmp_path / "meta")
                self.trees.append(self._embedded)
            return self._embedded
        from kaflet.metadata.zookeeper import ZooKeeperTree

        tree = await ZooKeeperTree.connect(self.connect, session_timeout=6.0)
        self.trees.append(tree)
        return tree

    async def broker(self, broker_id: int, *, start: bool = True, timeout_s: float = 5.0,
                     **kwargs: Any) -> tuple[UserCache, AclCache, PartitionCache]:
        client = HttpManagementService(self.service.url, timeout_s=timeout_s)
        self.clients.append(client)
        kwargs.setdefault("sync_interval_ms", HOUR_MS)  # pulls are driven by the test
        caches = build_caches(await self.tree(), client, broker_id=broker_id, cluster_id=7, **kwargs)
        self.caches.append(caches)
        if start:
            for cache in caches:
                await cache.start()
        return caches

    async def close(self) -> None:
        for caches in self.caches:
            for cache in caches:
                await cache.stop()
        for client in self.clients:
            await client.close()
        for tree in self.trees:
            await tree.close()


@pytest.fixture(params=["embedded", "zookeeper"])
async def cluster(request: pytest.FixtureRequest, tmp_path: Path,
                  service: ScriptedManagementService) -> AsyncIterator[Cluster]:
    c = Cluster(request.param, tmp_path, request, service)
    try:
        yield c
    finally:
        await c.close()



async def tick() -> None:
    """Let the clock move past the timestamps just written (rows and pulls are in ms)."""
    await asyncio.sleep(0.005)


async def test_initial_load_applies_rows_older_than_commit(cluster: Cluster) -> None:
    svc = cluster.service
    svc.add_user("app_a", "one", timestamp=1000)
    svc.add_user("app_a", "two", timestamp=2000)  # latest row wins
    svc.add_user("app_b", "pw", super_user=True, timestamp=1500)
    svc.add_user("app_c", "pw", timestamp=1000)
    svc.add_user("app_c", "pw", operation=2, timestamp=3000)  # deleted
    svc.add_acl("orders", "app_a", 3, timestamp=1000)
    svc.add_acl("orders", "app_a", 1, operation=2, timestamp=1100)  # revoke carries the removed bit
    svc.add_acl("*", "app_b", 1, timestamp=1000)
    svc.add_partitions("orders", "1, 3", timestamp=1000)
    await tick()
    users, acls, partitions = await cluster.broker(1, default_users=[
        UserRow(GatewayUser("admin", "admin-secret", True), Operation.CREATE, 0)])
    assert users.loaded
    assert users.user("app_a") == GatewayUser("app_a", "two", False)
    assert users.user("app_b") == GatewayUser("app_b", "pw", True)
    assert users.user("app_c") is None
    assert users.user("admin") == GatewayUser("admin", "admin-secret", True)
    assert acls.access("orders", "app_a") == 2
    assert acls.access("*", "app_b") == 1 and acls.access("orders", "app_b") is None
    assert partitions.disabled("orders") == {1, 3} and partitions.disabled("other") == frozenset()
    # Registered in the tree as Logi-Kafka lays it out.
    sync, commit, _ = paths("kafka_authorizer")
    tree = cluster.trees[0]
    assert await tree.children(sync) == ["1"]
    data, _ = await tree.get(commit)
    assert int(data or b"0") == acls.commit_timestamp > 3000
    pulled = svc.recorded("/api/v1/security/acls")[0]
    assert pulled.body["clusterId"] == 7 and pulled.body["start"] == 0


async def test_three_brokers_switch_together(cluster: Cluster) -> None:
    brokers = [await cluster.broker(i) for i in (1, 2, 3)]
    acls = [b[1] for b in brokers]
    await tick()
    cluster.service.add_acl("orders", "app_a", 3)
    await tick()
    # The leader (1) pulls the grant first: the others have not fetched it, so nothing commits.
    assert await acls[0].sync_once() == 1
    assert acls[0].parked == 1
    assert all(a.access("orders", "app_a") is None for a in acls)
    # The others pull it (parked), then the leader's next pull moves commit past it for all.
    await acls[1].sync_once()
    await acls[2].sync_once()
    assert all(a.access("orders", "app_a") is None for a in acls)
    await tick()
    await acls[0].sync_once()
    await until(lambda: all(a.access("orders", "app_a") == 3 for a in acls), timeout=15)
    assert len({a.commit_timestamp for a in acls}) == 1
    # A revoke row carries only the removed bit (write): read stays, on every broker.
    versions = [a.version for a in acls]
    await tick()
    await acls[0].sync_once()  # nothing new: commit may move, the view and its version do not
    assert [a.version for a in acls] == versions
    cluster.service.add_acl("orders", "app_a", 2, operation=2)
    await tick()
    for a in (acls[1], acls[2], acls[0]):
        await a.sync_once()
    await tick()
    await acls[0].sync_once()
    await until(lambda: all(a.access("orders", "app_a") == 1 for a in acls), timeout=15)
    assert all(a.version > v for a, v in zip(acls, versions, strict=True))


async def test_commit_is_the_slowest_brokers_fetch_and_the_leader_moves_on(cluster: Cluster) -> None:
    one = (await cluster.broker(1))[0]
    two = (await cluster.broker(2))[0]
    await tick()
    cluster.service.add_user("app_new", "pw")
    await tick()
    await two.sync_once()
    assert two.user("app_new") is None  # not the leader: it only parks and reports
    await one.stop()  # the leader leaves; 2 is the lowest id now
    await tick()
    await two.sync_once()
    await until(lambda: two.user("app_new") is not None, timeout=15)


async def test_reload_node_and_full_check_catch_rows_the_pulls_missed(cluster: Cluster) -> None:
    one = (await cluster.broker(1))[1]
    two = (await cluster.broker(2))[1]
    # A row whose timestamp is already below commit: incremental pulls never see it.
    cluster.service.add_acl("late", "app_x", 2, timestamp=5)
    await tick()
    await one.sync_once()
    await two.sync_once()
    assert one.access("late", "app_x") is None and two.access("late", "app_x") is None
    # Broker 2 is told to reload; broker 1 is not.
    tree = cluster.trees[-1]
    _, _, reload_path = paths("kafka_authorizer")
    await tree.create(reload_path, b"2")
    await until(lambda: two.access("late", "app_x") == 2, timeout=15)
    assert two.reloads == 1 and one.reloads == 0 and one.access("late", "app_x") is None
    version = one.version
    # Broker 1 finds the difference at its periodic full check and reloads.
    assert await one.check() is False
    assert one.access("late", "app_x") == 2 and one.reloads == 1
    assert one.version > version  # a reload changes the view under the same commit timestamp
    assert await one.check() is True


async def test_service_down_at_start_serves_static_defaults_then_recovers(
        cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    cluster.service.add_user("app_a", "pw", timestamp=1000)
    cluster.service.down()
    caplog.set_level(logging.INFO, "kaflet.gateway.cache")
    users, acls, _ = await cluster.broker(
        1, sync_interval_ms=200,
        default_users=[UserRow(GatewayUser("admin", "s", True), Operation.CREATE, 0)],
        default_acls=[AclRow("*", "kafka", 3, Operation.CREATE, 0)])
    assert not users.loaded
    assert users.user("admin") is not None and users.user("app_a") is None
    assert acls.access("*", "kafka") == 3
    assert any("serving the 1 static default entries" in r.getMessage() for r in caplog.records)
    cluster.service.up()
    await until(lambda: users.loaded and users.user("app_a") is not None, timeout=15)
    assert users.user("admin") is not None


@pytest.mark.parametrize("mode", ["down", "slow", "not-json", "code", "no-rows", "wrong-types", "http-500"])
async def test_a_failing_service_keeps_the_committed_view(
        cluster: Cluster, mode: str, caplog: pytest.LogCaptureFixture) -> None:
    cluster.service.add_acl("orders", "app_a", 3, timestamp=1000)
    await tick()
    acls = (await cluster.broker(1, timeout_s=0.3))[1]
    commit = acls.commit_timestamp
    cluster.service.add_acl("orders", "app_a", 3, operation=2)
    if mode == "down":
        cluster.service.down()
    else:
        cluster.service.slow_s = 1.0
        cluster.service.set_mode(mode)
    with pytest.raises(ManagementServiceError):
        await acls.sync_once()
    assert acls.access("orders", "app_a") == 3 and acls.commit_timestamp == commit
    # The periodic task: one warning for the outage (the other attempts at DEBUG), no
    # traceback, then one recovery line.
    caplog.set_level(logging.DEBUG, "kaflet.gateway.cache")
    acls.sync_interval_ms = 100
    acls.wake()
    await until(lambda: acls.pulls.attempts >= 3, timeout=15)
    failures = [r for r in caplog.records if "pull failed:" in r.getMessage()]
    assert [r.levelno for r in failures] == [logging.WARNING]
    again = [r for r in caplog.records if "pull failed again" in r.getMessage()]
    assert len(again) >= 2 and {r.levelno for r in again} == {logging.DEBUG}
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in failures + again)
    assert acls.access("orders", "app_a") == 3
    if mode == "down":
        cluster.service.up()
    cluster.service.set_mode("ok")
    await until(lambda: acls.access("orders", "app_a") is None, timeout=15)
    assert any("pull recovered after" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)


async def test_an_endpoint_the_service_does_not_offer_is_asked_for_rarely(
        cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    cluster.service.offer_partitions = False
    caplog.set_level(logging.INFO, "kaflet.gateway.cache")
    users, _, partitions = await cluster.broker(1, sync_interval_ms=50, check_interval_ms=HOUR_MS)
    assert users.loaded and not partitions.loaded
    cluster.service.add_user("app_a", "pw")
    await until(lambda: users.user("app_a") is not None, timeout=15)
    await until(lambda: len(cluster.service.recorded("/api/v1/security/users")) > 10, timeout=15)
    # One attempt at start-up, one more from the periodic task, then quiet until the check interval.
    assert len(cluster.service.recorded("/api/v1/partition/topicPartitions")) == 2
    missing = [r for r in caplog.records if "does not offer it" in r.getMessage()]
    assert len(missing) == 2 and partitions.disabled("any") == frozenset()


async def test_resync_after_a_session_expiry_registers_again_and_follows_commit(
        tmp_path: Path, service: ScriptedManagementService) -> None:
    tree = await EmbeddedTree.open(tmp_path / "meta")
    client = HttpManagementService(service.url)
    users = build_caches(tree, client, broker_id=1, cluster_id=7, sync_interval_ms=HOUR_MS)[0]
    try:
        await users.start()
        sync, commit_path, _ = paths("kafka_user")
        await tree.expire_session()
        assert await tree.children(sync) == []
        await users.resync()
        assert await tree.children(sync) == ["1"]
        service.add_user("app_a", "pw")
        await tick()
        await users.sync_once()
        await until(lambda: users.user("app_a") is not None, timeout=15)
        # The re-armed watch follows commit moves made by someone else (a new leader).
        service.add_user("app_b", "pw")
        await tick()
        await tree.delete(f"{sync}/1")
        await tree.create(f"{sync}/0", b"1", ephemeral=True)  # a lower id leads now
        await users.sync_once()
        assert users.user("app_b") is None and users.parked == 1
        await tree.set(commit_path, str(users.fetched_timestamp).encode())
        await until(lambda: users.user("app_b") is not None, timeout=15)
    finally:
        await users.stop()
        await client.close()
        await tree.close()
