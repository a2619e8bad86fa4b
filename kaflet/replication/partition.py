"""A partition this broker hosts: its log, leadership and ISR, the leader's view of each
follower, and the requests waiting on it (long-polling fetches, acks=all produces).

The high watermark is decided here, as in Kafka's Partition: the log only stores it. As leader,
it is the smallest log end offset among the ISR and the followers that are caught up (Kafka's
``maybeIncrementLeaderHW``); it only moves forward, and every move completes the acks=all
requests it satisfies (``delayed_produce``). A leader that is its own ISR therefore commits
each batch as it is appended. Followers report their position through
``update_follower_fetch_state`` (the Fetch handler's job once brokers replicate).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from kaflet.log.log import AppendResult, Log
from kaflet.protocol.errors import ErrorCode, KafkaError
from kaflet.replication.delayed_produce import HighWatermarkWaiters

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


class Partition:
    """Leadership, replica tracking and waiters of one partition hosted by this broker."""

    def __init__(self, topic: str, index: int, topic_id: str, log: Log, broker_id: int, *,
                 replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
                 now_ms: Callable[[], int] = _now_ms) -> None:
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
        self.isr: list[int] = []
        self._isr_set: frozenset[int] = frozenset()
        #: Followers by broker id (the assigned replicas other than this broker), while leader.
        self.remote_replicas: dict[int, Replica] = {}
        # Fetches long-polling on this partition: each is called with it at the next change.
        self._waiters: set[Callable[[Partition], None]] = set()
        self._acks = HighWatermarkWaiters()

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index}, leader={self.leader}, epoch={self.leader_epoch})"

    @property
    def is_leader(self) -> bool:
        return self.leader == self.broker_id

    # -- leadership -------------------------------------------------------------------------

    def _update_assignment_and_isr(self, replicas: list[int], isr: list[int], is_leader: bool) -> None:
        self.replicas = list(replicas)
        self.isr = list(isr)
        self._isr_set = frozenset(isr)
        if not is_leader:
            self.remote_replicas.clear()
            return
        followers = [r for r in replicas if r != self.broker_id]
        for r in followers:
            if r not in self.remote_replicas:
                self.remote_replicas[r] = Replica(r)
        for gone in [r for r in self.remote_replicas if r not in followers]:
            del self.remote_replicas[gone]

    def make_leader(self, leader_epoch: int, replicas: list[int], isr: list[int]) -> bool:
        """Lead at ``leader_epoch`` with this assignment and ISR (LeaderAndIsr, or the
        single-broker controller); the same epoch again only updates replicas and ISR.
        Returns whether the high watermark moved. A stale epoch is ignored.
        """
        if leader_epoch < self.leader_epoch:
            return False
        now = self._time()
        is_new_leader = not self.is_leader
        self._update_assignment_and_isr(replicas, isr, is_leader=True)
        if leader_epoch > self.leader_epoch:
            start = self.log.log_end_offset
            # A follower may hold entries of a later epoch than any here; caching where this
            # epoch starts lets it find the offset to truncate to.
            self.log.maybe_assign_epoch_start_offset(leader_epoch, start)
            for replica in self.remote_replicas.values():
                replica.reset(now, start, is_new_leader, replica.broker_id in self._isr_set)
            self.leader_epoch = leader_epoch
        self.leader = self.broker_id
        # The ISR may be down to this broker: the high watermark may move at once.
        return self.maybe_increment_high_watermark(now)

    def make_follower(self, leader: int, leader_epoch: int, replicas: list[int]) -> bool:
        """Follow ``leader`` at ``leader_epoch``. Requests waiting for acks here are answered
        NOT_LEADER_OR_FOLLOWER and waiting fetches are woken. Returns whether the epoch is new
        (the follower fetcher must then restart); a stale epoch is ignored.
        """
        if leader_epoch < self.leader_epoch:
            return False
        is_new_epoch = leader_epoch > self.leader_epoch
        self.leader = leader
        self.leader_epoch = leader_epoch
        self._update_assignment_and_isr(replicas, [], is_leader=False)
        self._acks.complete_all(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.wake_fetchers()
        return is_new_epoch

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
        waiting fetches. Returns whether it moved. Kafka's ``maybeIncrementLeaderHW``.
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
        self.wake_fetchers()
        return True

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, log_start_offset: int,
                                    now_ms: int, leader_end_offset: int | None = None) -> bool:
        """Record a follower's fetch from ``fetch_offset`` (it holds everything below) and
        advance the high watermark if that allows; returns whether it moved.

        ``leader_end_offset``: this log's end when the fetch was read (default: now). Raises
        KafkaError NOT_LEADER_OR_FOLLOWER when this broker does not lead the partition or
        ``replica_id`` is not one of its followers. Extending the ISR is the controller's
        business and not done here.
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
        replica.update_fetch_state(fetch_offset, log_start_offset, now_ms, leo)
        if replica.log_end_offset == previous:
            return False
        return self.maybe_increment_high_watermark(now_ms)

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
        if len(self.isr) >= self.log.config.min_insync_replicas:
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

    def append(self, records: memoryview, required_acks: int) -> AppendResult:
        """Append a produce request's record set as leader; raises KafkaError on refusal."""
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if required_acks == -1:
            min_isr = self.log.config.min_insync_replicas
            if len(self.isr) < min_isr:
                raise KafkaError(
                    ErrorCode.NOT_ENOUGH_REPLICAS,
                    f"The size of the current ISR {len(self.isr)} is insufficient to satisfy the "
                    f"min.isr requirement of {min_isr} for partition {self.topic}-{self.index}",
                )
        result = self.log.append_as_leader(records, self.leader_epoch, self._time())
        if not self.maybe_increment_high_watermark():
            self.wake_fetchers()  # followers wait for new data, not for the high watermark
        return result

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
        # With followers this would be the smallest log start offset in the ISR.
        return int(self.log.log_start_offset)

    # -- fetches waiting for data -----------------------------------------------------------

    def wake_fetchers(self) -> None:
        """Tell every long-polling fetch that waits on this partition that it changed."""
        if not self._waiters:
            return
        waiters, self._waiters = self._waiters, set()
        for wake in waiters:
            wake(self)

    def data_waiter(self, wake: Callable[[Partition], None]) -> None:
        """Register a callback called with this partition (once) at the next append, high
        watermark move, leadership change or close; the fetch it belongs to re-reads it."""
        self._waiters.add(wake)

    def forget_waiter(self, wake: Callable[[Partition], None]) -> None:
        self._waiters.discard(wake)
