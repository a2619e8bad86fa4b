"""The gateway inside a broker (in this process, real sockets): settings, start-up with the
service up or down, incremental pulls on the embedded backend, and cluster.id."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from kaflet.gateway.data_cache import paths
from kaflet.gateway.gateway import GATEWAY_CLUSTER_ID_PATH
from kaflet.gateway.model import GatewayUser
from kaflet.server.broker import Broker, BrokerStartError
from kaflet.server.config import BrokerConfig
from tests.support.controller import until
from tests.support.management_service import ScriptedManagementService, scripted_management_service


@pytest.fixture
def service() -> Iterator[ScriptedManagementService]:
    with scripted_management_service() as svc:
        yield svc


def config(data_dir: Path, **extra: str) -> BrokerConfig:
    return BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data_dir), **extra})


@asynccontextmanager
async def running(cfg: BrokerConfig) -> AsyncIterator[Broker]:
    broker = Broker(cfg)
    try:
        await broker.start()
        yield broker
    finally:
        await broker.stop()



async def test_gateway_off_by_default(tmp_path: Path, service: ScriptedManagementService) -> None:
    async with running(config(tmp_path / "d")) as broker:
        assert broker.gateway is None
        assert await broker.tree.exists("/DataCache") is None
        assert await broker.tree.exists(GATEWAY_CLUSTER_ID_PATH) is None
    assert service.recorded() == []


async def test_broker_pulls_users_acls_and_partitions(tmp_path: Path, service: ScriptedManagementService,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "kaflet")
    service.add_user("app_a", "pw-a", timestamp=1000)
    service.add_acl("orders", "app_a", 3, timestamp=1000)
    cfg = config(tmp_path / "d", **{"gateway.url": service.url, "cluster.id": "4",
                                    "gateway.sync.interval.ms": "200"})
    async with running(cfg) as broker:
        gw = broker.gateway
        assert gw is not None
        assert gw.users.user("app_a") == GatewayUser("app_a", "pw-a", False)
        assert gw.acls.access("orders", "app_a") == 3
        sync, _, _ = paths("kafka_user")
        assert await broker.tree.children(sync) == [str(broker.broker_id)]
        # A grant, a revoke of its write bit, a new user and disabled partitions, while running.
        service.add_acl("audit", "app_a", 1)
        service.add_acl("orders", "app_a", 2, operation=2)
        service.add_user("app_b", "pw-b")
        service.add_partitions("orders", "0")
        await until(lambda: gw.acls.access("audit", "app_a") == 1 and gw.acls.access("orders", "app_a") == 1
                         and gw.users.user("app_b") is not None and gw.partitions.disabled("orders") == {0}, timeout=15)
        bodies = [r.body for r in service.recorded("/api/v1/security/acls")]
        assert bodies[0]["start"] == 0 and all(b["clusterId"] == 4 for b in bodies)
        assert any(b["start"] > 0 for b in bodies[1:])
    assert any("gateway on" in r.getMessage() and "all caches loaded" in r.getMessage() for r in caplog.records)
    # The gateway turns disk load protection on (diskloadprotector.enable defaults to true).
    assert any("disk load protection" in r.getMessage() for r in caplog.records)


async def test_broker_starts_with_the_service_down_and_catches_up(
        tmp_path: Path, service: ScriptedManagementService, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "kaflet")
    service.add_user("app_a", "pw", timestamp=1000)
    service.down()
    cfg = config(tmp_path / "d", **{"gateway.url": service.url, "gateway.sync.interval.ms": "200",
                                    "kafkaexmetrics.enable": "true"})
    async with running(cfg) as broker:
        gw = broker.gateway
        assert gw is not None and not gw.users.loaded and gw.users.user("app_a") is None
        assert any("serving static defaults for kafka_user, kafka_authorizer, kafka_partition" in r.getMessage()
                   for r in caplog.records)
        service.up()
        await until(lambda: gw.users.user("app_a") is not None, timeout=15)
    # Without metrics.listener there is nowhere to serve the per-application metrics: it says so.
    assert any("kafkaexmetrics.enable=true has no effect without metrics.listener" in r.getMessage()
               for r in caplog.records)


async def test_cluster_id_is_stored_and_a_different_one_refused_unless_updated(tmp_path: Path) -> None:
    data = tmp_path / "d"
    async with running(config(data, **{"cluster.id": "5"})) as broker:
        stored, _ = await broker.tree.get(GATEWAY_CLUSTER_ID_PATH)
        assert stored == b"5"
    with pytest.raises(BrokerStartError, match="cluster.id 6 does not match the cluster id 5"):
        async with running(config(data, **{"cluster.id": "6"})):
            pass
    async with running(config(data, **{"cluster.id": "6", "cluster.id.update": "true"})) as broker:
        stored, _ = await broker.tree.get(GATEWAY_CLUSTER_ID_PATH)
        assert stored == b"6"
    async with running(config(data, **{"cluster.id": "6"})):
        pass


async def test_a_gateway_url_that_is_not_http_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BrokerStartError, match="must be an http"):
        async with running(config(tmp_path / "d", **{"gateway.url": "km:8080/gateway"})):
            pass
