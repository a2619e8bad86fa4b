"""Reading a topic back the way transactional tests check it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

from confluent_kafka import Consumer, TopicPartition

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.records import Record, build_batch
from tests.support.raw_client import RawClient


def consume_all(bootstrap: str, topic: str, isolation: str, expected: int, partitions: Iterable[int] = (0,),
                settle_s: float = 1.5, timeout_s: float = 30) -> list[bytes]:
    """Every value a confluent-kafka consumer with ``isolation.level=isolation`` reads from the
    start of ``partitions`` (in arrival order): it waits for ``expected`` values, then
    ``settle_s`` longer so that a record that should not be there has time to show up."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}", "isolation.level": isolation,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in partitions])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        settle: float | None = None
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m.value())
            if len(out) >= expected:
                settle = settle or time.monotonic() + settle_s
                if time.monotonic() > settle:
                    break
        return out
    finally:
        c.close()


def init_producer_id(client: RawClient) -> tuple[int, int]:
    """A fresh (producer id, epoch) from InitProducerId without a transactional id."""
    R = codec.request_class(ApiKey.INIT_PRODUCER_ID)
    resp = client.request(ApiKey.INIT_PRODUCER_ID, 1, R(transactional_id=None, transaction_timeout_ms=60000))
    assert resp.error_code == 0
    return resp.producer_id, resp.producer_epoch


def latest_offset(client: RawClient, topic: str, isolation: int, partition: int = 0) -> int:
    """ListOffsets' latest offset: the high watermark (isolation 0) or the last stable offset (1)."""
    R = codec.request_class(ApiKey.LIST_OFFSETS)
    T = R.ListOffsetsTopic
    req = R(replica_id=-1, isolation_level=isolation, topics=[T(name=topic, partitions=[
        T.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=-1)])])
    resp = client.request(ApiKey.LIST_OFFSETS, 5, req)
    part = resp.topics[0].partitions[0]
    assert part.error_code == 0
    return int(part.offset)


def raw_produce(client: RawClient, topic: str, partition: int, values: list[bytes], pid: int = -1, epoch: int = -1,
                transactional: bool = False) -> int:
    """A raw Produce (acks=all) of one batch (sequence 0 when `pid` is given), to a partition
    the client's broker leads; its base offset. A transactional one opens a transaction that
    no coordinator knows of: a hanging transaction."""
    batch = build_batch([Record(i, 0, None, v) for i, v in enumerate(values)], producer_id=pid,
                        producer_epoch=epoch, base_sequence=0 if pid >= 0 else -1, is_transactional=transactional)
    R = codec.request_class(ApiKey.PRODUCE)
    P = R.TopicProduceData
    # Produce needs a transactional id for a transactional batch (only its Write ACL is
    # checked); no coordinator has ever heard of this one.
    req = R(transactional_id="never-initialized" if transactional else None, acks=-1, timeout_ms=10000,
            topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=partition, records=batch)])])
    part = client.request(ApiKey.PRODUCE, 8, req).responses[0].partition_responses[0]
    assert part.error_code == 0
    return int(part.base_offset)
