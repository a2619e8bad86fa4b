"""`kaflet groups` end to end: list, describe with lag, reset offsets, delete."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.broker_process import BrokerProcess
from tests.support.topics import create_topic

CLI = [sys.executable, "-m", "kaflet.cli"]


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    b = BrokerProcess(tmp_path_factory.mktemp("cligroups") / "data",
                      {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"})
    b.start()
    try:
        yield b.bootstrap
    finally:
        try:
            b.stop(timeout=20)
        finally:
            b.kill()


def groups(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "groups", "--bootstrap-server", bootstrap, *args], capture_output=True,
                          text=True, timeout=60)


def _setup(bootstrap: str, n: int = 10) -> tuple[str, str]:
    topic, group = f"cg-{uuid.uuid4().hex[:6]}", f"grp-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), partition=i % 2)
    p.flush(30)
    return topic, group


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 6000})


def _rows(out: str, topic: str) -> dict[int, list[str]]:
    rows = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[1] == topic:
            rows[int(cols[2])] = cols
    return rows


def test_describe_shows_lag_and_members(bootstrap: str) -> None:
    topic, group = _setup(bootstrap)
    c = _consumer(bootstrap, group)
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < 4 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error() and m.partition() == 0 and got < 4:
            got += 1
            c.commit(message=m, asynchronous=False)
    try:
        out = groups(bootstrap, "--describe", "--group", group)
        assert out.returncode == 0, out.stderr
        rows = _rows(out.stdout, topic)
        assert "CURRENT-OFFSET" in out.stdout and "LAG" in out.stdout
        assert rows[0][3:6] == ["4", "5", "1"], out.stdout
        assert rows[0][6].startswith("rdkafka-") and rows[0][7] == "/127.0.0.1"
        assert rows[1][3] == "-" and rows[1][4] == "5"
        members = groups(bootstrap, "--describe", "--group", group, "--members")
        assert members.returncode == 0 and "#PARTITIONS" in members.stdout and " 2 " in members.stdout
        listed = groups(bootstrap, "--list")
        assert group in listed.stdout.split()
        refused = groups(bootstrap, "--delete", "--group", group)
        assert refused.returncode == 1
        assert refused.stderr.count("\n") == 1 and "NON_EMPTY_GROUP" in refused.stderr
        busy = groups(bootstrap, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
        assert busy.returncode == 1 and "inactive" in busy.stderr
    finally:
        c.close()


def test_reset_offsets_then_consumer_starts_there(bootstrap: str) -> None:
    topic, group = _setup(bootstrap)
    c = _consumer(bootstrap, group)
    c.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 5)], asynchronous=False)
    c.close()
    dry = groups(bootstrap, "--reset-offsets", "--group", group, "--topic", topic, "--to-offset", "2", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert [r[3] for r in _rows(dry.stdout, topic).values()] == ["2", "2"]
    before = _rows(groups(bootstrap, "--describe", "--group", group).stdout, topic)
    assert before[0][3] == "5"  # a dry run changes nothing
    shifted = groups(bootstrap, "--reset-offsets", "--group", group, "--topic", f"{topic}:1", "--shift-by", "-2",
                     "--execute")
    assert shifted.returncode == 0, shifted.stderr
    done = groups(bootstrap, "--reset-offsets", "--group", group, "--topic", f"{topic}:0", "--to-offset", "3",
                  "--execute")
    assert done.returncode == 0, done.stderr
    c = _consumer(bootstrap, group)
    c.subscribe([topic])
    firsts: dict[int, int] = {}
    deadline = time.monotonic() + 30
    while len(firsts) < 2 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            firsts.setdefault(m.partition(), m.offset())
    c.close()
    assert firsts == {0: 3, 1: 3}
    earliest = groups(bootstrap, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert earliest.returncode == 0, earliest.stderr
    assert [r[3] for r in _rows(earliest.stdout, topic).values()] == ["0", "0"]
    latest = groups(bootstrap, "--reset-offsets", "--group", group, "--topic", topic, "--to-datetime",
                    "2999-01-01T00:00:00", "--execute")
    assert [r[3] for r in _rows(latest.stdout, topic).values()] == ["5", "5"]


def test_delete_group_and_errors(bootstrap: str) -> None:
    topic, group = _setup(bootstrap, 2)
    c = _consumer(bootstrap, group)
    c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    c.close()
    out = groups(bootstrap, "--delete", "--group", group)
    assert out.returncode == 0 and "successful" in out.stdout, out.stderr
    gone = groups(bootstrap, "--describe", "--group", group)
    assert gone.returncode == 1 and "does not exist" in gone.stderr
    again = groups(bootstrap, "--delete", "--group", group)
    assert again.returncode == 1 and "GROUP_ID_NOT_FOUND" in again.stderr
    usage = groups(bootstrap, "--describe")
    assert usage.returncode == 2
    down = subprocess.run([*CLI, "groups", "--bootstrap-server", "127.0.0.1:1", "--list", "--timeout", "1"],
                          capture_output=True, text=True, timeout=60)
    assert down.returncode == 1 and down.stderr.startswith("Error: Could not reach")
