"""A minimal blocking Kafka protocol client for tests that need exact bytes on the wire."""

from __future__ import annotations

import socket
import struct
from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import is_flexible


class RawClient:
    """Send framed requests, read framed responses."""

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self, api_key: int, version: int, body: bytes, client_id: str = "raw") -> bytes:
        self.correlation += 1
        cid = client_id.encode()
        header = struct.pack(">hhih", api_key, version, self.correlation, len(cid)) + cid
        if is_flexible(api_key, version):
            header += b"\x00"
        payload = header + body
        return struct.pack(">i", len(payload)) + payload

    def request(self, api_key: int, version: int, request: Any) -> Any:
        """Encode with the generic codec, send, decode the response."""
        self.send_raw(self.frame(api_key, version, bytes(request.encode(version=version))))
        return self.read_response(api_key, version)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._read_exact(4))[0]
        return self._read_exact(size)

    def read_response(self, api_key: int, version: int) -> Any:
        data = self.read_frame()
        skip = 5 if is_flexible(api_key, version) and api_key != 18 else 4
        return codec.response_class(api_key).decode(data[skip:], version=version)

    def _read_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            buf += chunk
        return bytes(buf)

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the broker closes the connection within `timeout`."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False


def log_dir_errors(bootstrap: str) -> dict[str, int]:
    """DescribeLogDirs v4 of one broker: the error code of each of its log dirs."""
    from kaflet.protocol.api_keys import ApiKey

    c = RawClient(bootstrap)
    try:
        req = codec.request_class(ApiKey.DESCRIBE_LOG_DIRS)(topics=None)
        return {r.log_dir: r.error_code for r in c.request(ApiKey.DESCRIBE_LOG_DIRS, 4, req).results}
    finally:
        c.close()
