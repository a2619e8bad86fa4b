"""Creating __consumer_offsets (and __transaction_state) on first use, with Kafka's settings."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kaflet.controller.topics import CreateOutcome, TopicRequest
from kaflet.coordinator.group.store import GROUP_METADATA_TOPIC
from kaflet.protocol.errors import ErrorCode

log = logging.getLogger("kaflet.coordinator")

#: Creates a topic: (request, validate_only, timeout_ms) -> outcome (``TopicAdmin.create``).
CreateTopic = Callable[[TopicRequest, bool, int], Awaitable[CreateOutcome]]


@dataclass(frozen=True, slots=True)
class OffsetsTopicConfig:
    """The offsets.topic.* broker configs (Kafka's defaults).

    The same creation rules serve __transaction_state: ``name``, its topic ``configs`` beyond
    segment.bytes, and ``prefix`` (the broker config names, for messages) say which topic.
    A min.insync.replicas in ``configs`` is capped with the replication factor.
    """

    num_partitions: int = 50
    replication_factor: int = 3
    segment_bytes: int = 104_857_600
    name: str = GROUP_METADATA_TOPIC
    configs: tuple[tuple[str, str], ...] = (("cleanup.policy", "compact"), ("compression.type", "producer"))
    prefix: str = "offsets.topic"

    @classmethod
    def from_broker(cls, values: Mapping[str, Any]) -> OffsetsTopicConfig:
        return cls(values["offsets.topic.num.partitions"], values["offsets.topic.replication.factor"],
                   values["offsets.topic.segment.bytes"])


class OffsetsTopic:
    """Creates the offsets topic when a client first looks for a group coordinator (as Kafka does).

    ``create_topic`` creates it; ``partition_count`` is how many partitions this broker's
    metadata shows for a topic (0: unknown); ``live_brokers`` how many brokers are up.
    ``cap_replication_factor``: a broker alone creates it with the brokers it has (see ensure).
    """

    def __init__(self, config: OffsetsTopicConfig, create_topic: CreateTopic,
                 partition_count: Callable[[str], int], live_brokers: Callable[[], int],
                 cap_replication_factor: bool = True) -> None:
        self.config = config
        self._cap = cap_replication_factor
        self._create_topic = create_topic
        self._partition_count = partition_count
        self._live_brokers = live_brokers
        self._lock = asyncio.Lock()
        self._cap_logged = False

    def exists(self) -> bool:
        return self._partition_count(self.config.name) > 0

    async def ensure(self, timeout_ms: int = 10_000) -> bool:
        """Create the topic if needed; True once it exists with its partitions in place."""
        if self.exists():
            return True
        async with self._lock:  # concurrent FindCoordinators create it once
            if self.exists():
                return True
            cfg = self.config
            rf = cfg.replication_factor
            live = max(self._live_brokers(), 1)
            if rf > live and not self._cap:
                # Kafka's rule in a cluster: wait until enough brokers are up rather than create
                # an under-replicated offsets topic for good (clients retry FindCoordinator).
                log.warning("Number of alive brokers '%d' does not meet the required replication factor '%d' for "
                            "%s (configured via '%s.replication.factor'). This error "
                            "can be ignored if the cluster is starting up and not all brokers are up yet.",
                            live, rf, cfg.name, cfg.prefix)
                return False
            if rf > live:
                # A broker alone would never serve groups with Kafka's default of 3, so the
                # factor is capped (said once).
                if not self._cap_logged:
                    log.info("%s.replication.factor is %d but only %d broker(s) are live; creating %s "
                             "with replication factor %d", cfg.prefix, rf, live, cfg.name, live)
                    self._cap_logged = True
                rf = live
            configs: dict[str, str | None] = dict(cfg.configs)
            configs["segment.bytes"] = str(cfg.segment_bytes)
            if "min.insync.replicas" in configs:
                # A capped factor must not leave the topic unwritable with acks=all.
                configs["min.insync.replicas"] = str(min(int(configs["min.insync.replicas"] or rf), rf))
            req = TopicRequest(
                name=cfg.name,
                num_partitions=cfg.num_partitions,
                replication_factor=rf,
                assignments=None,
                configs=configs,
            )
            out = await self._create_topic(req, False, timeout_ms)
            if out.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                log.warning("could not create %s: %s", cfg.name, out.error_message)
                return False
            if out.error_code == ErrorCode.NONE:
                log.info("created %s with %d partitions", cfg.name, out.num_partitions)
        return self.exists()
