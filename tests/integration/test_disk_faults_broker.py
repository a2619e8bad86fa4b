"""A single broker process on real file systems that fill up or fail, with real clients.

* One log dir on a tmpfs that fills up: the broker refuses the write that hit ENOSPC, says why
  in one line and stops (every dir is offline, as Kafka halts); after space is freed and it is
  restarted, every acknowledged record is there at its offset, and new records follow them.
* Two log dirs, the second an ext4 image the kernel turns read-only: that dir goes offline
  (DescribeLogDirs says KAFKA_STORAGE_ERROR), its partitions lose their leader, the other dir
  keeps serving; once the disk is mounted again and the broker restarted, everything that was
  acknowledged with flush.messages=1 is back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from tests.support import cli, filesystems
from tests.support.broker_process import BrokerProcess
from tests.support.open_files import exhaust_descriptors
from tests.support.raw_client import log_dir_errors
from tests.support.topics import create_topic

pytestmark = [pytest.mark.skipif(filesystems.mounts_unavailable_reason() is not None,
                                 reason=str(filesystems.mounts_unavailable_reason())),
              pytest.mark.timeout(180)]


@pytest.fixture
def brokers() -> Iterator[list[BrokerProcess]]:
    made: list[BrokerProcess] = []
    yield made
    for b in made:
        b.kill()  # before the file systems go


def _produce(bootstrap: str, topic: str, count: int, partitions: int, size: int = 10_000,
             timeout_ms: int = 15_000, tag: str = "m") -> tuple[dict[bytes, tuple[int, int]], dict[str, int]]:
    """Send ``count`` records round-robin; (value -> (partition, offset) of the acknowledged
    ones, error name -> count of the refused ones)."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": timeout_ms, "retry.backoff.ms": 100})
    acked: dict[bytes, tuple[int, int]] = {}
    errors: dict[str, int] = {}

    def done(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            errors[err.name()] = errors.get(err.name(), 0) + 1

    filler = b"x" * size
    for i in range(count):
        value = b"%s%06d-" % (tag.encode(), i) + filler
        while True:
            try:
                p.produce(topic, value, partition=i % partitions, on_delivery=done)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    p.flush(timeout_ms / 1000 + 30)
    return acked, errors


def _read(bootstrap: str, topic: str, partitions: list[int]) -> dict[bytes, tuple[int, int]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "fetch.message.max.bytes": 1 << 20})
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    out: dict[bytes, tuple[int, int]] = {}
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 3:
        msgs = c.consume(500, timeout=0.5)
        if msgs:
            idle_since = time.monotonic()
        for m in msgs:
            if m.error() is not None:
                continue
            assert m.value() not in out, f"{m.value()[:8]!r} stored twice"
            out[m.value()] = (m.partition(), m.offset())
    c.close()
    return out


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def test_a_full_disk_stops_the_broker_and_loses_no_acknowledged_record(tmp_path: Path,
                                                                       brokers: list[BrokerProcess]) -> None:
    with filesystems.tmpfs(tmp_path, 64 << 20) as disk:
        broker = BrokerProcess(tmp_path / "broker", {"log.dirs": str(disk)})
        brokers.append(broker)
        broker.start()
        create_topic(broker.bootstrap, "full", 2)
        filler = filesystems.fill(disk, 3 << 20)
        acked, refused = _produce(broker.bootstrap, "full", 600, 2, timeout_ms=10_000)
        assert acked and refused, (len(acked), refused)
        # The broker stopped by itself, saying why in one line.
        deadline = time.monotonic() + 30
        while broker.alive and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not broker.alive and broker.proc is not None and broker.proc.returncode == 1
        out = broker.new_log()
        assert "every log directory has failed" in out and "No space left on device" in out, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
        # Space freed, restarted: everything acknowledged is there, at the offset it was given.
        filler.unlink()
        broker.start()
        stored = _read(broker.bootstrap, "full", [0, 1])
        missing = {v[:7] for v in acked if stored.get(v) != acked[v]}
        assert not missing, f"{len(missing)} acknowledged records lost or moved: {sorted(missing)[:10]}"
        # New records follow the stored ones; none reuses an offset.
        more, refused = _produce(broker.bootstrap, "full", 20, 2, tag="n")
        assert len(more) == 20 and not refused
        ends = {p: max(o for q, o in stored.values() if q == p) for p in (0, 1)}
        assert all(off > ends[p] for p, off in more.values())
        broker.stop()


def test_a_failed_dir_goes_offline_and_the_other_keeps_serving(tmp_path: Path,
                                                               brokers: list[BrokerProcess]) -> None:
    healthy = tmp_path / "healthy"
    with filesystems.ext4(tmp_path, 64) as disk:
        broker = BrokerProcess(tmp_path / "broker", {"log.dirs": f"{healthy},{disk.point}"})
        brokers.append(broker)
        broker.start()
        # flush.messages=1: an acknowledged record is on disk, so it survives the disk's failure.
        create_topic(broker.bootstrap, "jbod", 4, {"flush.messages": "1"})
        on_disk = sorted(p for p in range(4) if (disk.point / f"jbod-{p}").is_dir())
        elsewhere = sorted(set(range(4)) - set(on_disk))
        assert on_disk and elsewhere, "the partitions were not spread over both dirs"
        acked, refused = _produce(broker.bootstrap, "jbod", 200, 4, size=1000)
        assert len(acked) == 200 and not refused
        disk.fail()
        failed_at = time.monotonic()
        late, refused = _produce(broker.bootstrap, "jbod", 200, 4, size=1000, timeout_ms=8000, tag="l")
        # The partitions on the failed disk lose their leader (their only replica is offline);
        # the others keep taking records.
        assert refused, "nothing was refused after the disk failed"
        assert {p for p, _ in late.values()} <= set(elsewhere) | set(on_disk)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            leaders = _leaders(broker.bootstrap, "jbod")
            if all(leaders[p] == -1 for p in on_disk):
                break
            time.sleep(0.2)
        print(f"time from the disk failing to its partitions going offline: {time.monotonic() - failed_at:.2f} s")
        assert all(leaders[p] == -1 for p in on_disk), leaders
        assert all(leaders[p] == 1 or leaders[p] >= 0 for p in elsewhere), leaders
        assert log_dir_errors(broker.bootstrap) == {str(healthy): ErrorCode.NONE,
                                               str(disk.point): ErrorCode.KAFKA_STORAGE_ERROR}
        # kafka-log-dirs.sh's view of it: the dir's error, the other dir's replicas.
        proc = cli.run("log-dirs", "--describe", "--bootstrap-server", broker.bootstrap, "--json")
        assert proc.returncode == 0, proc.stderr
        described = json.loads(proc.stdout.splitlines()[-1])
        (b,) = described["brokers"]
        by_dir = {d["logDir"]: d for d in b["logDirs"]}
        assert by_dir[str(disk.point)]["error"] == "org.apache.kafka.common.errors.KafkaStorageException"
        assert by_dir[str(disk.point)]["partitions"] == []
        assert by_dir[str(healthy)]["error"] is None
        assert sorted(p["partition"] for p in by_dir[str(healthy)]["partitions"]) == [f"jbod-{p}" for p in elsewhere]
        table = cli.run("log-dirs", "--describe", "--bootstrap-server", broker.bootstrap).stdout
        assert f"{disk.point}  offline (KAFKA_STORAGE_ERROR)" in table, table
        after, refused = _produce(broker.bootstrap, "jbod", 40, 4, size=1000, timeout_ms=3000, tag="a")
        assert {p for p, _ in after.values()} == set(elsewhere)
        out = broker.new_log()
        assert out.count("is offline:") == 1, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
        # The disk comes back (mounted again) and the broker restarts: its partitions are back.
        broker.stop()
        filesystems.remount(disk)
        broker.start()
        assert log_dir_errors(broker.bootstrap) == {str(healthy): ErrorCode.NONE, str(disk.point): ErrorCode.NONE}
        stored = _read(broker.bootstrap, "jbod", list(range(4)))
        everything = {**acked, **late, **after}
        missing = {v[:7] for v in everything if stored.get(v) != everything[v]}
        assert not missing, f"{len(missing)} acknowledged records lost or moved: {sorted(missing)[:10]}"
        broker.stop()


def test_running_out_of_descriptors_is_not_a_disk_fault(tmp_path: Path, brokers: list[BrokerProcess]) -> None:
    """EMFILE refuses the work that needs a descriptor (a segment roll), closes new connections
    at once instead of leaving them in the backlog, takes no dir offline, and everything
    resumes when descriptors are back."""
    import resource

    from tests.support.raw_client import RawClient

    broker = BrokerProcess(tmp_path / "broker", {"log.segment.bytes": "20000"})
    brokers.append(broker)
    broker.start()
    create_topic(broker.bootstrap, "fds", 1)
    acked, refused = _produce(broker.bootstrap, "fds", 30, 1, size=1000)
    assert len(acked) == 30 and not refused
    pid = broker.pid
    assert pid is not None
    # A producer connected before descriptors run out; then none is left for the next
    # segment's files, and its records wait (KAFKA_STORAGE_ERROR is retriable).
    late: dict[bytes, tuple[int, int]] = {}
    refused_late: list[str] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "message.timeout.ms": 60_000, "retry.backoff.ms": 200})

    def done(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            late[msg.value()] = (msg.partition(), msg.offset())
        else:
            refused_late.append(err.name())

    p.produce("fds", b"e-first", partition=0, on_delivery=done)
    assert p.flush(10) == 0
    hard = exhaust_descriptors(pid)
    for i in range(100):
        p.produce("fds", b"e%05d-" % i + b"x" * 1000, partition=0, on_delivery=done)
    p.poll(0)
    deadline = time.monotonic() + 20
    while "not a disk fault" not in broker.new_log() and time.monotonic() < deadline:
        p.poll(0.2)
    assert "not a disk fault" in broker.new_log(), broker.new_log()[-3000:]
    # A new client is closed at once rather than left hanging.
    with pytest.raises(OSError):
        c = RawClient(broker.bootstrap, timeout=5)
        try:
            c.request(ApiKey.API_VERSIONS, 0, codec.request_class(ApiKey.API_VERSIONS)())
        finally:
            c.close()
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (hard, hard))
    assert p.flush(60) == 0
    assert len(late) == 101 and not refused_late, refused_late
    assert log_dir_errors(broker.bootstrap) == {str(tmp_path / "broker"): ErrorCode.NONE}
    stored = _read(broker.bootstrap, "fds", [0])
    everything = {**acked, **late}
    assert all(stored.get(v) == everything[v] for v in everything)
    out = broker.new_log()
    assert "is offline" not in out and "Traceback" not in out, out[-3000:]
    assert "closing new connections" in out and "accepting connections on PLAINTEXT again" in out
    broker.stop()
