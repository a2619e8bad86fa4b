"""AddPartitionsToTxn (v0-3) and EndTxn (v0-3) responses, hand-written: every transaction gets
one of each, and the generic codec's nested message objects for a few partitions' error codes
cost more CPU than the __transaction_state write behind them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kaflet.protocol.api_keys import ApiKey, is_flexible
from kaflet.protocol.primitives import Writer
from kaflet.protocol.response import OwnEncoding

TopicPartition = tuple[str, int]


def encode_add_partitions_to_txn_response(errors: dict[TopicPartition, int], throttle_time_ms: int,
                                          version: int) -> bytes:
    """ThrottleTimeMs, then ResultsByTopicV3AndBelow: each topic's partitions with their error
    codes, topics in the order of their first partition in ``errors``."""
    flexible = is_flexible(ApiKey.ADD_PARTITIONS_TO_TXN, version)
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, index), code in errors.items():
        by_topic.setdefault(topic, []).append((index, code))
    w = Writer()
    w.int32(throttle_time_ms)
    w.array_len(len(by_topic), flexible)
    for topic, results in by_topic.items():
        w.string(topic, flexible)
        w.array_len(len(results), flexible)
        for index, code in results:
            w.int32(index)
            w.int16(code)
            w.tagged_fields(flexible)
        w.tagged_fields(flexible)
    w.tagged_fields(flexible)
    return bytes(w.buf)


@dataclass(slots=True)
class AddPartitionsToTxnResponse(OwnEncoding):
    """An AddPartitionsToTxn response waiting for its throttle time: an error code per partition
    (the gateway rewrites the partition numbers in ``errors`` before it is encoded)."""

    errors: dict[TopicPartition, int]
    version: int

    def encode(self, throttle_time_ms: int) -> bytes:
        return encode_add_partitions_to_txn_response(self.errors, throttle_time_ms, self.version)


@dataclass(slots=True)
class EndTxnResponse(OwnEncoding):
    """An EndTxn response waiting for its throttle time: ThrottleTimeMs, ErrorCode."""

    error_code: int
    version: int

    def encode(self, throttle_time_ms: int) -> bytes:
        w = Writer()
        w.int32(throttle_time_ms)
        w.int16(self.error_code)
        w.tagged_fields(is_flexible(ApiKey.END_TXN, self.version))
        return bytes(w.buf)
