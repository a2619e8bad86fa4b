"""The controller channel's mechanics against real sockets and real kaflet broker processes.

No broker serves the controller-to-broker APIs yet, so ordinary APIs (Metadata, CreateTopics)
stand in for them: the channel treats every request alike.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import tracemalloc
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from kaflet.controller.channel import BrokerEndpointNotAvailableError, ControllerChannel
from kaflet.metadata.zkdata import BrokerInfo, EndPoint
from kaflet.network.client import BrokerClient, InterBrokerSettings
from kaflet.network.connector import InterBrokerConnector
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.header import parse_request_header
from tests.support.broker_process import BrokerProcess
from tests.support.hostile import HUGE, HugeFramePeer

VERSIONS = {ApiKey.METADATA: 9, ApiKey.CREATE_TOPICS: 5}
REMOTE_ID = 1001


def _metadata(topics: list[str]) -> Any:
    M = codec.request_class(ApiKey.METADATA)
    return M(topics=[M.MetadataRequestTopic(name=t) for t in topics], allow_auto_topic_creation=False,
             include_cluster_authorized_operations=False, include_topic_authorized_operations=False)


def _create_topic(name: str) -> Any:
    C = codec.request_class(ApiKey.CREATE_TOPICS)
    return C(topics=[C.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
             timeout_ms=10000, validate_only=False)


def _info(broker_id: int, port: int, listener: str = "PLAINTEXT") -> BrokerInfo:
    return BrokerInfo(id=broker_id, endpoints=(EndPoint(listener, "127.0.0.1", port, "PLAINTEXT"),))


async def _unused_local(api_key: ApiKey, request: Any) -> Any:
    raise AssertionError("no request is meant for the local broker in this test")


@pytest.fixture
async def channel() -> AsyncIterator[ControllerChannel]:
    ch = ControllerChannel(0, InterBrokerConnector(InterBrokerSettings(connect_timeout_s=2)), _unused_local,
                           request_timeout_s=10, api_versions=VERSIONS, backoff_s=0.05, max_backoff_s=0.2)
    try:
        yield ch
    finally:
        await ch.close()


class _Collector:
    """Callbacks that record responses and wake the test when `n` have arrived."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.responses: list[Any] = []
        self.done = asyncio.Event()

    def callback(self, tag: Any) -> Callable[[Any], None]:
        def record(response: Any) -> None:
            self.responses.append((tag, response))
            if len(self.responses) >= self.n:
                self.done.set()
        return record

    async def wait(self, timeout: float = 30) -> list[Any]:
        await asyncio.wait_for(self.done.wait(), timeout)
        return self.responses


async def test_requests_to_a_broker_arrive_in_order(channel: ControllerChannel, kaflet_broker: BrokerProcess) -> None:
    channel.add_broker(_info(REMOTE_ID, kaflet_broker.port or 0))
    got = _Collector(60)
    expected = []
    for i in range(20):
        # A topic is created and then looked up: in order, the lookup always finds it.
        name = f"ordered-{i}"
        channel.send(REMOTE_ID, ApiKey.CREATE_TOPICS, _create_topic(name), got.callback(("create", name)))
        channel.send(REMOTE_ID, ApiKey.METADATA, _metadata([name]), got.callback(("meta", name)))
        channel.send(REMOTE_ID, ApiKey.METADATA, _metadata([f"absent-{i}"]), got.callback(("meta", f"absent-{i}")))
        expected += [("create", name), ("meta", name), ("meta", f"absent-{i}")]
    responses = await got.wait()
    assert [tag for tag, _ in responses] == expected
    for (kind, name), response in responses:
        if kind == "create":
            assert [(t.name, t.error_code) for t in response.topics] == [(name, 0)]
        else:
            assert response.topics[0].name == name
            want = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name.startswith("absent") else 0
            assert response.topics[0].error_code == want


class _RecordingPeer:
    """A Kafka-speaking TCP peer that reads requests as soon as they arrive and answers each
    Metadata request after a delay, counting requests that arrive while another is unanswered."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.overlaps = 0
        self._unanswered = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[int, str]] = asyncio.Queue()

        async def answer() -> None:
            while True:
                correlation_id, name = await queue.get()
                await asyncio.sleep(0.02)
                M = codec.response_class(ApiKey.METADATA)
                body = bytes(M(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=1, topics=[
                    M.MetadataResponseTopic(error_code=0, name=name, is_internal=False, partitions=[])
                ]).encode(version=9))
                head = struct.pack(">i", correlation_id) + b"\x00"
                writer.write(struct.pack(">i", len(head) + len(body)) + head + body)
                self._unanswered -= 1  # no await since the write: the next request cannot slip in

        answering = asyncio.create_task(answer())
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = memoryview(await reader.readexactly(size))
                header = parse_request_header(frame)
                request = codec.decode_request(header.api_key, header.api_version, frame[header.body_offset:])
                if self._unanswered:
                    self.overlaps += 1
                self._unanswered += 1
                self.received.append(request.topics[0].name)
                queue.put_nowait((header.correlation_id, request.topics[0].name))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            answering.cancel()
            writer.close()


async def test_one_request_at_a_time(channel: ControllerChannel) -> None:
    peer = _RecordingPeer()
    server = await asyncio.start_server(peer.handle, "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        # The peer does notice pipelining: a BrokerClient used directly pipelines.
        async with await BrokerClient.connect("127.0.0.1", port) as client:
            await asyncio.gather(*(client.send(ApiKey.METADATA, 9, _metadata([f"p{i}"])) for i in range(10)))
        assert peer.overlaps > 0
        peer.overlaps = 0
        peer.received.clear()

        channel.add_broker(_info(REMOTE_ID, port))
        got = _Collector(30)
        for i in range(30):
            channel.send(REMOTE_ID, ApiKey.METADATA, _metadata([f"t{i}"]), got.callback(i))
        responses = await got.wait()
        assert [r.topics[0].name for _, r in responses] == [f"t{i}" for i in range(30)]
        assert peer.received == [f"t{i}" for i in range(30)]
        assert peer.overlaps == 0


async def test_resends_after_the_broker_is_restarted(fresh_broker: BrokerProcess, channel: ControllerChannel,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="kaflet.controller")
    fresh_broker.start()
    channel.add_broker(_info(REMOTE_ID, fresh_broker.port or 0))
    first = _Collector(1)
    channel.send(REMOTE_ID, ApiKey.CREATE_TOPICS, _create_topic("before-crash"), first.callback("before"))
    [(_, response)] = await first.wait()
    assert response.topics[0].error_code == 0

    await asyncio.to_thread(fresh_broker.kill)  # SIGKILL
    got = _Collector(3)
    channel.send(REMOTE_ID, ApiKey.CREATE_TOPICS, _create_topic("after-crash"), got.callback("create"))
    channel.send(REMOTE_ID, ApiKey.METADATA, _metadata(["after-crash"]), got.callback("meta"))
    channel.send(REMOTE_ID, ApiKey.METADATA, _metadata(["before-crash"]), got.callback("old"))
    # Let it fail a few times against the dead port, then start the broker again on that port.
    await asyncio.sleep(1.0)
    assert not got.responses
    assert channel.queued(REMOTE_ID) == 2  # the create is being retried; the lookups wait behind it
    await asyncio.to_thread(fresh_broker.start)
    responses = await got.wait()
    assert [tag for tag, _ in responses] == ["create", "meta", "old"]
    assert responses[0][1].topics[0].error_code == 0
    assert responses[1][1].topics[0].error_code == 0
    assert responses[2][1].topics[0].error_code == 0  # the topic made before the crash survived it

    # Repeated failures are a WARN once (then a summary at most every 30 s), not one per attempt.
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    retries = [r for r in caplog.records if r.levelno == logging.DEBUG and "failed again" in r.getMessage()
               and "CREATE_TOPICS" in r.getMessage()]
    assert len(warnings) == 1 and f"sending to broker {REMOTE_ID}" in warnings[0], warnings
    assert "CREATE_TOPICS" in warnings[0] and "reconnecting and resending" in warnings[0]
    assert len(retries) >= 2
    assert any(f"sending to broker {REMOTE_ID}" in r.getMessage() and "recovered after" in r.getMessage()
               and "failed attempts" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)


async def test_a_broker_announcing_two_gigabytes_is_dropped_and_the_request_resent(
        fresh_broker: BrokerProcess, channel: ControllerChannel, caplog: pytest.LogCaptureFixture) -> None:
    """A hostile peer on a broker's address answers with a 2 GiB size: the channel closes each
    such connection without allocating it, warns once, and resends until the broker is back."""
    caplog.set_level(logging.DEBUG, logger="kaflet.controller")
    await asyncio.to_thread(fresh_broker.start)
    port = fresh_broker.port or 0
    await asyncio.to_thread(fresh_broker.stop)
    peer = HugeFramePeer()
    await peer.start(port)
    channel.add_broker(_info(REMOTE_ID, port))
    got = _Collector(1)
    tracemalloc.start()
    try:
        channel.send(REMOTE_ID, ApiKey.CREATE_TOPICS, _create_topic("after-hostile"), got.callback("create"))
        await peer.wait_answered(3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await peer.close()
    print(f"controller channel: peak traced allocation {peak / 2**20:.2f} MiB over {peer.answered} answers "
          f"of {HUGE} bytes")
    assert peak < 16 * 2**20
    assert not got.responses

    await asyncio.to_thread(fresh_broker.start)
    [(_, response)] = await got.wait()
    assert response.topics[0].error_code == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"announced a response of {HUGE} bytes" in warnings[0], warnings


async def test_remove_broker_stops_retrying(channel: ControllerChannel, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kaflet.controller")
    accepted = 0

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        writer.close()  # accept, then close at once: every attempt fails

    server = await asyncio.start_server(refuse, "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        channel.add_broker(_info(REMOTE_ID, port))
        got = _Collector(1)
        for i in range(5):
            channel.send(REMOTE_ID, ApiKey.METADATA, _metadata([f"x{i}"]), got.callback(i))
        deadline = asyncio.get_running_loop().time() + 10
        while accepted < 3 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        assert accepted >= 3
        channel.remove_broker(REMOTE_ID)
        await asyncio.sleep(0.05)
        seen = accepted
        await asyncio.sleep(1.0)  # several back-off periods (at most 0.2 s each)
        assert accepted == seen
        assert not got.responses
        assert channel.broker_ids == [] and channel.queued(REMOTE_ID) == 0
        assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("controller-0-to-broker-")]
        # Requests for a removed broker are not queued (Kafka: "since it is offline").
        channel.send(REMOTE_ID, ApiKey.METADATA, _metadata(["late"]), got.callback("late"))
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"added broker {REMOTE_ID}" in m for m in messages)
    assert any(f"removed broker {REMOTE_ID}" in m and "4 queued request(s) dropped" in m for m in messages)
    assert any("since it is offline" in m for m in messages)


async def test_broker_without_the_inter_broker_listener(channel: ControllerChannel) -> None:
    with pytest.raises(BrokerEndpointNotAvailableError, match="no endpoint for the inter-broker listener PLAINTEXT"):
        channel.add_broker(_info(7, 9092, listener="EXTERNAL"))
    assert channel.broker_ids == []


async def test_unencodable_request_is_dropped_not_retried(channel: ControllerChannel,
                                                          kaflet_broker: BrokerProcess,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    channel.add_broker(_info(REMOTE_ID, kaflet_broker.port or 0))
    got = _Collector(1)
    M = codec.request_class(ApiKey.METADATA)
    broken = M(topics=5, allow_auto_topic_creation=False,  # not a list: encoding raises TypeError
               include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    channel.send(REMOTE_ID, ApiKey.METADATA, broken, got.callback("broken"))
    channel.send(REMOTE_ID, ApiKey.METADATA, _metadata(["fine"]), got.callback("fine"))
    [(tag, response)] = await got.wait()
    assert tag == "fine" and response.topics[0].name == "fine"
    assert any("cannot encode METADATA v9" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


async def test_close_stops_every_sender(kaflet_broker: BrokerProcess) -> None:
    ch = ControllerChannel(0, InterBrokerConnector(InterBrokerSettings()), _unused_local, api_versions=VERSIONS)
    ch.add_broker(_info(REMOTE_ID, kaflet_broker.port or 0))
    ch.add_broker(_info(1002, 1))  # nothing listens on port 1: retried until closed
    got = _Collector(1)
    ch.send(REMOTE_ID, ApiKey.METADATA, _metadata(["x"]), got.callback("x"))
    ch.send(1002, ApiKey.METADATA, _metadata(["y"]), got.callback("y"))
    await got.wait()
    await ch.close()
    assert ch.broker_ids == []
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("controller-0-to-broker-")]
    with pytest.raises(RuntimeError):
        ch.add_broker(_info(REMOTE_ID, kaflet_broker.port or 0))
