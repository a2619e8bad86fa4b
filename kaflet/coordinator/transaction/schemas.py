"""Record formats of __transaction_state, byte for byte as Kafka writes them.

The key is int16 version 0 and the transactional id. The value is written as v0, which is what
Kafka 2.8-3.9 write in ZooKeeper mode; reading also accepts the flexible v1 (compact types and
tagged fields) that Kafka 3.0+ can read. The partition list is null exactly when the state is
Empty, as Kafka's valueToBytes writes it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kaflet.metadata.topic_names import TRANSACTION_STATE_TOPIC_NAME as TRANSACTION_STATE_TOPIC
from kaflet.protocol.primitives import DecodeError, Reader, Writer

__all__ = ["TRANSACTION_STATE_TOPIC", "TxnLogValue", "TxnState", "decode_key", "decode_value", "encode_key",
           "encode_value"]
KEY_VERSION = 0
VALUE_VERSION = 0
_MAX_VALUE_VERSION = 1

TopicPartition = tuple[str, int]


class TxnState(enum.IntEnum):
    """Kafka's TransactionState, with the ids the log stores."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's admin APIs use (DescribeTransactions, ListTransactions)."""
        return "".join(p.capitalize() for p in self.name.split("_"))


@dataclass(slots=True)
class TxnLogValue:
    """One transactional id's state as stored in the topic."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = field(default_factory=set)
    last_update_ms: int = -1
    start_ms: int = -1


def encode_key(transactional_id: str) -> bytes:
    w = Writer()
    w.int16(KEY_VERSION)
    w.string(transactional_id, False)
    return bytes(w.buf)


def decode_key(data: bytes | memoryview) -> str | None:
    """The transactional id of a key; None for a key version Kafka does not know either."""
    r = Reader(data)
    if r.int16() != KEY_VERSION:
        return None
    return r.string()


def encode_value(v: TxnLogValue, version: int = VALUE_VERSION) -> bytes:
    """Value v0 (or v1); partitions grouped by topic, null for Empty."""
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise ValueError(f"cannot write transaction log value version {version}")
    if v.state == TxnState.EMPTY and v.partitions:
        raise ValueError("an Empty transaction has no partitions")
    flexible = version >= 1
    w = Writer()
    w.int16(version)
    w.int64(v.producer_id)
    w.int16(v.producer_epoch)
    w.int32(v.timeout_ms)
    w.int8(int(v.state))
    if v.state == TxnState.EMPTY:
        w.array_len(-1, flexible)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(v.partitions):
            by_topic.setdefault(topic, []).append(index)
        w.array_len(len(by_topic), flexible)
        for topic, indexes in by_topic.items():
            w.string(topic, flexible)
            w.array_len(len(indexes), flexible)
            for i in indexes:
                w.int32(i)
            w.tagged_fields(flexible)
    w.int64(v.last_update_ms)
    w.int64(v.start_ms)
    w.tagged_fields(flexible)
    return bytes(w.buf)


def decode_value(data: bytes | memoryview) -> TxnLogValue:
    """Value v0 or v1; the partitions of an Empty state are ignored, as Kafka's reader does."""
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise DecodeError(f"unknown transaction log value version {version}")
    flexible = version >= 1
    pid = r.int64()
    epoch = r.int16()
    timeout = r.int32()
    status = r.int8()
    try:
        state = TxnState(status)
    except ValueError:
        raise DecodeError(f"unknown transaction state {status}") from None
    partitions: set[TopicPartition] = set()
    count = r.compact_array_len(2) if flexible else r.array_len(6)
    for _ in range(count):
        topic = r.compact_string() if flexible else r.string()
        n = r.compact_array_len(4) if flexible else r.array_len(4)
        for _ in range(n):
            partitions.add((topic, r.int32()))
        if flexible:
            r.skip_tagged_fields()
    last_update = r.int64()
    start = r.int64()
    if flexible:
        r.skip_tagged_fields()
    if state == TxnState.EMPTY:
        partitions = set()
    return TxnLogValue(pid, epoch, timeout, state, partitions, last_update, start)
