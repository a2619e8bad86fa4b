"""A hostile Kafka peer: a real asyncio server that answers requests with a frame claiming
2 GiB and then sends nothing, and counts the connections its clients closed on it.

With ``upstream``, requests of APIs not in ``hostile_apis`` are relayed to a real broker and
its answers relayed back, so a client gets through its usual start (Metadata, ApiVersions) and
meets the huge frame only where the test wants it.
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

#: The largest size a frame can announce (2 GiB - 1).
HUGE = 2**31 - 1


class HugeFramePeer:
    """Answers (the chosen) requests with a 2 GiB size prefix and the request's correlation id."""

    def __init__(self, hostile_apis: set[int] | None = None, upstream: tuple[str, int] | None = None) -> None:
        self.hostile_apis = hostile_apis  # None: every API
        self.upstream = upstream
        self.answered = 0  # requests answered with the huge prefix
        self.closed_by_client = 0  # of those connections, the ones the client then closed
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, port: int = 0) -> int:
        """Listen on 127.0.0.1:port (0: any free port); returns the port."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._connections):
            task.cancel()

    async def wait_answered(self, count: int, timeout: float = 30.0) -> None:
        """Wait until ``count`` connections got the huge answer and were closed by the client."""
        async with asyncio.timeout(timeout):
            while self.closed_by_client < count:
                await asyncio.sleep(0.05)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                frame = await _read_frame(reader)
                api_key, _version, correlation_id = struct.unpack_from(">hhi", frame)
                if self.hostile_apis is None or api_key in self.hostile_apis or self.upstream is None:
                    writer.write(struct.pack(">ii", HUGE, correlation_id))
                    await writer.drain()
                    self.answered += 1
                    try:
                        closed = await reader.read(1) == b""  # nothing more comes: the client must close
                    except ConnectionResetError:
                        closed = True
                    self.closed_by_client += closed
                    return
                if upstream is None:
                    upstream = await asyncio.open_connection(*self.upstream)
                upstream[1].write(struct.pack(">i", len(frame)) + frame)
                response = await _read_frame(upstream[0])
                writer.write(struct.pack(">i", len(response)) + response)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            if upstream is not None:
                upstream[1].close()


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set size (VmHWM) so far."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for process {pid}")
