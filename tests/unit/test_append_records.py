"""The write path (kaflet/replication/append.py) over real logs: what each partition answers,
and what ``PendingAppends.wait`` waits for (flush.messages, acks=all)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from kaflet.log.config import LogConfig
from kaflet.log.log import Log
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.legacy_records import LegacyRecord, encode_message_set
from kaflet.protocol.records import Record, build_batch
from kaflet.replication.append import AppendEntry, PartitionLookup, append_records
from kaflet.replication.partition import Partition


def _batch(n: int = 2) -> memoryview:
    return memoryview(build_batch([Record(i, 0, b"k", b"v%d" % i) for i in range(n)]))


@pytest.fixture
def partitions(tmp_path: Path) -> Iterator[dict[tuple[str, int], Partition]]:
    out: dict[tuple[str, int], Partition] = {}
    for topic, props in (("t", {}), ("flushed", {"flush.messages": "1"}), ("__consumer_offsets", {})):
        lg = Log(str(tmp_path / f"{topic}-0"), LogConfig.from_props(props))
        part = Partition(topic, 0, "AAAAAAAAAAAAAAAAAAAAAA", lg, broker_id=1)
        part.make_leader(1, [1, 2], [1, 2])
        out[(topic, 0)] = part
    yield out
    for part in out.values():
        part.log.close()


def _lookup(parts: dict[tuple[str, int], Partition]) -> PartitionLookup:
    return lambda topic, index: parts.get((topic, index))


async def test_each_partition_gets_its_own_answer(partitions: dict[tuple[str, int], Partition]) -> None:
    entries = [AppendEntry("t", 0, _batch(3)), AppendEntry("missing", 0, _batch()),
               AppendEntry("__consumer_offsets", 0, _batch()), AppendEntry("t", 0, memoryview(b"\0" * 70))]
    pending = append_records(_lookup(partitions), entries, 1)
    ok, missing, internal, corrupt = pending.results
    assert (ok.error, ok.base_offset, ok.record_count) == (ErrorCode.NONE, 0, 3)
    assert missing.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert internal.error == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert internal.message == "Cannot append to internal topic __consumer_offsets"
    assert corrupt.error == ErrorCode.INVALID_RECORD and corrupt.log_start_offset == 0
    assert not pending.must_wait  # acks=1: answered at once
    # The coordinators may write their topics.
    (res,) = append_records(_lookup(partitions), [AppendEntry("__consumer_offsets", 0, _batch())], 1,
                            internal_topics_allowed=True).results
    assert res.error == ErrorCode.NONE


async def test_invalid_acks_refuse_every_partition(partitions: dict[tuple[str, int], Partition]) -> None:
    pending = append_records(_lookup(partitions), [AppendEntry("t", 0, _batch()), AppendEntry("x", 0, _batch())], 2)
    assert [r.error for r in pending.results] == [ErrorCode.INVALID_REQUIRED_ACKS] * 2
    assert partitions[("t", 0)].log.log_end_offset == 0


async def test_message_sets_are_converted_on_append(partitions: dict[tuple[str, int], Partition]) -> None:
    legacy = encode_message_set([LegacyRecord(0, 1000, b"a", b"1"), LegacyRecord(1, 1001, b"b", b"2")], 1)
    (res,) = append_records(_lookup(partitions), [AppendEntry("t", 0, memoryview(legacy), legacy=True)], 1).results
    assert (res.error, res.converted, res.record_count) == (ErrorCode.NONE, 2, 2)


async def test_acks_all_waits_for_the_follower_and_times_out_without_it(
        partitions: dict[tuple[str, int], Partition]) -> None:
    part = partitions[("t", 0)]
    pending = append_records(_lookup(partitions), [AppendEntry("t", 0, _batch(2))], -1)
    assert pending.must_wait
    waiting = asyncio.create_task(pending.wait(5000))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    part.update_follower_fetch_state(2, 2, 0, 0)  # broker 2 now holds offsets 0 and 1
    (res,) = await asyncio.wait_for(waiting, 5)
    assert res.error == ErrorCode.NONE and part.log.high_watermark == 2
    (res,) = await append_records(_lookup(partitions), [AppendEntry("t", 0, _batch())], -1).wait(50)
    assert res.error == ErrorCode.REQUEST_TIMED_OUT


async def test_flush_messages_is_made_durable_before_the_answer(partitions: dict[tuple[str, int], Partition]) -> None:
    log = partitions[("flushed", 0)].log
    pending = append_records(_lookup(partitions), [AppendEntry("flushed", 0, _batch(2))], 1)
    assert pending.must_wait and log.recovery_point == 0
    (res,) = await pending.wait(1000)
    assert res.error == ErrorCode.NONE and log.recovery_point == 2
