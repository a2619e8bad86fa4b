"""``Log.append_coordinator_records``: a coordinator's own batch built at the log end must be
what ``append_as_leader`` makes of the same records, and refused where that refuses them."""

from __future__ import annotations

from pathlib import Path

import pytest

from kaflet.coordinator.group.store import OffsetsTopicStore
from kaflet.log.append_origin import AppendOrigin
from kaflet.log.config import LogConfig
from kaflet.log.log import Log
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.records import Record, RecordError, build_batch, decode_records, iter_batches
from kaflet.replication.partition import Partition

NOW = 1_700_000_000_000
RECORDS = [Record(0, 0, b"key-a", b"value-a"), Record(1, 0, b"key-b", None)]


def _bytes(log: Log) -> bytes:
    return b"".join(r.read_bytes() for r in log.read(0, 1 << 20).regions)


def _both(tmp_path: Path, props: dict[str, object]) -> tuple[Log, Log]:
    cfg = LogConfig.from_props(props)
    return Log(str(tmp_path / "generic-0"), cfg), Log(str(tmp_path / "built-0"), cfg)


@pytest.mark.parametrize("props", [{}, {"cleanup.policy": "compact"}, {"message.timestamp.type": "LogAppendTime"},
                                   {"message.timestamp.before.max.ms": 1_000}])
def test_the_built_batch_is_the_validated_one(tmp_path: Path, props: dict[str, object]) -> None:
    generic, built = _both(tmp_path, props)
    for _ in range(2):  # the second lands at offset 2 with the same epoch
        a = generic.append_as_leader(build_batch(RECORDS, base_timestamp=NOW), 7, NOW, AppendOrigin.COORDINATOR)
        b = built.append_coordinator_records(RECORDS, 7, NOW)
        assert b == a
    assert _bytes(built) == _bytes(generic)
    assert built.leader_epoch_cache.latest_epoch == generic.leader_epoch_cache.latest_epoch == 7
    generic.close()
    built.close()


def test_the_topics_compression_type_is_applied(tmp_path: Path) -> None:
    generic, built = _both(tmp_path, {"compression.type": "gzip"})
    generic.append_as_leader(build_batch(RECORDS, base_timestamp=NOW), 3, NOW, AppendOrigin.COORDINATOR)
    built.append_coordinator_records(RECORDS, 3, NOW)
    (_, g), = list(iter_batches(_bytes(generic)))
    (_, b), = list(iter_batches(_bytes(built)))
    # gzip stamps its own time into the stream, so compare what it holds.
    assert b._replace(crc=0, length=0) == g._replace(crc=0, length=0)
    assert b.compression == 1
    assert decode_records(_bytes(built)) == decode_records(_bytes(generic))
    generic.close()
    built.close()


@pytest.mark.parametrize(("props", "records", "code"), [
    ({"max.message.bytes": 100}, [Record(0, 0, b"k", b"v" * 200)], ErrorCode.MESSAGE_TOO_LARGE),
    ({"cleanup.policy": "compact"}, [Record(0, 0, None, b"v")], ErrorCode.INVALID_RECORD),
    ({}, [], ErrorCode.INVALID_RECORD),
])
def test_refused_as_append_as_leader_refuses(tmp_path: Path, props: dict[str, object], records: list[Record],
                                            code: ErrorCode) -> None:
    generic, built = _both(tmp_path, props)
    with pytest.raises(RecordError) as validated:
        generic.append_as_leader(build_batch(records, base_timestamp=NOW), 0, NOW, AppendOrigin.COORDINATOR)
    with pytest.raises(RecordError) as direct:
        built.append_coordinator_records(records, 0, NOW)
    assert direct.value.code == validated.value.code == code
    assert built.log_end_offset == 0
    generic.close()
    built.close()


async def test_store_answers_after_the_follower_has_it(tmp_path: Path) -> None:
    # acks=all as before: with a follower in the ISR the write is answered once the high
    # watermark covers it, not when it is in the leader's log.
    log = Log(str(tmp_path / "__transaction_state-0"), LogConfig.from_props({"cleanup.policy": "compact"}))
    part = Partition("__transaction_state", 0, "AAAAAAAAAAAAAAAAAAAAAA", log, broker_id=1)
    part.make_leader(1, [1, 2], [1, 2])
    store = OffsetsTopicStore(lambda topic, index: part, 200, topic="__transaction_state")
    assert await store.append(0, [(b"k", b"v")]) == ErrorCode.REQUEST_TIMED_OUT
    assert log.log_end_offset == 1
    part.make_leader(2, [1], [1])  # reassigned to broker 1 alone: the next write is answered at once
    assert await store.append(0, [(b"k", b"w")]) == ErrorCode.NONE
    assert log.high_watermark == 2
    log.close()
