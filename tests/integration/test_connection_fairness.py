"""One connection's pipelined requests do not hold the broker's event loop until they are all answered.

A raw connection writes a burst of Metadata requests for a topic of many partitions in one go;
another connection then asks for ApiVersions. The broker must answer the second connection
while the burst is still being answered (network/connection.py hands the loop back after a
slice of serving one connection), and still answer the burst completely and in order.

The order is the broker's: every answer of the burst sent before ApiVersions' is already in the
first socket's receive buffer when ApiVersions' answer arrives (loopback delivers within the
send), so the first socket is drained before the second answer is counted.
"""

from __future__ import annotations

import select
import socket
import struct
import uuid
from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic

PARTITIONS = 100
BURST = 1000
METADATA_VERSION = 9


def _metadata_request(topic: str) -> Any:
    M = codec.request_class(ApiKey.METADATA)
    return M(topics=[M.MetadataRequestTopic(name=topic, topic_id=uuid.UUID(int=0))],
             allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def _api_versions_body() -> bytes:
    request = codec.request_class(ApiKey.API_VERSIONS)(client_software_name="kaflet-test",
                                                       client_software_version="1")
    return bytes(request.encode(version=3))


class _Frames:
    """Whole response frames as they come off a non-blocking socket: their correlation ids."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.correlations: list[int] = []

    def drain(self) -> bool:
        """Read what the socket holds now; False once the broker closed it."""
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except BlockingIOError:
                break
            if not data:
                return False
            self.buffer += data
        while len(self.buffer) >= 8:
            size = struct.unpack_from(">i", self.buffer)[0]
            if len(self.buffer) < 4 + size:
                break
            self.correlations.append(struct.unpack_from(">i", self.buffer, 4)[0])
            del self.buffer[:4 + size]
        return True


def test_a_burst_of_requests_does_not_hold_other_connections(kaflet_broker: BrokerProcess) -> None:
    topic = f"fair-{uuid.uuid4().hex[:8]}"
    create_topic(kaflet_broker.bootstrap, topic, PARTITIONS)
    burst, other = RawClient(kaflet_broker.bootstrap), RawClient(kaflet_broker.bootstrap)
    # Room for the whole burst's answers (~4 MB): a broker whose send to it had to wait
    # would hand its loop back for that reason alone.
    burst.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    try:
        # Both connections are served (their tasks wait for a request) before the burst.
        request = _metadata_request(topic)
        meta = burst.request(ApiKey.METADATA, METADATA_VERSION, request)
        assert len(meta.topics[0].partitions) == PARTITIONS
        other.send_raw(other.frame(ApiKey.API_VERSIONS, 3, _api_versions_body()))
        other.read_frame()

        body = bytes(request.encode(version=METADATA_VERSION))
        frames = b"".join(burst.frame(ApiKey.METADATA, METADATA_VERSION, body) for _ in range(BURST))
        expected = list(range(burst.correlation - BURST + 1, burst.correlation + 1))
        burst.send_raw(frames)
        # ApiVersions goes out once the broker is answering the burst (sent together, the
        # broker may read ApiVersions first).
        assert select.select([burst.sock], [], [], 30)[0], "no answer to the burst in 30 s"
        other.send_raw(other.frame(ApiKey.API_VERSIONS, 3, _api_versions_body()))
        asked = other.correlation

        burst.sock.setblocking(False)
        other.sock.setblocking(False)
        answers, others = _Frames(burst.sock), _Frames(other.sock)
        answered_before: int | None = None
        while answered_before is None or len(answers.correlations) < BURST:
            readable, _, _ = select.select([burst.sock, other.sock], [], [], 30)
            assert readable, f"no answer in 30 s ({len(answers.correlations)} of the burst's)"
            assert answers.drain(), "the broker closed the burst's connection"
            if answered_before is None and other.sock in readable:
                assert others.drain(), "the broker closed the other connection"
                if others.correlations:
                    assert others.correlations == [asked]
                    answered_before = len(answers.correlations)
        assert answers.correlations == expected
        assert answered_before < BURST, "ApiVersions was answered only after the whole burst"
    finally:
        burst.close()
        other.close()
