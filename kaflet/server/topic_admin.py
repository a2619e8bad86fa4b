"""Topic administration as the admin APIs see it: validate, write through the controller, and
answer once this broker's metadata shows the change (or the request's timeout passes)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from kaflet.controller import topics as controller_topics
from kaflet.controller.topics import CreateOutcome, TopicRequest
from kaflet.metadata.errors import AdminError
from kaflet.metadata.topic_names import validate as validate_topic_name
from kaflet.metadata.zkdata import topic_path, uuid_from_str
from kaflet.protocol.errors import ErrorCode
from kaflet.server.topic_config import (
    InvalidConfigError,
    validate_topic_configs,
)

if TYPE_CHECKING:
    from kaflet.metadata.metadata_cache import MetadataCache
    from kaflet.metadata.tree import MetadataTree
    from kaflet.replication.replica_manager import ReplicaManager
    from kaflet.server.config import BrokerConfig
    from kaflet.server.config_admin import ConfigAdmin
    from kaflet.server.services import MetadataWaiter

log = logging.getLogger("kaflet.admin")

# DescribeConfigs config sources, as CreateTopics v5+ reports them.
SOURCE_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5


class TopicAdmin:
    """Creates, deletes and grows topics on behalf of admin requests and auto-creation."""

    def __init__(self, config: BrokerConfig, broker_id: int, tree: MetadataTree, metadata: MetadataCache,
                 configs: ConfigAdmin, replicas: ReplicaManager, wait_for_metadata: MetadataWaiter,
                 internal_topics: Mapping[str, Callable[[], Awaitable[bool]]]) -> None:
        self.config = config
        self.broker_id = broker_id
        self.tree = tree
        self.metadata = metadata
        self.configs = configs
        self.replicas = replicas
        self.wait_for_metadata = wait_for_metadata
        # Internal topics (the coordinators') are created with their own settings, not the
        # defaults, also when a Metadata request names them.
        self._internal_topics = internal_topics
        self._auto_creating: set[str] = set()

    def _live(self) -> list[tuple[int, str | None]]:
        return [(b.id, b.rack) for b in self.metadata.brokers.values()]

    def describe_configs(self, overrides: dict[str, str]) -> dict[str, tuple[str, int]]:
        """Every config of a topic with these overrides: (value, source), as DescribeConfigs
        reports them (dynamic broker configs included)."""
        return {e.name: (e.value or "", e.source) for e in self.configs.topic_entries(overrides)}

    async def create(self, req: TopicRequest, validate_only: bool, timeout_ms: int) -> CreateOutcome:
        cfg = self.config
        out = CreateOutcome()
        try:
            validate_topic_name(req.name)
        except AdminError as exc:
            return CreateOutcome(exc.error_code, exc.message)
        if req.assignments and (req.num_partitions != -1 or req.replication_factor != -1):
            return CreateOutcome(
                ErrorCode.INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
            )
        partitions = cfg["num.partitions"] if req.num_partitions == -1 else req.num_partitions
        rf = cfg["default.replication.factor"] if req.replication_factor == -1 else req.replication_factor
        if not req.assignments:
            if partitions <= 0:
                return CreateOutcome(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
            if rf <= 0:
                return CreateOutcome(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        try:
            overrides = validate_topic_configs(dict(req.configs), self.configs.topic_defaults())
        except InvalidConfigError as exc:
            return CreateOutcome(ErrorCode.INVALID_CONFIG, str(exc))
        refusal = self._beyond_partition_limit(
            self._replicas_here(partitions, rf, list(req.assignments.values()) if req.assignments else None))
        if refusal is not None:
            return CreateOutcome(ErrorCode.POLICY_VIOLATION, refusal)
        try:
            created = await controller_topics.create_topic(
                self.tree,
                req.name,
                partitions,
                rf,
                overrides,
                self._live(),
                req.assignments,
                validate_only,
            )
        except AdminError as exc:
            return CreateOutcome(exc.error_code, exc.message)
        out.topic_id = uuid_from_str(created.topic_id)
        out.num_partitions = len(created.assignment)
        out.replication_factor = len(next(iter(created.assignment.values()))) if created.assignment else rf
        out.configs = self.describe_configs(overrides)
        if validate_only:
            return out
        # Kafka's DelayedCreatePartitions: answer once the controller has given every partition a
        # leader and this broker's metadata shows it.
        # With timeout_ms <= 0 Kafka answers at once, without waiting (NONE).
        ok = await self.wait_for_metadata(lambda: self._online(req.name, range(out.num_partitions)), timeout_ms)
        info = self.metadata.topics.get(req.name)
        if info is not None:
            out.topic_id = info.topic_id
        if not ok and timeout_ms > 0:
            out.error_code = ErrorCode.REQUEST_TIMED_OUT
            out.error_message = self._not_ready(req.name, range(out.num_partitions), timeout_ms)
            log.warning("topic %s: %s", req.name, out.error_message)
        return out

    async def auto_create(self, names: list[str]) -> None:
        """Create topics named by a Metadata request, with the broker's defaults."""
        cfg = self.config
        for name in names:
            if name in self._auto_creating:
                continue
            ensure_internal = self._internal_topics.get(name)
            if ensure_internal is not None:
                # Kafka creates __consumer_offsets with the offsets.topic.* settings and
                # __transaction_state with the transaction.state.log.* ones.
                await ensure_internal()
                continue
            self._auto_creating.add(name)
            try:
                req = TopicRequest(name, cfg["num.partitions"], cfg["default.replication.factor"], None, {})
                out = await self.create(req, False, 0)
                if out.error_code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                    log.warning("auto-creation of topic %s failed: %s", name, out.error_message)
                else:
                    log.info("auto-created topic %s", name)
            finally:
                self._auto_creating.discard(name)

    async def delete(self, name: str, timeout_ms: int) -> tuple[int, str | None]:
        if not self.config["delete.topic.enable"]:
            return ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled."
        if name not in self.metadata.topics:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
        try:
            await controller_topics.delete_topic(self.tree, name)
        except AdminError as exc:
            return exc.error_code, exc.message
        # Kafka answers once the metadata no longer shows the topic; kaflet also waits until this
        # broker has stopped (and removed) its own replicas, so the data is gone too, and until
        # the controller has removed the topic's node, so that a CreateTopics of the same name
        # right after the answer succeeds instead of finding the deletion still in progress. That
        # last wait is best effort: a replica on a broker that is down keeps the node (as in
        # Kafka), and the deletion has still succeeded as far as the metadata goes.
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        ok = await self.wait_for_metadata(
            lambda: name not in self.metadata.topics and not self.replicas.hosts_topic(name),
            timeout_ms)
        while ok and time.monotonic() < deadline and await self.tree.exists(topic_path(name)) is not None:
            await asyncio.sleep(0.02)
        if not ok:
            return ErrorCode.REQUEST_TIMED_OUT, f"Deletion of topic {name} did not complete within {timeout_ms} ms"
        return ErrorCode.NONE, None

    async def create_partitions(
        self, name: str, count: int, assignments: list[list[int]] | None, validate_only: bool, timeout_ms: int
    ) -> tuple[int, str | None]:
        info = self.metadata.topics.get(name)
        if info is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
        added = count - len(info.partitions)
        if added > 0:
            rf = len(next(iter(info.partitions.values())).replicas) if info.partitions else 1
            refusal = self._beyond_partition_limit(self._replicas_here(added, rf, assignments))
            if refusal is not None:
                return ErrorCode.POLICY_VIOLATION, refusal
        try:
            await controller_topics.add_partitions(
                self.tree, name, count, self._live(), assignments, validate_only)
        except AdminError as exc:
            return exc.error_code, exc.message
        if not validate_only and not await self.wait_for_metadata(lambda: self._online(name, range(count)), timeout_ms) \
                and timeout_ms > 0:
            message = self._not_ready(name, range(count), timeout_ms)
            log.warning("topic %s: %s", name, message)
            return ErrorCode.REQUEST_TIMED_OUT, message
        return ErrorCode.NONE, None

    def _replicas_here(self, partitions: int, rf: int, assignments: list[list[int]] | None) -> int:
        """How many of the new replicas land on this broker: exactly for an explicit assignment,
        else its even share (Kafka's assignment spreads replicas over the live brokers)."""
        if assignments is not None:
            return sum(1 for replicas in assignments if self.broker_id in replicas)
        live = max(1, len(self.metadata.brokers))
        return min(partitions, -(-partitions * rf // live))

    def _beyond_partition_limit(self, wanted: int) -> str | None:
        """The refusal message when ``wanted`` more replicas do not fit this broker's partition
        limit; Kafka's POLICY_VIOLATION, as when a broker-side policy refuses a topic or
        partitions (the other brokers of a cluster refuse their own in LeaderAndIsr)."""
        logs = self.replicas.log_manager
        room = logs.partition_room()
        if room is None or wanted <= room:
            return None
        return f"Refused: {logs.partition_limit_message(wanted)} on broker {self.broker_id}."

    def _not_ready(self, name: str, partitions: range, timeout_ms: int) -> str:
        """Kafka's DelayedCreatePartitions answers REQUEST_TIMED_OUT when partitions still have
        no leader at the timeout; the message says how many."""
        info = self.metadata.topics.get(name)
        missing = [p for p in partitions if info is None or (part := info.partitions.get(p)) is None
                   or part.leader < 0 or part.leader == self.broker_id and self.replicas.get(name, p) is None]
        return (f"{len(missing)} of the {len(partitions)} partitions of topic {name} had no leader after "
                f"{timeout_ms} ms (first: {missing[:5]}); the topic exists, check the brokers' logs")

    def _online(self, name: str, partitions: range) -> bool:
        """Every partition has a leader in this broker's metadata, and those it leads itself are
        in its replica manager (so a produce right after the answer finds them)."""
        info = self.metadata.topics.get(name)
        if info is None:
            return False
        for p in partitions:
            part = info.partitions.get(p)
            if part is None or part.leader < 0:
                return False
            if part.leader == self.broker_id and self.replicas.get(name, p) is None:
                return False
        return True


async def wait_until(predicate: Callable[[], bool], changed: Callable[[], asyncio.Event], timeout_ms: int) -> bool:
    """Wait until `predicate()` holds, re-checking whenever `changed()`'s event fires."""
    deadline = time.monotonic() + max(timeout_ms, 0) / 1000
    while not predicate():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        try:
            await asyncio.wait_for(changed().wait(), remaining)
        except TimeoutError:
            return predicate()
    return True
