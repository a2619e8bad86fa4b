"""A partition this broker hosts: its log, leadership and ISR, the leader's view of each
follower, and the requests waiting on it (long-polling fetches, acks=all produces).

The high watermark is decided here, as in Kafka's Partition: the log only stores it. As leader,
it is the smallest log end offset among the ISR and the followers that are caught up (Kafka's
``maybeIncrementLeaderHW``); it only moves forward, and every move completes the acks=all
requests it satisfies (``delayed_produce``). A leader that is its own ISR therefore commits
each batch as it is appended. Followers report their position through
``update_follower_fetch_state`` (called by Fetch for replica fetches).

The leader also changes the ISR itself, as Kafka 2.5-2.8 brokers do in ZooKeeper mode: a
follower whose log end offset reaches the high watermark (and that fetched in this leader epoch)
is added, one that has not caught up for ``replica.lag.time.max.ms`` is removed
(``maybe_shrink_isr``, run periodically by the replica manager). Each change is written to the
partition's state znode through an ``IsrWriter``, conditionally on the znode version the
controller sent (the partition epoch); until the write is answered the change is pending and
the high watermark counts the larger of the two ISRs (Kafka's "maximal ISR"), and a write that
fails leaves it pending until the next LeaderAndIsr, as Kafka gives up on a version conflict.

As follower, the replica fetcher appends what the leader sent (``append_as_follower``),
truncates, and follows the leader's high watermark and log start offset.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kaflet.log.append_origin import AppendOrigin
from kaflet.log.errors import UnexpectedAppendOffsetError
from kaflet.log.log import AppendResult, FollowerAppendResult, Log
from kaflet.metadata.zkdata import LeaderAndIsr
from kaflet.protocol.errors import ErrorCode, KafkaError
from kaflet.protocol.records import Record
from kaflet.replication.delayed_produce import HighWatermarkWaiters

log = logging.getLogger("kaflet.partition")

#: A remote replica's offset before its first fetch (Kafka's UnifiedLog.UnknownOffset).
UNKNOWN_OFFSET = -1
#: Kafka's default replica.lag.time.max.ms: a follower this recently caught up counts as in sync.
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class Replica:
    """The leader's view of one follower (Kafka's Replica and ReplicaState).

    Offsets are known only from the follower's fetches (UNKNOWN_OFFSET before the first one).
    ``last_caught_up_time_ms`` is the latest time the follower had everything the leader had
    (Kafka's definition, which tolerates a steady stream of small appends); it decides whether
    the follower still counts as caught up for ``replica.lag.time.max.ms``.
    """

    broker_id: int
    log_start_offset: int = UNKNOWN_OFFSET
    log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = 0
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0

    def is_caught_up(self, leader_end_offset: int, now_ms: int, replica_lag_time_max_ms: int) -> bool:
        return (leader_end_offset == self.log_end_offset
                or now_ms - self.last_caught_up_time_ms <= replica_lag_time_max_ms)

    def update_fetch_state(self, fetch_offset: int, log_start_offset: int, fetch_time_ms: int,
                           leader_end_offset: int) -> None:
        """A fetch from ``fetch_offset`` (so the follower holds everything below it) arrived at
        ``fetch_time_ms`` while the leader's log ended at ``leader_end_offset``."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            # It has reached what the leader had at its previous fetch.
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_start_offset = log_start_offset
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = max(leader_end_offset, self.last_fetch_leader_log_end_offset)
        self.last_fetch_time_ms = fetch_time_ms

    def reset(self, now_ms: int, leader_end_offset: int, is_new_leader: bool, in_sync: bool) -> None:
        """On a new leader epoch: a follower in the ISR starts caught up now, others at 0, so a
        replica outside the ISR does not hold the high watermark back."""
        if is_new_leader:
            self.log_start_offset = UNKNOWN_OFFSET
            self.log_end_offset = UNKNOWN_OFFSET
            self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
            self.last_fetch_time_ms = 0
        else:
            self.last_fetch_leader_log_end_offset = leader_end_offset
            self.last_fetch_time_ms = now_ms if in_sync else 0
        self.last_caught_up_time_ms = now_ms if in_sync else 0


class IsrWriter(Protocol):
    """Writes a leader's ISR change to the partition's state znode (``replication/isr.py``)."""

    def submit(self, topic: str, partition: int, state: LeaderAndIsr,
               on_done: Callable[[int | None], None]) -> None:
        """Write ``state`` if the znode's version is still ``state.zk_version``; ``on_done``
        gets the new version, or None when the write was given up (the version moved on)."""
        ...


@dataclass(frozen=True, slots=True, eq=False)
class PendingIsrChange:
    """An ISR change written but not yet answered (Kafka's PendingExpandIsr / PendingShrinkIsr)."""

    expand: bool
    isr: tuple[int, ...]  # the ISR proposed


class Partition:
    """Leadership, replica tracking and waiters of one partition hosted by this broker."""

    def __init__(self, topic: str, index: int, topic_id: str, log: Log, broker_id: int, *,
                 replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
                 now_ms: Callable[[], int] = _now_ms, isr_writer: IsrWriter | None = None,
                 on_isr_change: Callable[[bool], None] | None = None) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.broker_id = broker_id
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._time = now_ms
        self.leader = -1
        self.leader_epoch = -1  # Kafka's initial value: the first LeaderAndIsr brings epoch 0
        self.replicas: list[int] = []
        #: The committed ISR (as in the state znode); see ``maximal_isr`` while a change is pending.
        self.isr: list[int] = []
        self._isr_set: frozenset[int] = frozenset()  # the maximal ISR
        self.pending_isr: PendingIsrChange | None = None
        self.isr_writer = isr_writer
        #: Told of each ISR change this leader wrote: True for an expansion (IsrExpandsPerSec).
        self.on_isr_change = on_isr_change
        #: Epoch of the controller that made the leadership decision (written back with the ISR).
        self.controller_epoch = -1
        #: Version of the partition state znode (the partition epoch), -1 when unknown.
        self.zk_version = -1
        #: Where this leader's epoch starts in the log (None as follower): a follower joins the
        #: ISR only once it has reached it.
        self.leader_epoch_start_offset: int | None = None
        #: Followers by broker id (the assigned replicas other than this broker), while leader.
        self.remote_replicas: dict[int, Replica] = {}
        # Fetches long-polling on this partition: each is called with it at the next change,
        # consumers' when the high watermark moves, followers' when the log end offset does.
        self._waiters: set[Callable[[Partition], None]] = set()
        self._follower_waiters: set[Callable[[Partition], None]] = set()
        # DeleteRecords waiting for the followers' log start offsets (the low watermark).
        self._log_start_waiters: set[Callable[[Partition], None]] = set()
        self._acks = HighWatermarkWaiters()

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index}, leader={self.leader}, epoch={self.leader_epoch})"

    @property
    def is_leader(self) -> bool:
        return self.leader == self.broker_id

    # -- leadership -------------------------------------------------------------------------

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The ISR as the high watermark sees it: with a pending expansion the new member is
        already counted, with a pending shrink the leaving ones still are (Kafka's rule)."""
        return self._isr_set

    def _set_isr(self, isr: list[int], pending: PendingIsrChange | None = None) -> None:
        self.isr = list(isr)
        self.pending_isr = pending
        self._isr_set = frozenset(pending.isr if pending is not None and pending.expand else isr)

    def _update_assignment_and_isr(self, replicas: list[int], isr: list[int], is_leader: bool) -> None:
        self.replicas = list(replicas)
        self._set_isr(isr)
        if not is_leader:
            self.remote_replicas.clear()
            return
        followers = [r for r in replicas if r != self.broker_id]
        for r in followers:
            if r not in self.remote_replicas:
                self.remote_replicas[r] = Replica(r)
        for gone in [r for r in self.remote_replicas if r not in followers]:
            del self.remote_replicas[gone]

    def make_leader(self, leader_epoch: int, replicas: list[int], isr: list[int], *, zk_version: int = -1,
                    controller_epoch: int = -1) -> bool:
        """Lead at ``leader_epoch`` with this assignment and ISR (LeaderAndIsr, or the
        single-broker controller); the same epoch again only updates replicas and ISR.
        ``zk_version`` is the state znode's version, ``controller_epoch`` the epoch of the
        controller that decided. Returns whether the high watermark moved. A stale epoch is
        ignored.
        """
        if leader_epoch < self.leader_epoch:
            return False
        now = self._time()
        is_new_leader = not self.is_leader
        self._update_assignment_and_isr(replicas, isr, is_leader=True)
        self.zk_version = zk_version
        self.controller_epoch = controller_epoch
        if leader_epoch > self.leader_epoch or self.leader_epoch_start_offset is None:
            start = self.log.log_end_offset
            # A follower may hold entries of a later epoch than any here; caching where this
            # epoch starts lets it find the offset to truncate to.
            self.log.maybe_assign_epoch_start_offset(leader_epoch, start)
            for replica in self.remote_replicas.values():
                replica.reset(now, start, is_new_leader, replica.broker_id in self._isr_set)
            self.leader_epoch = leader_epoch
            self.leader_epoch_start_offset = start
        self.leader = self.broker_id
        # The ISR may be down to this broker: the high watermark may move at once.
        return self.maybe_increment_high_watermark(now)

    def make_follower(self, leader: int, leader_epoch: int, replicas: list[int], *, zk_version: int = -1,
                      controller_epoch: int = -1) -> bool:
        """Follow ``leader`` at ``leader_epoch``. Requests waiting for acks here are answered
        NOT_LEADER_OR_FOLLOWER and waiting fetches are woken. Returns whether the leader or
        the epoch changed (the follower fetcher must then restart); a stale epoch is ignored.
        """
        if leader_epoch < self.leader_epoch:
            return False
        changed = leader_epoch > self.leader_epoch or leader != self.leader
        self.leader = leader
        self.leader_epoch = leader_epoch
        self.leader_epoch_start_offset = None
        self.zk_version = zk_version
        self.controller_epoch = controller_epoch
        self._update_assignment_and_isr(replicas, [], is_leader=False)
        self._acks.complete_all(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.wake_fetchers()
        return changed

    def close(self, error: ErrorCode) -> None:
        """The partition leaves this broker (topic deleted, broker stopping): every waiting
        acks=all request gets ``error`` and waiting fetches are woken."""
        self._acks.complete_all(error)
        self.wake_fetchers()

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """Kafka's fencing of requests that carry a leader epoch (-1: no check)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    # -- the high watermark -----------------------------------------------------------------

    def maybe_increment_high_watermark(self, now_ms: int | None = None) -> bool:
        """Move the high watermark to the smallest log end offset among the ISR and the followers
        caught up within ``replica.lag.time.max.ms`` (so one about to join the ISR is waited
        for), if that is higher; then answer the acks=all requests it satisfies and wake
        waiting consumer fetches. Returns whether it moved. Kafka's ``maybeIncrementLeaderHW``.
        """
        if not self.is_leader:
            return False
        log = self.log
        leo = log.log_end_offset
        new_hw = leo
        if self.remote_replicas:
            now = self._time() if now_ms is None else now_ms
            isr, lag = self._isr_set, self.replica_lag_time_max_ms
            for replica in self.remote_replicas.values():
                if replica.log_end_offset < new_hw and (
                        replica.broker_id in isr or replica.is_caught_up(leo, now, lag)):
                    new_hw = replica.log_end_offset
        if new_hw <= log.high_watermark:
            return False
        hw = log.update_high_watermark(new_hw)
        if self._acks:
            self._acks.complete_up_to(hw, self._acks_error())
        self._wake_consumers()
        return True

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, log_start_offset: int,
                                    now_ms: int, leader_end_offset: int | None = None) -> bool:
        """Record a follower's fetch from ``fetch_offset`` (it holds everything below) and
        advance the high watermark if that allows; returns whether it moved.

        ``leader_end_offset``: this log's end when the fetch was read (default: now). Raises
        KafkaError NOT_LEADER_OR_FOLLOWER when this broker does not lead the partition or
        ``replica_id`` is not one of its followers. A follower that has caught up is added to
        the ISR (``maybe_expand_isr``).
        """
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"Leader not local for partition {self.topic}-{self.index} on broker {self.broker_id}")
        replica = self.remote_replicas.get(replica_id)
        if replica is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"Replica {replica_id} is not recognized as a valid replica of "
                             f"{self.topic}-{self.index} (replicas {self.replicas})")
        leo = self.log.log_end_offset if leader_end_offset is None else leader_end_offset
        previous = replica.log_end_offset
        previous_start = replica.log_start_offset
        replica.update_fetch_state(fetch_offset, log_start_offset, now_ms, leo)
        self.maybe_expand_isr(replica)
        if replica.log_start_offset != previous_start:
            self._wake(self._log_start_waiters)
        if replica.log_end_offset == previous:
            return False
        return self.maybe_increment_high_watermark(now_ms)

    # -- ISR changes (leader) ----------------------------------------------------------------

    def maybe_expand_isr(self, replica: Replica) -> None:
        """Add ``replica`` to the ISR if it is not in it, has reached the high watermark and
        has fetched in this leader epoch (at or past where the epoch starts), so a replica
        missing committed data of this epoch never joins (Kafka's ``maybeExpandIsr``)."""
        if self.pending_isr is not None or replica.broker_id in self._isr_set or not self.is_leader:
            return
        end = replica.log_end_offset
        start = self.leader_epoch_start_offset
        if end >= self.log.high_watermark and start is not None and end >= start:
            self._propose_isr(PendingIsrChange(True, (*self.isr, replica.broker_id)))

    def out_of_sync_replicas(self, max_lag_ms: int, now_ms: int | None = None) -> set[int]:
        """Followers in the ISR that are behind the leader's end and have not caught up for
        ``max_lag_ms`` (stuck or slow); empty while an ISR change is pending."""
        if self.pending_isr is not None or not self.is_leader:
            return set()
        now = self._time() if now_ms is None else now_ms
        leo = self.log.log_end_offset
        out = set()
        for r in self.isr:
            replica = self.remote_replicas.get(r)
            if replica is not None and replica.log_end_offset != leo and now - replica.last_caught_up_time_ms > max_lag_ms:
                out.add(r)
        return out

    def maybe_shrink_isr(self, now_ms: int | None = None) -> bool:
        """Remove the out-of-sync followers from the ISR (Kafka's ``maybeShrinkIsr``); returns
        whether a change was proposed."""
        out = self.out_of_sync_replicas(self.replica_lag_time_max_ms, now_ms)
        if not out:
            return False
        new_isr = tuple(r for r in self.isr if r not in out)
        log.info("%s-%d: shrinking ISR from %s to %s; leader high watermark %d, end offset %d; out of sync: %s",
                 self.topic, self.index, self.isr, list(new_isr), self.log.high_watermark, self.log.log_end_offset,
                 ", ".join(f"(broker {r}, end offset {self.remote_replicas[r].log_end_offset})" for r in sorted(out)))
        self._propose_isr(PendingIsrChange(False, new_isr))
        return True

    def _propose_isr(self, change: PendingIsrChange) -> None:
        if self.isr_writer is None:
            return  # not managed by a replica manager (tests of the leader alone): the ISR stays
        self._set_isr(self.isr, change)
        state = LeaderAndIsr(self.broker_id, self.leader_epoch, list(change.isr), self.controller_epoch,
                             zk_version=self.zk_version)
        self.isr_writer.submit(self.topic, self.index, state, lambda version: self._isr_written(change, version))

    def _isr_written(self, change: PendingIsrChange, new_version: int | None) -> None:
        if self.pending_isr is not change:
            return  # a LeaderAndIsr has set the state since: this answer is out of date
        if new_version is None:
            # Kafka gives up on a version conflict: the change stays pending (and no other is
            # tried) until the controller's next LeaderAndIsr sets the partition's state.
            log.info("%s-%d: the ISR change to %s was not written (state znode version %d); it stays pending "
                     "until the controller's next LeaderAndIsr", self.topic, self.index, list(change.isr),
                     self.zk_version)
            return
        self.zk_version = new_version
        self._set_isr(list(change.isr))
        if self.on_isr_change is not None:
            self.on_isr_change(change.expand)
        log.info("%s-%d: ISR updated to %s and version updated to %d", self.topic, self.index, self.isr, new_version)
        # A shrink may let the high watermark move (or leave acks=all short of min.insync.replicas).
        self.maybe_increment_high_watermark()

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, ErrorCode]:
        """For acks=all: (whether the request is answered, its error). Kafka's rule: answered
        once the high watermark reaches ``required_offset``, with NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if the ISR is then below min.insync.replicas; NOT_LEADER_OR_FOLLOWER when not leader."""
        if not self.is_leader:
            return False, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark >= required_offset:
            return True, self._acks_error()
        return False, ErrorCode.NONE

    def _acks_error(self) -> ErrorCode:
        if len(self._isr_set) >= self.log.config.min_insync_replicas:
            return ErrorCode.NONE
        return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    def watch_high_watermark(self, required_offset: int) -> asyncio.Future[ErrorCode]:
        """A future answered by the high watermark reaching ``required_offset`` (see
        ``delayed_produce``); give it back with ``forget_high_watermark_waiter`` if abandoned."""
        return self._acks.add(required_offset)

    def forget_high_watermark_waiter(self, fut: asyncio.Future[ErrorCode]) -> None:
        self._acks.drop(fut)

    @property
    def waiting_for_acks(self) -> int:
        """How many acks=all requests wait on this partition."""
        return len(self._acks)

    # -- leader writes ----------------------------------------------------------------------

    def _check_acks_all(self) -> None:
        """Raise KafkaError unless this broker leads with enough replicas in the ISR for acks=all."""
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        min_isr = self.log.config.min_insync_replicas
        if len(self.isr) < min_isr:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"The size of the current ISR {len(self.isr)} is insufficient to satisfy the "
                f"min.isr requirement of {min_isr} for partition {self.topic}-{self.index}",
            )

    def append(self, records: memoryview, required_acks: int, origin: AppendOrigin = AppendOrigin.CLIENT
               ) -> AppendResult:
        """Append a client's or a coordinator's (``origin``) record set as leader; raises
        KafkaError on refusal."""
        if required_acks == -1:
            self._check_acks_all()
        elif not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        result = self.log.append_as_leader(records, self.leader_epoch, self._time(), origin)
        self._wake_followers()
        self.maybe_increment_high_watermark()
        return result

    def append_coordinator_records(self, records: list[Record]) -> AppendResult:
        """Append a coordinator's own records as leader (acks=all; ``Log.append_coordinator_records``);
        raises KafkaError on refusal."""
        self._check_acks_all()
        result = self.log.append_coordinator_records(records, self.leader_epoch, self._time())
        self._wake_followers()
        self.maybe_increment_high_watermark()
        return result

    def append_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                          commit: bool) -> AppendResult:
        """Append the coordinator's COMMIT/ABORT marker as leader (acks=all, as Kafka writes them)."""
        self._check_acks_all()
        result = self.log.append_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit,
                                            self.leader_epoch, self._time())
        self._wake_followers()
        self.maybe_increment_high_watermark()
        return result

    # -- follower writes ----------------------------------------------------------------------

    def append_as_follower(self, records: memoryview) -> FollowerAppendResult | None:
        """Append what the leader sent (``Log.append_as_follower``). A first fetch into an empty
        log may start inside a batch (the leader's log start offset moved by DeleteRecords):
        the log then restarts at that batch's first offset, as Kafka does."""
        log_ = self.log
        try:
            return log_.append_as_follower(records)
        except UnexpectedAppendOffsetError as exc:
            leo = log_.log_end_offset
            if not (leo == log_.log_start_offset and exc.first_offset < leo <= exc.last_offset):
                raise
            log.info("%s-%d: first offset %d of the fetched records is below the log start offset %d; this is "
                     "the first append, so the log restarts at %d", self.topic, self.index, exc.first_offset,
                     leo, exc.first_offset)
            log_.truncate_fully_and_start_at(exc.first_offset)
            return log_.append_as_follower(records)

    def follow_leader_offsets(self, leader_high_watermark: int, leader_log_start_offset: int) -> bool:
        """After an append: the follower's high watermark is the leader's, bounded by its own
        log end offset; its log start offset follows the leader's (never past that high
        watermark). Returns whether the log start offset moved (segments below it may go)."""
        log_ = self.log
        hw = log_.update_high_watermark(leader_high_watermark)
        if leader_log_start_offset > log_.log_start_offset:
            return log_.maybe_increment_log_start_offset(min(leader_log_start_offset, hw))
        return False

    def delete_records(self, offset: int) -> int:
        """DeleteRecords on the leader: move the log start offset to ``offset`` (-1: the high
        watermark); returns the low watermark.  Raises KafkaError with Kafka's error codes.

        The caller drops the segments now below the start and checkpoints it
        (``LogManager.log_start_offset_moved``).
        """
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"Leader not local for partition {self.topic}-{self.index} on broker {self.broker_id}")
        if not self.log.config.delete:
            raise KafkaError(ErrorCode.POLICY_VIOLATION,
                             f"Records of partition {self.topic}-{self.index} can not be deleted due to the configured policy")
        target = self.log.high_watermark if offset == -1 else offset
        if target < 0:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"The offset {target} for partition {self.topic}-{self.index} is not valid")
        self.log.maybe_increment_log_start_offset(target)  # OffsetOutOfRangeError past the HW
        return int(self.log.log_start_offset)

    def low_watermark(self, alive: Callable[[int], bool]) -> int:
        """Kafka's lowWatermarkIfLeader: the smallest log start offset of this log and of the
        followers on live brokers that have reported theirs (DeleteRecords answers with it)."""
        starts = [r.log_start_offset for r in self.remote_replicas.values()
                  if r.log_start_offset != UNKNOWN_OFFSET and alive(r.broker_id)]
        return min([self.log.log_start_offset, *starts])

    # -- fetches waiting for data -----------------------------------------------------------

    def wake_fetchers(self) -> None:
        """Tell every long-polling fetch (and DeleteRecords) that waits on this partition that
        it changed (leadership, removal)."""
        self._wake(self._follower_waiters)
        self._wake(self._waiters)
        self._wake(self._log_start_waiters)

    def _wake_followers(self) -> None:
        self._wake(self._follower_waiters)

    def _wake_consumers(self) -> None:
        self._wake(self._waiters)

    def _wake(self, waiters: set[Callable[[Partition], None]]) -> None:
        if waiters:
            woken = list(waiters)
            waiters.clear()
            for wake in woken:
                wake(self)

    def log_start_waiter(self, wake: Callable[[Partition], None]) -> None:
        """Register a callback called with this partition (once) when a follower reports a new
        log start offset, or at a leadership change or close (DeleteRecords' low watermark)."""
        self._log_start_waiters.add(wake)

    def forget_log_start_waiter(self, wake: Callable[[Partition], None]) -> None:
        self._log_start_waiters.discard(wake)

    def data_waiter(self, wake: Callable[[Partition], None], follower: bool = False) -> None:
        """Register a callback called with this partition (once) when what the fetch may read
        grows, or at a leadership change or close; the fetch it belongs to re-reads it.

        A follower reads up to the log end offset, so it is woken by appends; a consumer reads
        up to the high watermark, so it is woken when that moves. Neither is woken for the
        other's reason, which would only make it read nothing and wait again."""
        (self._follower_waiters if follower else self._waiters).add(wake)

    def forget_waiter(self, wake: Callable[[Partition], None], follower: bool = False) -> None:
        (self._follower_waiters if follower else self._waiters).discard(wake)
