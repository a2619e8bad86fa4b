"""`kaflet transactions` end to end against a broker process: list, describe and
describe-producers; a hanging transaction (a transactional batch written by a producer id no
coordinator knows) is found by --find-hanging while a live transaction is not, and --abort
(by start offset, and by producer id and epochs) ends it, after which the last stable offset
moves and a read_committed consumer reads past it."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic
from tests.support.transactions import consume_all, init_producer_id, latest_offset, raw_produce

CLI = [sys.executable, "-m", "kaflet.cli"]


def txn_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "transactions", "--bootstrap-server", bootstrap, *args], capture_output=True,
                          text=True, timeout=60)


def _rows(out: str) -> list[list[str]]:
    """The table's data rows (Kafka's layout: padded cells, tab separated), header dropped."""
    return [[cell.strip() for cell in line.split("\t")[:-1]] for line in out.splitlines()[1:]]


@pytest.fixture
def raw(kaflet_broker: BrokerProcess) -> Iterator[RawClient]:
    client = RawClient(kaflet_broker.bootstrap)
    try:
        yield client
    finally:
        client.close()


def test_find_and_abort_hanging_transactions(kaflet_broker: BrokerProcess, raw: RawClient) -> None:
    bootstrap = kaflet_broker.bootstrap
    topic = f"clitxn-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 2)
    # A transaction no coordinator knows about: its producer id has no transactional id.
    pid, epoch = init_producer_id(raw)
    assert raw_produce(raw, topic, 0, [b"h1", b"h2"], pid, epoch, transactional=True) == 0
    assert raw_produce(raw, topic, 0, [b"after"]) == 2
    assert latest_offset(raw, topic, 1) == 0
    # A live transaction on partition 1, which the coordinator tracks: not hanging.
    live_id = f"cli-live-{uuid.uuid4().hex[:6]}"
    live = Producer({"bootstrap.servers": bootstrap, "transactional.id": live_id})
    live.init_transactions(30)
    live.begin_transaction()
    live.produce(topic, b"live", partition=1)
    assert live.flush(30) == 0

    [broker_id] = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers

    listed = txn_cli(bootstrap, "--list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split("\t")[0].strip() == "TransactionalId"
    [row] = [r for r in _rows(listed.stdout) if r[0] == live_id]
    assert row[1] == str(broker_id) and row[3] == "Ongoing"
    live_pid = int(row[2])

    described = txn_cli(bootstrap, "--describe", "--transactional-id", live_id)
    assert described.returncode == 0, described.stderr
    [row] = _rows(described.stdout)
    assert row[1:5] == [live_id, str(live_pid), "0", "Ongoing"] and row[8] == f"{topic}-1"
    assert int(row[6]) > 0 and int(row[7]) >= 0

    producers = txn_cli(bootstrap, "--describe-producers", "--topic", topic, "--partition", "0")
    assert producers.returncode == 0, producers.stderr
    assert [(r[0], r[1], r[5]) for r in _rows(producers.stdout)] == [(str(pid), str(epoch), "0")]

    # Open for less than the default 15 minutes: not yet a candidate.
    recent = txn_cli(bootstrap, "--find-hanging", "--topic", topic)
    assert recent.returncode == 0, recent.stderr
    assert _rows(recent.stdout) == []
    hanging = txn_cli(bootstrap, "--find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert hanging.returncode == 0, hanging.stderr
    assert [r[:6] for r in _rows(hanging.stdout)] == [[topic, "0", str(pid), str(epoch), "-1", "0"]]
    by_broker = txn_cli(bootstrap, "--find-hanging", "--broker-id", str(broker_id),
                        "--max-transaction-timeout", "0")
    assert by_broker.returncode == 0, by_broker.stderr
    assert [r[:3] for r in _rows(by_broker.stdout) if r[0] == topic] == [[topic, "0", str(pid)]]

    aborted = txn_cli(bootstrap, "--abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert aborted.returncode == 0, aborted.stderr
    assert f"producer id {pid}" in aborted.stdout
    assert latest_offset(raw, topic, 1) == 4  # past the two records, "after" and the ABORT marker
    assert consume_all(bootstrap, topic, "read_committed", 1) == [b"after"]
    again = txn_cli(bootstrap, "--find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert again.returncode == 0 and _rows(again.stdout) == []

    # The form for brokers older than 3.0: producer id and epochs given (-1 is taken as 0).
    pid2, epoch2 = init_producer_id(raw)
    start = raw_produce(raw, topic, 0, [b"h3"], pid2, epoch2, transactional=True)
    raw_produce(raw, topic, 0, [b"after2"])
    assert latest_offset(raw, topic, 1) == start
    aborted = txn_cli(bootstrap, "--abort", "--topic", topic, "--partition", "0", "--producer-id", str(pid2),
                      "--producer-epoch", str(epoch2), "--coordinator-epoch", "-1")
    assert aborted.returncode == 0, aborted.stderr
    assert consume_all(bootstrap, topic, "read_committed", 2) == [b"after", b"after2"]

    live.commit_transaction(30)
    assert consume_all(bootstrap, topic, "read_committed", 1, partitions=(1,)) == [b"live"]
    done = txn_cli(bootstrap, "--describe", "--transactional-id", live_id)
    assert done.returncode == 0 and _rows(done.stdout)[0][4] in ("CompleteCommit", "PrepareCommit")


@pytest.mark.parametrize(("args", "message"), [
    ([], "Exactly one of --list"),
    (["--list", "--abort"], "Exactly one of --list"),
    (["--describe"], "--describe needs --transactional-id"),
    (["--find-hanging"], "needs --topic or --broker-id"),
    (["--find-hanging", "--partition", "0", "--broker-id", "1"], "--partition needs --topic"),
    (["--abort", "--topic", "t", "--partition", "0"], "must be identified either with --start-offset"),
    (["--abort", "--topic", "t", "--partition", "0", "--producer-id", "5", "--coordinator-epoch", "0"],
     "--producer-id needs --producer-epoch"),
    (["--list", "--topic", "t"], "--topic cannot be used with --list"),
    (["--describe-producers", "--topic", "t"], "needs --topic and --partition"),
    (["--abort", "--topic", "t", "--partition", "-1", "--start-offset", "0"], "--partition"),
])
def test_bad_arguments_get_a_sentence(kaflet_broker: BrokerProcess, args: list[str], message: str) -> None:
    res = txn_cli(kaflet_broker.bootstrap, *args)
    assert res.returncode != 0
    assert message in res.stderr and "Traceback" not in res.stderr


def test_what_does_not_exist_is_said(kaflet_broker: BrokerProcess) -> None:
    bootstrap = kaflet_broker.bootstrap
    topic = f"clitxn-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    cases = [
        (["--describe", "--transactional-id", "no-such-id"], "TRANSACTIONAL_ID_NOT_FOUND"),
        (["--describe-producers", "--topic", "no-such-topic", "--partition", "0"], "Topic 'no-such-topic' does not"),
        (["--describe-producers", "--topic", topic, "--partition", "7"], f"Topic '{topic}' has no partition 7"),
        (["--abort", "--topic", topic, "--partition", "0", "--start-offset", "42"],
         "Could not find any open transactions starting at offset 42"),
        (["--find-hanging", "--broker-id", "999"], "Broker 999 is not in the cluster"),
    ]
    for args, message in cases:
        res = txn_cli(bootstrap, *args)
        assert res.returncode == 1, (args, res.stdout)
        assert res.stderr.startswith("Error: ") and message in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    unreachable = subprocess.run([*CLI, "transactions", "--bootstrap-server", "127.0.0.1:1", "--list", "--timeout",
                                  "1"], capture_output=True, text=True, timeout=60)
    assert unreachable.returncode == 1 and "Could not reach a broker" in unreachable.stderr


def test_idle_producer_ids_expire(tmp_path: Path) -> None:
    """producer.id.expiration.ms: an idle idempotent producer leaves the partition's producer
    state (DescribeProducers, here through --describe-producers); one with a transaction open
    stays."""
    overrides = {"producer.id.expiration.ms": "8000", "producer.id.expiration.check.interval.ms": "200"}
    with running_broker(tmp_path / "data", overrides) as broker:
        bootstrap = broker.bootstrap
        topic = f"clitxn-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic)
        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"exp-{uuid.uuid4().hex[:6]}"})
        txn.init_transactions(30)
        txn.begin_transaction()
        txn.produce(topic, b"open", partition=0)
        assert txn.flush(30) == 0
        idem = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        idem.produce(topic, b"once", partition=0)
        assert idem.flush(30) == 0

        def producers() -> list[tuple[str, str]]:
            res = txn_cli(bootstrap, "--describe-producers", "--topic", topic, "--partition", "0")
            assert res.returncode == 0, res.stderr
            return [(r[0], r[5]) for r in _rows(res.stdout)]

        first = producers()
        assert len(first) == 2 and sorted(start for _, start in first) == ["0", "None"]
        open_pid = next(pid for pid, start in first if start != "None")
        deadline = time.monotonic() + 60
        while len(current := producers()) > 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert current == [(open_pid, "0")]
        txn.abort_transaction(30)
