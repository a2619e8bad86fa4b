"""The partitions this broker hosts, and the controller's requests that change them (Kafka's
ReplicaManager in ZooKeeper mode).

``become_leader_or_follower`` applies a LeaderAndIsr request, ``stop_replicas`` a StopReplica
request and ``maybe_update_metadata_cache`` an UpdateMetadata request. Each takes the request
object (decoded from the wire, or handed over in-process by this broker's own controller) with
this broker's current epoch, and returns the response object, with Kafka's checks and error
codes: STALE_BROKER_EPOCH for a request meant for an earlier registration of this broker,
STALE_CONTROLLER_EPOCH for one from a controller older than the newest seen; per partition,
a leader epoch not newer than the hosted one is refused, as is a topic id other than the log's.

Becoming leader stops the partition's fetcher and makes it lead at the new epoch (its followers'
positions reset); becoming follower makes it follow and hands it to the fetcher of its new
leader, which truncates and then fetches (``fetcher.py``). The broker learns of both through
``on_leadership_change`` (the group coordinator loads and unloads ``__consumer_offsets``
partitions this way) and of stopped replicas through ``on_replicas_stopped``. The first
LeaderAndIsr starts the high watermark checkpoints, as in Kafka. A periodic task removes
lagging followers from the ISR of the partitions led here (every ``replica.lag.time.max.ms``/2).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence

from kaflet.log.append_origin import AppendOrigin
from kaflet.log.config import LogConfig
from kaflet.log.dir_failure import is_resource_exhaustion
from kaflet.log.disk_load import DiskLoadProtector
from kaflet.log.errors import PartitionLimitError
from kaflet.log.log_manager import LogDirNotFoundError, LogManager, future_dir_name
from kaflet.metadata.topic_names import is_valid
from kaflet.metadata.zkdata import ZERO_UUID, uuid_to_str
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.broker_connection import BrokerConnectionError
from kaflet.protocol.controller_codec import LeaderAndIsrPartitionError, LeaderAndIsrTopicError
from kaflet.protocol.controller_messages import (
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from kaflet.protocol.errors import ErrorCode
from kaflet.replication.alter_log_dirs import AlterLogDirsMover
from kaflet.replication.append import (
    AppendEntry,
    MarkerSpec,
    PartitionAppendResult,
    PendingAppends,
    append_marker_to,
    append_records,
)
from kaflet.replication.config import ReplicationConfig
from kaflet.replication.fetch_path import FetchParams, FetchResult, PartitionFetchInfo, fetch_messages
from kaflet.replication.fetcher import (
    BrokerEndpoint,
    Connector,
    InitialFetchState,
    LeaderConnection,
    ReplicaFetcherManager,
)
from kaflet.replication.partition import IsrWriter, Partition
from kaflet.replication.quota import ReplicaQuota, UnboundedQuota

log = logging.getLogger("kaflet.replica")

#: StopReplica's leader epoch: no check (NoEpoch), and the topic is being deleted (EpochDuringDelete).
NO_EPOCH = -1
EPOCH_DURING_DELETE = -2
#: The epoch a broker starts with before any controller request (KafkaController.InitialControllerEpoch).
INITIAL_CONTROLLER_EPOCH = 0
#: Broker epoch of a request from a controller that does not send one.
UNKNOWN_BROKER_EPOCH = -1

#: (partitions this broker now leads, partitions it now follows), after each LeaderAndIsr.
LeadershipCallback = Callable[[Sequence[Partition], Sequence[Partition]], None]
#: (topic, partition, deleted) of every replica a StopReplica stopped.
StoppedCallback = Callable[[Sequence[tuple[str, int, bool]]], None]
#: Applies an UpdateMetadata request to the metadata cache; returns the partitions removed.
MetadataUpdater = Callable[[UpdateMetadataRequest], list[tuple[str, int]]]
#: A live broker's inter-broker endpoint (host, port), from the metadata cache; None if unknown.
EndpointLookup = Callable[[int], tuple[str, int] | None]
#: Whether the metadata cache knows a partition.
PartitionKnown = Callable[[str, int], bool]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _is_stale_broker_epoch(request_epoch: int, broker_epoch: int) -> bool:
    # A larger epoch than this broker's is possible when the controller saw the new
    # registration first; only an older one is stale (Kafka's isBrokerEpochStale).
    return request_epoch != UNKNOWN_BROKER_EPOCH and request_epoch < broker_epoch


def leader_and_isr_error_response(request: LeaderAndIsrRequest, error: ErrorCode) -> LeaderAndIsrResponse:
    """A LeaderAndIsr response with ``error`` for the request and each of its partitions."""
    return LeaderAndIsrResponse(error, [
        LeaderAndIsrTopicError(_answer_topic_id(t.topic_id), [
            LeaderAndIsrPartitionError(p.partition_index, error) for p in t.partition_states])
        for t in request.topic_states])


_NO_TOPIC_ID = uuid.UUID(int=0)


def _answer_topic_id(topic_id: uuid.UUID | None) -> uuid.UUID:
    # The generic codec (a request a test or a tool built) reads the all-zero id as None.
    return topic_id if topic_id is not None else _NO_TOPIC_ID


def stop_replica_error_response(request: StopReplicaRequest, error: ErrorCode, per_partition: bool = True
                                ) -> StopReplicaResponse:
    """A StopReplica response with ``error`` (and for each partition unless ``per_partition`` is off)."""
    R = codec.response_class(ApiKey.STOP_REPLICA)
    parts = [R.StopReplicaPartitionError(topic_name=t.topic_name, partition_index=p.partition_index, error_code=error)
             for t in request.topic_states for p in t.partition_states] if per_partition else []
    return R(error_code=error, partition_errors=parts)


def update_metadata_response(error: ErrorCode) -> UpdateMetadataResponse:
    return UpdateMetadataResponse(error)


class ReplicaManager:
    """Maps (topic, partition) to the Partition objects that own the logs, and applies the
    controller's requests to them."""

    def __init__(self, broker_id: int, log_manager: LogManager, *,
                 config: ReplicationConfig | None = None,
                 isr_writer: IsrWriter | None = None,
                 connector: Connector | None = None,
                 leader_endpoint: EndpointLookup | None = None,
                 partition_known: PartitionKnown | None = None,
                 follower_quota: ReplicaQuota | None = None,
                 alter_log_dirs_quota: ReplicaQuota | None = None,
                 stopping: Callable[[], bool] | None = None,
                 now_ms: Callable[[], int] = _now_ms) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.config = config or ReplicationConfig()
        self.replica_lag_time_max_ms = self.config.replica_lag_time_max_ms
        self.isr_writer = isr_writer
        self._time = now_ms
        self.partitions: dict[tuple[str, int], Partition] = {}
        #: The newest controller epoch seen; older controllers' requests are refused.
        self.controller_epoch = INITIAL_CONTROLLER_EPOCH
        self.fetcher_manager = ReplicaFetcherManager(broker_id, self.config, self.get, connector or _no_connector,
                                                    follower_quota)
        #: Copies replicas being moved between this broker's log dirs (AlterReplicaLogDirs).
        self.alter_log_dirs = AlterLogDirsMover(log_manager, self.get, alter_log_dirs_quota or UnboundedQuota(),
                                                fetch_max_bytes=self.config.fetch_max_bytes)
        self._leader_endpoint = leader_endpoint or (lambda _broker: None)
        self._partition_known = partition_known or (lambda _topic, _partition: False)
        self.metadata_updater: MetadataUpdater | None = None
        self.on_leadership_change: LeadershipCallback | None = None
        self.on_replicas_stopped: StoppedCallback | None = None
        #: Told how many replicas of a LeaderAndIsr were refused for want of descriptors or
        #: memory: the controller counts them offline, so someone must ask it to try again.
        self.on_resources_short: Callable[[int], None] | None = None
        self.shutting_down = False
        #: Replicas of the LeaderAndIsr being applied that the partition limit refused.
        self._refused_by_limit: list[tuple[tuple[str, int], str]] = []
        #: ... and those refused because the process ran out of descriptors or memory.
        self._refused_for_resources: list[tuple[tuple[str, int], str]] = []
        # The broker is stopping (set before this manager's own shutdown): long polls answer at once.
        self._stopping = stopping or (lambda: self.shutting_down)
        self._isr_task: asyncio.Task[None] | None = None
        #: ISR changes written by this broker's leaders (Kafka's IsrExpandsPerSec / IsrShrinksPerSec).
        self.isr_expands = 0
        self.isr_shrinks = 0

    def _count_isr_change(self, expand: bool) -> None:
        if expand:
            self.isr_expands += 1
        else:
            self.isr_shrinks += 1

    def get(self, topic: str, partition: int) -> Partition | None:
        """The hosted partition, or None (a ``PartitionLookup``)."""
        return self.partitions.get((topic, partition))

    # -- the write path -----------------------------------------------------------------------

    def append_records(self, entries: Sequence[AppendEntry], required_acks: int, *,
                       origin: AppendOrigin = AppendOrigin.CLIENT, internal_topics_allowed: bool = False,
                       started: float | None = None) -> PendingAppends:
        """Append each entry's records to its partition led here: the way records of clients
        and coordinators (``origin``) go into a log (``append.append_records``), but for the
        coordinators' own writes (``append.append_coordinator_records``)."""
        return append_records(self.get, entries, required_acks, origin=origin,
                              internal_topics_allowed=internal_topics_allowed, started=started)

    def append_txn_markers(self, markers: Sequence[MarkerSpec], started: float | None = None
                           ) -> tuple[list[list[PartitionAppendResult]], PendingAppends]:
        """Append each COMMIT/ABORT marker to its partitions led here (WriteTxnMarkers): one
        result per partition of each marker, in order, and what still waits to be flushed and
        replicated (markers are written with acks=all)."""
        pending = PendingAppends([], time.monotonic() if started is None else started)
        out = []
        for spec in markers:
            out.append([append_marker_to(self.partitions.get(tp), spec, pending) for tp in spec[4]])
        pending.results.extend(r for results in out for r in results)
        return out, pending

    # -- the read path ------------------------------------------------------------------------

    async def fetch_messages(self, params: FetchParams, infos: Sequence[PartitionFetchInfo],
                             quota: ReplicaQuota | None = None, disk_load: DiskLoadProtector | None = None
                             ) -> FetchResult:
        """Read the partitions led here for a consumer or a follower, long-polling as ``params``
        ask: the one way records of partitions go out to clients and followers
        (``fetch_path.fetch_messages``). ``quota`` throttles a follower's read of throttled
        partitions (KIP-73); ``disk_load`` may refuse a consumer's cold reads."""
        return await fetch_messages(self.partitions, self._partition_known, self._stopping, params, infos,
                                    quota, disk_load)

    def hosts_topic(self, topic: str) -> bool:
        """Whether any partition of the topic is hosted here."""
        return any(t == topic for t, _ in self.partitions)

    def _new_partition(self, topic: str, index: int, topic_id: str | None, log_config: LogConfig) -> Partition:
        log_ = self.log_manager.get_or_create_log(topic, index, topic_id, log_config)
        part = Partition(topic, index, log_.topic_id or "", log_, self.broker_id,
                         replica_lag_time_max_ms=self.replica_lag_time_max_ms, now_ms=self._time,
                         isr_writer=self.isr_writer, on_isr_change=self._count_isr_change)
        self.partitions[(topic, index)] = part
        return part

    # -- LeaderAndIsr -------------------------------------------------------------------------

    async def create_logs(self, request: LeaderAndIsrRequest, broker_epoch: int) -> None:
        """Create, off the event loop, the logs a LeaderAndIsr v5 request will give this broker
        (``LogManager.create_logs``), before ``become_leader_or_follower`` applies it; a
        request it will refuse creates nothing."""
        if _is_stale_broker_epoch(request.broker_epoch, broker_epoch) or request.controller_epoch < self.controller_epoch:
            return
        # With a log dir offline, a replica that is not new may have its log there: only
        # become_leader_or_follower may decide (it answers KAFKA_STORAGE_ERROR).
        any_offline = self.log_manager.failure_channel.any_offline
        await self.log_manager.create_logs(
            (t.topic_name, ps.partition_index) for t in request.topic_states if is_valid(t.topic_name)
            for ps in t.partition_states
            if ps.partition_index >= 0 and self.broker_id in ps.replicas
            and (t.topic_name, ps.partition_index) not in self.partitions and (ps.is_new or not any_offline))

    def become_leader_or_follower(self, request: LeaderAndIsrRequest, broker_epoch: int) -> LeaderAndIsrResponse:
        """Apply a LeaderAndIsr v5 request (Kafka's ``becomeLeaderOrFollower``); returns the
        response object."""
        if _is_stale_broker_epoch(request.broker_epoch, broker_epoch):
            log.info("ignoring LeaderAndIsr with broker epoch %d older than this broker's %d",
                     request.broker_epoch, broker_epoch)
            return leader_and_isr_error_response(request, ErrorCode.STALE_BROKER_EPOCH)
        if request.controller_epoch < self.controller_epoch:
            log.warning("ignoring LeaderAndIsr from controller %d with epoch %d older than %d",
                        request.controller_id, request.controller_epoch, self.controller_epoch)
            return leader_and_isr_error_response(request, ErrorCode.STALE_CONTROLLER_EPOCH)
        self.controller_epoch = request.controller_epoch
        live_leaders = {b.broker_id: (b.host_name, b.port) for b in request.live_leaders}
        errors: dict[tuple[str, int], ErrorCode] = {}
        to_lead: list[tuple[tuple[str, int], str | None, LeaderAndIsrPartitionState]] = []
        to_follow: list[tuple[tuple[str, int], str | None, LeaderAndIsrPartitionState]] = []
        not_newer: list[tuple[tuple[str, int], int, int]] = []
        for t in request.topic_states:
            topic_id = _topic_id(t.topic_id)
            for ps in t.partition_states:
                tp = (t.topic_name, ps.partition_index)
                part = self.partitions.get(tp)
                current_epoch = part.leader_epoch if part is not None else -1
                if part is not None and part.log.offline:
                    # Kafka's HostedPartition.Offline, whatever the epoch: the controller learns
                    # from this answer that the replica is gone.
                    log.warning("ignoring LeaderAndIsr for %s-%d: its log directory is offline", *tp)
                    errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                elif part is None and (not is_valid(tp[0]) or tp[1] < 0):
                    # No such partition can exist, and its name must not become a directory.
                    log.warning("ignoring LeaderAndIsr for invalid partition %r-%d", *tp)
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif part is not None and topic_id is not None and part.log.topic_id not in (None, topic_id):
                    log.error("topic id %s of %s-%d in LeaderAndIsr does not match the log's %s", topic_id, *tp,
                              part.log.topic_id)
                    errors[tp] = ErrorCode.INCONSISTENT_TOPIC_ID
                elif ps.leader_epoch > current_epoch:
                    if self.broker_id not in ps.replicas:
                        log.warning("ignoring LeaderAndIsr for %s-%d: broker %d is not among its replicas %s",
                                    *tp, self.broker_id, list(ps.replicas))
                        errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    else:
                        (to_lead if ps.leader == self.broker_id else to_follow).append((tp, topic_id, ps))
                else:
                    # Kafka answers an epoch that is not newer with STALE_CONTROLLER_EPOCH.
                    not_newer.append((tp, ps.leader_epoch, current_epoch))
                    errors[tp] = ErrorCode.STALE_CONTROLLER_EPOCH
        if not_newer:
            # One line, not Kafka's one per partition: a new controller sends every partition's
            # state, mostly unchanged, and 10,000 lines held the loop for 0.3-1.5 s.
            log.info("ignoring LeaderAndIsr for %d partitions whose leader epoch is not newer than this broker's: %s%s",
                     len(not_newer), ", ".join(f"{t}-{p} ({e} <= {c})" for (t, p), e, c in not_newer[:5]),
                     ", ..." if len(not_newer) > 5 else "")
        self._refused_by_limit = []
        self._refused_for_resources = []
        leaders = self._make_leaders(to_lead, errors) if to_lead else []
        followers = self._make_followers(to_follow, live_leaders, errors) if to_follow else []
        # A move a restart interrupted (its -future log was loaded) resumes once the partition
        # is hosted again, as Kafka's becomeLeaderOrFollower restarts it.
        for tp, _, _ in (*to_lead, *to_follow):
            if tp in self.partitions and self.log_manager.get_future_log(*tp) is not None \
                    and tp not in self.alter_log_dirs.moving:
                self.alter_log_dirs.add(*tp)
        if self._refused_by_limit:
            refused = self._refused_by_limit
            log.warning("refused %d new replicas (%s-%d, ...): %s", len(refused), *refused[0][0],
                        self.log_manager.partition_limit_message(len(refused)))
            self._refused_by_limit = []
        if self._refused_for_resources:
            short = self._refused_for_resources
            log.warning("refused %d replicas (%s-%d, ...) for want of a resource, not a disk fault: %s",
                        len(short), *short[0][0], short[0][1])
            self._refused_for_resources = []
            if self.on_resources_short is not None:
                self.on_resources_short(len(short))
        # Kafka starts the high watermark checkpoints with the first LeaderAndIsr, once the
        # partitions are populated.
        self.log_manager.start_high_watermark_checkpoints()
        self.fetcher_manager.shutdown_idle_fetchers()
        if self.on_leadership_change is not None and (leaders or followers):
            self.on_leadership_change(leaders, followers)
        return LeaderAndIsrResponse(ErrorCode.NONE, [
            LeaderAndIsrTopicError(_answer_topic_id(t.topic_id), [
                LeaderAndIsrPartitionError(ps.partition_index, errors.get((t.topic_name, ps.partition_index), 0))
                for ps in t.partition_states])
            for t in request.topic_states])

    def _hosted(self, tp: tuple[str, int], topic_id: str | None, is_new: bool,
                errors: dict[tuple[str, int], ErrorCode], role: str) -> Partition | None:
        """The partition, its log created if needed; None (and KAFKA_STORAGE_ERROR) on a disk
        error, when its log dir is offline, or when it is not a new replica and may have had its
        log in an offline dir (Kafka's getOrCreateLog with isNew)."""
        part = self.partitions.get(tp)
        if part is not None and part.log.offline or \
                part is None and not is_new and self.log_manager.failure_channel.any_offline:
            log.warning("cannot become %s of %s-%d: its log directory is offline", role, *tp)
            errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
            return None
        try:
            if part is None:
                part = self._new_partition(tp[0], tp[1], topic_id, self.log_manager.config_for(tp[0]))
            elif topic_id is not None and part.log.topic_id is None:
                part.log.assign_topic_id(topic_id)
                part.topic_id = topic_id
        except PartitionLimitError as exc:
            # One line per request, not per partition (become_leader_or_follower logs it).
            self._refused_by_limit.append((tp, str(exc)))
            errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
            return None
        except OSError as exc:
            if is_resource_exhaustion(exc):
                # One line per request (become_leader_or_follower logs it), and a retry later.
                self._refused_for_resources.append((tp, str(exc)))
            else:
                log.error("cannot become %s of %s-%d: %s", role, *tp, exc)
            errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
            return None
        return part

    def _make_leaders(self, states: list[tuple[tuple[str, int], str | None, LeaderAndIsrPartitionState]],
                      errors: dict[tuple[str, int], ErrorCode]) -> list[Partition]:
        """Kafka's ``makeLeaders``: stop fetching, then lead at the new epoch."""
        self.fetcher_manager.remove_fetcher_for_partitions(tp for tp, _, _ in states)
        became: list[Partition] = []
        led: list[Partition] = []
        debug = log.isEnabledFor(logging.DEBUG)
        for tp, topic_id, ps in states:
            part = self._hosted(tp, topic_id, ps.is_new, errors, "leader")
            if part is None:
                continue
            was_leader = part.is_leader
            part.make_leader(ps.leader_epoch, list(ps.replicas), list(ps.isr), zk_version=ps.zk_version,
                             controller_epoch=ps.controller_epoch)
            if debug:
                log.debug("leader of %s-%d at epoch %d from offset %d (high watermark %d, ISR %s)", *tp,
                          ps.leader_epoch, part.log.log_end_offset, part.log.high_watermark, list(ps.isr))
            led.append(part)
            if not was_leader:
                became.append(part)
        if led:
            _log_roles("leader", led)
        return became

    def _make_followers(self, states: list[tuple[tuple[str, int], str | None, LeaderAndIsrPartitionState]],
                        live_leaders: dict[int, tuple[str, int]],
                        errors: dict[tuple[str, int], ErrorCode]) -> list[Partition]:
        """Kafka's ``makeFollowers``: follow the new leader (when it is alive), then fetch from it."""
        became: list[tuple[Partition, BrokerEndpoint]] = []
        for tp, topic_id, ps in states:
            part = self._hosted(tp, topic_id, ps.is_new, errors, "follower")
            if part is None:
                continue
            address = self._leader_endpoint(ps.leader) or live_leaders.get(ps.leader)
            if address is None:
                # The log exists now (so its high watermark is checkpointed), as in Kafka.
                log.error("cannot follow %s-%d: its new leader %d is not available", *tp, ps.leader)
                continue
            if part.make_follower(ps.leader, ps.leader_epoch, list(ps.replicas), zk_version=ps.zk_version,
                                  controller_epoch=ps.controller_epoch):
                became.append((part, BrokerEndpoint(ps.leader, address[0], address[1])))
        self.fetcher_manager.remove_fetcher_for_partitions((p.topic, p.index) for p, _ in became)
        if not self.shutting_down and became:
            self.fetcher_manager.add_fetcher_for_partitions({
                (p.topic, p.index): InitialFetchState(leader, p.leader_epoch, p.log.high_watermark)
                for p, leader in became})
        if log.isEnabledFor(logging.DEBUG):
            for p, leader in became:
                log.debug("follower of %s-%d at epoch %d, leader %d, from offset %d (high watermark %d)", p.topic,
                          p.index, p.leader_epoch, leader.broker_id, p.log.log_end_offset, p.log.high_watermark)
        if became:
            _log_roles("follower", [p for p, _ in became])
        return [p for p, _ in became]

    # -- AlterReplicaLogDirs -------------------------------------------------------------------

    def alter_replica_log_dirs(self, dirs: dict[tuple[str, int], str]) -> dict[tuple[str, int], ErrorCode]:
        """Move each replica to its log dir (Kafka's ``alterReplicaLogDirs``): a ``-future`` log
        there that ``AlterLogDirsMover`` fills and swaps in. A replica already there needs
        nothing; one not hosted yet will be created there (REPLICA_NOT_AVAILABLE until then)."""
        return {tp: self._alter_replica_log_dir(tp, d) for tp, d in dirs.items()}

    def _alter_replica_log_dir(self, tp: tuple[str, int], d: str) -> ErrorCode:
        lm = self.log_manager
        try:
            if len(future_dir_name(*tp)) > 255 or not is_valid(tp[0]) or tp[1] < 0:
                return ErrorCode.INVALID_TOPIC_EXCEPTION
            if not lm.check_log_dir(d):
                log.warning("cannot move %s-%d to %s: that log directory is offline", *tp, d)
                return ErrorCode.KAFKA_STORAGE_ERROR
            part = self.partitions.get(tp)
            if part is not None:
                if part.log.offline:
                    return ErrorCode.KAFKA_STORAGE_ERROR
                moving_to = lm.future_log_dir_of(*tp)
                if moving_to is not None and moving_to != d:
                    log.info("%s-%d: its move to %s is given up for one to %s", *tp, moving_to, d)
                    self.alter_log_dirs.remove(*tp)
                    lm.abandon_future_log(*tp)
            lm.maybe_update_preferred_log_dir(*tp, d)
            if part is None:
                known = self._partition_known(*tp) or self.log_manager.get_log(*tp) is not None
                return ErrorCode.REPLICA_NOT_AVAILABLE if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if lm.log_dir_of(*tp) == d:
                return ErrorCode.NONE
            if lm.get_future_log(*tp) is None:
                # Kafka creates no future log while a dir is offline: the partition might get
                # a second one there.
                if lm.failure_channel.any_offline:
                    return ErrorCode.KAFKA_STORAGE_ERROR
                lm.create_future_log(*tp, d)
            self.alter_log_dirs.add(*tp)
            return ErrorCode.NONE
        except LogDirNotFoundError as exc:
            log.warning("cannot move %s-%d: %s", *tp, exc)
            return ErrorCode.LOG_DIR_NOT_FOUND
        except OSError as exc:
            log.warning("cannot move %s-%d to %s: %s", *tp, d, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR

    # -- StopReplica --------------------------------------------------------------------------

    def stop_replicas(self, request: StopReplicaRequest, broker_epoch: int) -> StopReplicaResponse:
        """Apply a StopReplica v3 request (Kafka's ``stopReplicas``); returns the response object."""
        if _is_stale_broker_epoch(request.broker_epoch, broker_epoch):
            log.info("ignoring StopReplica with broker epoch %d older than this broker's %d",
                     request.broker_epoch, broker_epoch)
            return stop_replica_error_response(request, ErrorCode.STALE_BROKER_EPOCH, per_partition=False)
        if request.controller_epoch < self.controller_epoch:
            log.warning("ignoring StopReplica from controller %d with epoch %d older than %d",
                        request.controller_id, request.controller_epoch, self.controller_epoch)
            return stop_replica_error_response(request, ErrorCode.STALE_CONTROLLER_EPOCH, per_partition=False)
        self.controller_epoch = request.controller_epoch
        results: dict[tuple[str, int], ErrorCode] = {}
        to_stop: dict[tuple[str, int], bool] = {}
        for t in request.topic_states:
            for ps in t.partition_states:
                tp = (t.topic_name, ps.partition_index)
                part = self.partitions.get(tp)
                epoch = ps.leader_epoch
                # The same epoch is accepted too (Kafka 3.4+, KAFKA-13972): a cancelled
                # reassignment stops the replicas it was adding without bumping the epoch.
                if part is None or epoch in (EPOCH_DURING_DELETE, NO_EPOCH) or epoch >= part.leader_epoch:
                    # Not hosted: a log left from before a restart is still deleted.
                    to_stop[tp] = ps.delete_partition
                    results[tp] = ErrorCode.NONE
                else:
                    log.info("ignoring StopReplica (delete=%s) for %s-%d: leader epoch %d is older than %d",
                             ps.delete_partition, *tp, epoch, part.leader_epoch)
                    results[tp] = ErrorCode.FENCED_LEADER_EPOCH
        results.update(self._stop_partitions(to_stop))
        self.fetcher_manager.shutdown_idle_fetchers()
        if self.on_replicas_stopped is not None and to_stop:
            self.on_replicas_stopped([(t, p, delete) for (t, p), delete in to_stop.items()
                                      if results[(t, p)] == ErrorCode.NONE])
        R = codec.response_class(ApiKey.STOP_REPLICA)
        return R(error_code=ErrorCode.NONE, partition_errors=[
            R.StopReplicaPartitionError(topic_name=t, partition_index=p, error_code=e) for (t, p), e in results.items()])

    def _stop_partitions(self, to_stop: dict[tuple[str, int], bool]) -> dict[tuple[str, int], ErrorCode]:
        """Stop fetching; for deletion remove the partition and delete its log. Returns errors."""
        self.fetcher_manager.remove_fetcher_for_partitions(to_stop)
        errors: dict[tuple[str, int], ErrorCode] = {}
        for tp, delete in to_stop.items():
            part = self.partitions.get(tp)
            if part is not None and part.log.offline:
                errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR  # deleted once the dir is back
                continue
            if not delete:
                continue
            part = self.partitions.pop(tp, None)
            if part is not None:
                # Kafka answers what waited on a removed partition from its metadata cache.
                part.close(ErrorCode.NOT_LEADER_OR_FOLLOWER if self._partition_known(*tp)
                           else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            try:
                self.log_manager.delete_log(*tp)
            except OSError as exc:
                log.error("cannot delete the log of %s-%d: %s", *tp, exc)
                errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
        return errors

    # -- UpdateMetadata -----------------------------------------------------------------------

    def maybe_update_metadata_cache(self, request: UpdateMetadataRequest, broker_epoch: int) -> UpdateMetadataResponse:
        """Apply an UpdateMetadata v7 request through ``metadata_updater`` after the epoch checks
        (Kafka's ``maybeUpdateMetadataCache``); returns the response object."""
        if _is_stale_broker_epoch(request.broker_epoch, broker_epoch):
            log.info("ignoring UpdateMetadata with broker epoch %d older than this broker's %d",
                     request.broker_epoch, broker_epoch)
            return update_metadata_response(ErrorCode.STALE_BROKER_EPOCH)
        if request.controller_epoch < self.controller_epoch:
            log.warning("ignoring UpdateMetadata from controller %d with epoch %d older than %d",
                        request.controller_id, request.controller_epoch, self.controller_epoch)
            return update_metadata_response(ErrorCode.STALE_CONTROLLER_EPOCH)
        if self.metadata_updater is not None:
            self.metadata_updater(request)
        self.controller_epoch = request.controller_epoch
        return update_metadata_response(ErrorCode.NONE)

    # -- OffsetForLeaderEpoch -----------------------------------------------------------------

    def last_offset_for_leader_epoch(self, topic: str, partition: int, current_leader_epoch: int,
                                     leader_epoch: int) -> tuple[ErrorCode, int, int]:
        """(error, epoch, end offset) for OffsetForLeaderEpoch, answered by the leader only:
        the largest epoch <= ``leader_epoch`` this log has and where it ends (the log end
        offset for the current epoch), or (-1, -1) when unknown. ``current_leader_epoch``
        (-1: none) fences requests from older or newer leader epochs."""
        part = self.partitions.get((topic, partition))
        if part is None:
            known = self._partition_known(topic, partition)
            return (ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), -1, -1
        error = part.check_leader_epoch(current_leader_epoch)
        if error != ErrorCode.NONE:
            return error, -1, -1
        if not part.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1
        epoch, offset = part.log.end_offset_for_epoch(leader_epoch)
        return ErrorCode.NONE, epoch, offset

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the periodic ISR shrink (every replica.lag.time.max.ms / 2, as Kafka)."""
        if self._isr_task is None:
            self._isr_task = asyncio.get_running_loop().create_task(self._shrink_isr_loop(), name="isr-expiration")

    async def _shrink_isr_loop(self) -> None:
        interval = self.replica_lag_time_max_ms / 2 / 1000
        while True:
            await asyncio.sleep(interval)
            self.maybe_shrink_isr()

    def maybe_shrink_isr(self) -> None:
        """Remove lagging followers from the ISR of every partition led here."""
        for part in list(self.partitions.values()):
            if part.is_leader and part.remote_replicas and not part.log.offline:
                try:
                    part.maybe_shrink_isr()
                except Exception:
                    log.exception("ISR shrink of %s-%d failed", part.topic, part.index)

    # -- failed log dirs ----------------------------------------------------------------------

    def handle_log_dir_failure(self, log_dir: str) -> list[Partition]:
        """Kafka's handleLogDirFailure: the partitions in the offline ``log_dir`` stop following
        and stop serving (their requests answer KAFKA_STORAGE_ERROR); what waits on them is
        answered; those led here are resigned. Returns them."""
        tps = self.log_manager.handle_log_dir_failure(log_dir)
        self.fetcher_manager.remove_fetcher_for_partitions(tps)
        offline = [p for p in (self.partitions.get(tp) for tp in tps) if p is not None]
        for part in offline:
            part.close(ErrorCode.KAFKA_STORAGE_ERROR)
        resigned = [p for p in offline if p.is_leader]
        if resigned and self.on_leadership_change is not None:
            self.on_leadership_change([], resigned)
        log.warning("broker %d stopped following and serving %d partitions in the failed log directory %s",
                    self.broker_id, len(tps), log_dir)
        return offline

    def shutdown(self) -> None:
        """The broker is stopping: answer everything waiting on a partition, as if leadership
        moved away (acks=all: NOT_LEADER_OR_FOLLOWER, so producers retry elsewhere), and stop
        following (``stop`` waits for the fetchers)."""
        self.shutting_down = True
        task, self._isr_task = self._isr_task, None
        if task is not None:
            task.cancel()
        for part in self.partitions.values():
            part.close(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.fetcher_manager.remove_fetcher_for_partitions(list(self.partitions))

    async def stop(self) -> None:
        """Stop the fetchers, the moves between log dirs and the ISR task and wait for them
        (after ``shutdown``); a move resumes at the next start."""
        self.shutdown()
        await self.alter_log_dirs.stop()
        await self.fetcher_manager.shutdown()


#: Partitions a LeaderAndIsr's summary line describes; the others are counted (each has a
#: DEBUG line).
_ROLES_SHOWN = 3


def _log_roles(role: str, parts: list[Partition]) -> None:
    """One INFO line for the partitions a LeaderAndIsr made this broker lead (or follow): a
    line per partition held the loop for 1.0 s of a restart with 20,000 partitions."""
    def describe(p: Partition) -> str:
        where = f"ISR {p.isr}" if role == "leader" else f"leader {p.leader}"
        return (f"{p.topic}-{p.index} at epoch {p.leader_epoch} from offset {p.log.log_end_offset} "
                f"(high watermark {p.log.high_watermark}, {where})")

    more = len(parts) - _ROLES_SHOWN
    log.info("%s of %d partition%s: %s%s", role, len(parts), "" if len(parts) == 1 else "s",
             ", ".join(describe(p) for p in parts[:_ROLES_SHOWN]), f" and {more} more" if more > 0 else "")


def _topic_id(raw: uuid.UUID | None) -> str | None:
    """A request's topic id as the log stores it (base64), None for the zero id."""
    if raw is None:
        return None
    text = uuid_to_str(raw.bytes)
    return None if text == ZERO_UUID else text


async def _no_connector(leader: BrokerEndpoint) -> LeaderConnection:
    raise BrokerConnectionError(f"this broker has no inter-broker client to reach broker {leader.broker_id}")
