"""The hand-written hot-path codecs agree with the schema-generated codec, both directions."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from kaflet.protocol import codec
from kaflet.protocol.api_versions import encode_api_versions_response
from kaflet.protocol.fetch import PartitionFetchData, encode_fetch_response
from kaflet.protocol.header import parse_request_header, response_header
from kaflet.protocol.primitives import DecodeError, Reader
from kaflet.protocol.produce import PartitionProduceResult, decode_produce_request, encode_produce_response

names = st.text(alphabet="abcdefgh._-", min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(
    version=st.integers(3, 10),
    txn=st.none() | names,
    acks=st.sampled_from([-1, 0, 1]),
    topics=st.lists(
        st.tuples(names, st.lists(st.tuples(st.integers(0, 100), st.none() | st.binary(max_size=64)), max_size=3)),
        max_size=3,
    ),
)
def test_produce_request_matches_generated_codec(version, txn, acks, topics):
    cls = codec.request_class(0)
    req = cls(
        transactional_id=txn,
        acks=acks,
        timeout_ms=1500,
        topic_data=[
            cls.TopicProduceData(name=n, partition_data=[cls.TopicProduceData.PartitionProduceData(index=i, records=r) for i, r in ps])
            for n, ps in topics
        ],
    )
    body = memoryview(bytes(req.encode(version=version)))
    ours = decode_produce_request(body, version)
    assert ours.transactional_id == txn and ours.acks == acks and ours.timeout_ms == 1500
    assert [(t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partitions]) for t in ours.topics] == [
        (n, list(ps)) for n, ps in topics
    ]


@settings(max_examples=40, deadline=None)
@given(version=st.integers(3, 10), base=st.integers(-1, 2**40), err=st.integers(0, 100))
def test_produce_response_decodes_with_generated_codec(version, base, err):
    body = encode_produce_response(
        [("orders", [PartitionProduceResult(3, err, base, -1, 7, "boom" if err else None)])], 12, version
    )
    resp = codec.response_class(0).decode(body, version=version)
    part = resp.responses[0].partition_responses[0]
    assert resp.throttle_time_ms == 12
    assert (part.index, part.error_code, part.base_offset) == (3, err, base)
    if version >= 5:
        assert part.log_start_offset == 7


@settings(max_examples=40, deadline=None)
@given(
    version=st.integers(3, 10),
    errors=st.lists(st.tuples(st.integers(0, 2**31 - 1), st.none() | st.text(max_size=40)), max_size=4),
    message=st.none() | st.text(max_size=60),
)
def test_produce_response_record_errors_decode_with_generated_codec(version, errors, message):
    body = encode_produce_response(
        [("t", [PartitionProduceResult(0, 87, -1, -1, 0, message, errors), PartitionProduceResult(1, 0, 5, -1, 0)])],
        0, version,
    )
    resp = codec.response_class(0).decode(body, version=version)
    bad, good = resp.responses[0].partition_responses
    assert (good.index, good.error_code, good.base_offset) == (1, 0, 5)
    if version >= 8:  # KIP-467: record_errors and error_message (flexible from v9)
        assert [(r.batch_index, r.batch_index_error_message) for r in bad.record_errors] == errors
        assert bad.error_message == message and good.record_errors == [] and good.error_message is None
    # Byte for byte what the generated codec writes for the same content.
    again = codec.build_response(0, responses=resp.responses, throttle_time_ms=resp.throttle_time_ms)
    assert codec.encode_response(0, version, again) == body


@settings(max_examples=40, deadline=None)
@given(version=st.integers(4, 12), data=st.binary(min_size=0, max_size=300))
def test_fetch_response_chunks_decode_with_generated_codec(version, data):
    parts = [PartitionFetchData(0, 0, 10, 10, 2, [data] if data else []), PartitionFetchData(1, 1)]
    chunks = encode_fetch_response([("t", parts)], 0, version)
    body = b"".join(bytes(c) for c in chunks)
    resp = codec.response_class(1).decode(body, version=version)
    p0, p1 = resp.responses[0].partitions
    assert p0.high_watermark == 10 and p1.error_code == 1
    assert (p0.records or b"") == data


def test_api_versions_v3_has_no_top_level_tagged_fields():
    body = encode_api_versions_response(0, [(0, 3, 10), (18, 0, 3)], 0, 3)
    # error, compact array(2), 2 x (key, min, max, tags), throttle, empty tag section
    assert body == b"\x00\x00" + b"\x03" + b"\x00\x00\x00\x03\x00\x0a\x00" + b"\x00\x12\x00\x00\x00\x03\x00" + b"\x00\x00\x00\x00" + b"\x00"
    resp = codec.response_class(18).decode(body, version=3)
    assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == [(0, 3, 10), (18, 0, 3)]


def test_request_header_v2_keeps_client_id_non_compact():
    frame = memoryview(b"\x00\x03\x00\x0c\x00\x00\x00\x07\x00\x03abc\x00rest")
    h = parse_request_header(frame)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id, h.flexible) == (3, 12, 7, "abc", True)
    assert bytes(frame[h.body_offset :]) == b"rest"
    assert response_header(7, 3, True) == b"\x00\x00\x00\x07\x00"
    assert response_header(7, 18, True) == b"\x00\x00\x00\x07"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80), st.integers(3, 10))
def test_produce_decoder_rejects_garbage_with_decode_error_only(data, version):
    try:
        decode_produce_request(memoryview(data), version)
    except DecodeError:
        pass


def test_huge_array_count_is_refused_before_allocation():
    r = Reader(b"\x7f\xff\xff\xff" + os.urandom(8))
    try:
        r.array_len(4)
    except DecodeError:
        return
    raise AssertionError("a 2-billion-item array was accepted")
