"""The hand-written hot-path codecs agree with the schema-generated codec, both directions."""

from __future__ import annotations

import os
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from kaflet.protocol import codec
from kaflet.protocol.api_versions import encode_api_versions_response
from kaflet.protocol.fetch import (
    NodeEndpoint,
    PartitionFetchData,
    decode_fetch_request,
    encode_fetch_response,
)
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


@settings(max_examples=60, deadline=None)
@given(version=st.integers(4, 16), data=st.binary(min_size=0, max_size=300), leader=st.booleans())
def test_fetch_response_chunks_decode_with_generated_codec(version, data, leader):
    tid = uuid.uuid4()
    key = tid.bytes if version >= 13 else "t"
    parts = [PartitionFetchData(0, 0, 10, 10, 2, [data] if data else []),
             PartitionFetchData(1, 6, current_leader=(7, 3) if leader else None)]
    nodes = [NodeEndpoint(7, "h7", 9097, "rack-a")] if leader else []
    chunks = encode_fetch_response([(key, parts)], 5, version, 0, 42, nodes)
    body = b"".join(bytes(c) for c in chunks)
    resp = codec.response_class(1).decode(body, version=version)
    assert resp.throttle_time_ms == 5
    if version >= 7:
        assert resp.session_id == 42
    topic = resp.responses[0]
    assert topic.topic_id == tid if version >= 13 else topic.topic == "t"
    p0, p1 = topic.partitions
    assert p0.high_watermark == 10 and p1.error_code == 6
    assert (p0.records or b"") == data
    if version >= 12 and leader:
        assert (p1.current_leader.leader_id, p1.current_leader.leader_epoch) == (7, 3)
    if version >= 16 and leader:
        assert [(n.node_id, n.host, n.port, n.rack) for n in resp.node_endpoints] == [(7, "h7", 9097, "rack-a")]


fetch_partitions = st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(-1, 100), st.integers(0, 2**62),
                                      st.integers(-1, 100), st.integers(-1, 2**62), st.integers(0, 2**31 - 1)),
                            max_size=4)


@settings(max_examples=150, deadline=None)
@given(
    version=st.integers(4, 16),
    topics=st.lists(st.tuples(names, fetch_partitions), max_size=3),
    forgotten=st.lists(st.tuples(names, st.lists(st.integers(0, 2**31 - 1), max_size=3)), max_size=2),
    session=st.tuples(st.integers(0, 2**31 - 1), st.integers(-1, 2**31 - 1)),
    replica=st.tuples(st.integers(-1, 5), st.integers(-1, 2**40)),
    rack=names,
)
def test_fetch_request_matches_generated_codec(version, topics, forgotten, session, replica, rack):
    F = codec.request_class(1)
    ids = {n: uuid.uuid5(uuid.NAMESPACE_DNS, n) for n, _ in topics + forgotten}
    req = F(
        replica_id=replica[0], replica_state=F.ReplicaState(replica_id=replica[0], replica_epoch=replica[1]),
        max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=1,
        session_id=session[0], session_epoch=session[1],
        topics=[F.FetchTopic(topic=n, topic_id=ids[n], partitions=[F.FetchTopic.FetchPartition(
            partition=p, current_leader_epoch=le, fetch_offset=fo, last_fetched_epoch=lfe, log_start_offset=ls,
            partition_max_bytes=mb) for p, le, fo, lfe, ls, mb in ps]) for n, ps in topics],
        forgotten_topics_data=[F.ForgottenTopic(topic=n, topic_id=ids[n], partitions=ps) for n, ps in forgotten],
        rack_id=rack, cluster_id="c1",
    )
    ours = decode_fetch_request(memoryview(bytes(req.encode(version=version))), version)
    assert (ours.max_wait_ms, ours.min_bytes, ours.max_bytes, ours.isolation_level) == (500, 1, 1 << 20, 1)
    assert ours.replica_id == replica[0]
    if version >= 15:
        assert ours.replica_epoch == replica[1]
    if version >= 7:
        assert (ours.session_id, ours.session_epoch) == session
        by_id = version >= 13
        assert [(f.topic_id if by_id else f.name, f.partitions) for f in ours.forgotten_topics] == [
            (ids[n].bytes if by_id else n, ps) for n, ps in forgotten]
    assert ours.rack_id == (rack if version >= 11 else "")
    assert ours.cluster_id == ("c1" if version >= 12 else None)

    def expected(p: tuple) -> tuple:
        part, le, fo, lfe, ls, mb = p
        return (part, le if version >= 9 else -1, fo, lfe if version >= 12 else -1, ls if version >= 5 else -1, mb)

    assert [(t.topic_id if version >= 13 else t.name, t.partitions) for t in ours.topics] == [
        (ids[n].bytes if version >= 13 else n, [expected(p) for p in ps]) for n, ps in topics]


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


HOT_DECODERS = [(decode_produce_request, v) for v in range(3, 11)] + [(decode_fetch_request, v) for v in range(4, 17)]


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=120), st.sampled_from(HOT_DECODERS))
def test_hot_decoders_reject_garbage_with_decode_error_only(data, decoder_and_version):
    decoder, version = decoder_and_version
    try:
        decoder(memoryview(data), version)
    except DecodeError:
        pass


def test_huge_array_count_is_refused_before_allocation():
    r = Reader(b"\x7f\xff\xff\xff" + os.urandom(8))
    try:
        r.array_len(4)
    except DecodeError:
        return
    raise AssertionError("a 2-billion-item array was accepted")
