"""Log side of transactions: markers, producer state with open transactions, LSO, .txnindex."""

from __future__ import annotations

import os
import struct

import pytest

from kaflet.log.config import LogConfig
from kaflet.log.errors import ProducerStateError
from kaflet.log.log import Log
from kaflet.log.transaction_index import ENTRY_SIZE, AbortedTxn, TransactionIndex
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.records import Record, build_batch, decode_records, iter_batches


def _cfg(**props) -> LogConfig:  # type: ignore[no-untyped-def]
    return LogConfig.from_props({"segment.bytes": 4000, "index.interval.bytes": 300, **props})


def _txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0, transactional: bool = True) -> bytes:
    return build_batch([Record(i, 0, b"k", b"p%d-%d" % (pid, seq + i)) for i in range(n)], base_timestamp=1000,
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)


def _plain(n: int = 1) -> bytes:
    return build_batch([Record(i, 0, b"k", b"plain") for i in range(n)], base_timestamp=1000)


def _marker(lg: Log, pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> int:
    return lg.append_txn_marker(pid, epoch, coordinator_epoch, commit, leader_epoch=0, now_ms=2000).base_offset


def test_lso_follows_open_transactions_and_high_watermark(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg())
    lg.append_as_leader(_plain(3), 0)                       # 0..2
    lg.append_as_leader(_txn_batch(7, 0), 0)                # 3..4 (txn of 7)
    lg.append_as_leader(_txn_batch(8, 0), 0)                # 5..6 (txn of 8)
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.first_unstable_offset == 3 and lg.last_stable_offset == 3
    m7 = _marker(lg, 7, commit=True)                        # 7
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.last_stable_offset == 5                       # 8's transaction is still open
    m8 = _marker(lg, 8, commit=False)                       # 8
    # Until the marker is replicated (below the HW) the transaction is unstable.
    assert lg.last_stable_offset == 5
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.first_unstable_offset is None and lg.last_stable_offset == lg.high_watermark == 9
    assert (m7, m8) == (7, 8)
    # Only the aborted transaction is indexed; its LSO is past the marker (no other open txn).
    assert lg.collect_aborted_txns(0, 9) == [AbortedTxn(8, 5, 8, 9)]
    assert lg.collect_aborted_txns(9, 20) == []
    # The marker batch is Kafka's: control + transactional, one record key (0, type), value (0, epoch).
    data = lg.read_batches(7)
    batches = list(iter_batches(data))
    assert [h.is_control and h.is_transactional for _, h in batches] == [True, True]
    recs = decode_records(data[: batches[0][1].size])
    assert recs[0].key == struct.pack(">hh", 0, 1) and recs[0].value == struct.pack(">hi", 0, 0)


def test_txnindex_entry_records_lso_of_other_open_txn(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg())
    lg.append_as_leader(_txn_batch(1, 0), 0)   # 0..1
    lg.append_as_leader(_txn_batch(2, 0), 0)   # 2..3
    _marker(lg, 2, commit=False)               # 4: LSO then is 0 (producer 1 still open)
    _marker(lg, 1, commit=False)               # 5
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.collect_aborted_txns(0, 6) == [AbortedTxn(2, 2, 4, 0), AbortedTxn(1, 0, 5, 6)]
    path = os.path.join(lg.dir, "00000000000000000000.txnindex")
    assert os.path.getsize(path) == 2 * ENTRY_SIZE
    with open(path, "rb") as f:
        raw = f.read()
    assert struct.unpack_from(">hqqqq", raw, 0) == (0, 2, 2, 4, 0)


def test_marker_checks_epochs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg())
    lg.append_as_leader(_txn_batch(5, 0, epoch=3), 0)
    _marker(lg, 5, commit=True, epoch=3, coordinator_epoch=4)
    with pytest.raises(ProducerStateError) as e:
        _marker(lg, 5, commit=True, epoch=2, coordinator_epoch=4)
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(ProducerStateError) as e:
        _marker(lg, 5, commit=True, epoch=3, coordinator_epoch=3)
    assert e.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    # A marker with a bumped epoch (the coordinator fenced the producer) is accepted.
    _marker(lg, 5, commit=False, epoch=4, coordinator_epoch=4)
    # The old epoch is now fenced for data too.
    with pytest.raises(ProducerStateError) as e:
        lg.append_as_leader(_txn_batch(5, 2, epoch=3), 0)
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_non_transactional_batch_during_txn_is_invalid_txn_state(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg())
    lg.append_as_leader(_txn_batch(9, 0), 0)
    with pytest.raises(ProducerStateError) as e:
        lg.append_as_leader(_txn_batch(9, 2, transactional=False), 0)
    assert e.value.code == ErrorCode.INVALID_TXN_STATE


def test_restart_rebuilds_open_txns_lso_and_txnindex(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path / "t-0")
    lg = Log(d, _cfg())
    lg.append_as_leader(_txn_batch(1, 0, n=20), 0)       # 0..19, rolls the segment later
    for _ in range(80):
        lg.append_as_leader(_plain(3), 0)
    lg.append_as_leader(_txn_batch(2, 0), 0)
    _marker(lg, 1, commit=False)
    lg.append_as_leader(_txn_batch(3, 0), 0)             # left open
    leo = lg.log_end_offset
    lg.update_high_watermark(leo)
    expected = lg.collect_aborted_txns(0, leo)
    assert len(lg.segments) > 1 and expected and expected[0].producer_id == 1
    lso = lg.last_stable_offset
    # Crash: no clean close, and the .txnindex files lost as well; the snapshots stay.
    for name in os.listdir(d):
        if name.endswith(".txnindex"):
            os.unlink(os.path.join(d, name))
    for seg in lg.segments:
        seg.close_handlers()
    lg2 = Log(d, _cfg(), recovery_point=0, high_watermark=leo)
    assert lg2.last_stable_offset == lso
    assert sorted(lg2.producer_state.ongoing_txns) == [2, 3]
    assert lg2.collect_aborted_txns(0, leo) == expected
    # Clean close and reopen: ongoing transactions come from the snapshot.
    lg2.close()
    lg3 = Log(d, _cfg(), had_clean_shutdown=True, high_watermark=leo)
    assert lg3.last_stable_offset == lso and lg3.collect_aborted_txns(0, leo) == expected


def test_truncation_drops_txnindex_entries_and_reopens_txn(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg())
    lg.append_as_leader(_txn_batch(4, 0), 0)   # 0..1
    m = _marker(lg, 4, commit=False)          # 2
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.collect_aborted_txns(0, 3) == [AbortedTxn(4, 0, 2, 3)]
    lg.truncate_to(m)
    assert lg.collect_aborted_txns(0, 3) == []
    assert lg.first_unstable_offset == 0


def test_retention_deletes_txnindex_with_segment(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg())
    lg.append_as_leader(_txn_batch(4, 0), 0)
    _marker(lg, 4, commit=False)
    first = lg.segments[0]
    assert os.path.exists(first.txn_index.path)
    while len(lg.segments) < 3:
        lg.append_as_leader(_plain(20), 0)
    lg.update_high_watermark(lg.log_end_offset)
    lg.maybe_increment_log_start_offset(lg.segments[1].base_offset)
    lg.delete_log_start_offset_breached()
    assert not os.path.exists(first.txn_index.path)


def test_transaction_index_torn_entry_is_dropped(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "00000000000000000000.txnindex")
    idx = TransactionIndex(path)
    assert idx.append(AbortedTxn(1, 0, 5, 6)) and not idx.append(AbortedTxn(1, 0, 5, 6))
    with open(path, "ab") as f:
        f.write(b"\x00" * 10)
    again = TransactionIndex(path)
    assert again.entries == [AbortedTxn(1, 0, 5, 6)] and os.path.getsize(path) == ENTRY_SIZE


def test_abort_marker_segments_after_its_data_is_found(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg())
    lg.append_as_leader(_txn_batch(6, 0), 0)          # 0..1 in the first segment
    while len(lg.segments) < 3:
        lg.append_as_leader(_plain(20), 0)
    m = _marker(lg, 6, commit=False)
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.aborted_txns_for_read(0, lg.last_stable_offset) == [AbortedTxn(6, 0, m, m + 1)]
    # A fetch past the transaction's data does not need it.
    assert lg.aborted_txns_for_read(m + 1, lg.last_stable_offset) == []


# ---------------------------------------------------------------- the log cleaner


def _compact_cfg() -> LogConfig:
    return LogConfig.from_props({"cleanup.policy": "compact", "segment.bytes": 600, "index.interval.bytes": 100,
                                 "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": 1000,
                                 "file.delete.delay.ms": 0})


def _keyed(key: bytes, value: bytes, **kw) -> bytes:  # type: ignore[no-untyped-def]
    return build_batch([Record(0, 0, key, value)], base_timestamp=1000, **kw)


def _clean(lg: Log, now: int = 1000) -> None:
    from kaflet.log.cleaner import Cleaner
    from kaflet.log.cleaner_manager import cleanable_section

    view = lg.cleaner_view()
    assert view is not None
    ltc = cleanable_section(view, None, now)
    Cleaner(10_000).clean(lg, view, ltc.first_dirty, ltc.first_uncleanable, now)


def _values(lg: Log, upto: int) -> list[tuple[int, bytes | None]]:
    out = []
    for seg in lg.segments:
        for pos, h in seg.batches():
            if not h.is_control and h.base_offset < upto:
                out.extend((h.base_offset + r.offset_delta, r.value) for r in decode_records(seg.read_batch(pos, h)))
    return out


def test_cleaner_removes_aborted_data_and_keeps_lso_bound(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path / "c-0")
    lg = Log(d, _compact_cfg(), now_ms=lambda: 1000)
    lg.append_as_leader(_keyed(b"k0", b"committed-before"), 0)                         # 0
    lg.append_as_leader(_keyed(b"k0", b"aborted", producer_id=3, producer_epoch=0, base_sequence=0,
                               is_transactional=True), 0)                              # 1
    lg.append_as_leader(_keyed(b"ka", b"aborted-2", producer_id=3, producer_epoch=0, base_sequence=1,
                               is_transactional=True), 0)                              # 2
    abort = _marker(lg, 3, commit=False)                                                # 3
    lg.append_as_leader(_keyed(b"kc", b"committed-txn", producer_id=3, producer_epoch=0, base_sequence=2,
                               is_transactional=True), 0)                              # 4
    commit = _marker(lg, 3, commit=True)                                                # 5
    for i in range(30):
        lg.append_as_leader(_keyed(b"k%d" % (1 + i % 3), b"v%d" % i), 0)
    open_first = lg.log_end_offset
    lg.append_as_leader(_keyed(b"k1", b"open", producer_id=4, producer_epoch=0, base_sequence=0,
                               is_transactional=True), 0)
    for i in range(30):
        lg.append_as_leader(_keyed(b"k%d" % (1 + i % 3), b"w%d" % i), 0)
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.last_stable_offset == open_first
    before = _values(lg, lg.log_end_offset)
    _clean(lg)
    after = _values(lg, lg.log_end_offset)
    # Undecided data and everything after it is untouched.
    assert [v for v in after if v[0] >= open_first] == [v for v in before if v[0] >= open_first]
    below = dict(v for v in after if v[0] < open_first)
    # The aborted records are gone and did not shadow the committed k0; committed txn data stays.
    assert below[0] == b"committed-before" and 1 not in below and 2 not in below
    assert below[4] == b"committed-txn"
    assert len(below) < open_first - 3  # keys were compacted too
    # Both markers stay (their transactions had batches in the pass) and the abort keeps its entry.
    markers = [h.base_offset for seg in lg.segments for _, h in seg.batches() if h.is_control]
    assert markers == [abort, commit]
    assert lg.collect_aborted_txns(0, lg.last_stable_offset) == [AbortedTxn(3, 1, abort, abort + 1)]
    # A restart reads the cleaned segment's index back.
    lg.close()
    lg2 = Log(d, _compact_cfg(), had_clean_shutdown=True, high_watermark=10_000, now_ms=lambda: 1000)
    assert lg2.collect_aborted_txns(0, lg2.last_stable_offset) == [AbortedTxn(3, 1, abort, abort + 1)]


def test_cleaner_drops_marker_of_aborted_txn_without_data_after_horizon(tmp_path) -> None:  # type: ignore[no-untyped-def]
    now = [1000]
    lg = Log(str(tmp_path / "c-0"), _compact_cfg(), now_ms=lambda: now[0])
    lg.append_as_leader(_keyed(b"x", b"aborted", producer_id=5, producer_epoch=0, base_sequence=0,
                               is_transactional=True), 0)                              # 0
    _marker(lg, 5, commit=False)                                                        # 1
    lg.append_as_leader(_keyed(b"y", b"p", producer_id=5, producer_epoch=0, base_sequence=1), 0)  # 2, last of 5
    for i in range(40):
        lg.append_as_leader(_keyed(b"k%d" % (i % 3), b"v%d" % i), 0)
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    _clean(lg, now=1000)                # the aborted batch goes; the marker still saw it: kept
    assert [h.base_offset for seg in lg.segments for _, h in seg.batches() if h.is_control] == [1]
    assert lg.collect_aborted_txns(0, lg.last_stable_offset)[0].last_offset == 1
    _clean(lg, now=1000)                # no batch of it left: the marker gets a delete horizon
    _clean(lg, now=5000)                # past delete.retention.ms: the marker and its entry go
    assert [h.base_offset for seg in lg.segments for _, h in seg.batches() if h.is_control] == []
    assert lg.collect_aborted_txns(0, lg.last_stable_offset) == []
    assert (2, b"p") in _values(lg, lg.log_end_offset)


def test_idle_producers_expire_unless_a_transaction_is_open(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = Log(str(tmp_path / "t-0"), _cfg())
    lg.append_as_leader(_txn_batch(7, 0, transactional=False), 0)  # idempotent, last write at 1000
    lg.append_as_leader(_txn_batch(8, 0), 0)                       # an open transaction, also at 1000
    expiration = 5000
    assert lg.remove_expired_producers(expiration, now_ms=1000 + expiration - 1) == 0
    assert lg.remove_expired_producers(expiration, now_ms=1000 + expiration) == 1
    assert sorted(lg.producer_state.producers) == [8]
    # Forgotten: its next batch is taken as from an unknown producer (KIP-360), at any sequence.
    lg.append_as_leader(_txn_batch(7, 40, transactional=False), 0)
    assert lg.producer_state.producers[7].last_seq == 41
    _marker(lg, 8, commit=True)  # the marker's time (2000) is 8's last write now
    assert lg.remove_expired_producers(expiration, now_ms=2000 + expiration) == 2
    assert lg.producer_state.producers == {}
    # What the next snapshot holds: a reopened log does not bring them back.
    lg.close()
    lg = Log(str(tmp_path / "t-0"), _cfg())
    assert lg.producer_state.producers == {}
    lg.close()
