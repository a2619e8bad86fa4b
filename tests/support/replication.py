"""Helpers for replication tests: controller requests as the controller builds them, and an
in-process leader that answers a follower's requests from a real ReplicaManager.

``LoopbackLeader`` stands in for the BrokerClient connection of a follower's fetcher (unit tests
only). It answers Fetch, OffsetForLeaderEpoch and ListOffsets with the leader-side code the
broker's handlers use (``kaflet.replication.follower_fetch``, ``ReplicaManager``), and every
request and response goes through the real codecs (the Fetch response through the hand-written
encoder and decoder), so the fetcher sees what it would see on a socket.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

from kaflet.network.client import BrokerConnectionError
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode, KafkaError
from kaflet.protocol.fetch import PartitionFetchData, encode_fetch_response
from kaflet.replication.follower_fetch import fetch_upper_bound, record_follower_fetch
from kaflet.replication.replica_manager import ReplicaManager

TOPIC_ID = uuid.UUID("6c3a3f43-5a5f-4b8f-9a56-2c0d1f0e7a11")


class Clock:
    """A settable clock in milliseconds (a partition's or replica manager's ``now_ms``)."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def leader_and_isr(controller_epoch: int, topic: str, partitions: list[dict[str, Any]], *,
                   broker_epoch: int = -1, controller_id: int = 1, topic_id: uuid.UUID = TOPIC_ID,
                   live_leaders: list[tuple[int, str, int]] = ()) -> Any:  # type: ignore[assignment]
    """A LeaderAndIsr v5 request; each partition dict has index, leader, leader_epoch, isr,
    replicas and optionally zk_version."""
    R = codec.request_class(ApiKey.LEADER_AND_ISR)
    T = R.LeaderAndIsrTopicState
    P = T.LeaderAndIsrPartitionState
    states = [P(partition_index=p["index"], controller_epoch=controller_epoch, leader=p["leader"],
                leader_epoch=p["leader_epoch"], isr=p["isr"], zk_version=p.get("zk_version", 0),
                replicas=p["replicas"], adding_replicas=[], removing_replicas=[], is_new=p.get("is_new", False))
              for p in partitions]
    return R(controller_id=controller_id, controller_epoch=controller_epoch, broker_epoch=broker_epoch, type=0,
             topic_states=[T(topic_name=topic, topic_id=topic_id, partition_states=states)],
             live_leaders=[R.LeaderAndIsrLiveLeader(broker_id=b, host_name=h, port=port)
                           for b, h, port in live_leaders])


def stop_replica(controller_epoch: int, topic: str, partitions: list[tuple[int, int, bool]], *,
                 broker_epoch: int = -1) -> Any:
    """A StopReplica v3 request: (partition, leader epoch, delete) per partition."""
    R = codec.request_class(ApiKey.STOP_REPLICA)
    T = R.StopReplicaTopicState
    return R(controller_id=1, controller_epoch=controller_epoch, broker_epoch=broker_epoch, topic_states=[
        T(topic_name=topic, partition_states=[
            T.StopReplicaPartitionState(partition_index=p, leader_epoch=e, delete_partition=d)
            for p, e, d in partitions])])


def update_metadata(controller_epoch: int, brokers: list[tuple[int, str, int]], topic: str | None = None,
                    partitions: list[dict[str, Any]] = (), *, broker_epoch: int = -1,  # type: ignore[assignment]
                    controller_id: int = 1, topic_id: uuid.UUID = TOPIC_ID) -> Any:
    """An UpdateMetadata v7 request with PLAINTEXT brokers and one topic's partition states."""
    R = codec.request_class(ApiKey.UPDATE_METADATA)
    T = R.UpdateMetadataTopicState
    B = R.UpdateMetadataBroker
    states = [T.UpdateMetadataPartitionState(
        partition_index=p["index"], controller_epoch=controller_epoch, leader=p["leader"],
        leader_epoch=p["leader_epoch"], isr=p["isr"], zk_version=p.get("zk_version", 0), replicas=p["replicas"],
        offline_replicas=p.get("offline", [])) for p in partitions]
    topics = [T(topic_name=topic, topic_id=topic_id, partition_states=states)] if topic is not None else []
    return R(controller_id=controller_id, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
             topic_states=topics, live_brokers=[
                 B(id=b, rack=None, endpoints=[B.UpdateMetadataEndpoint(port=port, host=h, listener="PLAINTEXT",
                                                                         security_protocol=0)])
                 for b, h, port in brokers])


def _round_trip_response(api_key: int, version: int, response: Any) -> Any:
    return codec.decode_response(api_key, version, memoryview(codec.encode_response(api_key, version, response)))


class LoopbackLeader:
    """A follower's connection to a leader that lives in the same process (see the module doc)."""

    def __init__(self, leader: ReplicaManager, *, fail: Callable[[], bool] = lambda: False) -> None:
        self.leader = leader
        self._fail = fail
        self._closed = False
        self.requests: list[tuple[int, Any]] = []

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True

    def _check(self) -> None:
        if self._closed:
            raise BrokerConnectionError("connection closed")
        if self._fail():
            self._closed = True
            raise BrokerConnectionError("leader unreachable")

    async def send(self, api_key: int, version: int, request: Any, *, timeout_s: float | None = None) -> Any:
        self._check()
        request = codec.decode_request(api_key, version, memoryview(request.encode(version=version)))
        self.requests.append((api_key, request))
        if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            return _round_trip_response(api_key, version, self._offset_for_leader_epoch(request))
        if api_key == ApiKey.LIST_OFFSETS:
            return _round_trip_response(api_key, version, self._list_offsets(request))
        raise AssertionError(f"unexpected API {api_key}")

    async def send_raw(self, api_key: int, version: int, request: Any, *,
                       timeout_s: float | None = None) -> memoryview:
        self._check()
        assert api_key == ApiKey.FETCH
        if isinstance(request, bytes | bytearray | memoryview):  # encoded by the fetcher itself
            request = codec.decode_request(api_key, version, memoryview(request))
        self.requests.append((api_key, request))
        chunks = await self._fetch(request, version)
        self._check()
        return memoryview(b"".join(c if isinstance(c, bytes) else c.read_bytes() for c in chunks))

    def _offset_for_leader_epoch(self, req: Any) -> Any:
        R = codec.response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH)
        T = R.OffsetForLeaderTopicResult
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                error, epoch, offset = self.leader.last_offset_for_leader_epoch(
                    t.topic, p.partition, p.current_leader_epoch, p.leader_epoch)
                parts.append(T.EpochEndOffset(error_code=error, partition=p.partition, leader_epoch=epoch,
                                              end_offset=offset))
            topics.append(T(topic=t.topic, partitions=parts))
        return R(throttle_time_ms=0, topics=topics)

    def _list_offsets(self, req: Any) -> Any:
        R = codec.response_class(ApiKey.LIST_OFFSETS)
        TR = R.ListOffsetsTopicResponse
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                part = self.leader.get(t.name, p.partition_index)
                error, offset = ErrorCode.NONE, -1
                if part is None or not part.is_leader:
                    error = ErrorCode.NOT_LEADER_OR_FOLLOWER
                elif (fenced := part.check_leader_epoch(p.current_leader_epoch)) != ErrorCode.NONE:
                    error = fenced
                else:
                    offset = part.log.log_end_offset if p.timestamp == -1 else part.log.log_start_offset
                parts.append(TR.ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=error,
                                                             old_style_offsets=[], timestamp=-1, offset=offset,
                                                             leader_epoch=-1))
            topics.append(TR(name=t.name, partitions=parts))
        return R(throttle_time_ms=0, topics=topics)

    async def _fetch(self, req: Any, version: int) -> list[Any]:
        deadline = time.monotonic() + req.max_wait_ms / 1000
        first = True
        while True:
            total = 0
            waitable = []
            topics = []
            for t in req.topics:
                datas = []
                for p in t.partitions:
                    part = self.leader.get(t.topic, p.partition)
                    data = PartitionFetchData(p.partition)
                    datas.append(data)
                    if part is None or not part.is_leader:
                        data.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                        continue
                    lg = part.log
                    data.high_watermark = data.last_stable_offset = lg.high_watermark
                    data.log_start_offset = lg.log_start_offset
                    epoch_error = part.check_leader_epoch(p.current_leader_epoch)
                    if epoch_error:
                        data.error_code = epoch_error
                        continue
                    try:
                        regions = lg.read(p.fetch_offset, p.partition_max_bytes, fetch_upper_bound(part, req.replica_id),
                                          total == 0).regions
                    except KafkaError as exc:
                        data.error_code = exc.code
                        continue
                    if first:
                        data.error_code = record_follower_fetch(part, req.replica_id, p.fetch_offset,
                                                                p.log_start_offset)
                        if data.error_code:
                            continue
                    data.records = list(regions) or None
                    total += sum(r.size for r in regions)
                    waitable.append(part)
                topics.append((t.topic, datas))
            first = False
            remaining = deadline - time.monotonic()
            errors = any(d.error_code for _, ds in topics for d in ds)
            if total >= req.min_bytes or errors or remaining <= 0 or not waitable:
                return encode_fetch_response(topics, 0, version)
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def wake(_part: Any, fut: asyncio.Future[None] = fut) -> None:
                if not fut.done():
                    fut.set_result(None)

            for part in waitable:
                part.data_waiter(wake, req.replica_id >= 0)
            try:
                async with asyncio.timeout(remaining):
                    await fut
            except TimeoutError:
                pass
            finally:
                for part in waitable:
                    part.forget_waiter(wake, req.replica_id >= 0)
