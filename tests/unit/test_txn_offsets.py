"""TxnOffsetCommit in the group coordinator over a real __consumer_offsets partition log: the
offsets are written in a transactional batch, stay pending until the COMMIT marker (dropped by
ABORT), lose to a later plain commit, and survive a reload (markers in the log replayed)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from kaflet.coordinator.group.coordinator import GroupConfig, GroupCoordinator
from kaflet.coordinator.group.schemas import OffsetValue, encode_offset_key, encode_offset_value
from kaflet.coordinator.group.store import GROUP_METADATA_TOPIC, OffsetsTopicStore
from kaflet.log.config import LogConfig
from kaflet.log.log import Log
from kaflet.protocol.errors import ErrorCode as E
from kaflet.protocol.records import Record, build_batch, iter_batches
from kaflet.replication.partition import Partition

PID, EPOCH = 4000, 2
TP = ("orders", 0)


class Offsets:
    def __init__(self, path: Path) -> None:
        self.log = Log(str(path / f"{GROUP_METADATA_TOPIC}-0"), LogConfig.from_props({}))
        self.part = Partition(GROUP_METADATA_TOPIC, 0, "AAAAAAAAAAAAAAAAAAAAAA", self.log, broker_id=1)
        self.part.make_leader(1, [1], [1])
        self.store = OffsetsTopicStore(lambda t, i: self.part if (t, i) == (GROUP_METADATA_TOPIC, 0) else None, 5000)

    def coordinator(self) -> GroupCoordinator:
        return GroupCoordinator(GroupConfig(num_partitions=1, initial_rebalance_delay_ms=0), self.store)

    def marker(self, commit: bool) -> None:
        """A COMMIT/ABORT control batch, as the WriteTxnMarkers handler appends it."""
        key = struct.pack(">hh", 0, 1 if commit else 0)
        batch = build_batch([Record(0, 0, key, struct.pack(">hi", 0, 0))], base_offset=self.log.log_end_offset,
                            producer_id=PID, producer_epoch=EPOCH, is_transactional=True, is_control=True)
        self.log.append_as_follower(memoryview(batch))


@pytest.fixture
def o(tmp_path: Path) -> Iterator[Offsets]:
    offsets = Offsets(tmp_path)
    yield offsets
    offsets.log.close()


async def _loaded(o: Offsets) -> GroupCoordinator:
    c = o.coordinator()
    c.on_became_leader(0)
    await c._tasks.drain()
    return c


def _fetch(c: GroupCoordinator) -> int | None:
    err, offs = c.fetch_offsets("g", [TP])
    assert err == E.NONE
    v = offs[TP]
    return None if v is None else v.offset


async def test_pending_until_commit_marker(o: Offsets) -> None:
    c = await _loaded(o)
    assert await c.commit_txn_offsets("g", PID, EPOCH, "", None, -1, {TP: OffsetValue(10)}) == {TP: E.NONE}
    # Written as the producer's transactional batch; not visible until the transaction commits.
    data = b"".join(r.read_bytes() for r in o.log.read(0, 1 << 20, o.log.log_end_offset).regions)
    ((_, h),) = list(iter_batches(memoryview(data)))
    assert (h.producer_id, h.producer_epoch, h.is_transactional) == (PID, EPOCH, True)
    assert _fetch(c) is None and c.has_pending_txn_offsets("g", TP)
    assert await c.commit_txn_offsets("g", PID, EPOCH, "", None, -1, {TP: OffsetValue(12)}) == {TP: E.NONE}
    c.complete_txn(0, PID, commit=True)
    assert _fetch(c) == 12 and not c.has_pending_txn_offsets("g", TP)
    # Each batch at base sequence 0, as Kafka's coordinator writes it (appended with its origin).
    data = b"".join(r.read_bytes() for r in o.log.read(0, 1 << 20, o.log.log_end_offset).regions)
    assert [h.base_sequence for _, h in iter_batches(memoryview(data))] == [0, 0]


async def test_log_of_the_old_sequence_numbering_loads(o: Offsets) -> None:
    """Logs written before coordinator appends skipped the sequence check continued the
    producer's sequence; they load, and new commits of the same producer epoch go on."""
    rec = Record(0, 0, encode_offset_key("g", *TP), encode_offset_value(OffsetValue(4)))
    for seq in (0, 1):
        old = build_batch([rec], base_offset=o.log.log_end_offset, producer_id=PID, producer_epoch=EPOCH,
                          base_sequence=seq, is_transactional=True)
        o.log.append_as_follower(memoryview(old))
    o.marker(commit=True)
    c = await _loaded(o)
    assert _fetch(c) == 4
    assert await c.commit_txn_offsets("g", PID, EPOCH, "", None, -1, {TP: OffsetValue(9)}) == {TP: E.NONE}
    c.complete_txn(0, PID, commit=True)
    assert _fetch(c) == 9


async def test_abort_drops_and_plain_commit_wins(o: Offsets) -> None:
    c = await _loaded(o)
    await c.commit_txn_offsets("g", PID, EPOCH, "", None, -1, {TP: OffsetValue(10)})
    c.complete_txn(0, PID, commit=False)
    assert _fetch(c) is None
    await c.commit_txn_offsets("g", PID, EPOCH, "", None, -1, {TP: OffsetValue(20)})
    assert await c.commit_offsets("g", "", None, -1, {TP: OffsetValue(30)}) == {TP: E.NONE}
    c.complete_txn(0, PID, commit=True)
    assert _fetch(c) == 30  # the plain commit was written after the transaction's


async def test_member_checks(o: Offsets) -> None:
    """Kafka's validateOffsetCommit for transactional commits."""
    c = await _loaded(o)
    one = {TP: OffsetValue(1)}
    # An empty group takes generation -1 commits, whatever member they name.
    assert await c.commit_txn_offsets("g", PID, EPOCH, "nobody", None, -1, one) == {TP: E.NONE}
    assert await c.commit_txn_offsets("g", PID, EPOCH, "", None, 3, one) == {TP: E.UNKNOWN_MEMBER_ID}
    joined = await c.join_group("g", "", None, False, "client", "/127.0.0.1", 1000, 10000, "consumer",
                                [("range", b"meta")])
    assert joined.error == E.NONE and joined.generation_id == 1
    member = joined.member_id
    assert await c.commit_txn_offsets("g", PID, EPOCH, "nobody", None, -1, one) == {TP: E.UNKNOWN_MEMBER_ID}
    # The member with a generation that is not the group's, -1 included (Kafka: ILLEGAL_GENERATION).
    assert await c.commit_txn_offsets("g", PID, EPOCH, member, None, -1, one) == {TP: E.ILLEGAL_GENERATION}
    assert await c.commit_txn_offsets("g", PID, EPOCH, member, None, 3, one) == {TP: E.ILLEGAL_GENERATION}
    assert await c.commit_txn_offsets("g", PID, EPOCH, member, None, 1, one) == {TP: E.NONE}
    # A producer naming neither member nor generation (older clients) may commit to any group.
    assert await c.commit_txn_offsets("g", PID, EPOCH, "", None, -1, one) == {TP: E.NONE}
    c.shutdown()


async def test_reload_replays_markers(o: Offsets) -> None:
    c = await _loaded(o)
    await c.commit_txn_offsets("g", PID, EPOCH, "", None, -1, {TP: OffsetValue(5)})
    o.marker(commit=True)
    await c.commit_txn_offsets("g", PID, EPOCH, "", None, -1, {TP: OffsetValue(6), ("orders", 1): OffsetValue(7)})
    o.marker(commit=False)
    await c.commit_txn_offsets("g", PID, EPOCH, "", None, -1, {TP: OffsetValue(8)})  # still open
    reloaded = await _loaded(o)
    assert _fetch(reloaded) == 5
    assert reloaded.fetch_offsets("g", [("orders", 1)])[1][("orders", 1)] is None
    assert reloaded.has_pending_txn_offsets("g", TP)
    reloaded.complete_txn(0, PID, commit=True)
    assert _fetch(reloaded) == 8


async def test_marker_during_load_is_applied_after_it(o: Offsets) -> None:
    c = await _loaded(o)
    await c.commit_txn_offsets("g", PID, EPOCH, "", None, -1, {TP: OffsetValue(3)})
    c.on_resigned(0)
    c.on_became_leader(0)  # loading: the replay may miss a marker written now
    c.complete_txn(0, PID, commit=True)
    await c._tasks.drain()
    assert _fetch(c) == 3
