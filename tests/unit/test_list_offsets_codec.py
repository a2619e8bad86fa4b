"""The hand-written ListOffsets and OffsetFetch v8 codecs against the generic codec, byte for byte."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.list_offsets import (
    MAX_VERSION,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsTopic,
    ListOffsetsTopicResponse,
    decode_list_offsets_request,
    decode_list_offsets_response,
    encode_list_offsets_request,
    encode_list_offsets_response,
)
from kaflet.protocol.offset_fetch import (
    OffsetFetchGroup,
    OffsetFetchPartition,
    OffsetFetchTopic,
    decode_offset_fetch_response,
    encode_offset_fetch_response,
)

i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(min_size=1, max_size=20)
versions = st.integers(0, MAX_VERSION)

requests = st.builds(
    ListOffsetsRequest, i32, st.integers(0, 1),
    st.lists(st.builds(ListOffsetsTopic, names,
                       st.lists(st.builds(ListOffsetsPartition, i32, i64, i32, i32), max_size=5)), max_size=4))


@st.composite
def responses(draw: st.DrawFn, version: int) -> list[ListOffsetsTopicResponse]:
    def partition() -> Any:
        return st.builds(ListOffsetsPartitionResponse, i32, i16,
                         st.lists(i64, max_size=3) if version == 0 else st.just([]),
                         i64 if version >= 1 else st.just(-1), i64 if version >= 1 else st.just(-1),
                         i32 if version >= 4 else st.just(-1))
    return draw(st.lists(st.builds(ListOffsetsTopicResponse, names, st.lists(partition(), max_size=5)), max_size=4))


def _codec_request(req: ListOffsetsRequest) -> Any:
    R: Any = codec.request_class(ApiKey.LIST_OFFSETS)
    T = R.ListOffsetsTopic
    return R(replica_id=req.replica_id, isolation_level=req.isolation_level, topics=[
        T(name=t.name, partitions=[T.ListOffsetsPartition(partition_index=p.partition_index, timestamp=p.timestamp,
                                                          current_leader_epoch=p.current_leader_epoch,
                                                          max_num_offsets=p.max_num_offsets)
                                   for p in t.partitions]) for t in req.topics])


def _for_version(req: ListOffsetsRequest, version: int) -> ListOffsetsRequest:
    """The request as `version` can carry it (fields it lacks at their defaults)."""
    return ListOffsetsRequest(req.replica_id, req.isolation_level if version >= 2 else 0, [
        ListOffsetsTopic(t.name, [ListOffsetsPartition(p.partition_index, p.timestamp,
                                                       p.current_leader_epoch if version >= 4 else -1,
                                                       p.max_num_offsets if version == 0 else 1)
                                  for p in t.partitions]) for t in req.topics])


@settings(max_examples=300, deadline=None)
@given(requests, versions)
def test_list_offsets_request_matches_the_generic_codec(req: ListOffsetsRequest, version: int) -> None:
    ours = encode_list_offsets_request(req, version)
    assert ours == bytes(_codec_request(req).encode(version=version))
    assert decode_list_offsets_request(memoryview(ours), version) == _for_version(req, version)


@settings(max_examples=300, deadline=None)
@given(st.data(), versions, st.integers(0, 2**31 - 1))
def test_list_offsets_response_matches_the_generic_codec(data: st.DataObject, version: int, throttle: int) -> None:
    topics = data.draw(responses(version))
    R: Any = codec.response_class(ApiKey.LIST_OFFSETS)
    T = R.ListOffsetsTopicResponse
    theirs = R(topics=[T(name=t.name, partitions=[T.ListOffsetsPartitionResponse(
        partition_index=p.partition_index, error_code=p.error_code, old_style_offsets=p.old_style_offsets,
        timestamp=p.timestamp, offset=p.offset, leader_epoch=p.leader_epoch) for p in t.partitions]) for t in topics])
    ours = encode_list_offsets_response(topics, throttle, version)
    assert ours == codec.encode_response(ApiKey.LIST_OFFSETS, version, theirs, throttle)
    assert decode_list_offsets_response(memoryview(ours), version) == topics


offset_fetch_groups = st.lists(st.builds(
    OffsetFetchGroup, names,
    st.lists(st.builds(OffsetFetchTopic, names,
                       st.lists(st.builds(OffsetFetchPartition, i32, i64, i32, st.none() | st.text(max_size=10), i16),
                                max_size=5)), max_size=3), i16), max_size=4)


@settings(max_examples=300, deadline=None)
@given(offset_fetch_groups, st.integers(0, 2**31 - 1))
def test_offset_fetch_v8_response_matches_the_generic_codec(groups: list[OffsetFetchGroup], throttle: int) -> None:
    R: Any = codec.response_class(ApiKey.OFFSET_FETCH)
    G = R.OffsetFetchResponseGroup
    T = G.OffsetFetchResponseTopics
    P = T.OffsetFetchResponsePartitions
    theirs = R(groups=[G(group_id=g.group_id, error_code=g.error_code, topics=[
        T(name=t.name, partitions=[P(partition_index=p.partition_index, committed_offset=p.committed_offset,
                                     committed_leader_epoch=p.committed_leader_epoch, metadata=p.metadata,
                                     error_code=p.error_code) for p in t.partitions]) for t in g.topics])
        for g in groups])
    ours = encode_offset_fetch_response(groups, throttle)
    assert ours == codec.encode_response(ApiKey.OFFSET_FETCH, 8, theirs, throttle)
    assert decode_offset_fetch_response(memoryview(ours)) == groups
