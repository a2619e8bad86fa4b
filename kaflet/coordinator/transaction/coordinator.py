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
                               apply: Callable[[bytes | None, bytes | None, int, int], None]) -> None: ...


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """Markers to write for one transaction: to every partition in ``partitions``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: frozenset[TopicPartition]


#: Writes a transaction's markers to its partitions' leaders, for as long as the second
#: argument says the job is still this coordinator's; True once every partition has them (or
#: is gone), False when they cannot be written by this coordinator any more.
MarkerSender = Callable[[MarkerJob, Callable[[], bool]], Awaitable[bool]]


@dataclass(slots=True)
class TxnConfig:
    """The broker configs the coordinator honours (Kafka's names in from_broker)."""

    num_partitions: int = 50
    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 604_800_000
    abort_interval_ms: int = 10_000
    remove_expired_interval_ms: int = 3_600_000
    #: How long an EndTxn connection waits for its markers before reading its next request,
    #: and AddPartitionsToTxn / AddOffsetsToTxn for the previous transaction's before answering
    #: CONCURRENT_TRANSACTIONS (kaflet's; see ``end_txn`` and ``await_completion``).
    completion_wait_ms: int = 20

    @classmethod
    def from_broker(cls, cfg: Mapping[str, Any]) -> TxnConfig:
        return cls(num_partitions=cfg["transaction.state.log.num.partitions"],
                   max_timeout_ms=cfg["transaction.max.timeout.ms"],
                   id_expiration_ms=cfg["transactional.id.expiration.ms"],
                   abort_interval_ms=cfg["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                   remove_expired_interval_ms=cfg["transaction.remove.expired.transaction.cleanup.interval.ms"])


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


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


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
        # transactional id -> done once its marker round (and completion write) has finished
        self._completing: dict[str, asyncio.Future[None]] = {}

    # ---- plumbing ------------------------------------------------------------------------

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        self._tasks.spawn(coro, name)

    def start(self) -> None:
        """Start Kafka's two periodic jobs: aborting timed-out transactions and expiring idle
        transactional ids."""
        self._spawn(self._every(self.config.abort_interval_ms, self.abort_timed_out), "txn-abort-timed-out")
        self._spawn(self._every(self.config.remove_expired_interval_ms, self.expire_transactional_ids),
                    "txn-expire-ids")

    async def _every(self, interval_ms: int, job: Callable[[], Awaitable[int]]) -> None:
        while self.active:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await job()
            except Exception:
                log.exception("transaction coordinator job %s failed", job.__name__)

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

        def apply(key: bytes | None, value: bytes | None, position: int, txn_producer_id: int) -> None:
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

    # ---- InitProducerId ------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_producer_id: int = -1,
                               expected_epoch: int = -1) -> tuple[ErrorCode, int, int]:
        """Kafka's handleInitProducerId for a transactional id: (error, producer id, epoch).

        A new id gets a fresh producer id at epoch 0; an existing one has its epoch bumped,
        which fences the previous producer. An ongoing transaction is first aborted with a
        bumped epoch (the client gets CONCURRENT_TRANSACTIONS and retries)."""
        def fail(code: ErrorCode) -> tuple[ErrorCode, int, int]:
            return code, -1, -1

        if not transactional_id:
            return fail(E.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return fail(E.INVALID_TRANSACTION_TIMEOUT)
        status = self._status(transactional_id)
        if status is not None:
            return fail(status)
        expected = (expected_producer_id, expected_epoch) if expected_producer_id >= 0 else None
        txn = self.txns.get(transactional_id)
        if txn is None:
            pid = await self.next_producer_id()
            status = self._status(transactional_id)
            if status is not None:
                return fail(status)
            txn = self.txns.get(transactional_id)  # another request may have created it meanwhile
            if txn is None:
                txn = TransactionMetadata(transactional_id, pid, -1, -1, -1, timeout_ms, S.EMPTY,
                                          last_update_ms=self._now())
                self.txns[transactional_id] = txn

        if txn.pending_in_progress:
            return fail(E.CONCURRENT_TRANSACTIONS)
        if expected is not None and not (
                txn.producer_epoch == -1 or expected[0] == txn.producer_id
                or (expected[0] == txn.last_producer_id and expected[1] >= 32766)):
            return fail(E.PRODUCER_FENCED)
        if txn.state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return fail(E.CONCURRENT_TRANSACTIONS)
        if txn.state == S.ONGOING:
            fence = txn.prepare_fence_producer_epoch()
            code = await self._end(txn, fence.producer_id, fence.producer_epoch, commit=False, from_client=False)
            return fail(code if code != E.NONE else E.CONCURRENT_TRANSACTIONS)
        if txn.state not in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT):
            log.error("transactional id %s is %s, which InitProducerId never meets", transactional_id,
                      txn.state.kafka_name)
            return fail(E.UNKNOWN_SERVER_ERROR)
        now = self._now()
        transit: Transit | None
        if txn.epoch_exhausted and (expected is None or expected[1] == txn.producer_epoch):
            new_pid = await self.next_producer_id()
            if txn.pending_in_progress or self.txns.get(transactional_id) is not txn:
                return fail(E.CONCURRENT_TRANSACTIONS)
            transit = txn.prepare_producer_id_rotation(new_pid, timeout_ms, now, expected is not None)
        else:
            transit = txn.prepare_increment_epoch(timeout_ms, expected[1] if expected else None, now)
            if transit is None:
                return fail(E.PRODUCER_FENCED)
        code = await self._write(txn, transit)
        if code != E.NONE:
            return fail(code)
        log.info("initialized transactional id %s with producer id %d and epoch %d on %s-%d", transactional_id,
                 transit.producer_id, transit.producer_epoch, schemas.TRANSACTION_STATE_TOPIC,
                 self.partition_for(transactional_id))
        return E.NONE, transit.producer_id, transit.producer_epoch

    # ---- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------

    def _check_producer(self, transactional_id: str, producer_id: int,
                        epoch: int) -> tuple[ErrorCode | None, TransactionMetadata | None]:
        if not transactional_id:
            return E.INVALID_REQUEST, None
        status = self._status(transactional_id)
        if status is not None:
            return status, None
        txn = self.txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING, None
        if txn.producer_epoch != epoch:
            return E.PRODUCER_FENCED, None
        return None, txn

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             partitions: set[TopicPartition]) -> ErrorCode:
        """Kafka's handleAddPartitionsToTransaction: the partitions join the ongoing transaction."""
        code, txn = self._check_producer(transactional_id, producer_id, epoch)
        if txn is None:
            return code or E.UNKNOWN_SERVER_ERROR
        if txn.pending in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            await self.await_completion(transactional_id)
            code, txn = self._check_producer(transactional_id, producer_id, epoch)  # anything may have changed
            if txn is None:
                return code or E.UNKNOWN_SERVER_ERROR
        if txn.pending_in_progress or txn.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return E.CONCURRENT_TRANSACTIONS
        if txn.state == S.ONGOING and partitions <= txn.partitions:
            return E.NONE
        return await self._write(txn, txn.prepare_add_partitions(partitions, self._now()))

    async def await_completion(self, transactional_id: str) -> None:
        """Wait (at most ``completion_wait_ms``) for the marker round of the id's last
        transaction: EndTxn's own (``end_txn``), or the previous one's when AddPartitionsToTxn
        or AddOffsetsToTxn meets it still in flight.

        Kafka answers CONCURRENT_TRANSACTIONS at once while markers are in flight, and the
        clients retry AddPartitionsToTxn after 20 ms (librdkafka; the Java producer's first
        retry too). Markers that outlast EndTxn's wait (another broker's partitions, a leader
        that moved) would cost the next transaction that 20 ms for nothing if they complete
        meanwhile; waiting no longer than the client's own back-off gives the same answer
        Kafka's retry would, only sooner. A completion still pending afterwards is answered as
        Kafka answers it."""
        done = self._completing.get(transactional_id)
        if done is None or done.done():
            return
        # A waiter of its own released by whichever comes first: cheaper than asyncio.timeout
        # around asyncio.shield (one future and one timer instead of a timeout context, a shield
        # future and their callbacks), and this wait is on every transaction's path.
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        done.add_done_callback(lambda _: _release(waiter))
        timer = loop.call_later(self.config.completion_wait_ms / 1000, _release, waiter)
        try:
            await waiter
        finally:
            timer.cancel()

    # ---- EndTxn and the markers ----------------------------------------------------------

    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                      await_markers: bool = True) -> ErrorCode:
        """Kafka's handleEndTransaction: answered once PrepareCommit/PrepareAbort is written
        and, with ``await_markers``, the marker round has ended or had ``completion_wait_ms``.
        Without it the caller waits with ``await_completion`` when it suits it (the EndTxn
        handler: after its response is sent)."""
        if not transactional_id:
            return E.INVALID_REQUEST
        status = self._status(transactional_id)
        if status is not None:
            return status
        txn = self.txns.get(transactional_id)
        if txn is None:
            return E.INVALID_PRODUCER_ID_MAPPING
        code = await self._end(txn, producer_id, epoch, commit, from_client=True)
        if code == E.NONE and await_markers:
            # Answered once PrepareCommit/PrepareAbort is written, as Kafka answers, but not
            # before the marker round has had its (bounded) chance: markers of this broker's
            # own partitions are written in-process at once, so the client that reads this
            # answer finds the transaction visible to read_committed consumers and its next
            # AddPartitionsToTxn finds the id free, instead of racing the marker task for the
            # event loop. Remote or failing markers cost the answer at most
            # ``completion_wait_ms``, less than the CONCURRENT_TRANSACTIONS retry they would
            # otherwise cost the next transaction.
            await self.await_completion(transactional_id)
        return code

    async def _end(self, txn: TransactionMetadata, producer_id: int, epoch: int, commit: bool,
                   from_client: bool) -> ErrorCode:
        is_fence = False
        if txn.producer_id != producer_id:
            if txn.pending == S.PREPARE_EPOCH_FENCE:
                txn.abort_transition()
            return E.INVALID_PRODUCER_ID_MAPPING
        if (from_client and epoch != txn.producer_epoch) or epoch < txn.producer_epoch:
            return E.PRODUCER_FENCED
        if txn.pending_in_progress and txn.pending != S.PREPARE_EPOCH_FENCE:
            return E.CONCURRENT_TRANSACTIONS
        state = txn.state
        if state == S.ONGOING:
            target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            if target == S.PREPARE_ABORT and txn.pending == S.PREPARE_EPOCH_FENCE:
                # The fence is not written by itself: it becomes the PrepareAbort at the new epoch.
                is_fence = True
                txn.pending = None
                txn.producer_epoch = epoch
                txn.last_producer_epoch = -1
            transit = txn.prepare_abort_or_commit(target, self._now())
        elif state == S.COMPLETE_COMMIT:
            return E.NONE if commit else E.INVALID_TXN_STATE
        elif state == S.COMPLETE_ABORT:
            return E.INVALID_TXN_STATE if commit else E.NONE
        elif state == S.PREPARE_COMMIT:
            return E.CONCURRENT_TRANSACTIONS if commit else E.INVALID_TXN_STATE
        elif state == S.PREPARE_ABORT:
            return E.INVALID_TXN_STATE if commit else E.CONCURRENT_TRANSACTIONS
        else:  # Empty (Dead and PrepareEpochFence are never a current state)
            return E.INVALID_TXN_STATE
        partition = self.partition_for(txn.transactional_id)
        coordinator_epoch = self.owned.get(partition, -1)
        code = await self._write(txn, transit)
        if code != E.NONE:
            if is_fence and self.txns.get(txn.transactional_id) is txn:
                # The epoch was bumped in memory but never returned: the next fence reuses it.
                txn.failed_epoch_fence = True
                log.warning("writing the epoch fence of %s failed (%s); epoch %d was not returned to the client",
                            txn.transactional_id, code.name, txn.producer_epoch)
            return code
        self._start_markers(txn, coordinator_epoch)
        return E.NONE

    # ---- markers ------------------------------------------------------------------------

    def _start_markers(self, txn: TransactionMetadata, coordinator_epoch: int) -> None:
        # Kafka prepares the completion before sending: while the markers are in flight the
        # transition is pending, so every other request for the id gets CONCURRENT_TRANSACTIONS
        # (a client's retry of EndTxn, its next AddPartitionsToTxn, or an abort, which it retries).
        transit = txn.prepare_complete(self._now())
        job = MarkerJob(txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.state == S.PREPARE_COMMIT,
                        coordinator_epoch, frozenset(txn.partitions))
        done = self._completing.get(txn.transactional_id)
        if done is None or done.done():
            self._completing[txn.transactional_id] = asyncio.get_running_loop().create_future()
        self._spawn(self._complete(txn, job, transit), f"txn-markers-{txn.transactional_id}")

    async def _complete(self, txn: TransactionMetadata, job: MarkerJob, transit: Transit) -> None:
        """Write the markers, then CompleteCommit/CompleteAbort (Kafka's TransactionMarkerChannelManager)."""
        try:
            await self._complete_round(txn, job, transit)
        finally:
            done = self._completing.pop(job.transactional_id, None)
            if done is not None and not done.done():
                done.set_result(None)

    async def _complete_round(self, txn: TransactionMetadata, job: MarkerJob, transit: Transit) -> None:
        partition = self.partition_for(job.transactional_id)

        def current() -> bool:
            return self.active and self.owned.get(partition) == job.coordinator_epoch and \
                self.txns.get(job.transactional_id) is txn and txn.producer_epoch == job.producer_epoch

        done = await self.send_markers(job, current)
        if not done or not current():
            # As in Kafka, the completion stays pending: the coordinator that loads the
            # partition next sends the markers again.
            log.info("markers of %s at coordinator epoch %d were not completed here (coordinator moved or fenced)",
                     job.transactional_id, job.coordinator_epoch)
            return
        while True:
            code = await self._write(txn, transit)
            if code == E.NONE or not current():
                return
            # Kafka retries the completion write until it succeeds or the coordinator moves.
            log.warning("writing the completion of %s failed (%s); retrying", job.transactional_id, code.name)
            transit = txn.prepare_complete(self._now())
            await asyncio.sleep(0.1)

    # ---- timeouts and expiration ---------------------------------------------------------

    async def abort_timed_out(self) -> int:
        """Abort every ongoing transaction older than its timeout, at a bumped epoch so its
        producer is fenced (Kafka's abortTimedOutTransactions); how many were started."""
        now = self._now()
        expired = [t for p, t in self._owned_txns() if t.state == S.ONGOING and not t.pending_in_progress
                   and t.start_ms + t.timeout_ms < now]
        started = 0
        for txn in expired:
            if txn.pending_in_progress or txn.state != S.ONGOING or \
                    self.txns.get(txn.transactional_id) is not txn:
                continue  # changed while an earlier abort was being written
            fence = txn.prepare_fence_producer_epoch()
            log.info("aborting transaction of %s (producer id %d): it timed out after %d ms", txn.transactional_id,
                     txn.producer_id, txn.timeout_ms)
            code = await self._end(txn, fence.producer_id, fence.producer_epoch, commit=False, from_client=False)
            if code == E.NONE:
                started += 1
            else:
                log.warning("aborting the timed-out transaction of %s failed: %s", txn.transactional_id, code.name)
        return started

    async def expire_transactional_ids(self) -> int:
        """Forget ids idle for transactional.id.expiration.ms with no transaction open: Dead,
        then a tombstone in the log (Kafka's removeExpiredTransactionalIds); how many."""
        now = self._now()
        idle = [t for p, t in self._owned_txns()
                if t.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) and not t.pending_in_progress
                and t.last_update_ms + self.config.id_expiration_ms <= now]
        removed = 0
        for txn in idle:
            if txn.pending_in_progress or self.txns.get(txn.transactional_id) is not txn:
                continue
            partition = self.partition_for(txn.transactional_id)
            epoch = self.owned.get(partition)
            txn.prepare_dead()
            code = await self.store.append(partition, [(schemas.encode_key(txn.transactional_id), None)])
            if self.owned.get(partition) != epoch or self.txns.get(txn.transactional_id) is not txn:
                continue
            txn.abort_transition()
            if code == E.NONE:
                del self.txns[txn.transactional_id]
                removed += 1
                log.info("transactional id %s expired (idle for %d ms)", txn.transactional_id,
                         now - txn.last_update_ms)
        return removed

    def _owned_txns(self) -> list[tuple[int, TransactionMetadata]]:
        return [(p, t) for t in self.txns.values() if (p := self.partition_for(t.transactional_id)) in self.owned]

    # ---- DescribeTransactions / ListTransactions -----------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        """Kafka's handleDescribeTransactions: the id's metadata, or why there is none."""
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE, None
        if not transactional_id:
            return E.INVALID_REQUEST, None
        status = self._status(transactional_id)
        if status is not None:
            return status, None
        txn = self.txns.get(transactional_id)
        if txn is None or txn.state == S.DEAD:
            return E.TRANSACTIONAL_ID_NOT_FOUND, None
        return E.NONE, txn

    def list(self, producer_ids: set[int], state_names: set[str], duration_ms: int = -1
             ) -> tuple[ErrorCode, list[str], list[TransactionMetadata]]:
        """Kafka's listTransactionStates: (error, unknown state filters, matching ids)."""
        if not self.active:
            return E.COORDINATOR_NOT_AVAILABLE, [], []
        if self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, [], []
        by_name = {s.kafka_name: s for s in TxnState}
        unknown = sorted(n for n in state_names if n not in by_name)
        states = {by_name[n] for n in state_names if n in by_name}
        now = self._now()
        out = [t for _, t in self._owned_txns()
               if t.state != S.DEAD
               and (not producer_ids or t.producer_id in producer_ids)
               and (not state_names or t.state in states)
               and not (duration_ms >= 0 and now - t.start_ms <= duration_ms)]
        return E.NONE, unknown, sorted(out, key=lambda t: t.transactional_id)
