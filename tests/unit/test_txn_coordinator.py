"""The transaction coordinator's state machine over a real __transaction_state partition log,
with the markers recorded instead of sent (the WriteTxnMarkers handler is the log side's)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kaflet.coordinator.group.store import OffsetsTopicStore
from kaflet.coordinator.transaction import schemas
from kaflet.coordinator.transaction.coordinator import MarkerJob, TransactionCoordinator, TxnConfig
from kaflet.coordinator.transaction.schemas import TxnState
from kaflet.coordinator.transaction.state import IllegalTransition, TransactionMetadata
from kaflet.log.config import LogConfig
from kaflet.log.log import Log
from kaflet.protocol.errors import ErrorCode as E
from kaflet.protocol.records import Record, build_batch, decode_records, iter_batches
from kaflet.replication.partition import Partition

S = TxnState
TOPIC = schemas.TRANSACTION_STATE_TOPIC


class Harness:
    """A coordinator over one real __transaction_state partition; markers are recorded and
    answered by ``marker_result``."""

    def __init__(self, path: Path, start_pid: int = 1000) -> None:
        self.log = Log(str(path / f"{TOPIC}-0"), LogConfig.from_props({}))
        self.part = Partition(TOPIC, 0, "AAAAAAAAAAAAAAAAAAAAAA", self.log, broker_id=1)
        self.part.make_leader(3, [1], [1])
        self.store = OffsetsTopicStore(lambda topic, index: self.part if (topic, index) == (TOPIC, 0) else None,
                                       5000, topic=TOPIC)
        self.jobs: list[MarkerJob] = []
        self.marker_result = True
        self.marker_gate: asyncio.Event | None = None
        self._pids: Iterator[int] = itertools.count(start_pid)
        self.now = 1_000_000
        self.coordinator = self.new_coordinator()

    def new_coordinator(self) -> TransactionCoordinator:
        async def next_pid() -> int:
            return next(self._pids)

        async def send(job: MarkerJob, current: Callable[[], bool]) -> bool:
            self.jobs.append(job)
            if self.marker_gate is not None:
                await self.marker_gate.wait()
            return self.marker_result

        return TransactionCoordinator(TxnConfig(num_partitions=1), self.store, next_pid, send,
                                      now_ms=lambda: self.now)

    async def load(self, coordinator: TransactionCoordinator | None = None, epoch: int = 3) -> None:
        c = coordinator or self.coordinator
        c.on_became_leader(0, epoch)
        await c.drain()
        assert c.owned == {0: epoch}

    def records(self) -> list[tuple[str, schemas.TxnLogValue | None]]:
        out: list[tuple[str, schemas.TxnLogValue | None]] = []
        data = b"".join(r.read_bytes() for r in self.log.read(0, 1 << 20, self.log.log_end_offset).regions)
        mv = memoryview(data)
        for pos, h in iter_batches(mv):
            for rec in decode_records(mv[pos:pos + h.size]):
                assert rec.key is not None
                txn_id = schemas.decode_key(rec.key)
                assert txn_id is not None
                out.append((txn_id, schemas.decode_value(rec.value) if rec.value is not None else None))
        return out

    def states(self) -> list[TxnState]:
        return [v.state for _, v in self.records() if v is not None]


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    harness.coordinator.shutdown()
    harness.log.close()


# ---- the state machine ----------------------------------------------------------------------


def test_transitions_follow_kafkas_valid_previous_states() -> None:
    txn = TransactionMetadata("t", 5, -1, 0, -1, 1000, S.EMPTY)
    with pytest.raises(IllegalTransition):
        txn.prepare_abort_or_commit(S.PREPARE_COMMIT, 1)  # Empty -> PrepareCommit is not allowed
    t = txn.prepare_add_partitions({("a", 0)}, 10)
    with pytest.raises(IllegalTransition):
        txn.prepare_add_partitions({("a", 1)}, 11)  # one pending transition at a time
    txn.complete_transition(t)
    assert (txn.state, txn.partitions, txn.start_ms) == (S.ONGOING, {("a", 0)}, 10)
    t = txn.prepare_abort_or_commit(S.PREPARE_COMMIT, 20)
    txn.complete_transition(t)
    with pytest.raises(IllegalTransition):
        txn.prepare_add_partitions({("a", 1)}, 21)  # PrepareCommit -> Ongoing is not allowed
    txn.complete_transition(txn.prepare_complete(30))
    assert (txn.state, txn.partitions) == (S.COMPLETE_COMMIT, set())


def test_failed_write_leaves_state_unchanged() -> None:
    txn = TransactionMetadata("t", 5, -1, 0, -1, 1000, S.EMPTY)
    txn.prepare_add_partitions({("a", 0)}, 10)
    txn.abort_transition()
    assert (txn.state, txn.pending, txn.partitions) == (S.EMPTY, None, set())


def test_epoch_bump_rules() -> None:
    txn = TransactionMetadata("t", 5, -1, 4, -1, 1000, S.COMPLETE_ABORT)
    t = txn.prepare_increment_epoch(2000, None, 50)
    assert t is not None and (t.producer_epoch, t.last_producer_epoch, t.timeout_ms) == (5, -1, 2000)
    txn.complete_transition(t)
    # KIP-360: the producer that holds epoch 5 may bump it; a retry with the last epoch gets it again.
    t = txn.prepare_increment_epoch(2000, 5, 60)
    assert t is not None and (t.producer_epoch, t.last_producer_epoch) == (6, 5)
    txn.complete_transition(t)
    t = txn.prepare_increment_epoch(2000, 5, 70)
    assert t is not None and (t.producer_epoch, t.last_producer_epoch) == (6, 5)
    txn.abort_transition()
    assert txn.prepare_increment_epoch(2000, 3, 80) is None  # a fenced epoch


# ---- loading and unloading ------------------------------------------------------------------


def _write(h: Harness, txn_id: str, v: schemas.TxnLogValue | None) -> None:
    value = schemas.encode_value(v) if v is not None else None
    h.part.append(memoryview(build_batch([Record(0, 0, schemas.encode_key(txn_id), value)])), -1)


async def test_load_restores_last_state_and_resumes_prepared(h: Harness) -> None:
    _write(h, "a", schemas.TxnLogValue(10, 0, 60000, S.ONGOING, {("x", 0)}, 5, 5))
    _write(h, "a", schemas.TxnLogValue(10, 0, 60000, S.PREPARE_COMMIT, {("x", 0), ("y", 1)}, 6, 5))
    _write(h, "b", schemas.TxnLogValue(11, 2, 60000, S.EMPTY, set(), 7, -1))
    _write(h, "gone", schemas.TxnLogValue(12, 0, 60000, S.EMPTY, set(), 7, -1))
    _write(h, "gone", None)
    _write(h, "dead", schemas.TxnLogValue(13, 0, 60000, S.DEAD, set(), 7, -1))
    await h.load()
    c = h.coordinator
    assert set(c.txns) == {"a", "b"}
    assert (c.txns["b"].producer_id, c.txns["b"].producer_epoch) == (11, 2)
    # The prepared commit is finished: markers to both partitions at coordinator epoch 3, then CompleteCommit.
    assert h.jobs == [MarkerJob("a", 10, 0, True, 3, frozenset({("x", 0), ("y", 1)}))]
    assert c.txns["a"].state == S.COMPLETE_COMMIT
    assert h.records()[-1] == ("a", schemas.TxnLogValue(10, 0, 60000, S.COMPLETE_COMMIT, set(), h.now, 5))


async def test_load_and_resign(h: Harness) -> None:
    _write(h, "t", schemas.TxnLogValue(11, 2, 60000, S.EMPTY, set(), 7, -1))
    c = h.coordinator
    assert c._status("t") == E.NOT_COORDINATOR
    c.on_became_leader(0, 3)
    assert c._status("t") == E.COORDINATOR_LOAD_IN_PROGRESS
    await c.drain()
    assert c._status("t") is None and c.txns["t"].producer_epoch == 2
    c.on_resigned(0)
    assert c.txns == {} and c.owned == {} and c._status("t") == E.NOT_COORDINATOR
    await h.load(epoch=4)  # loaded again from the log
    assert c.txns["t"].producer_epoch == 2


async def test_unreadable_record_is_skipped(h: Harness) -> None:
    h.part.append(memoryview(build_batch([Record(0, 0, schemas.encode_key("bad"), b"\x00\x09junk")])), -1)
    _write(h, "ok", schemas.TxnLogValue(11, 2, 60000, S.EMPTY, set(), 7, -1))
    await h.load()
    assert set(h.coordinator.txns) == {"ok"}


# ---- InitProducerId -------------------------------------------------------------------------


async def test_init_producer_id_new_and_bumped(h: Harness) -> None:
    await h.load()
    c = h.coordinator
    assert await c.init_producer_id("t", 60000) == (E.NONE, 1000, 0)
    assert h.records() == [("t", schemas.TxnLogValue(1000, 0, 60000, S.EMPTY, set(), h.now, -1))]
    # A second producer with the same id gets the next epoch: the first one is fenced.
    assert await c.init_producer_id("t", 30000) == (E.NONE, 1000, 1)
    assert c.txns["t"].timeout_ms == 30000
    # KIP-360: the fenced producer (epoch 0) cannot bump; the current one (epoch 1) can.
    assert await c.init_producer_id("t", 30000, 1000, 0) == (E.PRODUCER_FENCED, -1, -1)
    assert await c.init_producer_id("t", 30000, 1000, 1) == (E.NONE, 1000, 2)
    assert await c.init_producer_id("t", 30000, 1000, 1) == (E.NONE, 1000, 2)  # its retry
    assert await c.init_producer_id("t", 30000, 77, 2) == (E.PRODUCER_FENCED, -1, -1)


async def test_init_producer_id_rejects_bad_input(h: Harness) -> None:
    await h.load()
    c = h.coordinator
    assert (await c.init_producer_id("", 1000))[0] == E.INVALID_REQUEST
    assert (await c.init_producer_id("t", 0))[0] == E.INVALID_TRANSACTION_TIMEOUT
    assert (await c.init_producer_id("t", 900_001))[0] == E.INVALID_TRANSACTION_TIMEOUT
    assert h.records() == []


async def test_exhausted_epoch_rotates_producer_id(h: Harness) -> None:
    _write(h, "t", schemas.TxnLogValue(10, 32766, 60000, S.COMPLETE_COMMIT, set(), 5, 5))
    await h.load()
    assert await h.coordinator.init_producer_id("t", 60000) == (E.NONE, 1000, 0)


async def test_failed_write_is_answered_and_nothing_changes(h: Harness) -> None:
    await h.load()
    c = h.coordinator
    assert await c.init_producer_id("t", 60000) == (E.NONE, 1000, 0)
    h.part.make_follower(2, 4, [2, 1])  # the partition moved to broker 2
    code, _, _ = await c.init_producer_id("t", 60000)
    assert code == E.NOT_COORDINATOR
    assert c.txns["t"].producer_epoch == 0 and c.txns["t"].pending is None


async def test_init_aborts_an_ongoing_transaction_first(h: Harness) -> None:
    await h.load()
    c = h.coordinator
    assert await c.init_producer_id("t", 60000) == (E.NONE, 1000, 0)
    assert await c.add_partitions("t", 1000, 0, {("x", 0), ("x", 1)}) == E.NONE
    h.now += 10
    # A new producer instance: the open transaction is aborted at a bumped epoch, which fences
    # the old producer's writes; the client retries on CONCURRENT_TRANSACTIONS.
    assert (await c.init_producer_id("t", 60000))[0] == E.CONCURRENT_TRANSACTIONS
    await c.drain()
    assert h.jobs == [MarkerJob("t", 1000, 1, False, 3, frozenset({("x", 0), ("x", 1)}))]
    assert h.states() == [S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.COMPLETE_ABORT]
    assert [v.producer_epoch for _, v in h.records() if v is not None] == [0, 0, 1, 1]
    assert await c.init_producer_id("t", 60000) == (E.NONE, 1000, 2)
    assert await c.add_partitions("t", 1000, 0, {("x", 0)}) == E.PRODUCER_FENCED


# ---- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn ---------------------------------------------


async def _begin(h: Harness, txn_id: str = "t") -> tuple[int, int]:
    await h.load()
    code, pid, epoch = await h.coordinator.init_producer_id(txn_id, 60000)
    assert code == E.NONE
    return pid, epoch


async def test_commit_writes_prepare_markers_then_complete(h: Harness) -> None:
    pid, epoch = await _begin(h)
    c = h.coordinator
    assert await c.add_partitions("t", pid, epoch, {("x", 0)}) == E.NONE
    h.now += 5
    assert await c.add_partitions("t", pid, epoch, {("x", 0), ("__consumer_offsets", 7)}) == E.NONE
    assert await c.add_partitions("t", pid, epoch, {("x", 0)}) == E.NONE  # nothing new: no write
    assert c.txns["t"].start_ms == h.now - 5
    h.marker_gate = asyncio.Event()
    assert await c.end_txn("t", pid, epoch, commit=True) == E.NONE
    # Answered after PrepareCommit is written; while markers are in flight the completion is
    # pending and every request for the id waits (librdkafka retries an abort on it).
    assert (c.txns["t"].state, c.txns["t"].pending) == (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
    assert await c.end_txn("t", pid, epoch, commit=True) == E.CONCURRENT_TRANSACTIONS
    assert await c.end_txn("t", pid, epoch, commit=False) == E.CONCURRENT_TRANSACTIONS
    assert await c.add_partitions("t", pid, epoch, {("y", 0)}) == E.CONCURRENT_TRANSACTIONS
    assert (await c.init_producer_id("t", 60000))[0] == E.CONCURRENT_TRANSACTIONS
    h.marker_gate.set()
    await c.drain()
    assert h.jobs == [MarkerJob("t", pid, epoch, True, 3, frozenset({("x", 0), ("__consumer_offsets", 7)}))]
    assert h.states() == [S.EMPTY, S.ONGOING, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    assert await c.end_txn("t", pid, epoch, commit=True) == E.NONE  # a retry after completion
    assert await c.end_txn("t", pid, epoch, commit=False) == E.INVALID_TXN_STATE
    # The next transaction starts from CompleteCommit.
    assert await c.add_partitions("t", pid, epoch, {("y", 0)}) == E.NONE
    assert c.txns["t"].partitions == {("y", 0)}


async def test_end_txn_answers_once_its_markers_are_written(h: Harness) -> None:
    pid, epoch = await _begin(h)
    c = h.coordinator
    c.config.completion_wait_ms = 30_000  # the gate opens on the next turn of the loop
    assert await c.add_partitions("t", pid, epoch, {("x", 0)}) == E.NONE
    h.marker_gate = asyncio.Event()
    asyncio.get_running_loop().call_soon(h.marker_gate.set)
    assert await c.end_txn("t", pid, epoch, commit=True) == E.NONE
    # The answer waited for the markers and the completion: the transaction is over.
    assert (c.txns["t"].state, c.txns["t"].pending) == (S.COMPLETE_COMMIT, None)
    assert h.states()[-2:] == [S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    assert not c._completing
    # Markers that take longer than the wait do not hold the answer: it says what Kafka's
    # says once PrepareAbort is written, and the round goes on.
    c.config.completion_wait_ms = 5
    assert await c.add_partitions("t", pid, epoch, {("y", 0)}) == E.NONE
    h.marker_gate = asyncio.Event()
    assert await c.end_txn("t", pid, epoch, commit=False) == E.NONE
    assert (c.txns["t"].state, c.txns["t"].pending) == (S.PREPARE_ABORT, S.COMPLETE_ABORT)
    h.marker_gate.set()
    await c.drain()
    assert c.txns["t"].state == S.COMPLETE_ABORT
    assert h.states()[-2:] == [S.PREPARE_ABORT, S.COMPLETE_ABORT]
    # Without await_markers (the EndTxn handler, which waits after sending its answer) the
    # answer comes once PrepareCommit is written; await_completion then waits for the round.
    c.config.completion_wait_ms = 30_000
    assert await c.add_partitions("t", pid, epoch, {("x", 0)}) == E.NONE
    h.marker_gate = asyncio.Event()
    assert await c.end_txn("t", pid, epoch, commit=True, await_markers=False) == E.NONE
    assert (c.txns["t"].state, c.txns["t"].pending) == (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
    asyncio.get_running_loop().call_soon(h.marker_gate.set)
    await c.await_completion("t")
    assert (c.txns["t"].state, c.txns["t"].pending) == (S.COMPLETE_COMMIT, None)


async def test_next_add_partitions_waits_briefly_for_the_previous_markers(h: Harness) -> None:
    pid, epoch = await _begin(h)
    c = h.coordinator
    assert await c.add_partitions("t", pid, epoch, {("x", 0)}) == E.NONE
    h.marker_gate = asyncio.Event()
    c.config.completion_wait_ms = 1  # EndTxn gives up waiting for the markers ...
    assert await c.end_txn("t", pid, epoch, commit=True) == E.NONE
    assert c.txns["t"].pending == S.COMPLETE_COMMIT
    c.config.completion_wait_ms = 30_000  # ... and the gate opens on the next turn of the loop
    asyncio.get_running_loop().call_soon(h.marker_gate.set)
    # Kafka answers CONCURRENT_TRANSACTIONS and the client retries 20 ms later; here the
    # request waits for the completion and gets the answer that retry would get.
    assert await c.add_partitions("t", pid, epoch, {("y", 0)}) == E.NONE
    assert h.states()[-3:] == [S.PREPARE_COMMIT, S.COMPLETE_COMMIT, S.ONGOING]
    assert c.txns["t"].partitions == {("y", 0)}
    # Markers still in flight when the wait is over: CONCURRENT_TRANSACTIONS, as Kafka answers.
    c.config.completion_wait_ms = 1
    h.marker_gate = asyncio.Event()
    assert await c.end_txn("t", pid, epoch, commit=False) == E.NONE
    assert await c.add_partitions("t", pid, epoch, {("z", 0)}) == E.CONCURRENT_TRANSACTIONS
    h.marker_gate.set()
    await c.drain()
    assert not c._completing  # nothing kept once the rounds are over
    assert await c.add_partitions("t", pid, epoch, {("z", 0)}) == E.NONE


async def test_abort(h: Harness) -> None:
    pid, epoch = await _begin(h)
    c = h.coordinator
    assert await c.add_partitions("t", pid, epoch, {("x", 0)}) == E.NONE
    assert await c.end_txn("t", pid, epoch, commit=False) == E.NONE
    await c.drain()
    assert h.jobs[0].commit is False
    assert h.states()[-2:] == [S.PREPARE_ABORT, S.COMPLETE_ABORT]


async def test_request_errors(h: Harness) -> None:
    pid, epoch = await _begin(h)
    c = h.coordinator
    assert await c.end_txn("t", pid, epoch, commit=True) == E.INVALID_TXN_STATE  # nothing to end
    assert await c.add_partitions("t", pid + 1, epoch, {("x", 0)}) == E.INVALID_PRODUCER_ID_MAPPING
    assert await c.add_partitions("t", pid, epoch + 1, {("x", 0)}) == E.PRODUCER_FENCED
    assert await c.add_partitions("nope", pid, epoch, {("x", 0)}) == E.INVALID_PRODUCER_ID_MAPPING
    assert await c.add_partitions("", pid, epoch, {("x", 0)}) == E.INVALID_REQUEST
    assert await c.end_txn("nope", pid, epoch, commit=True) == E.INVALID_PRODUCER_ID_MAPPING
    assert await c.end_txn("t", pid, epoch - 1, commit=True) == E.PRODUCER_FENCED


async def test_markers_not_completed_when_coordinator_moves(h: Harness) -> None:
    pid, epoch = await _begin(h)
    c = h.coordinator
    assert await c.add_partitions("t", pid, epoch, {("x", 0)}) == E.NONE
    h.marker_result = False  # e.g. TRANSACTION_COORDINATOR_FENCED from the leader
    assert await c.end_txn("t", pid, epoch, commit=True) == E.NONE
    await c.drain()
    assert h.states()[-1] == S.PREPARE_COMMIT
    # A new coordinator (re-election at a higher epoch) finishes it from the log.
    h.marker_result = True
    c.on_resigned(0)
    await h.load(epoch=4)
    assert h.jobs[-1].coordinator_epoch == 4 and h.states()[-1] == S.COMPLETE_COMMIT


# ---- timeouts and expiration ----------------------------------------------------------------


async def test_timed_out_transaction_is_aborted_and_producer_fenced(h: Harness) -> None:
    pid, epoch = await _begin(h)
    c = h.coordinator
    assert await c.add_partitions("t", pid, epoch, {("x", 0)}) == E.NONE
    h.now += 59_999
    assert await c.abort_timed_out() == 0
    h.now += 2
    assert await c.abort_timed_out() == 1
    await c.drain()
    assert h.jobs == [MarkerJob("t", pid, epoch + 1, False, 3, frozenset({("x", 0)}))]
    assert h.states()[-2:] == [S.PREPARE_ABORT, S.COMPLETE_ABORT]
    assert await c.end_txn("t", pid, epoch, commit=True) == E.PRODUCER_FENCED


async def test_idle_transactional_id_expires(h: Harness) -> None:
    await _begin(h)
    c = h.coordinator
    h.now += c.config.id_expiration_ms - 1
    assert await c.expire_transactional_ids() == 0
    h.now += 1
    assert await c.expire_transactional_ids() == 1
    assert "t" not in c.txns and h.records()[-1] == ("t", None)
    c.on_resigned(0)
    await h.load(epoch=4)
    assert "t" not in c.txns  # the tombstone is replayed
    assert await c.init_producer_id("t", 1000) == (E.NONE, 1001, 0)  # a new producer id


# ---- DescribeTransactions / ListTransactions ------------------------------------------------


async def test_describe_and_list(h: Harness) -> None:
    c = h.coordinator
    assert c.describe("t") == (E.NOT_COORDINATOR, None)
    pid, epoch = await _begin(h)
    assert await c.add_partitions("t", pid, epoch, {("x", 0)}) == E.NONE
    await c.init_producer_id("idle", 1000)
    code, txn = c.describe("t")
    assert code == E.NONE and txn is not None and (txn.state, txn.partitions) == (S.ONGOING, {("x", 0)})
    assert c.describe("nope") == (E.TRANSACTIONAL_ID_NOT_FOUND, None)
    assert c.describe("") == (E.INVALID_REQUEST, None)
    code, unknown, txns = c.list(set(), {"Ongoing", "Nope"})
    assert (code, unknown, [t.transactional_id for t in txns]) == (E.NONE, ["Nope"], ["t"])
    assert [t.transactional_id for t in c.list({pid + 1}, set())[2]] == ["idle"]
    h.now += 100
    # Running for 100 ms; an id with no transaction has start time -1, so Kafka lists it too.
    assert [t.transactional_id for t in c.list(set(), set(), 99)[2]] == ["idle", "t"]
    assert [t.transactional_id for t in c.list(set(), set(), 100)[2]] == ["idle"]
