"""One client connection: read a frame, hand it to the broker, write the response, repeat.

Requests on a connection are handled one at a time and answered in order, as Kafka does (it
mutes a channel while a request is in flight). Pipelined requests wait in the socket buffer.
Plain sockets are driven with the loop's sock_* calls so file regions go out with sendfile.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

log = logging.getLogger("kaflet.network")

_SIZE = struct.Struct(">i")
_READ_CHUNK = 65536


class FileRegionLike(Protocol):
    """A run of bytes in a file that can be sent without copying it through Python."""

    size: int

    position: int

    @property
    def file(self) -> Any:
        """The open binary file object that holds the bytes."""
        ...

    def read_bytes(self) -> bytes: ...


Chunk = bytes | bytearray | memoryview | FileRegionLike


class FrameError(Exception):
    """The peer sent something that is not a Kafka frame we accept; the connection is closed."""


class Connection:
    """A client connection and the per-connection state the broker's handlers may use."""

    def __init__(
        self,
        sock: socket.socket,
        peer: tuple[str, int],
        listener: str,
        handler: Callable[[Connection, memoryview], Awaitable[Sequence[Chunk] | None]],
        max_request_bytes: int,
        conn_id: str,
    ) -> None:
        self.sock = sock
        self.peer = peer
        self.listener = listener
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.conn_id = conn_id
        self.loop = asyncio.get_running_loop()
        self.last_active = time.monotonic()
        self.busy = False
        self.closed = False
        self.client_software: tuple[str, str] = ("", "")
        self._buf = bytearray(_READ_CHUNK)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self.use_sendfile = True
        self.task: asyncio.Task[None] | None = None

    async def serve(self) -> None:
        """Serve requests until the peer disconnects, sends garbage, or the broker closes us."""
        try:
            while not self.closed:
                frame = await self._read_frame()
                if frame is None:
                    return
                self.busy = True
                self.last_active = time.monotonic()
                chunks = await self.handler(self, frame)
                if chunks is not None:
                    await self._write(chunks)
                self.busy = False
                self.last_active = time.monotonic()
        except FrameError as exc:
            log.warning("closing connection %s from %s:%d: %s", self.conn_id, self.peer[0], self.peer[1], exc)
        except (ConnectionError, TimeoutError, BrokenPipeError):
            pass
        except OSError as exc:
            if not self.closed:
                log.info("connection %s closed: %s", self.conn_id, exc.strerror or exc)
        finally:
            self.busy = False
            self.close()

    async def _fill(self, need: int) -> bool:
        """Make at least `need` bytes available in the buffer; False on EOF."""
        while self._end - self._start < need:
            if self._start and self._end == self._start:
                self._start = self._end = 0
            if len(self._buf) - self._start < need:
                # compact so the frame prefix fits at the front
                remaining = self._end - self._start
                self._buf[0:remaining] = self._buf[self._start : self._end]
                self._start, self._end = 0, remaining
            n = await self.loop.sock_recv_into(self.sock, self._view[self._end :])
            if n == 0:
                if self._end != self._start:
                    raise FrameError("connection closed in the middle of a request")
                return False
            self._end += n
        return True

    async def _read_frame(self) -> memoryview | None:
        if not await self._fill(4):
            return None
        size = _SIZE.unpack_from(self._buf, self._start)[0]
        if size < 0 or size > self.max_request_bytes:
            raise FrameError(
                f"request size {size} is larger than socket.request.max.bytes ({self.max_request_bytes})"
                if size > 0 else f"invalid request size {size}"
            )
        self._start += 4
        buffered = self._end - self._start
        if size <= buffered:
            frame = bytes(self._view[self._start : self._start + size])
            self._start += size
            return memoryview(frame)
        # A large frame is received straight into its own buffer.
        frame_buf = bytearray(size)
        frame_buf[:buffered] = self._view[self._start : self._end]
        self._start = self._end = 0
        view = memoryview(frame_buf)
        got = buffered
        while got < size:
            n = await self.loop.sock_recv_into(self.sock, view[got:])
            if n == 0:
                raise FrameError("connection closed in the middle of a request")
            got += n
        return view

    async def _write(self, chunks: Sequence[Chunk]) -> None:
        total = 0
        for c in chunks:
            total += c.size if hasattr(c, "size") else len(c)  # type: ignore[arg-type]
        pending = bytearray(_SIZE.pack(total))
        for c in chunks:
            if isinstance(c, bytes | bytearray | memoryview):
                pending += c
                continue
            if pending:
                await self.loop.sock_sendall(self.sock, pending)
                pending = bytearray()
            await self._send_region(c)
        if pending:
            await self.loop.sock_sendall(self.sock, pending)

    async def _send_region(self, region: FileRegionLike) -> None:
        if self.use_sendfile:
            try:
                sent = await self.loop.sock_sendfile(self.sock, region.file, region.position, region.size,
                                                     fallback=False)
            except (asyncio.SendfileNotAvailableError, NotImplementedError):
                self.use_sendfile = False
            else:
                if sent != region.size:
                    # The file shrank under us (truncation): the frame length we announced is now
                    # wrong, so the only safe move is to drop the connection.
                    raise ConnectionError("log truncated while sending a fetch response")
                return
        data = region.read_bytes()
        if len(data) != region.size:
            raise ConnectionError("log truncated while sending a fetch response")
        await self.loop.sock_sendall(self.sock, data)

    def abort(self) -> None:
        """Stop serving from outside: cancel the connection's task, which closes the socket.

        The socket is never closed under a pending sock_* call (the loop still watches its fd).
        """
        if self.task is not None and not self.task.done():
            self.task.cancel()
        elif self.task is None:
            self.close()

    def close(self) -> None:
        """Close the socket (from the connection's own task)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def configure_socket(sock: socket.socket, send_buf: int, recv_buf: int) -> None:
    """Low latency (no Nagle) and the configured buffer sizes (-1: the OS default)."""
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if send_buf > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buf)
    if recv_buf > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buf)


__all__ = ["Connection", "FrameError", "configure_socket", "Chunk", "FileRegionLike"]
