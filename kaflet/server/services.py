"""What the handlers are given: the broker's parts they use, grouped by concern.

`Broker.start()` builds one `Services` once every part exists and hands it to the dispatcher,
which puts it on each `RequestContext`; no handler sees the Broker. The groups are frozen:
what changes while the broker runs (its epoch after a new ZooKeeper session, `stopping`, the
gateway's partition numbering) is read from the one mutable `RunState` at each request.

The parts the Produce, Fetch, Metadata and OffsetCommit handlers lean on most are Protocols
(`ReplicaAccess`, `GroupCoordination`, `TopicAdministration`), so that unit tests hand the
handlers in-memory fakes (tests/unit/test_handlers.py); the rest are the concrete classes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kaflet.controller.controller import KafkaController
    from kaflet.coordinator.group.consumer_coordinator import (
        GroupDescription,
        HeartbeatRequest,
        HeartbeatResult,
    )
    from kaflet.coordinator.group.group import GroupSummary
    from kaflet.coordinator.group.member import JoinResult, SyncResult
    from kaflet.coordinator.group.schemas import OffsetValue
    from kaflet.coordinator.producer_id_manager import ProducerIdManager
    from kaflet.coordinator.transaction.coordinator import TransactionCoordinator
    from kaflet.gateway.partitions import PartitionRouter
    from kaflet.gateway.session_report import SessionReport
    from kaflet.log.disk_load import DiskLoadProtector
    from kaflet.log.log_manager import LogManager
    from kaflet.metadata.metadata_cache import MetadataCache
    from kaflet.metrics.stats import BrokerMetrics
    from kaflet.protocol.errors import ErrorCode
    from kaflet.quota.manager import QuotaManager
    from kaflet.quota.replication import ReplicationQuota
    from kaflet.quota.store import QuotaConfigStore
    from kaflet.replication.append import AppendEntry, MarkerSpec, PartitionAppendResult, PendingAppends
    from kaflet.replication.fetch_path import FetchParams, FetchResult, PartitionFetchInfo
    from kaflet.replication.partition import Partition
    from kaflet.replication.quota import ReplicaQuota
    from kaflet.security.authorizer import Authorizer
    from kaflet.security.scram_store import ScramCredentialStore
    from kaflet.server.config_admin import ConfigAdmin
    from kaflet.server.controller_requests import ControllerRequests
    from kaflet.server.fetch_session import FetchManager
    from kaflet.server.topic_admin import CreateOutcome, TopicRequest

TopicPartition = tuple[str, int]


class ReplicaAccess(Protocol):
    """The hosted partitions, the one write path and the one read path (the replica manager,
    as handlers use it)."""

    @property
    def partitions(self) -> Mapping[TopicPartition, Partition]: ...

    def get(self, topic: str, partition: int) -> Partition | None: ...

    def append_records(self, entries: Sequence[AppendEntry], required_acks: int, *,
                       internal_topics_allowed: bool = False, started: float | None = None) -> PendingAppends: ...

    def append_txn_markers(self, markers: Sequence[MarkerSpec], started: float | None = None
                           ) -> tuple[list[list[PartitionAppendResult]], PendingAppends]: ...

    async def fetch_messages(self, params: FetchParams, infos: Sequence[PartitionFetchInfo],
                             quota: ReplicaQuota | None = None, disk_load: DiskLoadProtector | None = None
                             ) -> FetchResult: ...

    def last_offset_for_leader_epoch(self, topic: str, partition: int, current_leader_epoch: int,
                                     leader_epoch: int) -> tuple[ErrorCode, int, int]: ...

    def alter_replica_log_dirs(self, dirs: dict[TopicPartition, str]) -> dict[TopicPartition, ErrorCode]: ...


class GroupCoordination(Protocol):
    """The group coordinator, as the group and offset handlers use it."""

    ensure_topic: Callable[[], Awaitable[bool]] | None

    def partition_for(self, group_id: str) -> int: ...

    async def join_group(
        self, group_id: str, member_id: str, group_instance_id: str | None, require_known_member_id: bool,
        client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]],
    ) -> JoinResult: ...

    async def sync_group(self, group_id: str, generation_id: int, member_id: str, protocol_type: str | None,
                         protocol_name: str | None, group_instance_id: str | None,
                         assignments: dict[str, bytes]) -> SyncResult: ...

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                  generation_id: int) -> ErrorCode: ...

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]
                    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]: ...

    async def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None,
                             generation_id: int, offsets: dict[TopicPartition, OffsetValue],
                             api_version: int = 8) -> dict[TopicPartition, ErrorCode]: ...

    async def commit_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                                 group_instance_id: str | None, generation_id: int,
                                 offsets: dict[TopicPartition, OffsetValue]) -> dict[TopicPartition, ErrorCode]: ...

    def complete_txn(self, partition: int, producer_id: int, commit: bool) -> None: ...

    def has_pending_txn_offsets(self, group_id: str, tp: TopicPartition) -> bool: ...

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None,
                      member_id: str | None = None, member_epoch: int = -1
                      ) -> tuple[ErrorCode, dict[TopicPartition, OffsetValue | None]]: ...

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                             ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]: ...

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupSummary]: ...

    def list_groups(self, states: set[str] | None = None, types: set[str] | None = None
                    ) -> tuple[ErrorCode, list[tuple[str, str, str, str]]]: ...

    async def consumer_group_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult: ...

    def consumer_group_describe(self, group_id: str) -> GroupDescription: ...

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]: ...


class TopicAdministration(Protocol):
    """Topic creation, deletion and new partitions (server/topic_admin.py)."""

    async def create(self, req: TopicRequest, validate_only: bool, timeout_ms: int) -> CreateOutcome: ...

    async def auto_create(self, names: list[str]) -> None: ...

    async def delete(self, name: str, timeout_ms: int) -> tuple[int, str | None]: ...

    async def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None,
                                validate_only: bool, timeout_ms: int) -> tuple[int, str | None]: ...


#: Waits (up to a timeout in ms) until a predicate over the metadata cache holds; False: timed out.
MetadataWaiter = Callable[[Callable[[], bool], int], Awaitable[bool]]


@dataclass(slots=True)
class RunState:
    """What changes while the broker runs: written by the Broker, read by handlers per request."""

    #: The czxid of this broker's registration: controller requests for an earlier one are stale.
    broker_epoch: int = -1
    #: The broker is stopping: long-polling fetches answer at once.
    stopping: bool = False
    #: Client numbering of topics with disabled partitions (the gateway); None: clients see all.
    #: While set, the dispatcher renumbers partitions around the handlers (server/renumbering.py).
    partition_router: PartitionRouter | None = None


#: How long a Metadata or DescribeCluster request waits for the broker's first UpdateMetadata:
#: well below clients' request timeouts (30 s and more), far above the milliseconds it takes.
FIRST_METADATA_WAIT_MS = 5000


@dataclass(frozen=True, slots=True)
class Cluster:
    """Who this broker is and what it knows of the cluster."""

    broker_id: int
    cluster_id: str
    metadata: MetadataCache
    wait_for_metadata: MetadataWaiter

    async def metadata_known(self) -> None:
        """Wait (at most ``FIRST_METADATA_WAIT_MS``) while this broker has not yet had its first
        UpdateMetadata from the controller. Listeners serve before it arrives (in a cluster the
        controller's requests come over them), and a Metadata answer without a controller made
        librdkafka's AdminClient wait minutes for one; held here, the client's first answer
        names the controller. Every UpdateMetadata names its controller, so afterwards this
        answers at once, as Kafka does."""
        cache = self.metadata
        if cache.controller_id < 0:
            await self.wait_for_metadata(lambda: cache.controller_id >= 0, FIRST_METADATA_WAIT_MS)


@dataclass(frozen=True, slots=True)
class Settings:
    """The static broker configs handlers read."""

    fetch_max_bytes: int
    auto_create_topics_enable: bool
    request_timeout_ms: int
    #: Most partitions one DescribeTopicPartitions answer lists (max.request.partition.size.limit).
    max_request_partition_size_limit: int = 2000
    #: The listener the other brokers connect to (server/inter_broker_security.py); None for a
    #: broker alone, whose controller reaches it in-process.
    inter_broker_listener: str | None = None


@dataclass(frozen=True, slots=True)
class Storage:
    """Partitions, logs and the read side around them."""

    replicas: ReplicaAccess
    logs: LogManager
    fetch_sessions: FetchManager
    #: The leader replication quota (KIP-73) a follower's fetch is throttled by.
    leader_quota: ReplicationQuota
    #: Disk load protection (diskloadprotector.enable); None: off.
    disk_load: DiskLoadProtector | None


@dataclass(frozen=True, slots=True)
class Coordinators:
    groups: GroupCoordination
    transactions: TransactionCoordinator
    producer_ids: ProducerIdManager


@dataclass(frozen=True, slots=True)
class Admin:
    """Cluster administration: topics, configs, the controller, quotas and credentials."""

    topics: TopicAdministration
    configs: ConfigAdmin
    #: This broker's controller (active or not); only the active one acts.
    controller: KafkaController
    #: LeaderAndIsr, StopReplica and UpdateMetadata, from the wire or this broker's own controller.
    controller_requests: ControllerRequests
    quota_configs: QuotaConfigStore
    scram_credentials: ScramCredentialStore


@dataclass(frozen=True, slots=True)
class Accounting:
    """Metrics and quotas: what requests are counted and charged for."""

    #: The counters behind the Prometheus endpoint; None: none are kept.
    metrics: BrokerMetrics | None
    quotas: QuotaManager
    #: Produce and Fetch count their bytes per topic (server/traffic.py, RequestContext.traffic).
    track_traffic: bool
    #: Connections per topic reported to the management service; None: no gateway.
    session_report: SessionReport | None


@dataclass(frozen=True, slots=True)
class Services:
    """Everything a handler may use, built once at the end of the broker's start-up."""

    cluster: Cluster
    settings: Settings
    storage: Storage
    coordinators: Coordinators
    admin: Admin
    #: authorizer.class.name's authorizer; None: everything is allowed.
    authorizer: Authorizer | None
    accounting: Accounting
    state: RunState
