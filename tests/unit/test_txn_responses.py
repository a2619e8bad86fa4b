"""The hand-written AddPartitionsToTxn and EndTxn responses are byte for byte what the generic
codec encodes for every version kaflet offers."""

from __future__ import annotations

from typing import Any

import pytest

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode as E
from kaflet.protocol.txn_responses import AddPartitionsToTxnResponse, EndTxnResponse
from kaflet.server.handlers import add_partitions_to_txn, end_txn

ERRORS = {("orders", 3): E.UNKNOWN_TOPIC_OR_PARTITION, ("orders", 0): E.OPERATION_NOT_ATTEMPTED,
          ("payments-é", 1): E.OPERATION_NOT_ATTEMPTED, ("orders", 7): E.OPERATION_NOT_ATTEMPTED}


@pytest.mark.parametrize("version", range(add_partitions_to_txn.MIN_VERSION, add_partitions_to_txn.MAX_VERSION + 1))
@pytest.mark.parametrize("errors", [ERRORS, {}], ids=["partitions", "none"])
def test_add_partitions_to_txn(version: int, errors: dict[tuple[str, int], int]) -> None:
    R: Any = codec.response_class(ApiKey.ADD_PARTITIONS_TO_TXN)
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), code in errors.items():
        by_topic.setdefault(topic, []).append(R.AddPartitionsToTxnTopicResult.AddPartitionsToTxnPartitionResult(
            partition_index=index, partition_error_code=code))
    generic = R(results_by_topic_v3_and_below=[R.AddPartitionsToTxnTopicResult(name=t, results_by_partition=ps)
                                               for t, ps in by_topic.items()])
    expected = codec.encode_response(ApiKey.ADD_PARTITIONS_TO_TXN, version, generic, 250)
    assert AddPartitionsToTxnResponse(errors, version).encode(250) == expected
    decoded = codec.decode_response(ApiKey.ADD_PARTITIONS_TO_TXN, version, memoryview(expected))
    assert {(t.name, r.partition_index): r.partition_error_code for t in decoded.results_by_topic_v3_and_below
            for r in t.results_by_partition} == errors


@pytest.mark.parametrize("version", range(end_txn.MIN_VERSION, end_txn.MAX_VERSION + 1))
def test_end_txn(version: int) -> None:
    R: Any = codec.response_class(ApiKey.END_TXN)
    expected = codec.encode_response(ApiKey.END_TXN, version, R(error_code=E.PRODUCER_FENCED), 17)
    assert EndTxnResponse(E.PRODUCER_FENCED, version).encode(17) == expected
