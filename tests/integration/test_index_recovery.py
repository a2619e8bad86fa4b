"""A broker SIGKILLed after transactional traffic with aborts, whose index files are then
deleted or damaged (``.index``, ``.timeindex`` and ``.txnindex``), rebuilds them at restart:
read_committed consumers still skip the aborted records and ListOffsets by time still finds
each record."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from kaflet.log.checkpoints import RECOVERY_POINT_CHECKPOINT, read_offset_checkpoint
from tests.support.broker_process import running_broker
from tests.support.topics import create_topic
from tests.support.transactions import consume_all

OVERRIDES = {"log.flush.offset.checkpoint.interval.ms": "200", "replica.high.watermark.checkpoint.interval.ms": "200",
             "transaction.state.log.num.partitions": "1", "offsets.topic.num.partitions": "1"}
ROUNDS = 12


def _produce(bootstrap: str, topic: str) -> tuple[list[bytes], list[bytes], dict[bytes, tuple[int, int]]]:
    """ROUNDS x (a committed transaction of 4 records, an aborted one of 3): the committed and
    aborted values, and each value's (offset, timestamp)."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"txn-{uuid.uuid4().hex[:8]}",
                  "linger.ms": 0})
    placed: dict[bytes, tuple[int, int]] = {}

    def delivered(err: object, msg: object) -> None:
        assert err is None, err
        placed[msg.value()] = (msg.offset(), msg.timestamp()[1])  # type: ignore[attr-defined]

    p.init_transactions(30)
    committed: list[bytes] = []
    aborted: list[bytes] = []
    for r in range(ROUNDS):
        for kind, values in (("c", committed), ("a", aborted)):
            p.begin_transaction()
            for j in range(4 if kind == "c" else 3):
                v = f"{kind}{r}-{j}-".encode() + b"x" * 60
                # Markers carry the coordinator's clock, and ListOffsets by time answers the first
                # record (control ones too, as Kafka) at or after the time: keep every record's
                # timestamp after the marker before it.
                time.sleep(0.003)
                p.produce(topic, v, partition=0, on_delivery=delivered)
                p.flush(30)  # one batch per record: more index entries, more segments
                values.append(v)
            if kind == "c":
                p.commit_transaction(30)
            else:
                p.abort_transaction(30)
    assert len(placed) == len(committed) + len(aborted)
    return committed, aborted, placed


def _offsets_for_times(bootstrap: str, topic: str, timestamps: list[int]) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_committed"})
    try:
        # One partition per request: librdkafka keeps only one timestamp per partition.
        return [c.offsets_for_times([TopicPartition(topic, 0, t)], 30)[0].offset for t in timestamps]
    finally:
        c.close()


def _damage(part_dir: Path, recovery_point: int) -> dict[str, list[str]]:
    """Delete every non-empty .txnindex, and delete, fill with garbage or misalign offset and
    time indexes of the segments below the recovery point; returns what was done to what."""
    segs = sorted(int(n[:20]) for n in os.listdir(part_dir) if n.endswith(".log"))
    flushed = [b for i, b in enumerate(segs[:-1]) if segs[i + 1] <= recovery_point]
    done: dict[str, list[str]] = {"txnindex deleted": [], "deleted": [], "garbage": [], "misaligned": []}
    for n in sorted(os.listdir(part_dir)):
        if n.endswith(".txnindex") and (part_dir / n).stat().st_size:
            (part_dir / n).unlink()
            done["txnindex deleted"].append(n)
    for i, base in enumerate(flushed[:6]):
        suffix = ".index" if i % 2 == 0 else ".timeindex"
        path = part_dir / f"{base:020d}{suffix}"
        how = ("deleted", "garbage", "misaligned")[i % 3]
        if how == "deleted":
            path.unlink()
        elif how == "garbage":
            path.write_bytes(os.urandom(path.stat().st_size or 48))
        else:
            with open(path, "ab") as f:
                f.write(b"\x07" * 5)
        done[how].append(path.name)
    return done


def test_sigkill_then_lost_and_corrupt_indexes_are_rebuilt(tmp_path: Path) -> None:
    data = tmp_path / "data"
    topic = "recover-idx"
    with running_broker(data, OVERRIDES) as broker:
        create_topic(broker.bootstrap, topic, 1, {"segment.bytes": "1500", "index.interval.bytes": "100"})
        committed, aborted, placed = _produce(broker.bootstrap, topic)
        total = len(committed) + len(aborted)
        assert consume_all(broker.bootstrap, topic, "read_committed", len(committed)) == committed
        probe = [placed[v][1] for v in committed[::5] + aborted[::4]]
        expected_by_time = [placed[v][0] for v in committed[::5] + aborted[::4]]
        assert _offsets_for_times(broker.bootstrap, topic, probe) == expected_by_time
        part_dir = data / f"{topic}-0"
        leo = max(o for o, _ in placed.values()) + 2  # the last ABORT marker follows the last record
        deadline = time.monotonic() + 20
        while read_offset_checkpoint(str(data / RECOVERY_POINT_CHECKPOINT)).get((topic, 0), 0) < leo // 2:
            assert time.monotonic() < deadline, "the recovery point was never checkpointed"
            time.sleep(0.1)
        broker.kill()  # SIGKILL: no clean-shutdown marker, no final checkpoints
        recovery_point = read_offset_checkpoint(str(data / RECOVERY_POINT_CHECKPOINT))[(topic, 0)]
        done = _damage(part_dir, recovery_point)
        assert len(done["txnindex deleted"]) >= 3 and all(done[k] for k in ("deleted", "garbage", "misaligned"))

        broker.start()
        # The aborted records are still skipped by read_committed, and are there for read_uncommitted.
        assert consume_all(broker.bootstrap, topic, "read_committed", len(committed)) == committed
        uncommitted = consume_all(broker.bootstrap, topic, "read_uncommitted", total)
        assert sorted(uncommitted) == sorted(committed + aborted)
        assert _offsets_for_times(broker.bootstrap, topic, probe) == expected_by_time
        assert _offsets_for_times(broker.bootstrap, topic, [int(time.time() * 1000) + 3_600_000]) == [-1]
        for name in done["txnindex deleted"]:
            assert (part_dir / name).stat().st_size > 0, f"{name} was not rebuilt"
        log = broker.new_log()
        assert "rebuilding it from the log" in log
        assert "Traceback" not in log
