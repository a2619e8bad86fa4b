"""`kaflet transactions` on a 3-broker cluster: --list and --describe reach the coordinator of a
transactional id on whichever broker it is, --find-hanging asks each partition's leader (or, with
--broker-id, that broker's replicas, followers included) and --abort writes the marker on the
partition's leader."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from kaflet.coordinator.group.hashing import partition_for
from tests.support.cluster import Cluster, create_topic_led_by_each
from tests.support.raw_client import RawClient
from tests.support.transactions import consume_all, init_producer_id, latest_offset, raw_produce

pytestmark = pytest.mark.timeout(300)


def _cli(bootstrap: str, *args: str) -> list[list[str]]:
    res = subprocess.run([sys.executable, "-m", "kaflet.cli", "transactions", "--bootstrap-server", bootstrap, *args,
                          "--timeout", "30"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, (args, res.stderr)
    return [[cell.strip() for cell in line.split("\t")[:-1]] for line in res.stdout.splitlines()[1:]]


def test_transactions_tool_across_brokers(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    cluster.wait_for_registered([1, 2, 3])
    topic = f"clitx-{uuid.uuid4().hex[:6]}"
    create_topic_led_by_each(cluster, topic)
    # A hanging transaction on partition 1, led by broker 2 (its followers are 3 and 1).
    leader = RawClient(cluster.broker(2).bootstrap)
    try:
        pid, epoch = init_producer_id(leader)
        start = raw_produce(leader, topic, 1, [b"hung"], pid, epoch, transactional=True)
        raw_produce(leader, topic, 1, [b"plain"])
    finally:
        leader.close()
    # A live transaction on every partition, which its coordinator tracks: not hanging.
    txn_id = f"tx-{uuid.uuid4().hex[:6]}"
    live = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id})
    live.init_transactions(60)
    live.begin_transaction()
    for p in range(3):
        live.produce(topic, f"live{p}".encode(), partition=p)
    assert live.flush(60) == 0
    coordinator = cluster.leader("__transaction_state", partition_for(txn_id, 50))
    bootstrap = cluster.broker(1).bootstrap

    [listed] = [r for r in _cli(bootstrap, "--list") if r[0] == txn_id]
    assert listed[1] == str(coordinator) and listed[3] == "Ongoing"
    [described] = _cli(bootstrap, "--describe", "--transactional-id", txn_id)
    assert described[0] == str(coordinator) and described[4] == "Ongoing"
    assert sorted(described[8].split(",")) == [f"{topic}-{p}" for p in range(3)]

    hanging = _cli(bootstrap, "--find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert [r[:3] + [r[5]] for r in hanging] == [[topic, "1", str(pid), str(start)]]
    # Broker 3 holds a follower replica of partition 1: its producer state shows the same.
    on_follower = _cli(bootstrap, "--find-hanging", "--broker-id", "3", "--max-transaction-timeout", "0")
    assert [r[:3] for r in on_follower if r[0] == topic] == [[topic, "1", str(pid)]]

    res = subprocess.run([sys.executable, "-m", "kaflet.cli", "transactions", "--bootstrap-server", bootstrap,
                          "--abort", "--topic", topic, "--partition", "1", "--start-offset", str(start)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert _cli(bootstrap, "--find-hanging", "--topic", topic, "--max-transaction-timeout", "0") == []
    live.commit_transaction(60)
    # The COMMIT markers follow commit_transaction(); then nothing holds the LSO back.
    client = RawClient(cluster.broker(2).bootstrap)
    try:
        cluster.wait_until(lambda: latest_offset(client, topic, 1, partition=1) ==
                           latest_offset(client, topic, 0, partition=1) == 5, timeout=30,
                           what="the last stable offset of partition 1 to reach its end")
    finally:
        client.close()
    got = consume_all(cluster.bootstrap, topic, "read_committed", 4, range(3), settle_s=2, timeout_s=60)
    assert sorted(got) == [b"live0", b"live1", b"live2", b"plain"]
