"""Moving a replica between the log dirs of one broker process, with real clients and tools.

* A broker with two log dirs, a topic with data, an idempotent acks=all producer running:
  `kaflet reassign-partitions --execute` with `log_dirs` and `--replica-alter-log-dirs-throttle`
  moves the replica; DescribeLogDirs (`kaflet log-dirs --describe`) shows the future replica
  while it is copied and `--verify` says it is in progress, then that it completed (clearing
  the throttle); every acknowledged record is read back at its offset, and the old dir no
  longer holds the partition.
* SIGKILL in the middle of the copy: after the restart the move resumes from the `-future`
  dir and ends; nothing acknowledged is lost.
* Bad requests through the tool: a directory that is not one of log.dirs (absolute or
  relative) is refused with Kafka's LOG_DIR_NOT_FOUND in one line, an offline one with
  KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient

from tests.support import cli
from tests.support.broker_process import BrokerProcess
from tests.support.faults import AckedProducer, check_delivery, payload_number, read_partitions
from tests.support.topics import create_topic

pytestmark = pytest.mark.timeout(120)

TOPIC = "moving"
THROTTLE_CONFIG = "replica.alter.log.dirs.io.max.bytes.per.second"


@pytest.fixture
def made() -> Iterator[list[Any]]:
    """Brokers and producers the test started: closed and killed (by PID) whatever happens."""
    things: list[Any] = []
    yield things
    for thing in reversed(things):
        if isinstance(thing, AckedProducer):
            thing.close()
        else:
            thing.kill()


def _broker(tmp_path: Path, made: list[Any]) -> tuple[BrokerProcess, Path, Path]:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    broker = BrokerProcess(tmp_path / "broker", {"log.dirs": f"{d1},{d2}", "log.segment.bytes": str(1 << 20),
                                                 "log.segment.delete.delay.ms": "200"})
    made.append(broker)
    broker.start()
    create_topic(broker.bootstrap, TOPIC, 1)
    assert (d1 / f"{TOPIC}-0").is_dir()  # the first of two empty dirs
    return broker, d1, d2


def _preload(bootstrap: str, count: int, size: int = 10_000) -> dict[int, bytes]:
    """``count`` records of ``size`` bytes; offset -> value of each acknowledged one."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 20})
    acked: dict[int, bytes] = {}

    def done(err: KafkaError | None, msg: Any) -> None:
        assert err is None, err
        acked[msg.offset()] = msg.value()

    for i in range(count):
        p.produce(TOPIC, b"pre-%06d-" % i + b"x" * size, on_delivery=done)
        p.poll(0)
    assert p.flush(30) == 0
    assert len(acked) == count
    return acked


def _broker_id(bootstrap: str) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    (bid,) = md.brokers
    return int(bid)


def _plan(tmp_path: Path, broker_id: int, log_dir: str) -> str:
    path = tmp_path / f"move-{time.monotonic_ns()}.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": 0, "replicas": [broker_id], "log_dirs": [log_dir]}]}))
    return str(path)


def _future_replicas(bootstrap: str, log_dir: Path) -> list[dict[str, Any]]:
    proc = cli.run("log-dirs", "--describe", "--bootstrap-server", bootstrap, "--topic-list", TOPIC, "--json")
    assert proc.returncode == 0, proc.stderr
    described = json.loads(proc.stdout.splitlines()[2])
    return [p for b in described["brokers"] for d in b["logDirs"] if d["logDir"] == str(log_dir)
            for p in d["partitions"] if p["isFuture"]]


def _verify(bootstrap: str, plan: str) -> str:
    proc = cli.run("reassign-partitions", "--bootstrap-server", bootstrap, "--reassignment-json-file", plan, "--verify")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _check_everything_read_back(bootstrap: str, producer: AckedProducer, preloaded: dict[int, bytes]) -> None:
    log = producer.stop()
    stored = read_partitions(bootstrap, TOPIC, [0])
    check = check_delivery(log, stored)
    assert check.ok, str(check)
    by_offset = dict(stored[0])
    assert all(by_offset.get(o) == v for o, v in preloaded.items())
    # The running producer's records in the order it sent them.
    numbers = [n for _, v in stored[0] if (n := payload_number(v)) is not None]
    assert numbers == sorted(numbers) and len(numbers) >= len(log.acked)


def test_move_under_a_running_producer_with_a_throttle(tmp_path: Path, made: list[Any]) -> None:
    broker, d1, d2 = _broker(tmp_path, made)
    bootstrap = broker.bootstrap
    preloaded = _preload(bootstrap, 500)  # about 5 MB
    producer = AckedProducer(bootstrap, TOPIC, 1, rate=200)
    made.append(producer)
    producer.start().wait_acked(50)
    bid = _broker_id(bootstrap)
    plan = _plan(tmp_path, bid, str(d2))
    started = time.monotonic()
    # About 10 s of copying: long enough for the polls below (a CLI process each) to see it under load.
    proc = cli.run("reassign-partitions", "--bootstrap-server", bootstrap, "--reassignment-json-file", plan,
                   "--execute", "--replica-alter-log-dirs-throttle", "500000")
    assert proc.returncode == 0, proc.stderr
    assert "The replica-alter-dir throttle limit was set to 500000 B/s" in proc.stdout
    assert f"Successfully started moving log directory to {d2} for replica {TOPIC}-0 with broker {bid}" in proc.stdout
    futures_seen: list[dict[str, Any]] = []
    in_progress = False
    deadline = time.monotonic() + 60
    while True:
        futures_seen += _future_replicas(bootstrap, d2)
        out = _verify(bootstrap, plan)
        if f"Reassignment of replica {TOPIC}-0-{bid} completed successfully." in out:
            break
        in_progress = in_progress or f"Reassignment of replica {TOPIC}-0-{bid} is still in progress." in out
        assert "Clearing broker-level throttles" not in out
        assert time.monotonic() < deadline, out
        time.sleep(0.3)
    took = time.monotonic() - started
    assert in_progress and futures_seen, "the move was never seen in progress"
    assert all(f["partition"] == f"{TOPIC}-0" and f["offsetLag"] >= 0 for f in futures_seen)
    assert any(f["size"] > 0 for f in futures_seen)
    assert "Clearing broker-level throttles on broker" in out
    # The throttle is gone from the broker's config.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    from confluent_kafka.admin import ConfigResource, ResourceType

    res = ConfigResource(ResourceType.BROKER, str(bid))
    entry = admin.describe_configs([res])[res].result(10).get(THROTTLE_CONFIG)
    assert entry is None or entry.value in (None, "9223372036854775807")
    producer.wait_more(50)  # the partition serves from its new dir
    _check_everything_read_back(bootstrap, producer, preloaded)
    assert (d2 / f"{TOPIC}-0").is_dir() and not (d1 / f"{TOPIC}-0").exists()
    assert not [p for p in d2.iterdir() if p.name.endswith("-future")]
    deadline = time.monotonic() + 20
    while [p for p in d1.iterdir() if p.name.startswith(f"{TOPIC}-0.")]:
        assert time.monotonic() < deadline, "the old copy was not removed"
        time.sleep(0.2)
    print(f"moved about 5 MB at a 500 kB/s throttle in {took:.1f} s")


def test_sigkill_during_the_copy_resumes_after_restart(tmp_path: Path, made: list[Any]) -> None:
    broker, d1, d2 = _broker(tmp_path, made)
    bootstrap = broker.bootstrap
    preloaded = _preload(bootstrap, 400)
    producer = AckedProducer(bootstrap, TOPIC, 1, rate=100)
    made.append(producer)
    producer.start().wait_acked(30)
    bid = _broker_id(bootstrap)
    plan = _plan(tmp_path, bid, str(d2))
    proc = cli.run("reassign-partitions", "--bootstrap-server", bootstrap, "--reassignment-json-file", plan,
                   "--execute", "--replica-alter-log-dirs-throttle", "300000")
    assert proc.returncode == 0, proc.stderr
    deadline = time.monotonic() + 30
    while not any(f["size"] > 0 for f in _future_replicas(bootstrap, d2)):
        assert time.monotonic() < deadline, "no future replica"
        time.sleep(0.2)
    broker.kill()
    [future_dir] = [p for p in d2.iterdir() if p.name.endswith("-future")]
    assert (d1 / f"{TOPIC}-0").is_dir()
    broker.start()
    assert "resuming its move" in broker.new_log()
    # Lift the throttle so the rest goes fast.
    proc = cli.run("configs", "--bootstrap-server", bootstrap, "--entity-type", "brokers", "--entity-name", str(bid),
                   "--alter", "--delete-config", THROTTLE_CONFIG)
    assert proc.returncode == 0, proc.stderr
    deadline = time.monotonic() + 60
    while f"Reassignment of replica {TOPIC}-0-{bid} completed successfully." not in (out := _verify(bootstrap, plan)):
        assert time.monotonic() < deadline, out
        time.sleep(0.3)
    assert not future_dir.exists() and (d2 / f"{TOPIC}-0").is_dir() and not (d1 / f"{TOPIC}-0").exists()
    producer.wait_more(30)
    _check_everything_read_back(bootstrap, producer, preloaded)


def test_bad_directories_are_refused(tmp_path: Path, made: list[Any]) -> None:
    broker, d1, d2 = _broker(tmp_path, made)
    bid = _broker_id(broker.bootstrap)
    for bad in (str(tmp_path / "d3"), "d2", str(d2) + "/"):
        plan = _plan(tmp_path, bid, bad)
        proc = cli.run("reassign-partitions", "--bootstrap-server", broker.bootstrap, "--reassignment-json-file", plan,
                       "--execute", "--timeout", "5")
        cli.assert_one_line_error(proc, f"Failed to alter dir for {TOPIC}-0-{bid}", "LOG_DIR_NOT_FOUND")
    # Where it is already: nothing to do, and --verify says so at once.
    plan = _plan(tmp_path, bid, str(d1))
    proc = cli.run("reassign-partitions", "--bootstrap-server", broker.bootstrap, "--reassignment-json-file", plan,
                   "--execute")
    assert proc.returncode == 0, proc.stderr
    assert f"Reassignment of replica {TOPIC}-0-{bid} completed successfully." in _verify(broker.bootstrap, plan)
    assert not [p for p in d2.iterdir() if p.name.startswith(TOPIC)]
    bad_json = tmp_path / "bad.json"
    bad_json.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": 0, "replicas": [bid], "log_dirs": [7]}]}))
    cli.assert_one_line_error(cli.run("reassign-partitions", "--bootstrap-server", broker.bootstrap,
                                      "--reassignment-json-file", str(bad_json), "--execute"), "Invalid log_dirs")
    cli.assert_usage_error(cli.run("reassign-partitions", "--bootstrap-server", broker.bootstrap,
                                   "--reassignment-json-file", plan, "--verify", "--replica-alter-log-dirs-throttle",
                                   "10"))


def test_offline_directory_is_refused(tmp_path: Path, made: list[Any]) -> None:
    """A log dir that failed (here: at start-up, a checkpoint file of it cannot be read) is
    offline: a move there gets KAFKA_STORAGE_ERROR, and the partition stays where it is."""
    d1, broken = tmp_path / "d1", tmp_path / "broken"
    (broken / "recovery-point-offset-checkpoint").mkdir(parents=True)  # reading it fails: EISDIR
    broker = BrokerProcess(tmp_path / "broker", {"log.dirs": f"{d1},{broken}"})
    made.append(broker)
    broker.start()
    create_topic(broker.bootstrap, TOPIC, 1)
    bid = _broker_id(broker.bootstrap)
    proc = cli.run("reassign-partitions", "--bootstrap-server", broker.bootstrap, "--reassignment-json-file",
                   _plan(tmp_path, bid, str(broken)), "--execute", "--timeout", "5")
    cli.assert_one_line_error(proc, f"Failed to alter dir for {TOPIC}-0-{bid}", "KAFKA_STORAGE_ERROR")
    assert (d1 / f"{TOPIC}-0").is_dir()
