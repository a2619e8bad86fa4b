"""The hand-written ListOffsets and OffsetFetch v8 codecs against the generic codec, byte for byte,
and the DescribeGroups v5 member-count reader against answers the generic codec wrote."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.describe_groups import VERSION as DESCRIBE_GROUPS_VERSION
from kaflet.protocol.describe_groups import GroupMembers, decode_member_counts
from kaflet.protocol.list_offsets import (
    MAX_VERSION,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsTopic,
    ListOffsetsTopicResponse,
    decode_list_offsets_request,
    encode_list_offsets_request,
    encode_list_offsets_response,
    read_offsets,
)
from kaflet.protocol.offset_fetch import (
    OffsetFetchGroup,
    OffsetFetchPartition,
    OffsetFetchTopic,
    encode_offset_fetch_response,
    read_committed,
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
    assert read_offsets(memoryview(ours), version) == {
        (t.name, p.partition_index): p.offset if version else p.old_style_offsets[0]
        for t in topics for p in t.partitions if p.error_code == 0 and (version or p.old_style_offsets)}


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
    expected: dict[str, dict[tuple[str, int], int]] = {}
    for g in groups:
        if g.error_code == 0:
            expected[g.group_id] = {(t.name, p.partition_index): p.committed_offset for t in g.topics
                                    for p in t.partitions if p.error_code == 0 and p.committed_offset >= 0}
    assert read_committed(memoryview(ours)) == expected


members = st.fixed_dictionaries({
    "member_id": st.text(max_size=10), "group_instance_id": st.none() | st.text(max_size=10),
    "client_id": st.text(max_size=10), "client_host": st.text(max_size=10),
    "member_metadata": st.binary(max_size=20), "member_assignment": st.binary(max_size=20)})
described_groups = st.lists(st.fixed_dictionaries({
    "error_code": i16, "group_id": names, "group_state": st.text(max_size=12), "protocol_type": st.text(max_size=8),
    "protocol_data": st.text(max_size=8), "members": st.lists(members, max_size=4),
    "authorized_operations": st.none() | st.sets(st.integers(2, 12))}),
    max_size=4)


@settings(max_examples=300, deadline=None)
@given(described_groups, st.integers(0, 2**31 - 1))
def test_describe_groups_member_counts_read_the_generic_codecs_answers(groups: list[dict[str, Any]],
                                                                        throttle: int) -> None:
    R: Any = codec.response_class(ApiKey.DESCRIBE_GROUPS)
    G = R.DescribedGroup
    M = G.DescribedGroupMember
    theirs = R(groups=[G(**{**g, "members": [M(**m) for m in g["members"]]}) for g in groups])
    body = codec.encode_response(ApiKey.DESCRIBE_GROUPS, DESCRIBE_GROUPS_VERSION, theirs, throttle)
    assert decode_member_counts(memoryview(body)) == [
        GroupMembers(g["error_code"], g["group_id"], len(g["members"])) for g in groups]
