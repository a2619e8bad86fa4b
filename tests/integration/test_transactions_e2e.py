"""Transactions end to end with confluent-kafka: commit, abort, read_committed and
read_uncommitted consumers, and a second producer fencing the first."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.support.broker_process import BrokerProcess
from tests.support.topics import create_topic
from tests.support.transactions import consume_all

TOPIC = "txn-e2e"


def _read(bootstrap: str, isolation: str, expected: int) -> list[str]:
    return sorted(v.decode() for v in consume_all(bootstrap, TOPIC, isolation, expected, range(2), settle_s=1))


def test_commit_abort_and_fencing(kaflet_broker: BrokerProcess) -> None:
    bs = kaflet_broker.bootstrap
    create_topic(bs, TOPIC, 2)
    p = Producer({"bootstrap.servers": bs, "transactional.id": "e2e-1"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(TOPIC, f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(TOPIC, f"a{i}".encode(), partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(TOPIC, b"d0", partition=0)
    p.commit_transaction(30)
    committed = sorted([f"c{i}" for i in range(10)] + ["d0"])
    assert _read(bs, "read_committed", 11) == committed
    assert _read(bs, "read_uncommitted", 16) == sorted(committed + [f"a{i}" for i in range(5)])
    # A second producer with the same transactional id fences the first one.
    p2 = Producer({"bootstrap.servers": bs, "transactional.id": "e2e-1"})
    p2.init_transactions(30)
    p.begin_transaction()
    p.produce(TOPIC, b"zombie", partition=0)
    with pytest.raises(KafkaException) as info:
        p.commit_transaction(30)
    assert info.value.args[0].code() == KafkaError._FENCED
    p2.begin_transaction()
    p2.produce(TOPIC, b"p2", partition=1)
    p2.commit_transaction(30)
    assert _read(bs, "read_committed", 12) == sorted(committed + ["p2"])


def test_send_offsets_to_transaction(kaflet_broker: BrokerProcess) -> None:
    """Consume-transform-produce: offsets committed with the transaction, none with an abort.
    (Needs the WriteTxnMarkers handler to call GroupCoordinator.complete_txn for
    __consumer_offsets partitions.)"""
    bs = kaflet_broker.bootstrap
    create_topic(bs, "eos-src", 1)
    create_topic(bs, "eos-dst", 1)
    p0 = Producer({"bootstrap.servers": bs})
    for i in range(10):
        p0.produce("eos-src", f"m{i}".encode())
    p0.flush(30)
    c = Consumer({"bootstrap.servers": bs, "group.id": "eos", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    c.subscribe(["eos-src"])
    p = Producer({"bootstrap.servers": bs, "transactional.id": "eos-1"})
    p.init_transactions(30)
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 4 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m)
    assert len(got) >= 4
    p.begin_transaction()
    for m in got:
        p.produce("eos-dst", m.value())
    p.send_offsets_to_transaction([TopicPartition("eos-src", 0, got[-1].offset() + 1)],
                                  c.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    src = [TopicPartition("eos-src", 0)]
    assert c.committed(src, 10)[0].offset == len(got)
    p.begin_transaction()
    p.produce("eos-dst", b"aborted")
    p.send_offsets_to_transaction([TopicPartition("eos-src", 0, 9)], c.consumer_group_metadata(), 30)
    p.abort_transaction(30)
    assert c.committed(src, 10)[0].offset == len(got)
    c.close()
