"""The controller-to-broker messages round-trip through the generic codec."""

from __future__ import annotations

import uuid

import pytest

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey, is_flexible
from kaflet.protocol.primitives import DecodeError


def _leader_and_isr() -> object:
    R = codec.request_class(ApiKey.LEADER_AND_ISR)
    P = R.LeaderAndIsrTopicState.LeaderAndIsrPartitionState
    return R(controller_id=1, controller_epoch=3, broker_epoch=77, type=1,
             topic_states=[R.LeaderAndIsrTopicState(topic_name="orders", topic_id=uuid.UUID(int=5), partition_states=[
                 P(partition_index=2, controller_epoch=3, leader=1, leader_epoch=4, isr=[1, 2], zk_version=6,
                   replicas=[1, 2, 3], adding_replicas=[], removing_replicas=[], is_new=True)])],
             live_leaders=[R.LeaderAndIsrLiveLeader(broker_id=1, host_name="127.0.0.1", port=9092)])


def _update_metadata() -> object:
    R = codec.request_class(ApiKey.UPDATE_METADATA)
    T = R.UpdateMetadataTopicState
    B = R.UpdateMetadataBroker
    return R(controller_id=1, controller_epoch=3, broker_epoch=9, topic_states=[T(
        topic_name="orders", topic_id=uuid.UUID(int=5), partition_states=[T.UpdateMetadataPartitionState(
            partition_index=0, controller_epoch=3, leader=2, leader_epoch=1, isr=[2], zk_version=1,
            replicas=[2, 3], offline_replicas=[3])])],
        live_brokers=[B(id=2, endpoints=[B.UpdateMetadataEndpoint(port=1, host="h", listener="PLAINTEXT",
                                                                   security_protocol=0)], rack=None)])


def _stop_replica() -> object:
    R = codec.request_class(ApiKey.STOP_REPLICA)
    T = R.StopReplicaTopicState
    return R(controller_id=1, controller_epoch=3, broker_epoch=9, topic_states=[T(
        topic_name="orders", partition_states=[T.StopReplicaPartitionState(partition_index=1, leader_epoch=-2,
                                                                           delete_partition=True)])])


def _controlled_shutdown() -> object:
    return codec.request_class(ApiKey.CONTROLLED_SHUTDOWN)(broker_id=2, broker_epoch=44)


@pytest.mark.parametrize(("key", "version", "build"), [
    (ApiKey.LEADER_AND_ISR, 5, _leader_and_isr),
    (ApiKey.UPDATE_METADATA, 7, _update_metadata),
    (ApiKey.STOP_REPLICA, 3, _stop_replica),
    (ApiKey.CONTROLLED_SHUTDOWN, 3, _controlled_shutdown),
])
def test_request_round_trip(key: ApiKey, version: int, build: object) -> None:
    req = build()  # type: ignore[operator]
    data = bytes(req.encode(version=version))
    assert is_flexible(key, version)
    decoded = codec.decode_request(key, version, memoryview(data))
    if key in (ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA):
        # controller_codec's objects (test_controller_codec.py compares their fields)
        assert decoded.encode(version=version) == data
    else:
        assert decoded == req
    assert codec.request_class(key).max_version == version
    with pytest.raises(DecodeError):
        codec.decode_request(key, version, memoryview(data[: len(data) // 2]))


def test_responses_round_trip() -> None:
    R = codec.response_class(ApiKey.CONTROLLED_SHUTDOWN)
    resp = R(error_code=0, remaining_partitions=[R.RemainingPartition(topic_name="t", partition_index=3)])
    data = codec.encode_response(ApiKey.CONTROLLED_SHUTDOWN, 3, resp)
    assert R.decode(data, version=3) == resp
    L = codec.response_class(ApiKey.LEADER_AND_ISR)
    T = L.LeaderAndIsrTopicError
    resp2 = L(error_code=0, topics=[T(topic_id=uuid.UUID(int=7), partition_errors=[
        T.LeaderAndIsrPartitionError(partition_index=0, error_code=0)])])
    data2 = codec.encode_response(ApiKey.LEADER_AND_ISR, 5, resp2)
    assert L.decode(data2, version=5) == resp2
    assert codec.decode_response(ApiKey.LEADER_AND_ISR, 5, memoryview(data2)).encode(version=5) == data2
