"""The hand-written LeaderAndIsr and UpdateMetadata codec against the generic codec.

Hypothesis builds each message both ways; the bytes must be the same, each side must parse the
other's bytes into the same fields, and malformed bodies must raise DecodeError only.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaflet.protocol import codec
from kaflet.protocol import controller_codec as cc
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.primitives import DecodeError

LAIR = codec.request_class(ApiKey.LEADER_AND_ISR)
LAIR_ANSWER = codec.response_class(ApiKey.LEADER_AND_ISR)
UM = codec.request_class(ApiKey.UPDATE_METADATA)

ZERO_ID = uuid.UUID(int=0)
int32 = st.integers(-(2**31), 2**31 - 1)
# Lists long enough to take the slow paths too: over 126 items (a two-byte count).
ids = st.one_of(st.lists(int32, max_size=4), st.integers(125, 128).map(lambda n: list(range(-1, n))))
text = st.text(min_size=0, max_size=140)
topic_id = st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1))

lair_partition = st.builds(cc.LeaderAndIsrPartitionState, int32, int32, int32, int32, ids, int32, ids, ids, ids,
                           st.booleans())
lair = st.builds(
    cc.LeaderAndIsrRequest, int32, int32, st.integers(-(2**63), 2**63 - 1), st.integers(-128, 127),
    st.lists(st.builds(cc.LeaderAndIsrTopicState, text, topic_id, st.lists(lair_partition, max_size=4)), max_size=3),
    st.lists(st.builds(cc.LeaderAndIsrLiveLeader, int32, text, int32), max_size=3))
um_partition = st.builds(cc.UpdateMetadataPartitionState, int32, int32, int32, int32, ids, int32, ids, ids)
um = st.builds(
    cc.UpdateMetadataRequest, int32, int32, st.integers(-(2**63), 2**63 - 1),
    st.lists(st.builds(cc.UpdateMetadataTopicState, text, topic_id, st.lists(um_partition, max_size=4)), max_size=3),
    st.lists(st.builds(cc.UpdateMetadataBroker, int32, st.lists(st.builds(
        cc.UpdateMetadataEndpoint, int32, text, text, st.integers(-(2**15), 2**15 - 1)), max_size=2),
        st.one_of(st.none(), text)), max_size=3))
lair_answer = st.builds(cc.LeaderAndIsrResponse, st.integers(-(2**15), 2**15 - 1), st.lists(st.builds(
    cc.LeaderAndIsrTopicError, topic_id, st.one_of(
        st.lists(st.builds(cc.LeaderAndIsrPartitionError, int32, st.integers(-(2**15), 2**15 - 1)), max_size=4),
        st.integers(126, 128).map(lambda n: [cc.LeaderAndIsrPartitionError(i, 0) for i in range(n)]))),
    max_size=3))


def _generic(message: Any, cls: Any) -> Any:
    """The generic codec's object with the same fields as a controller_codec message."""
    fields = {}
    for f in dataclasses.fields(message):
        if not f.compare:  # kaflet's own bookkeeping, not a field of the message
            continue
        value = getattr(message, f.name)
        if isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
            # The generic codec names its nested classes as controller_codec does.
            item_cls = getattr(cls, type(value[0]).__name__)
            value = [_generic(v, item_cls) for v in value]
        fields[f.name] = value
    return cls(**fields)


def _fields(message: Any) -> Any:
    """A message's fields as plain values, whichever codec made it (``like`` names them)."""
    if isinstance(message, list):
        return [_fields(m) for m in message]
    if dataclasses.is_dataclass(message):
        return {f.name: _fields(getattr(message, f.name)) for f in dataclasses.fields(message) if f.compare}
    if isinstance(getattr(message, "fields", None), dict):  # the generic codec's message
        # It reads the all-zero topic id as None; controller_codec keeps the UUID.
        return {n: ZERO_ID if n == "topic_id" and getattr(message, n) is None else _fields(getattr(message, n))
                for n in message.fields}
    return message


def _same(own: Any, generic: Any) -> None:
    own_fields = _fields(own)
    assert own_fields == {n: _fields(getattr(generic, n)) for n in own_fields}


REQUESTS = {  # api key: (version, strategy, parser, the generic codec's class)
    ApiKey.LEADER_AND_ISR: (5, lair, cc.decode_leader_and_isr_request, LAIR),
    ApiKey.UPDATE_METADATA: (7, um, cc.decode_update_metadata_request, UM),
}


@settings(max_examples=50, deadline=None)
@given(request=um, other_epoch=st.integers(-(2**63), 2**63 - 1))
def test_update_metadata_requests_sharing_their_topics_encode_as_alone(request: cc.UpdateMetadataRequest,
                                                                       other_epoch: int) -> None:
    """The controller's broadcast: one encoding of the topic states serves every broker's request."""
    shared: list[bytes] = []
    first = dataclasses.replace(request, encoded_topics=shared)
    second = dataclasses.replace(request, broker_epoch=other_epoch, encoded_topics=shared)
    assert first.encode(7) == request.encode(7)
    assert len(shared) == 1
    assert second.encode(7) == dataclasses.replace(request, broker_epoch=other_epoch).encode(7)


@pytest.mark.parametrize("key", list(REQUESTS))
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_requests_are_the_generic_codecs(key: ApiKey, data: st.DataObject) -> None:
    version, strategy, parse, generic_class = REQUESTS[key]
    request = data.draw(strategy)
    body = request.encode(version=version)
    assert body == bytes(_generic(request, generic_class).encode(version=version))
    parsed = parse(memoryview(body))
    assert parsed == request
    _same(parsed, generic_class.decode(body, version=version))
    assert codec.decode_request(key, version, memoryview(body)) == request


@settings(max_examples=100, deadline=None)
@given(answer=lair_answer)
def test_leader_and_isr_response_is_the_generic_codecs(answer: cc.LeaderAndIsrResponse) -> None:
    data = answer.encode(version=5)
    assert data == bytes(_generic(answer, LAIR_ANSWER).encode(version=5))
    assert codec.encode_response(ApiKey.LEADER_AND_ISR, 5, answer) == data  # the dispatcher's path
    assert cc.decode_leader_and_isr_response(data) == answer
    assert codec.decode_response(ApiKey.LEADER_AND_ISR, 5, memoryview(data)) == answer


@given(code=st.integers(-(2**15), 2**15 - 1))
def test_update_metadata_response_is_the_generic_codecs(code: int) -> None:
    answer = cc.UpdateMetadataResponse(code)
    data = answer.encode(version=7)
    assert data == bytes(codec.response_class(ApiKey.UPDATE_METADATA)(error_code=code).encode(version=7))
    assert codec.decode_response(ApiKey.UPDATE_METADATA, 7, memoryview(data)) == answer
    with pytest.raises(DecodeError):
        cc.decode_update_metadata_response(data[:2])


def test_tagged_fields_are_skipped() -> None:
    # A newer sender may add tagged fields anywhere; each section is skipped whole.
    request = cc.LeaderAndIsrRequest(1, 2, 3, 0, [cc.LeaderAndIsrTopicState("t", uuid.UUID(int=9), [
        cc.LeaderAndIsrPartitionState(0, 2, 1, 5, [1], 7, [1, 2])])], [])
    data = bytearray(request.encode(version=5))
    # The partition's tags are the last byte before the topic's tags, the leaders and the request's.
    tags_at = len(data) - 4
    assert data[tags_at] == 0
    data[tags_at:tags_at + 1] = bytes([1, 5, 2, 0xAB, 0xCD])  # one field: tag 5, two bytes
    assert cc.decode_leader_and_isr_request(data) == request


@pytest.mark.parametrize("parse, good", [
    (cc.decode_leader_and_isr_request, cc.LeaderAndIsrRequest(1, 2, 3, 0, [cc.LeaderAndIsrTopicState(
        "orders", uuid.UUID(int=5), [cc.LeaderAndIsrPartitionState(0, 2, 1, 5, [1, 2], 7, [1, 2, 3])])],
        [cc.LeaderAndIsrLiveLeader(1, "h", 9092)]).encode(5)),
    (cc.decode_update_metadata_request, cc.UpdateMetadataRequest(1, 2, 3, [cc.UpdateMetadataTopicState(
        "orders", uuid.UUID(int=5), [cc.UpdateMetadataPartitionState(0, 2, 1, 5, [1, 2], 7, [1, 2, 3], [3])])],
        [cc.UpdateMetadataBroker(1, [cc.UpdateMetadataEndpoint(9092, "h", "PLAINTEXT", 0)], None)]).encode(7)),
    (cc.decode_leader_and_isr_response, cc.LeaderAndIsrResponse(0, [cc.LeaderAndIsrTopicError(
        uuid.UUID(int=5), [cc.LeaderAndIsrPartitionError(0, 0)])]).encode(5)),
])
def test_malformed_bodies_raise_decode_error(parse: Any, good: bytes) -> None:
    parse(good)
    for cut in range(len(good)):
        with pytest.raises(DecodeError):
            parse(good[:cut])
    with pytest.raises(DecodeError, match="left over"):
        parse(good + b"\x00")


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=200))
def test_garbage_raises_decode_error_only(body: bytes) -> None:
    for parse in (cc.decode_leader_and_isr_request, cc.decode_update_metadata_request,
                  cc.decode_leader_and_isr_response):
        try:
            parse(body)
        except DecodeError:
            pass


def test_a_huge_count_builds_nothing() -> None:
    # A count of 2**28 partitions in a 40-byte body is refused before any item is read.
    head = cc.LeaderAndIsrRequest(1, 2, 3, 0, [], []).encode(5)[:17]
    body = head + bytes([2, 2]) + b"t" + bytes(16) + bytes([0x80, 0x80, 0x80, 0x80, 0x01])
    with pytest.raises(DecodeError, match="cannot fit"):
        cc.decode_leader_and_isr_request(body)


def test_other_versions_are_refused() -> None:
    with pytest.raises(ValueError, match="only version 5"):
        cc.LeaderAndIsrRequest(1, 2, 3, 0, [], []).encode(version=4)
