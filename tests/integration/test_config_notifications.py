"""Config changes written straight into the metadata tree (as Kafka's tools or another broker
would) reach a running broker through /config/changes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kaflet.metadata import zkdata
from kaflet.server.broker import Broker
from kaflet.server.config import BrokerConfig
from kaflet.server.topic_admin import TopicRequest


async def _until(cond, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if cond():
            return True
        await asyncio.sleep(0.02)
    return bool(cond())


async def test_notifications_apply_topic_and_broker_configs(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data")}))
    await broker.start()
    try:
        out = await broker.topic_admin.create(TopicRequest("n1", 1, 1, None, {}), False, 5000)
        assert out.error_code == 0
        log = broker.log_manager.get_log("n1", 0)
        tree = broker.tree

        await tree.set(zkdata.topic_config_path("n1"), zkdata.entity_config_json({"max.message.bytes": "1234"}))
        await tree.create(zkdata.config_change_prefix(), zkdata.config_change_json("topics/n1"), sequential=True)
        assert await _until(lambda: log.config.max_message_bytes == 1234)

        path = zkdata.config_entity_path(zkdata.ConfigType.BROKER, zkdata.DEFAULT_ENTITY)
        await tree.create(path, zkdata.entity_config_json({"log.segment.bytes": "4096"}), make_parents=True)
        # A v1 notification, as older Kafka tools write them.
        await tree.create(zkdata.config_change_prefix(),
                          b'{"version":1,"entity_type":"brokers","entity_name":"<default>"}', sequential=True)
        assert await _until(lambda: log.config.segment_bytes == 4096)
        assert log.config.max_message_bytes == 1234  # the topic override is kept
        assert broker.config_admin.dynamic.default == {"log.segment.bytes": "4096"}
    finally:
        await broker.stop()


async def test_notifications_apply_replication_throttles(tmp_path: Path) -> None:
    """KIP-73 configs written as Kafka's tools write them reach the broker's replication quotas:
    the per-broker rate wins over the cluster default, a server.properties value is not one
    (the rates are dynamic-only, as in Kafka), and the topic's throttled replicas pick this
    broker's partitions."""
    broker = Broker(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"),
                                  "broker.id": "3", "leader.replication.throttled.rate": "5"}))
    await broker.start()
    try:
        quotas = broker.config_admin.replication_quotas
        unbounded = 2**63 - 1
        assert (quotas.broker_id, quotas.leader.bound, quotas.follower.bound) == (3, unbounded, unbounded)
        out = await broker.topic_admin.create(TopicRequest("rt", 3, 1, None, {}), False, 5000)
        assert out.error_code == 0
        tree = broker.tree

        async def write(entity_type: str, name: str, configs: dict[str, str]) -> None:
            path = zkdata.config_entity_path(entity_type, name)
            data = zkdata.entity_config_json(configs)
            if await tree.get_or_none(path) is None:
                await tree.create(path, data, make_parents=True)
            else:
                await tree.set(path, data)
            await tree.create(zkdata.config_change_prefix(), zkdata.config_change_json(f"{entity_type}/{name}"),
                              sequential=True)

        await write(zkdata.ConfigType.BROKER, zkdata.DEFAULT_ENTITY, {"leader.replication.throttled.rate": "1000",
                                                                      "follower.replication.throttled.rate": "2000"})
        await write(zkdata.ConfigType.BROKER, "3", {"leader.replication.throttled.rate": "300"})
        assert await _until(lambda: (quotas.leader.bound, quotas.follower.bound) == (300, 2000))
        await write(zkdata.ConfigType.TOPIC, "rt", {"leader.replication.throttled.replicas": "0:3,1:4,2:3",
                                                    "follower.replication.throttled.replicas": "*"})
        assert await _until(lambda: quotas.leader.is_throttled("rt", 0))
        assert [quotas.leader.is_throttled("rt", p) for p in range(3)] == [True, False, True]
        assert all(quotas.follower.is_throttled("rt", p) for p in range(3))
        await write(zkdata.ConfigType.TOPIC, "rt", {})
        await write(zkdata.ConfigType.BROKER, "3", {})
        assert await _until(lambda: not quotas.follower.is_throttled("rt", 0) and quotas.leader.bound == 1000)
    finally:
        await broker.stop()
