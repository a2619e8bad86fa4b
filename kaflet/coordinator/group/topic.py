"""Creating __consumer_offsets on first use, with Kafka's settings for it."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from kaflet.coordinator.group.store import GROUP_METADATA_TOPIC
from kaflet.protocol.errors import ErrorCode
from kaflet.server.topic_admin import TopicRequest

if TYPE_CHECKING:
    from kaflet.server.broker import Broker

log = logging.getLogger("kaflet.coordinator")


class OffsetsTopic:
    """Creates the offsets topic when a client first looks for a group coordinator (as Kafka does)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._lock = asyncio.Lock()
        self._cap_logged = False

    def exists(self) -> bool:
        info = self.broker.metadata_cache.topics.get(GROUP_METADATA_TOPIC)
        return info is not None and bool(info.partitions)

    async def ensure(self, timeout_ms: int = 10_000) -> bool:
        """Create the topic if needed; True once it exists with its partitions in place."""
        if self.exists():
            return True
        async with self._lock:  # concurrent FindCoordinators create it once
            if self.exists():
                return True
            cfg = self.broker.config
            rf = cfg["offsets.topic.replication.factor"]
            live = max(len(self.broker.live_brokers()), 1)
            if rf > live:
                # Kafka refuses to create the topic until enough brokers are up; a single
                # broker would then never serve groups, so the factor is capped (said once).
                if not self._cap_logged:
                    log.info("offsets.topic.replication.factor is %d but only %d broker(s) are live; creating %s "
                             "with replication factor %d", rf, live, GROUP_METADATA_TOPIC, live)
                    self._cap_logged = True
                rf = live
            req = TopicRequest(
                name=GROUP_METADATA_TOPIC,
                num_partitions=cfg["offsets.topic.num.partitions"],
                replication_factor=rf,
                assignments=None,
                configs={
                    "cleanup.policy": "compact",
                    "segment.bytes": str(cfg["offsets.topic.segment.bytes"]),
                    "compression.type": "producer",
                },
            )
            out = await self.broker.topic_admin.create(req, False, timeout_ms)
            if out.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                log.warning("could not create %s: %s", GROUP_METADATA_TOPIC, out.error_message)
                return False
            if out.error_code == ErrorCode.NONE:
                log.info("created %s with %d partitions", GROUP_METADATA_TOPIC, out.num_partitions)
        return self.exists()
