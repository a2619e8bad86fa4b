"""Transactions on a 3-broker cluster: the coordinator sends WriteTxnMarkers over the network to
leaders on other brokers, and after the coordinator's broker is killed another broker loads
__transaction_state (replicated) and fences the old producer's epoch."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from kaflet.coordinator.group.hashing import partition_for
from tests.support.cluster import Cluster, create_topic_led_by_each
from tests.support.transactions import consume_all

pytestmark = pytest.mark.timeout(300)


def _read_committed(bootstrap: str, topic: str, expected: int) -> list[str]:
    return sorted(v.decode() for v in consume_all(bootstrap, topic, "read_committed", expected, range(3),
                                                  settle_s=2, timeout_s=60))


def test_markers_across_brokers_and_coordinator_failover(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    cluster.wait_for_registered([1, 2, 3])
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    create_topic_led_by_each(cluster, topic)
    txn_id = f"tx-{uuid.uuid4().hex[:6]}"
    p1 = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id})
    p1.init_transactions(60)
    p1.begin_transaction()
    for i in range(9):
        p1.produce(topic, f"c{i}".encode(), partition=i % 3)
    p1.commit_transaction(60)
    p1.begin_transaction()
    for i in range(3):
        p1.produce(topic, f"a{i}".encode(), partition=i)
    p1.flush(60)
    p1.abort_transaction(60)
    assert _read_committed(cluster.bootstrap, topic, 9) == sorted(f"c{i}" for i in range(9))

    coordinator = cluster.leader("__transaction_state", partition_for(txn_id, 50))
    assert coordinator is not None
    cluster.kill(coordinator)
    p2 = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id})
    p2.init_transactions(90)  # a new coordinator loaded the id and bumps its epoch
    p2.begin_transaction()
    live = [p for p in range(3) if cluster.leader(topic, p) not in (None, coordinator)]
    p2.produce(topic, b"after", partition=live[0])
    p2.commit_transaction(60)
    assert _read_committed(cluster.bootstrap, topic, 10) == sorted([f"c{i}" for i in range(9)] + ["after"])
