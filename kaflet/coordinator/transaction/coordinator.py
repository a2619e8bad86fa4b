"""The transaction coordinator (Kafka's TransactionCoordinator and TransactionStateManager).

It owns the transactional ids whose __transaction_state partition this broker leads. Every
state change is prepared on the metadata, written to that partition, and applied once the write
is acknowledged (see ``state``). Ending a transaction writes PrepareCommit/PrepareAbort, answers
the client, then has the marker sender write the COMMIT/ABORT markers to every partition of the
transaction (WriteTxnMarkers to their leaders) and finally writes CompleteCommit/CompleteAbort.
All state lives on the broker's event loop, so no locks: a method runs to its first ``await``
alone. The coordinator epoch is the leader epoch of the __transaction_state partition, so a
coordinator that lost the partition is fenced by the partition leaders (Kafka's rule).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kaflet.coordinator.group.hashing import partition_for
from kaflet.coordinator.tasks import BackgroundTasks
from kaflet.coordinator.transaction import schemas
from kaflet.coordinator.transaction.schemas import TopicPartition, TxnState
from kaflet.coordinator.transaction.state import TransactionMetadata, Transit
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.primitives import DecodeError

log = logging.getLogger("kaflet.coordinator.transaction")

E = ErrorCode
S = TxnState
KeyValue = tuple[bytes, bytes | None]


class TxnStore(Protocol):
    """Where the coordinator writes and replays __transaction_state (``OffsetsTopicStore``)."""

    async def append(self, partition: int, records: list[KeyValue]) -> ErrorCode: ...

    async def replay_partition(self, partition: int,
                               apply: Callable[[bytes | None, bytes | None], None]) -> None: ...


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """Markers to write for one transaction: to every partition in ``partitions``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: frozenset[TopicPartition]


#: Writes a transaction's markers to its partitions' leaders; True once every partition has
#: them (or is gone), False when the markers cannot be written by this coordinator any more
#: (it was fenced, or resigned).
MarkerSender = Callable[[MarkerJob], Awaitable[bool]]


@dataclass(slots=True)
class TxnConfig:
    """The broker configs the coordinator honours (Kafka's names in from_broker)."""

    num_partitions: int = 50

    @classmethod
    def from_broker(cls, cfg: Mapping[str, Any]) -> TxnConfig:
        return cls(num_partitions=cfg["transaction.state.log.num.partitions"])


def _append_error(code: ErrorCode) -> ErrorCode:
    """How a failed __transaction_state write is answered (Kafka's appendTransactionToLog)."""
    if code in (E.UNKNOWN_TOPIC_OR_PARTITION, E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                E.REQUEST_TIMED_OUT):
        return E.COORDINATOR_NOT_AVAILABLE
    if code in (E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR):
        return E.NOT_COORDINATOR
    if code in (E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE):
        return E.UNKNOWN_SERVER_ERROR
    return code


class TransactionCoordinator:
    """Every transactional id whose __transaction_state partition this broker leads."""

    def __init__(self, config: TxnConfig, store: TxnStore, next_producer_id: Callable[[], Awaitable[int]],
                 send_markers: MarkerSender, ensure_topic: Callable[[], Awaitable[bool]] | None = None,
                 now_ms: Callable[[], int] | None = None) -> None:
        self.config = config
        self.store = store
        self.next_producer_id = next_producer_id
        self.send_markers = send_markers
        self.ensure_topic = ensure_topic
        self.num_partitions = config.num_partitions
        self.txns: dict[str, TransactionMetadata] = {}
        self.owned: dict[int, int] = {}  # partition -> coordinator epoch
        self.loading: dict[int, int] = {}
        self.active = True
        self._now = now_ms or (lambda: int(time.time() * 1000))
        self._tasks = BackgroundTasks("transaction coordinator")

    # ---- plumbing ------------------------------------------------------------------------

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        self._tasks.spawn(coro, name)

    def shutdown(self) -> None:
        """Stop the timers and the marker writes; the state stays in the log."""
        self.active = False
        self._tasks.cancel_all()

    async def drain(self) -> None:
        """Wait for the coordinator's own tasks (loads, marker rounds)."""
        await self._tasks.drain()

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def _status(self, transactional_id: str) -> ErrorCode | None:
        """Kafka's getTransactionState checks before a transactional id is looked at."""
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE
        p = self.partition_for(transactional_id)
        if p in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if p not in self.owned:
            return E.NOT_COORDINATOR
        return None

    # ---- partition ownership -------------------------------------------------------------

    def on_became_leader(self, partition: int, coordinator_epoch: int, num_partitions: int | None = None) -> None:
        """This broker leads `partition` of __transaction_state at `coordinator_epoch`: load it."""
        if num_partitions:
            self.num_partitions = num_partitions
        if not self.active or self.owned.get(partition) == coordinator_epoch or \
                self.loading.get(partition) == coordinator_epoch:
            return
        self._forget(partition)
        self.loading[partition] = coordinator_epoch
        self._spawn(self._load(partition, coordinator_epoch), f"load-txns-{partition}")

    def on_resigned(self, partition: int) -> None:
        """This broker no longer leads `partition`: forget its transactional ids (the new
        coordinator loads them and finishes what was in flight)."""
        self._forget(partition)

    def _forget(self, partition: int) -> None:
        self.owned.pop(partition, None)
        self.loading.pop(partition, None)
        for txn_id in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[txn_id]

    async def _load(self, partition: int, coordinator_epoch: int) -> None:
        values: dict[str, schemas.TxnLogValue] = {}

        def apply(key: bytes | None, value: bytes | None) -> None:
            if key is None:
                return
            try:
                txn_id = schemas.decode_key(key)
                if txn_id is None:
                    return
                if value is None:
                    values.pop(txn_id, None)
                else:
                    values[txn_id] = schemas.decode_value(value)
            except DecodeError as exc:
                log.warning("skipping an unreadable record in %s-%d: %s", schemas.TRANSACTION_STATE_TOPIC,
                            partition, exc)

        start = time.monotonic()
        try:
            await self.store.replay_partition(partition, apply)
        except Exception:
            if self.loading.get(partition) == coordinator_epoch:
                del self.loading[partition]
            log.exception("loading %s-%d failed; its transactional ids stay unavailable",
                          schemas.TRANSACTION_STATE_TOPIC, partition)
            return
        if self.loading.get(partition) != coordinator_epoch:
            return  # resigned (or re-elected) meanwhile
        for txn_id, v in values.items():
            if v.state != S.DEAD:
                self.txns[txn_id] = TransactionMetadata.from_log(txn_id, v)
        del self.loading[partition]
        self.owned[partition] = coordinator_epoch
        if values:
            log.info("loaded %d transactional ids from %s-%d in %.0f ms", len(values),
                     schemas.TRANSACTION_STATE_TOPIC, partition, (time.monotonic() - start) * 1000)
        # Kafka finishes what the previous coordinator left prepared: the markers go out again.
        for txn in list(self.txns.values()):
            if self.partition_for(txn.transactional_id) == partition and \
                    txn.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                self._start_markers(txn, coordinator_epoch)

    async def _write(self, txn: TransactionMetadata, transit: Transit) -> ErrorCode:
        """Write `transit` for `txn` and apply it once acknowledged (appendTransactionToLog)."""
        partition = self.partition_for(txn.transactional_id)
        epoch = self.owned.get(partition)
        key = schemas.encode_key(txn.transactional_id)
        value = schemas.encode_value(transit.log_value())
        try:
            code = await self.store.append(partition, [(key, value)])
        except Exception:
            log.exception("writing %s for %s failed", transit.state.kafka_name, txn.transactional_id)
            code = E.UNKNOWN_SERVER_ERROR
        if self.owned.get(partition) != epoch or self.txns.get(txn.transactional_id) is not txn:
            # The partition moved (or was reloaded) while the write was in flight.
            return E.NOT_COORDINATOR
        if code != E.NONE:
            txn.abort_transition()
            return _append_error(code)
        txn.complete_transition(transit)
        return E.NONE

    # ---- markers ------------------------------------------------------------------------

    def _start_markers(self, txn: TransactionMetadata, coordinator_epoch: int) -> None:
        job = MarkerJob(txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.state == S.PREPARE_COMMIT,
                        coordinator_epoch, frozenset(txn.partitions))
        self._spawn(self._complete(txn, job), f"txn-markers-{txn.transactional_id}")

    async def _complete(self, txn: TransactionMetadata, job: MarkerJob) -> None:
        """Write the markers, then CompleteCommit/CompleteAbort (Kafka's TransactionMarkerChannelManager)."""
        done = await self.send_markers(job)
        partition = self.partition_for(job.transactional_id)
        if not done or self.owned.get(partition) != job.coordinator_epoch or \
                self.txns.get(job.transactional_id) is not txn:
            log.info("markers of %s at coordinator epoch %d were not completed here (coordinator moved or fenced)",
                     job.transactional_id, job.coordinator_epoch)
            return
        if txn.producer_epoch != job.producer_epoch or txn.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return
        while True:
            code = await self._write(txn, txn.prepare_complete(self._now()))
            if code == E.NONE or self.owned.get(partition) != job.coordinator_epoch or \
                    self.txns.get(job.transactional_id) is not txn or not self.active:
                return
            # Kafka retries the completion write until it succeeds or the coordinator moves.
            log.warning("writing the completion of %s failed (%s); retrying", job.transactional_id, code.name)
            await asyncio.sleep(0.1)
