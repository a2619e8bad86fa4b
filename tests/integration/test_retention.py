"""Retention, DeleteRecords and dump-log against a real broker process and real clients.

Disk space is checked on disk (the partition directory's files), not only through offsets.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.records import iter_batches
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic

OVERRIDES = {"log.retention.check.interval.ms": "300", "log.segment.delete.delay.ms": "500"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("retention") / "data", OVERRIDES) as b:
        yield b


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _produce(bootstrap: str, topic: str, n: int, start: int = 0, per_batch: int = 10, size: int = 100) -> None:
    """n messages valued v<index>, flushed every ``per_batch`` so the log gets many batches."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(start, start + n):
        p.produce(topic, key=b"k%d" % i, value=(f"v{i}:".encode() + b"x" * size))
        if (i + 1) % per_batch == 0:
            p.flush(10)
    assert p.flush(10) == 0


def _disk(broker: BrokerProcess, topic: str) -> tuple[list[int], int, int]:
    """(segment base offsets, bytes in .log files, number of .deleted files) of partition 0."""
    d = broker.data_dir / f"{topic}-0"
    while True:  # the broker may rename a segment between listing and stat: look again
        logs = sorted(d.glob("*.log"))
        try:
            size = sum(p.stat().st_size for p in logs)
        except FileNotFoundError:
            continue
        return [int(p.name[:20]) for p in logs], size, len(list(d.glob("*.deleted")))


def _wait(cond, timeout: float = 15.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return bool(cond())


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(low), int(high)
    finally:
        c.close()


def _fetch_from(bootstrap: str, topic: str, offset: int, reset: str, want: int = 0,
                timeout: float = 15.0) -> tuple[list[tuple[int, bytes]], KafkaError | None]:
    """Assign partition 0 at ``offset``; collect ``want`` messages or the first error."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ret", "enable.auto.commit": False,
                  "auto.offset.reset": reset, "enable.partition.eof": False})
    got: list[tuple[int, bytes]] = []
    try:
        c.assign([TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (want == 0 or len(got) < want):
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                return got, m.error()
            got.append((m.offset(), m.value()))
        return got, None
    finally:
        c.close()


def test_retention_ms_frees_disk_and_moves_start(broker: BrokerProcess) -> None:
    topic = _topic("ret-ms")
    create_topic(broker.bootstrap, topic, 1, {"retention.ms": "1000", "segment.bytes": "4096",
                                              "segment.ms": "600000"})
    _produce(broker.bootstrap, topic, 300)
    bases, size, _ = _disk(broker, topic)
    assert size > 0
    # Every record expires one second after it was written: within the check interval the
    # closed segments go, then the active one is rolled and goes too (Kafka's rule).
    assert _wait(lambda: _disk(broker, topic)[1:] == (0, 0)), _disk(broker, topic)
    bases, size, _ = _disk(broker, topic)
    assert bases == [300] and size == 0
    assert _watermarks(broker.bootstrap, topic) == (300, 300)
    _, error = _fetch_from(broker.bootstrap, topic, 0, "error")
    assert error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET, error
    assert "out of range" in error.str().lower()


def test_records_without_timestamps_survive_retention(broker: BrokerProcess) -> None:
    """librdkafka sends records given timestamp -1 as BaseTimestamp -1 with MaxTimestamp 0: a
    segment dated 1970, which retention must not take for 56 years old."""
    topic, control = _topic("no-ts"), _topic("ret-control")
    create_topic(broker.bootstrap, topic, 1)  # the default retention.ms: 7 days
    create_topic(broker.bootstrap, control, 1, {"retention.ms": "500"})
    for codec_name in ("none", "gzip"):
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "compression.type": codec_name})
        for i in range(10):
            p.produce(topic, key=b"k%d" % i, value=b"%s-%d" % (codec_name.encode(), i), timestamp=-1)
        assert p.flush(10) == 0
    _produce(broker.bootstrap, control, 10)
    # Checks run every 300 ms: once the control topic's records have gone, several ran.
    assert _wait(lambda: _watermarks(broker.bootstrap, control) == (10, 10))
    assert _watermarks(broker.bootstrap, topic) == (0, 20)
    stored = [h for f in sorted((broker.data_dir / f"{topic}-0").glob("*.log"))
              for _, h in iter_batches(f.read_bytes())]
    assert stored and all((h.base_timestamp, h.max_timestamp) == (-1, -1) for h in stored)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "no-ts", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 20 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append((m.offset(), m.value(), m.timestamp()))
        assert got == [(i, b"%s-%d" % (name, i % 10), (TIMESTAMP_CREATE_TIME, -1))
                       for i, name in enumerate([b"none"] * 10 + [b"gzip"] * 10)]
        # ListOffsets by time: no record has a timestamp, so none is at or after 0.
        (found,) = c.offsets_for_times([TopicPartition(topic, 0, 0)], timeout=10)
        assert found.error is None and found.offset == -1
    finally:
        c.close()


def test_retention_bytes_keeps_the_newest_segments(broker: BrokerProcess) -> None:
    topic = _topic("ret-bytes")
    create_topic(broker.bootstrap, topic, 1, {"retention.bytes": "8192", "segment.bytes": "2048"})
    _produce(broker.bootstrap, topic, 400)

    def settled() -> bool:
        bases, size, deleted = _disk(broker, topic)
        return size <= 8192 + 2048 and deleted == 0

    assert _wait(settled), _disk(broker, topic)
    bases, size, _ = _disk(broker, topic)
    assert size >= 8192  # Kafka only deletes a segment if at least retention.bytes remain
    low, high = _watermarks(broker.bootstrap, topic)
    assert low == bases[0] > 0 and high == 400
    # A consumer asking for offset 0 is reset to the new start and reads everything after it.
    got, error = _fetch_from(broker.bootstrap, topic, 0, "earliest", want=400 - low)
    assert error is None
    assert [o for o, _ in got] == list(range(low, 400))
    assert all(v.startswith(f"v{o}:".encode()) for o, v in got)


def test_delete_records_moves_start_frees_disk_and_survives_restart(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides=OVERRIDES)
    b.start()
    try:
        topic = _topic("delrec")
        create_topic(b.bootstrap, topic, 1, {"segment.bytes": "2048"})
        _produce(b.bootstrap, topic, 300)
        bases0, size0, _ = _disk(b, topic)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        res = admin.delete_records([TopicPartition(topic, 0, 150)])
        deleted = next(iter(res.values())).result(15)
        assert deleted.low_watermark == 150
        assert _wait(lambda: _disk(b, topic)[2] == 0)
        bases, size, _ = _disk(b, topic)
        holding = max(x for x in bases0 if x <= 150)
        assert bases[0] == holding and size < size0  # whole segments below 150 are gone from disk
        assert _watermarks(b.bootstrap, topic) == (150, 300)
        _, error = _fetch_from(b.bootstrap, topic, 100, "error")
        assert error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET
        got, error = _fetch_from(b.bootstrap, topic, 100, "earliest", want=150)
        assert error is None and [o for o, _ in got] == list(range(150, 300))
        # Beyond the high watermark: OFFSET_OUT_OF_RANGE.
        res = admin.delete_records([TopicPartition(topic, 0, 1000)])
        with pytest.raises(KafkaException) as ei:
            next(iter(res.values())).result(15)
        assert ei.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE

        # The start offset is checkpointed: a restart (even a crash) keeps it.
        b.restart(hard=True)
        assert _watermarks(b.bootstrap, topic) == (150, 300)
        # -1: up to the high watermark; only the active segment remains on disk.
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        res = admin.delete_records([TopicPartition(topic, 0, -1)])
        assert next(iter(res.values())).result(15).low_watermark == 300
        assert _wait(lambda: _disk(b, topic)[2] == 0)
        assert len(_disk(b, topic)[0]) == 1
        assert _watermarks(b.bootstrap, topic) == (300, 300)
        b.restart()
        assert _watermarks(b.bootstrap, topic) == (300, 300)
    finally:
        try:
            b.stop(timeout=20)
        finally:
            b.kill()


def test_dump_log_matches_what_was_produced(broker: BrokerProcess) -> None:
    topic = _topic("dump")
    create_topic(broker.bootstrap, topic, 1)
    produced: dict[int, tuple[bytes | None, bytes | None, list[str], int]] = {}
    # Recent timestamps: records older than retention.ms (7 days by default) would be deleted.
    now = int(time.time() * 1000)
    for codec_name in ("none", "gzip"):
        p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec_name, "linger.ms": 5})

        def delivered(header_keys: list[str]):  # type: ignore[no-untyped-def]
            def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
                assert err is None
                produced[msg.offset()] = (msg.key(), msg.value(), header_keys, msg.timestamp()[1])
            return on_delivery

        for i in range(20):
            key = None if i % 7 == 3 else f"key-{codec_name}-{i}".encode()
            value = None if i % 9 == 4 else f"value {codec_name} {i}".encode()
            headers = [("trace", b"t%d" % i), ("n", None)] if i % 2 else None
            p.produce(topic, key=key, value=value, headers=headers, timestamp=now - 1000 + i,
                      on_delivery=delivered([k for k, _ in headers or []]))
        assert p.flush(10) == 0
        del p  # release the client before the broker stops
    assert sorted(produced) == list(range(40))
    log_file = broker.data_dir / f"{topic}-0" / "00000000000000000000.log"
    out = subprocess.run([sys.executable, "-m", "kaflet.cli", "dump-log", "--files", str(log_file),
                          "--print-data-log"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    records = [line for line in out.stdout.splitlines() if line.startswith("| offset: ")]
    batches = [line for line in out.stdout.splitlines() if line.startswith("baseOffset: ")]
    assert {"none", "gzip"} == {line.split("compresscodec: ")[1].split()[0] for line in batches}
    assert all(line.endswith("isvalid: true") for line in batches)
    assert len(records) == 40
    for line in records:
        offset = int(line.split()[2])
        key, value, header_keys, ts = produced[offset]
        assert f"CreateTime: {ts} " in line
        assert f"keySize: {-1 if key is None else len(key)} valueSize: {-1 if value is None else len(value)} " in line
        assert f"headerKeys: [{','.join(header_keys)}]" in line
        if key is not None:
            assert f" key: {key.decode()}" in line
        else:
            assert " key: " not in line
        if value is not None:
            assert line.endswith(f"payload: {value.decode()}")
        else:
            assert "payload:" not in line


def test_delete_records_error_codes(broker: BrokerProcess) -> None:
    compacted = _topic("compacted")
    plain = _topic("plain")
    create_topic(broker.bootstrap, compacted, 1, {"cleanup.policy": "compact"})
    create_topic(broker.bootstrap, plain, 1)
    _produce(broker.bootstrap, plain, 20)
    req_cls = codec.request_class(ApiKey.DELETE_RECORDS)
    T = req_cls.DeleteRecordsTopic
    P = T.DeleteRecordsPartition
    client = RawClient(broker.bootstrap)
    try:
        for version in (0, 1, 2):
            req = req_cls(topics=[
                T(name=plain, partitions=[P(partition_index=0, offset=5), P(partition_index=7, offset=1)]),
                T(name=compacted, partitions=[P(partition_index=0, offset=0)]),
                T(name="no-such-topic", partitions=[P(partition_index=0, offset=0)]),
                T(name=plain + "x", partitions=[P(partition_index=0, offset=-1)]),
            ], timeout_ms=5000)
            resp = client.request(ApiKey.DELETE_RECORDS, version, req)
            got = {(t.name, p.partition_index): (p.error_code, p.low_watermark) for t in resp.topics
                   for p in t.partitions}
            assert got == {
                (plain, 0): (0, 5),
                (plain, 7): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
                (compacted, 0): (ErrorCode.POLICY_VIOLATION, -1),
                ("no-such-topic", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
                (plain + "x", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            }, version
            bad = req_cls(topics=[T(name=plain, partitions=[P(partition_index=0, offset=-2),
                                                             P(partition_index=0, offset=21)])], timeout_ms=5000)
            resp = client.request(ApiKey.DELETE_RECORDS, version, bad)
            assert [p.error_code for p in resp.topics[0].partitions] == [ErrorCode.OFFSET_OUT_OF_RANGE] * 2
    finally:
        client.close()
    assert _watermarks(broker.bootstrap, plain) == (5, 20)
