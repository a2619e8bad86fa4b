"""Start-up recovery of a segment's derived files: a missing or corrupt ``.index``,
``.timeindex`` or ``.txnindex`` is rebuilt from the log (Kafka's LogLoader / LogSegment.recover),
and a crash at any step of the cleaner's swap or of retention's renames leaves a log that loads
with nothing lost and the aborted transactions still indexed."""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from kaflet.log.config import LogConfig
from kaflet.log.errors import CorruptIndexError
from kaflet.log.log import Log
from kaflet.log.segment import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX, LogSegment
from kaflet.log.transaction_index import ENTRY_SIZE, AbortedTxn, TransactionIndex
from kaflet.protocol.records import Record, build_batch, decode_records
from tests.unit.test_log_transactions import _clean, _marker

TS0 = 1_700_000_000_000


def _cfg() -> LogConfig:
    return LogConfig.from_props({"segment.bytes": 500, "index.interval.bytes": 100, "file.delete.delay.ms": 0})


def _batch(key: bytes, value: bytes, ts: int, pid: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    return build_batch([Record(0, 0, key, value)], base_timestamp=ts, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                       base_sequence=seq, is_transactional=txn)


def _txn_log(d: str, cfg: LogConfig, now: Callable[[], int] | None = None) -> Log:
    """Transactions over many segments: producer 1 aborts a transaction whose data starts in the
    first segment and whose marker comes segments later, producer 2 commits, producer 3 aborts
    while 2's next transaction is open (an LSO below its data), and plain records in between,
    each record with its own timestamp.  Values say what they are ("aborted-..." must never be
    read committed)."""
    lg = Log(d, cfg, now_ms=now) if now else Log(d, cfg)
    seqs: dict[int, int] = {}
    ts = [TS0]

    def put(key: bytes, value: bytes, pid: int = -1) -> None:
        seq = seqs.get(pid, 0)
        if pid >= 0:
            seqs[pid] = seq + 1
        ts[0] += 10
        lg.append_as_leader(_batch(key, value, ts[0], pid, seq if pid >= 0 else -1, pid >= 0), 0)

    put(b"a", b"aborted-1-0", 1)
    for i in range(12):
        put(b"k%d" % (i % 4), b"plain-%d" % i)
    put(b"b", b"committed-2-0", 2)
    put(b"a", b"aborted-1-1", 1)
    _marker(lg, 2, commit=True)
    for i in range(12, 24):
        put(b"k%d" % (i % 4), b"plain-%d" % i)
    _marker(lg, 1, commit=False)
    put(b"c", b"committed-2-1", 2)          # 2's next transaction is open ...
    put(b"d", b"aborted-3-0", 3)
    _marker(lg, 3, commit=False)            # ... so this entry's LSO is 2's first offset
    put(b"k0", b"plain-late", -1)
    _marker(lg, 2, commit=True)
    for i in range(24, 40):
        put(b"k%d" % (i % 4), b"plain-%d" % i)
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    return lg


def _built(tmp_path: Path) -> tuple[str, Log, int]:
    """``_txn_log`` in ``tmp_path/t-0``: its directory, the log and its end offset."""
    d = str(tmp_path / "t-0")
    lg = _txn_log(d, _cfg())
    return d, lg, lg.log_end_offset


def _visible(lg: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a read_committed consumer reads: records below the LSO, less those of aborted
    transactions as the log's .txnindex entries describe them."""
    lso = lg.last_stable_offset
    aborted = lg.collect_aborted_txns(lg.log_start_offset, lso)
    out = []
    for seg in lg.segments:
        for pos, h in seg.batches():
            if h.is_control or h.base_offset >= lso:
                continue
            if h.is_transactional and any(a.producer_id == h.producer_id and a.first_offset <= h.base_offset
                                          <= a.last_offset for a in aborted):
                continue
            out.extend((h.base_offset + r.offset_delta, r.key, r.value)
                       for r in decode_records(seg.read_batch(pos, h)))
    return out


def _abort_segments(lg: Log) -> list[LogSegment]:
    return [s for s in lg.segments if s.txn_index.entries]


def _crash(lg: Log) -> None:
    """Drop the log as a SIGKILL would: no snapshot, no trim, files left as they are."""
    for seg in lg.segments:
        seg.close_handlers()


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# ---------------------------------------------------------------- the .txnindex


def _damage_txn_index(path: str, how: str) -> None:
    data = _read(path)
    if how == "missing":
        os.unlink(path)
    elif how == "torn":
        with open(path, "wb") as f:
            f.write(data[:-5])
    elif how == "garbage":
        with open(path, "wb") as f:
            f.write(os.urandom(len(data)))
    elif how == "out-of-segment":  # a whole, well-formed entry whose marker is in another segment
        with open(path, "wb") as f:
            f.write(data + struct.pack(">hqqqq", 0, 9, 0, 10**9, 10**9 + 1))


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("how", ["missing", "torn", "garbage", "out-of-segment"])
def test_damaged_txn_index_of_an_old_segment_is_rebuilt(tmp_path: Path, how: str, clean: bool) -> None:
    d, lg, leo = _built(tmp_path)
    expected = lg.collect_aborted_txns(0, leo)
    visible = _visible(lg)
    assert [a.producer_id for a in expected] == [1, 3] and expected[1].last_stable_offset < expected[1].first_offset
    assert not any(v and v.startswith(b"aborted") for _, _, v in visible)
    files = {s.base_offset: _read(s.txn_index.path) for s in _abort_segments(lg)}
    # The damaged indexes are before the newest producer snapshot: replaying from it alone
    # cannot bring their entries back.
    assert max(lg.producer_state.snapshot_offsets()) > max(files)
    if clean:
        lg.close()
    else:
        _crash(lg)
    for base in files:
        _damage_txn_index(os.path.join(d, f"{base:020d}.txnindex"), how)
    lg2 = Log(d, _cfg(), had_clean_shutdown=clean, recovery_point=leo, high_watermark=leo)
    assert lg2.collect_aborted_txns(0, leo) == expected
    assert _visible(lg2) == visible
    assert {s.base_offset: _read(s.txn_index.path) for s in _abort_segments(lg2)} == files
    # Every segment has its file again (empty when it has no abort), so the next start reads none.
    assert all(os.path.exists(s.txn_index.path) for s in lg2.segments)
    lg2.close()


def test_unclean_start_restores_entries_lost_above_the_recovery_point(tmp_path: Path) -> None:
    """A power loss can keep a segment's batches and lose its .txnindex writes (the file stays,
    empty or short). Above the recovery point nothing was fsync'd, so an unclean start replays
    producer state from there and appends the entries that are missing."""
    d, lg, leo = _built(tmp_path)
    expected = lg.collect_aborted_txns(0, leo)
    files = {s.base_offset: _read(s.txn_index.path) for s in _abort_segments(lg)}
    first = min(files)
    _crash(lg)
    for base in files:
        with open(os.path.join(d, f"{base:020d}.txnindex"), "wb"):
            pass
    lg2 = Log(d, _cfg(), recovery_point=first, high_watermark=leo)
    assert lg2.collect_aborted_txns(0, leo) == expected
    assert {s.base_offset: _read(s.txn_index.path) for s in _abort_segments(lg2)} == files
    lg2.close()


def test_segments_without_txn_index_files_get_empty_ones_once(tmp_path: Path) -> None:
    """A log written by Kafka (which creates a .txnindex only with its first entry): the
    segments without one are read once; those with no abort get an empty file."""
    d = str(tmp_path / "t-0")
    lg = _txn_log(d, _cfg())
    leo = lg.log_end_offset
    expected = lg.collect_aborted_txns(0, leo)
    lg.close()
    with_entries = set()
    for name in os.listdir(d):
        if name.endswith(".txnindex"):
            if os.path.getsize(os.path.join(d, name)):
                with_entries.add(name)
            else:
                os.unlink(os.path.join(d, name))
    lg2 = Log(d, _cfg(), had_clean_shutdown=True, high_watermark=leo)
    assert lg2.collect_aborted_txns(0, leo) == expected
    sizes = {os.path.basename(s.txn_index.path): os.path.getsize(s.txn_index.path) for s in lg2.segments}
    assert {n for n, size in sizes.items() if size} == with_entries and len(sizes) == len(lg2.segments)
    lg2.close()


def test_new_segments_get_an_empty_txn_index(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), _cfg())
    for i in range(40):
        lg.append_as_leader(_batch(b"k", b"v%d" % i, TS0 + i), 0)
    assert len(lg.segments) > 2
    assert all(os.path.getsize(s.txn_index.path) == 0 for s in lg.segments)
    lg.truncate_fully_and_start_at(100)
    assert os.path.getsize(lg.active_segment.txn_index.path) == 0
    lg.close()


def test_txn_index_sanity_check(tmp_path: Path) -> None:
    path = str(tmp_path / "00000000000000000005.txnindex")
    idx = TransactionIndex(path)
    assert idx.sanity_check(0, None) is False  # missing: not corrupt (the loader decides)
    idx.ensure_file()
    assert idx.sanity_check(0, None) is True
    idx.append(AbortedTxn(1, 3, 10, 11))
    idx.append(AbortedTxn(2, 0, 12, 4))
    assert TransactionIndex(path).sanity_check(5, 20)
    for lo, hi in ((11, None), (0, 12)):  # an entry before the base, or at the next base
        with pytest.raises(CorruptIndexError):
            TransactionIndex(path).sanity_check(lo, hi)
    with open(path, "ab") as f:
        f.write(b"\x00" * (ENTRY_SIZE - 1))
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path).sanity_check(0, None)


# ---------------------------------------------------------------- offset and time indexes


def _lookups(lg: Log) -> tuple[list[tuple[int, int] | None], list[int]]:
    """ListOffsets by time for every 7th timestamp (and past the last), and each segment's
    largest timestamp (retention's)."""
    by_time = []
    for ts in list(range(TS0 - 5, TS0 + 1000, 7)) + [TS0 + 10**6]:
        r = lg.offset_for_timestamp(ts)
        by_time.append(None if r is None else (r.offset, r.timestamp))
    return by_time, [s.largest_timestamp for s in lg.segments]


def _reads(lg: Log) -> list[bytes]:
    return [lg.read_batches(o, 300) for o in range(lg.log_start_offset, lg.log_end_offset, 3)]


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("damage", ["missing", "garbage", "misaligned", "truncated-offset-index"])
def test_missing_or_corrupt_offset_and_time_indexes_are_rebuilt(tmp_path: Path, damage: str, clean: bool) -> None:
    d, lg, leo = _built(tmp_path)
    lookups, reads = _lookups(lg), _reads(lg)
    assert lookups[0][0] is not None and lookups[0][0][0] == 0
    inactive = lg.segments[:-1]
    assert len(inactive) >= 4
    originals = {p: _read(p) for s in inactive for p in (s.offset_index.path, s.time_index.path)}
    if clean:
        lg.close()
    else:
        _crash(lg)
    for seg in inactive[:3]:
        for path in (seg.offset_index.path, seg.time_index.path):
            data = _read(path)
            if damage == "missing":
                os.unlink(path)
            elif damage == "garbage":
                with open(path, "wb") as f:
                    f.write(os.urandom(len(data)))
            elif damage == "misaligned":
                with open(path, "ab") as f:
                    f.write(b"\x01\x02\x03")
            elif path.endswith(".index"):  # half the entries: still a consistent offset index
                with open(path, "wb") as f:
                    f.write(data[: len(data) // 16 * 8])
    # Unclean: the recovery point says every segment is flushed, so only the sanity checks
    # stand between a bad index and the readers.
    lg2 = Log(d, _cfg(), had_clean_shutdown=clean, recovery_point=leo, high_watermark=leo)
    assert _lookups(lg2) == lookups
    assert _reads(lg2) == reads
    if damage != "truncated-offset-index":  # a consistent index stays as it is
        assert {p: _read(p) for p in originals} == originals
    lg2.close()


# ---------------------------------------------------------------- crash in the middle of a rename


def _record_renames(monkeypatch: pytest.MonkeyPatch, run: Callable[[], object]) -> list[tuple[str, str]]:
    """Run ``run`` and return the renames it made, as (from, to) file names."""
    renames: list[tuple[str, str]] = []
    real = os.rename

    def recording(a: str, b: str) -> None:
        real(a, b)
        renames.append((os.path.basename(a), os.path.basename(b)))

    monkeypatch.setattr(os, "rename", recording)
    try:
        run()
    finally:
        monkeypatch.setattr(os, "rename", real)
    return renames


def _states(pre: str, renames: list[tuple[str, str]], into: Path) -> list[tuple[int, str]]:
    """One directory per prefix of ``renames`` applied to a copy of ``pre``: every on-disk state
    a crash between two renames leaves."""
    out = []
    for k in range(len(renames) + 1):
        d = str(into / f"state{k}" / "c-0")
        shutil.copytree(pre, d)
        for a, b in renames[:k]:
            os.rename(os.path.join(d, a), os.path.join(d, b))
        out.append((k, d))
    return out


def _latest_by_key(rows: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes | None, bytes | None]:
    return {k: v for _, k, v in rows}


def _compact_txn_log(d: str) -> Log:
    cfg = LogConfig.from_props({"cleanup.policy": "compact", "segment.bytes": 700, "index.interval.bytes": 100,
                                "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": 1000,
                                "file.delete.delay.ms": 0})
    return _txn_log(d, cfg, now=lambda: 1000)


def test_crash_at_every_step_of_the_cleaner_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two cleaner passes (the first swaps one segment at a time, the second merges the cleaned
    segments, the aborted transactions' entries with them); for every swap of both, every
    on-disk state a crash between two of its renames leaves must load with the records, the
    committed view and no temporary file left."""
    d = str(tmp_path / "live" / "c-0")
    lg = _compact_txn_log(d)
    leo, cfg = lg.log_end_offset, lg.config
    latest = _latest_by_key(_visible(lg))
    real_replace = Log.replace_with_cleaned
    swaps: list[tuple[str, list[tuple[str, str]], int]] = []

    def replace(self: Log, old: list[LogSegment], base: int, cleaned: dict[str, str]) -> bool:
        pre = str(tmp_path / f"pre-swap-{len(swaps)}")
        shutil.copytree(self.dir, pre)  # the .cleaned files are complete: the swap is next
        result: list[bool] = []
        renames = _record_renames(monkeypatch, lambda: result.append(real_replace(self, old, base, cleaned)))
        swaps.append((pre, renames, len(old)))
        return result[0]

    monkeypatch.setattr(Log, "replace_with_cleaned", replace)
    _clean(lg)
    _clean(lg)
    monkeypatch.undo()
    assert _latest_by_key(_visible(lg)) == latest
    lg.close()
    # The swap as it is done: .cleaned -> .swap (the .log last), old segments -> .deleted,
    # .swap -> final; every cleaned segment has its .txnindex, some of them with entries.
    assert any(n > 1 for _, _, n in swaps)
    with_entries = [pre for pre, renames, _ in swaps
                    if any(os.path.getsize(os.path.join(pre, a)) for a, _ in renames
                           if a.endswith(".txnindex" + CLEANED_SUFFIX))]
    assert with_entries
    for i, (pre, renames, _) in enumerate(swaps):
        targets = [b for _, b in renames]
        assert targets[3].endswith(".log" + SWAP_SUFFIX) and targets[4].endswith(DELETED_SUFFIX)
        assert renames[0][0].endswith(".index" + CLEANED_SUFFIX) and renames[2][0].endswith(".txnindex" + CLEANED_SUFFIX)
        for k, state in _states(pre, renames, tmp_path / f"swap{i}"):
            lg2 = Log(state, cfg, recovery_point=0, high_watermark=leo, now_ms=lambda: 1000)
            rows = _visible(lg2)
            assert _latest_by_key(rows) == latest, f"swap {i} state {k}"
            assert not any(v and v.startswith(b"aborted") for _, _, v in rows), f"swap {i} state {k}"
            assert lg2.log_end_offset == leo
            names = os.listdir(state)
            assert not any(n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)) for n in names), (i, k, names)
            bases = [s.base_offset for s in lg2.segments]
            assert bases == sorted(set(bases))
            assert all(os.path.exists(s.txn_index.path) for s in lg2.segments)
            # And the log cleans again from there.
            _clean(lg2)
            assert _latest_by_key(_visible(lg2)) == latest
            lg2.close()


def test_crash_at_every_step_of_retention(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = str(tmp_path / "live" / "t-0")
    lg = _txn_log(d, _cfg())
    leo = lg.log_end_offset
    before = _visible(lg)
    pre = str(tmp_path / "pre-retention")
    shutil.copytree(d, pre)
    # Retention of the segments below producer 3's marker (producer 1's marker goes with them).
    target = next(s for s in lg.segments if s.base_offset > lg.collect_aborted_txns(0, leo)[1].last_offset).base_offset
    lg.maybe_increment_log_start_offset(target)
    renames = _record_renames(monkeypatch, lg.delete_log_start_offset_breached)
    assert len(renames) >= 8 and all(b.endswith(DELETED_SUFFIX) for _, b in renames)
    _crash(lg)
    for k, state in _states(pre, renames, tmp_path):
        lg2 = Log(state, _cfg(), recovery_point=0, high_watermark=leo)
        start = lg2.log_start_offset
        assert start == lg2.segments[0].base_offset <= target
        assert _visible(lg2) == [r for r in before if r[0] >= start], f"state {k}"
        assert lg2.log_end_offset == leo
        assert not any(n.endswith(DELETED_SUFFIX) for n in os.listdir(state))
        lg2.close()
