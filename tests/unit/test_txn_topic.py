"""__transaction_state is created with Kafka's transaction.state.log.* settings."""

from __future__ import annotations

import asyncio

from kaflet.controller.topics import CreateOutcome, TopicRequest
from kaflet.coordinator.group.topic import OffsetsTopic
from kaflet.coordinator.transaction.topic import transaction_topic_config
from kaflet.server.config import BrokerConfig


def _create(live: int, **overrides: str) -> list[TopicRequest]:
    values = BrokerConfig({"broker.id": "0", **overrides}).values
    made: list[TopicRequest] = []
    counts: dict[str, int] = {}

    async def create(req: TopicRequest, validate_only: bool, timeout_ms: int) -> CreateOutcome:
        made.append(req)
        counts[req.name] = req.num_partitions
        return CreateOutcome(num_partitions=req.num_partitions)

    topic = OffsetsTopic(transaction_topic_config(values), create, lambda name: counts.get(name, 0), lambda: live)
    assert asyncio.run(topic.ensure())
    assert asyncio.run(topic.ensure())  # exists now: not created twice
    return made


def test_created_once_with_kafkas_configs() -> None:
    (req,) = _create(3)
    assert req.name == "__transaction_state"
    assert (req.num_partitions, req.replication_factor) == (50, 3)
    assert req.configs == {"cleanup.policy": "compact", "compression.type": "uncompressed",
                           "unclean.leader.election.enable": "false", "min.insync.replicas": "2",
                           "segment.bytes": "104857600"}


def test_broker_alone_caps_factor_and_min_isr() -> None:
    (req,) = _create(1, **{"transaction.state.log.num.partitions": "7", "transaction.state.log.segment.bytes": "1000"})
    assert (req.num_partitions, req.replication_factor) == (7, 1)
    assert req.configs["min.insync.replicas"] == "1"
    assert req.configs["segment.bytes"] == "1000"
