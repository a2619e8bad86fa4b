"""Transactions under faults: a transactional producer process SIGKILLed mid-transaction, and
the broker SIGKILLed mid-transaction then restarted. In both the open transaction must end
aborted (by the coordinator's timeout or by a new producer instance fencing it), the last
stable offset must move past it, and read_committed consumers must never see its records."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing

import pytest
from confluent_kafka import Producer

from kaflet.protocol.errors import ErrorCode
from tests.integration.test_transactions_log import _describe_producers, _latest, _produce
from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic
from tests.support.transactions import consume_all as _consume

TXN_TIMEOUT_MS = 3000
#: A transaction that must still be open after a broker is killed and started again: long enough
#: for a restart on a busy machine (3 s was not), short enough to wait for its abort.
RESTART_TXN_TIMEOUT_MS = 12000
# The coordinator looks for timed-out transactions this often (Kafka's default is 10 s).
BROKER_OVERRIDES = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}

# Commits c0..c4, then opens a transaction with o0..o9 flushed to the log (not committed),
# says so on stdout, and waits to be killed.
_CHILD = """
import sys, time
from confluent_kafka import Producer
bootstrap, topic, txn_id, timeout_ms = sys.argv[1:5]
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
              "transaction.timeout.ms": int(timeout_ms)})
p.init_transactions(30)
p.begin_transaction()
for i in range(5):
    p.produce(topic, f"c{i}".encode(), partition=0)
p.commit_transaction(30)
p.begin_transaction()
for i in range(10):
    p.produce(topic, f"o{i}".encode(), partition=0)
p.flush(30)
print("open", flush=True)
time.sleep(600)
"""

COMMITTED = [f"c{i}".encode() for i in range(5)]
OPEN = [f"o{i}".encode() for i in range(10)]


@pytest.fixture
def child_producers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Producer processes a test starts; any still running at the end are SIGKILLed by PID."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _start_child(procs: list[subprocess.Popen[bytes]], bootstrap: str, topic: str, txn_id: str,
                 timeout_ms: int = TXN_TIMEOUT_MS) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, bootstrap, topic, txn_id, str(timeout_ms)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    procs.append(proc)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else b""
    if line.strip() != b"open":
        proc.kill()
        _, err = proc.communicate(10)
        pytest.fail(f"transactional producer process did not open its transaction: {line!r}\n{err.decode()}")
    return proc


def _open_transaction(client: RawClient, topic: str) -> tuple[int, int]:
    """Producer id and epoch of the one producer with a transaction open on partition 0."""
    [p0] = _describe_producers(client, topic, [0])
    assert p0.error_code == 0
    open_txns = [(p.producer_id, p.producer_epoch) for p in p0.active_producers if p.current_txn_start_offset >= 0]
    assert len(open_txns) == 1, p0.active_producers
    return open_txns[0]


def _wait_lso_reaches_end(bootstrap: str, topic: str, timeout: float) -> int:
    """Poll ListOffsets until the last stable offset equals the high watermark (nothing open)."""
    deadline = time.monotonic() + timeout
    while True:
        with closing(RawClient(bootstrap)) as client:
            lso, hwm = _latest(client, topic, 1), _latest(client, topic, 0)
        if lso == hwm:
            return lso
        assert time.monotonic() < deadline, f"LSO stuck at {lso}, high watermark {hwm}"
        time.sleep(0.2)


def _check_fenced_and_usable(bootstrap: str, topic: str, txn_id: str, old: tuple[int, int]) -> None:
    """A new instance with the same transactional id works; the old producer epoch is refused."""
    p2 = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    p2.init_transactions(30)
    with closing(RawClient(bootstrap)) as client:
        code, _ = _produce(client, topic, [b"zombie"], pid=old[0], epoch=old[1], seq=len(OPEN), txn_id=txn_id,
                           transactional=True)
    assert code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED), code
    p2.begin_transaction()
    p2.produce(topic, b"n0", partition=0)
    p2.commit_transaction(30)
    end = _wait_lso_reaches_end(bootstrap, topic, 30)
    # c0..c4 + their marker, o0..o9 + the abort marker, n0 + its marker.
    assert end == len(COMMITTED) + 1 + len(OPEN) + 1 + 2
    assert sorted(_consume(bootstrap, topic, "read_committed", len(COMMITTED) + 1)) == sorted(COMMITTED + [b"n0"])
    assert sorted(_consume(bootstrap, topic, "read_uncommitted", len(COMMITTED) + len(OPEN) + 1)) == \
        sorted(COMMITTED + OPEN + [b"n0"])


def test_killed_producer_is_aborted_by_timeout_and_fenced(
        fresh_broker: BrokerProcess, child_producers: list[subprocess.Popen[bytes]]) -> None:
    fresh_broker.overrides.update(BROKER_OVERRIDES)
    bs = fresh_broker.start().bootstrap
    topic, txn_id = "txn-fault-producer", "fault-producer-1"
    create_topic(bs, topic, 1)
    child = _start_child(child_producers, bs, topic, txn_id)
    with closing(RawClient(bs)) as client:
        old = _open_transaction(client, topic)
        assert _latest(client, topic, 1) == len(COMMITTED) + 1  # the LSO waits at the open transaction
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    # Nobody ends the transaction: only the coordinator's timeout can (3 s; generous bound).
    assert _wait_lso_reaches_end(bs, topic, 60) == len(COMMITTED) + 1 + len(OPEN) + 1
    assert sorted(_consume(bs, topic, "read_committed", len(COMMITTED))) == sorted(COMMITTED)
    with closing(RawClient(bs)) as client:
        # The timeout abort bumped the epoch: the dead producer's epoch is already fenced.
        code, _ = _produce(client, topic, [b"zombie"], pid=old[0], epoch=old[1], seq=len(OPEN), txn_id=txn_id,
                           transactional=True)
        assert code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED), code
    _check_fenced_and_usable(bs, topic, txn_id, old)


@pytest.mark.parametrize("finish", ["timeout", "new_instance"])
def test_broker_killed_mid_transaction(fresh_broker: BrokerProcess, child_producers: list[subprocess.Popen[bytes]],
                                       finish: str) -> None:
    fresh_broker.overrides.update(BROKER_OVERRIDES)
    bs = fresh_broker.start().bootstrap
    topic, txn_id = f"txn-fault-broker-{finish}", f"fault-broker-{finish}"
    create_topic(bs, topic, 1)
    # new_instance: a timeout long enough that only the new instance's init_transactions() can end it.
    child = _start_child(child_producers, bs, topic, txn_id, RESTART_TXN_TIMEOUT_MS if finish == "timeout" else 120000)
    with closing(RawClient(bs)) as client:
        old = _open_transaction(client, topic)
    fresh_broker.kill()
    # The producer process dies too, so no client finishes the transaction for us.
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    fresh_broker.start()
    with closing(RawClient(bs)) as client:
        assert _open_transaction(client, topic) == old  # recovered from the log as still open
    if finish == "timeout":
        # The coordinator reloads the transaction as Ongoing and aborts it once it times out.
        assert _wait_lso_reaches_end(bs, topic, 60) == len(COMMITTED) + 1 + len(OPEN) + 1
        assert sorted(_consume(bs, topic, "read_committed", len(COMMITTED))) == sorted(COMMITTED)
    # new_instance: init_transactions() fences the old epoch and aborts the open transaction itself.
    _check_fenced_and_usable(bs, topic, txn_id, old)
