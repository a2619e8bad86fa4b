"""Proxy mode's view of idempotent producers across a cluster move, without processes."""

from __future__ import annotations

import pytest

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.primitives import DecodeError
from kaflet.protocol.produce import decode_produce_request
from kaflet.protocol.records import Record, build_batch
from kaflet.proxy.producers import ProducerPlacements, produce_head, unknown_producer_answer


def _request(version: int, batches: list[bytes | None], acks: int = -1) -> bytes:
    R = codec.request_class(ApiKey.PRODUCE)
    topic = R.TopicProduceData(name="t", partition_data=[R.TopicProduceData.PartitionProduceData(index=i, records=b)
                                                         for i, b in enumerate(batches)])
    return bytes(R(transactional_id="tx" if version == 8 else None, acks=acks, timeout_ms=1000, topic_data=[topic]).encode(version=version))


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_the_producer_of_a_request_is_its_first_batchs(version: int) -> None:
    batch = build_batch([Record(0, 0, None, b"v")], producer_id=4242, producer_epoch=3, base_sequence=17)
    assert produce_head(version, _request(version, [batch, batch])) == (-1, (4242, 3))
    assert produce_head(version, _request(version, [batch], acks=1)) == (1, (4242, 3))
    plain = build_batch([Record(0, 0, None, b"v")])  # no producer id: not idempotent
    assert produce_head(version, _request(version, [plain])) == (-1, None)
    assert produce_head(version, _request(version, [None])) == (-1, None)
    assert produce_head(version, _request(version, [])) == (-1, None)
    with pytest.raises(DecodeError):
        produce_head(version, _request(version, [batch])[:30])


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_the_answer_to_a_moved_producer_is_unknown_producer_id_everywhere(version: int) -> None:
    batch = build_batch([Record(0, 0, None, b"v")], producer_id=1, producer_epoch=0, base_sequence=0)
    request = decode_produce_request(memoryview(_request(version, [batch, batch])), version)
    answer = codec.decode_response(ApiKey.PRODUCE, version, memoryview(unknown_producer_answer(request, version)))
    [topic] = answer.responses
    assert topic.name == "t"
    assert [(p.index, p.error_code) for p in topic.partition_responses] == [
        (0, ErrorCode.UNKNOWN_PRODUCER_ID), (1, ErrorCode.UNKNOWN_PRODUCER_ID)]
    # The Java client bumps its epoch only when the broker names a log start offset (v5 and later).
    assert version < 5 or all(p.log_start_offset == 0 for p in topic.partition_responses)


def test_a_pair_used_on_another_cluster_is_stale_until_this_one_gives_it_out() -> None:
    placements = ProducerPlacements()
    assert not placements.stale(7, "kafka-a", (5, 0))
    assert not placements.stale(7, "kafka-a", (5, 0))
    assert placements.stale(7, "kafka-b", (5, 0))  # the cluster moved
    assert placements.stale(7, "kafka-b", (5, 0))  # and stays so
    assert not placements.stale(7, "kafka-a", (5, 0))  # back where it was given (e.g. after an outage)
    assert not placements.stale(8, "kafka-b", (5, 0))  # another gateway cluster id's producers are apart
    assert not placements.stale(7, "kafka-b", (5, 1))  # the Java client's bumped epoch
    placements.issued(7, "kafka-b", (5, 0))  # the new place gave the same pair to a new producer
    assert not placements.stale(7, "kafka-b", (5, 0))


def test_the_placements_are_bounded() -> None:
    placements = ProducerPlacements(limit=10)
    assert not placements.stale(7, "a", (1, 0))
    for pid in range(2, 30):
        placements.stale(7, "a", (pid, 0))
    assert len(placements._seen) <= 10
    assert not placements.stale(7, "b", (1, 0))  # forgotten: passed on as before
    assert placements.stale(7, "b", (29, 0))
