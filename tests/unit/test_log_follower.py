"""Log.append_as_follower: the leader's batches are stored byte for byte, with their offsets."""

from __future__ import annotations

from pathlib import Path

import pytest

from kaflet.log.config import LogConfig
from kaflet.log.errors import LogError, UnexpectedAppendOffsetError
from kaflet.log.log import Log
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.records import Record, RecordError, build_batch


def _cfg(**props: str) -> LogConfig:
    return LogConfig.from_props({"segment.bytes": "4000", "index.interval.bytes": "300", **props})


def _leader_batches(leader: Log, count: int, epoch: int, producer_id: int = -1) -> None:
    for i in range(count):
        batch = build_batch([Record(j, j, b"k%d" % j, b"v" * 40) for j in range(3)], base_timestamp=1000 + i,
                            producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                            base_sequence=3 * i if producer_id >= 0 else -1)
        leader.append_as_leader(batch, leader_epoch=epoch, now_ms=5000)


def _replicate(leader: Log, follower: Log, max_bytes: int) -> None:
    """What a fetcher does: read from the follower's end, append what came back."""
    while (start := follower.log_end_offset) < leader.log_end_offset:
        data = leader.read_batches(start, max_bytes)
        result = follower.append_as_follower(memoryview(data))
        assert result is not None and result.first_offset == start
        assert follower.log_end_offset == result.last_offset + 1 and 0 < result.valid_bytes <= len(data)


def _all_bytes(lg: Log) -> bytes:
    return b"".join(lg.read_batches(seg.base_offset) for seg in lg.segments)


def test_follower_stores_the_leaders_bytes_offsets_and_epochs(tmp_path: Path) -> None:
    leader = Log(str(tmp_path / "leader" / "t-0"), _cfg())
    _leader_batches(leader, 10, epoch=3, producer_id=77)
    _leader_batches(leader, 10, epoch=5)
    follower = Log(str(tmp_path / "follower" / "t-0"), _cfg())
    _replicate(leader, follower, 700)  # reads end mid-batch: only whole batches are appended
    assert _all_bytes(follower) == _all_bytes(leader)
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries == [(3, 0), (5, 30)]
    assert follower.producer_state.producers[77].last_seq == leader.producer_state.producers[77].last_seq == 29
    assert len(follower.segments) > 1  # rolled like any log
    # Appends leave the high watermark to the partition.
    assert follower.high_watermark == 0


def test_follower_append_survives_restart_and_recovery(tmp_path: Path) -> None:
    leader = Log(str(tmp_path / "leader" / "t-0"), _cfg())
    _leader_batches(leader, 20, epoch=2)
    follower = Log(str(tmp_path / "follower" / "t-0"), _cfg())
    _replicate(leader, follower, 1 << 20)
    follower.close()
    again = Log(str(tmp_path / "follower" / "t-0"), _cfg(), had_clean_shutdown=False)
    assert again.log_end_offset == 60 and _all_bytes(again) == _all_bytes(leader)
    assert again.leader_epoch_cache.entries == [(2, 0)]


def test_partial_trailing_batch_is_left_out(tmp_path: Path) -> None:
    leader = Log(str(tmp_path / "leader" / "t-0"), _cfg())
    _leader_batches(leader, 3, epoch=0)
    data = leader.read_batches(0)
    follower = Log(str(tmp_path / "follower" / "t-0"), _cfg())
    one = len(data) // 3
    result = follower.append_as_follower(memoryview(data)[: 2 * one + 30])
    assert result is not None and (result.last_offset, result.valid_bytes) == (5, 2 * one)
    assert follower.append_as_follower(memoryview(data)[2 * one : 2 * one + 20]) is None
    assert follower.log_end_offset == 6


def test_offset_gaps_of_a_compacted_leader_are_kept(tmp_path: Path) -> None:
    follower = Log(str(tmp_path / "t-0"), _cfg())
    a = build_batch([Record(0, 0, b"a", b"1")], base_offset=0, base_timestamp=1000, partition_leader_epoch=1)
    b = build_batch([Record(0, 0, b"b", b"2")], base_offset=40, base_timestamp=1000, partition_leader_epoch=1)
    follower.append_as_follower(a + b)
    assert follower.log_end_offset == 41
    assert follower.read_batches(40) == b


def test_corrupt_or_backward_batches_are_refused_whole(tmp_path: Path) -> None:
    follower = Log(str(tmp_path / "t-0"), _cfg())
    good = build_batch([Record(0, 0, b"a", b"1")], base_offset=0, base_timestamp=1000, partition_leader_epoch=1)
    bad = bytearray(build_batch([Record(0, 0, b"b", b"2")], base_offset=1, base_timestamp=1000))
    bad[-1] ^= 0xFF
    with pytest.raises(RecordError) as exc:
        follower.append_as_follower(good + bytes(bad))
    assert exc.value.code == ErrorCode.CORRUPT_MESSAGE
    assert follower.log_end_offset == 0  # nothing of the set was written
    short = bytearray(good)
    short[8:12] = (10).to_bytes(4, "big")
    with pytest.raises(RecordError):
        follower.append_as_follower(bytes(short))
    same = build_batch([Record(0, 0, b"b", b"2")], base_offset=0, base_timestamp=1000)
    with pytest.raises(LogError, match="Out of order offsets"):
        follower.append_as_follower(good + same)
    follower.append_as_follower(good)
    with pytest.raises(UnexpectedAppendOffsetError) as unexpected:
        follower.append_as_follower(good)
    assert (unexpected.value.first_offset, unexpected.value.last_offset) == (0, 0)
    assert follower.log_end_offset == 1


def test_follower_append_reports_flush_due(tmp_path: Path) -> None:
    follower = Log(str(tmp_path / "t-0"), _cfg(**{"flush.messages": "4"}))
    batch = build_batch([Record(j, j, None, b"v") for j in range(3)], base_offset=0, base_timestamp=1000)
    first = follower.append_as_follower(batch)
    assert first is not None and not first.flush_needed
    second = follower.append_as_follower(build_batch([Record(j, j, None, b"v") for j in range(3)], base_offset=3,
                                                     base_timestamp=1000))
    assert second is not None and second.flush_needed
