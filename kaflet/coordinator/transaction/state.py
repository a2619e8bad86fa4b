"""One transactional id's metadata and Kafka's state machine over it (TransactionMetadata).

A change is made in two steps, as Kafka makes it: ``prepare_*`` checks the transition, marks it
pending and returns the target (a ``Transit``) to be written to __transaction_state; once the
write is acknowledged ``complete_transition`` applies it (``abort_transition`` drops it on a
failed write). While a transition is pending, other requests get CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kaflet.coordinator.transaction.schemas import TopicPartition, TxnLogValue, TxnState

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
_SHORT_MAX = 32767

S = TxnState

#: Kafka's validPreviousStates of each state.
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


class IllegalTransition(Exception):
    """A transition Kafka's state machine does not allow (a coordinator bug, never client input)."""


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps Short.MaxValue free so the coordinator can always fence a producer."""
    return epoch >= _SHORT_MAX - 1


@dataclass(frozen=True, slots=True)
class Transit:
    """The metadata a prepared transition leads to (Kafka's TxnTransitMetadata)."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int

    def log_value(self) -> TxnLogValue:
        """What __transaction_state stores for this transition."""
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state, set(self.partitions),
                           self.last_update_ms, self.start_ms)


@dataclass(slots=True)
class TransactionMetadata:
    """The coordinator's view of one transactional id."""

    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    pending: TxnState | None = None
    failed_epoch_fence: bool = False

    @classmethod
    def from_log(cls, transactional_id: str, v: TxnLogValue) -> TransactionMetadata:
        return cls(transactional_id, v.producer_id, NO_PRODUCER_ID, v.producer_epoch, NO_PRODUCER_EPOCH, v.timeout_ms,
                   v.state, set(v.partitions), v.start_ms, v.last_update_ms)

    @property
    def pending_in_progress(self) -> bool:
        return self.pending is not None

    @property
    def epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT)

    def _prepare(self, state: TxnState, producer_id: int, epoch: int, last_epoch: int, timeout_ms: int,
                 partitions: set[TopicPartition] | frozenset[TopicPartition], start_ms: int, update_ms: int) -> Transit:
        if self.pending is not None:
            raise IllegalTransition(f"{self.transactional_id}: {self.pending.kafka_name} is already pending")
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name}")
        self.pending = state
        return Transit(producer_id, self.producer_id, epoch, last_epoch, timeout_ms, state, frozenset(partitions),
                       start_ms, update_ms)

    def prepare_fence_producer_epoch(self) -> Transit:
        """Bump the epoch of an ongoing transaction so its producer is fenced before the abort."""
        if self.producer_epoch == _SHORT_MAX:
            raise IllegalTransition("cannot fence a producer whose epoch is Short.MaxValue")
        # After a failed fence write the epoch was already bumped in memory, but never returned.
        bumped = self.producer_epoch if self.failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(S.PREPARE_EPOCH_FENCE, self.producer_id, bumped, NO_PRODUCER_EPOCH, self.timeout_ms,
                             self.partitions, self.start_ms, self.last_update_ms)

    def prepare_increment_epoch(self, timeout_ms: int, expected_epoch: int | None, now_ms: int) -> Transit | None:
        """InitProducerId's epoch bump; None when the expected epoch is fenced (PRODUCER_FENCED)."""
        if self.epoch_exhausted:
            raise IllegalTransition(f"no more epochs for producer id {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch  # a retry of a call that succeeded
        else:
            return None
        return self._prepare(S.EMPTY, self.producer_id, epoch, last, timeout_ms, frozenset(), -1, now_ms)

    def prepare_producer_id_rotation(self, new_producer_id: int, timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> Transit:
        if self.has_pending_transaction:
            raise IllegalTransition("cannot rotate producer ids while a transaction is pending")
        last = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare(S.EMPTY, new_producer_id, 0, last, timeout_ms, frozenset(), -1, now_ms)

    def prepare_add_partitions(self, added: set[TopicPartition], now_ms: int) -> Transit:
        start = now_ms if self.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT) else self.start_ms
        return self._prepare(S.ONGOING, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.timeout_ms, self.partitions | added, start, now_ms)

    def prepare_abort_or_commit(self, state: TxnState, now_ms: int) -> Transit:
        return self._prepare(state, self.producer_id, self.producer_epoch, self.last_producer_epoch, self.timeout_ms,
                             self.partitions, self.start_ms, now_ms)

    def prepare_complete(self, now_ms: int) -> Transit:
        state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        self.failed_epoch_fence = False  # the fence reached the log
        return self._prepare(state, self.producer_id, self.producer_epoch, self.last_producer_epoch, self.timeout_ms,
                             frozenset(), self.start_ms, now_ms)

    def prepare_dead(self) -> Transit:
        return self._prepare(S.DEAD, self.producer_id, self.producer_epoch, self.last_producer_epoch, self.timeout_ms,
                             frozenset(), self.start_ms, self.last_update_ms)

    def abort_transition(self) -> None:
        """The write of the pending transition failed: nothing changes."""
        self.pending = None

    def complete_transition(self, t: Transit) -> None:
        """Apply a transition whose write was acknowledged (Kafka's completeTransitionTo checks)."""
        if self.pending != t.state:
            raise IllegalTransition(f"{self.transactional_id}: completing {t.state.kafka_name}, pending "
                                    f"{self.pending.kafka_name if self.pending else None}")
        if self.state not in VALID_PREVIOUS[t.state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.kafka_name} -> {t.state.kafka_name}")
        if t.state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) and (
                t.producer_id != self.producer_id or t.producer_epoch != self.producer_epoch):
            raise IllegalTransition(f"{self.transactional_id}: producer id or epoch changed in {t.state.kafka_name}")
        if t.state == S.ONGOING and not self.partitions <= t.partitions:
            raise IllegalTransition(f"{self.transactional_id}: partitions dropped while ongoing")
        self.producer_id = t.producer_id
        self.last_producer_id = t.last_producer_id
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = t.last_producer_epoch
        self.timeout_ms = t.timeout_ms
        self.state = t.state
        self.partitions = set(t.partitions)
        self.start_ms = t.start_ms
        self.last_update_ms = t.last_update_ms
        self.pending = None
