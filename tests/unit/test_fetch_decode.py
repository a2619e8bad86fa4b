"""The follower-side Fetch codecs: the response decoder round trips through kaflet's encoder and
kafka-python's; the request encoder writes the bytes kafka-python's codec writes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.fetch import (
    ENCODE_REQUEST_VERSION,
    AbortedTransaction,
    EpochEndOffset,
    LeaderIdAndEpoch,
    PartitionFetchData,
    SnapshotId,
    decode_fetch_request,
    decode_fetch_response,
    encode_fetch_request,
    encode_fetch_response,
)
from kaflet.protocol.primitives import DecodeError

i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
versions = st.integers(4, 12)


@st.composite
def partitions(draw: st.DrawFn) -> PartitionFetchData:
    chunks = draw(st.lists(st.binary(max_size=300), max_size=3))
    return PartitionFetchData(index=draw(st.integers(0, 2**31 - 1)), error_code=draw(i16),
                              high_watermark=draw(i64), last_stable_offset=draw(i64),
                              log_start_offset=draw(i64), records=list(chunks), preferred_read_replica=draw(i32))


topics_st = st.lists(st.tuples(st.text(min_size=1, max_size=40), st.lists(partitions(), max_size=4)), max_size=4)


@settings(max_examples=300, deadline=None)
@given(topics=topics_st, throttle=i32, version=versions, error_code=i16, session_id=i32)
def test_round_trip_with_kaflet_encoder(topics: list[tuple[str, list[PartitionFetchData]]], throttle: int,
                                        version: int, error_code: int, session_id: int) -> None:
    chunks = encode_fetch_response(topics, throttle, version, error_code=error_code, session_id=session_id)
    assert all(isinstance(c, bytes) for c in chunks)
    body = bytearray(b"".join(chunks))  # type: ignore[arg-type]
    decoded = decode_fetch_response(memoryview(body), version)
    assert decoded.throttle_time_ms == throttle
    assert (decoded.error_code, decoded.session_id) == ((error_code, session_id) if version >= 7 else (0, 0))
    assert [name for name, _ in decoded.topics] == [name for name, _ in topics]
    for (_, sent), (_, got) in zip(topics, decoded.topics, strict=True):
        assert len(sent) == len(got)
        for s, g in zip(sent, got, strict=True):
            assert (g.index, g.error_code, g.high_watermark, g.last_stable_offset) == \
                (s.index, s.error_code, s.high_watermark, s.last_stable_offset)
            assert g.log_start_offset == (s.log_start_offset if version >= 5 else -1)
            assert g.preferred_read_replica == (s.preferred_read_replica if version >= 11 else -1)
            assert g.aborted_transactions == []
            assert bytes(g.records) == b"".join(s.records)  # type: ignore[arg-type]
            if len(g.records):
                # A view into the received buffer, not a copy.
                assert g.records.obj is body
            assert g.diverging_epoch is None and g.current_leader is None and g.snapshot_id is None


@st.composite
def kp_partitions(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "partition_index": draw(st.integers(0, 2**31 - 1)), "error_code": draw(i16),
        "high_watermark": draw(i64), "last_stable_offset": draw(i64), "log_start_offset": draw(i64),
        "aborted_transactions": draw(st.none() | st.lists(st.tuples(i64, i64), max_size=4)),
        "preferred_read_replica": draw(i32), "records": draw(st.none() | st.binary(max_size=200)),
        "diverging_epoch": draw(st.none() | st.tuples(i32, i64)),
        "current_leader": draw(st.none() | st.tuples(i32, i32)),
        "snapshot_id": draw(st.none() | st.tuples(i64, i32)),
    }


def _kafka_python_body(version: int, throttle: int, topics: list[tuple[str, list[dict[str, Any]]]]) -> bytes:
    R = codec.response_class(ApiKey.FETCH)
    T = R.FetchableTopicResponse
    P = T.PartitionData
    parts_of = []
    for name, parts in topics:
        built = []
        for p in parts:
            fields = {k: p[k] for k in ("partition_index", "error_code", "high_watermark", "last_stable_offset",
                                         "log_start_offset", "preferred_read_replica", "records")}
            fields["aborted_transactions"] = None if p["aborted_transactions"] is None else [
                P.AbortedTransaction(producer_id=a, first_offset=b) for a, b in p["aborted_transactions"]]
            if version >= 12:
                if p["diverging_epoch"] is not None:
                    fields["diverging_epoch"] = P.EpochEndOffset(epoch=p["diverging_epoch"][0],
                                                                 end_offset=p["diverging_epoch"][1])
                if p["current_leader"] is not None:
                    fields["current_leader"] = P.LeaderIdAndEpoch(leader_id=p["current_leader"][0],
                                                                  leader_epoch=p["current_leader"][1])
                if p["snapshot_id"] is not None:
                    fields["snapshot_id"] = P.SnapshotId(end_offset=p["snapshot_id"][0], epoch=p["snapshot_id"][1])
            built.append(P(**fields))
        parts_of.append(T(topic=name, partitions=built))
    return bytes(R(throttle_time_ms=throttle, error_code=0, session_id=7, responses=parts_of).encode(version=version))


@settings(max_examples=200, deadline=None)
@given(version=versions, throttle=i32,
       topics=st.lists(st.tuples(st.text(min_size=1, max_size=20), st.lists(kp_partitions(), max_size=3)), max_size=3))
def test_decodes_what_kafka_python_encodes(version: int, throttle: int,
                                           topics: list[tuple[str, list[dict[str, Any]]]]) -> None:
    """An independent encoder: aborted transactions, null records and the v12 tagged fields."""
    body = _kafka_python_body(version, throttle, topics)
    decoded = decode_fetch_response(body, version)
    assert decoded.throttle_time_ms == throttle
    assert decoded.session_id == (7 if version >= 7 else 0)
    for (name, sent), (got_name, got) in zip(topics, decoded.topics, strict=True):
        assert got_name == name
        for s, g in zip(sent, got, strict=True):
            assert g.index == s["partition_index"] and g.error_code == s["error_code"]
            assert (g.high_watermark, g.last_stable_offset) == (s["high_watermark"], s["last_stable_offset"])
            assert g.log_start_offset == (s["log_start_offset"] if version >= 5 else -1)
            expected_aborted = (None if s["aborted_transactions"] is None
                                else [AbortedTransaction(*a) for a in s["aborted_transactions"]])
            assert g.aborted_transactions == expected_aborted
            assert g.preferred_read_replica == (s["preferred_read_replica"] if version >= 11 else -1)
            assert bytes(g.records) == (s["records"] or b"")
            if version >= 12:
                assert g.diverging_epoch == (EpochEndOffset(*s["diverging_epoch"]) if s["diverging_epoch"] else None)
                assert g.current_leader == (LeaderIdAndEpoch(*s["current_leader"]) if s["current_leader"] else None)
                assert g.snapshot_id == (SnapshotId(*s["snapshot_id"]) if s["snapshot_id"] else None)


@settings(max_examples=300, deadline=None)
@given(topics=topics_st, version=versions, data=st.data())
def test_truncated_or_corrupted_bodies_raise_decode_error(topics: list[tuple[str, list[PartitionFetchData]]],
                                                          version: int, data: st.DataObject) -> None:
    body = bytearray(b"".join(encode_fetch_response(topics, 0, version)))  # type: ignore[arg-type]
    # The decoder reads every byte the encoder wrote, so any truncation is noticed.
    cut = data.draw(st.integers(0, len(body) - 1))
    with pytest.raises(DecodeError):
        decode_fetch_response(memoryview(body)[:cut], version)
    if body:
        pos = data.draw(st.integers(0, len(body) - 1))
        body[pos] ^= data.draw(st.integers(1, 255))
        try:
            decode_fetch_response(body, version)  # anything but DecodeError is a bug
        except DecodeError:
            pass


def test_truncated_body_is_a_decode_error() -> None:
    body = b"".join(encode_fetch_response(  # type: ignore[arg-type]
        [("t", [PartitionFetchData(0, records=[b"x" * 100])])], 0, 12))
    with pytest.raises(DecodeError):
        decode_fetch_response(body[:-20], 12)


def test_hostile_counts_are_bounded() -> None:
    # v12: one topic "t", one partition, then an aborted-transaction count of 2**28.
    body = (b"\x00\x00\x00\x00" + b"\x00\x00" + b"\x00\x00\x00\x00" + b"\x02" + b"\x02t" + b"\x02"
            + b"\x00" * 30 + b"\x81\x80\x80\x80\x01")
    with pytest.raises(DecodeError, match="aborted transactions cannot fit"):
        decode_fetch_response(body, 12)


@pytest.mark.parametrize("version", [3, 13])
def test_other_versions_are_refused(version: int) -> None:
    with pytest.raises(DecodeError):
        decode_fetch_response(b"", version)


# ---------------------------------------------------------------- the follower's request encoder

fetch_partitions = st.lists(st.tuples(st.integers(0, 2**31 - 1), i32, i64, i32, i64, i32), max_size=5)


@settings(max_examples=200, deadline=None)
@given(replica=i32, wait=i32, min_bytes=i32, max_bytes=i32, isolation=st.integers(0, 1), session_id=i32,
       epoch=i32, topics=st.lists(st.tuples(st.text(min_size=1, max_size=30), fetch_partitions), max_size=3),
       forgotten=st.lists(st.tuples(st.text(min_size=1, max_size=30), st.lists(i32, max_size=4)), max_size=3),
       rack=st.text(max_size=10))
def test_request_encoder_writes_what_kafka_pythons_codec_writes(
        replica: int, wait: int, min_bytes: int, max_bytes: int, isolation: int, session_id: int, epoch: int,
        topics: list[tuple[str, list[Any]]], forgotten: list[tuple[str, list[int]]], rack: str) -> None:
    F = codec.request_class(ApiKey.FETCH)
    FT, FP = F.FetchTopic, F.FetchTopic.FetchPartition
    reference = F(replica_id=replica, max_wait_ms=wait, min_bytes=min_bytes, max_bytes=max_bytes,
                  isolation_level=isolation, session_id=session_id, session_epoch=epoch,
                  topics=[FT(topic=name, partitions=[
                      FP(partition=p, current_leader_epoch=e, fetch_offset=o, last_fetched_epoch=le,
                         log_start_offset=ls, partition_max_bytes=mb) for p, e, o, le, ls, mb in parts])
                      for name, parts in topics],
                  forgotten_topics_data=[F.ForgottenTopic(topic=name, partitions=ps) for name, ps in forgotten],
                  rack_id=rack).encode(version=ENCODE_REQUEST_VERSION)
    mine = encode_fetch_request(replica, wait, min_bytes, max_bytes, isolation, session_id, epoch, topics, forgotten,
                                rack)
    assert mine == bytes(reference)
    decoded = decode_fetch_request(memoryview(mine), ENCODE_REQUEST_VERSION)
    assert [(t.name, t.partitions) for t in decoded.topics] == [(n, list(ps)) for n, ps in topics]
    assert [(f.name, f.partitions) for f in decoded.forgotten_topics] == forgotten
