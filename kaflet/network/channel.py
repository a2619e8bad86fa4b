"""Byte channels under a Connection: plain sockets and TLS, both over the loop's sock_* calls.

A plain channel is the socket itself: frames are received straight into their buffers and file
regions go out with sendfile. The TLS channel is sans-io TLS: an `ssl.SSLObject` between two
`MemoryBIO`s, with ciphertext moved by the same sock_recv/sock_sendall calls, so no asyncio
transport or protocol is involved and Connection code is the same for both. TLS cannot use
sendfile (the bytes must be encrypted in user space), so file regions are read and written
through TLS instead.
"""

from __future__ import annotations

import asyncio
import io
import os
import socket
import ssl
from typing import Any, Protocol, cast

_TLS_READ = 65536
_TCP_CORK: int | None = getattr(socket, "TCP_CORK", None)
_TLS_WRITE_CHUNK = 262144  # bounds the ciphertext buffered at once for a large response


class FileRegionLike(Protocol):
    """A run of bytes in a file that can be sent without copying it through Python."""

    size: int

    position: int

    @property
    def file(self) -> Any:
        """The open binary file object that holds the bytes."""
        ...

    def read_bytes(self) -> bytes: ...


class Channel:
    """A plain TCP socket driven with the loop's sock_* calls."""

    is_tls = False

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        self.use_sendfile = True
        self._fd = sock.fileno()
        self._watching = False  # our reader is registered with the loop
        self._waiting: tuple[asyncio.Future[int], memoryview] | None = None
        #: Reads that found the socket empty and waited (the task resumed in a new loop step).
        self.waits = 0

    async def start(self, timeout: float) -> None:
        """Anything to do before the first frame (the TLS handshake); nothing for plain sockets."""

    async def recv_into(self, view: memoryview) -> int:
        """Receive into `view`; 0 at end of stream.

        Unlike the loop's ``sock_recv_into``, which registers the socket with the selector and
        removes it again for every read that has to wait (two epoll_ctl calls, a future and its
        callbacks per request of a paced client), the registration stays while the client is
        quiet. It is dropped only when bytes arrive with nobody reading (a request is being
        handled), since the level-triggered selector would report them on every loop turn.
        """
        try:
            return self.sock.recv_into(view)
        except (BlockingIOError, InterruptedError):
            pass
        self.waits += 1
        waiter: asyncio.Future[int] = self.loop.create_future()
        self._waiting = (waiter, view)
        if not self._watching:
            self.loop.add_reader(self._fd, self._on_readable)
            self._watching = True
        try:
            return await waiter
        finally:
            self._waiting = None

    def _on_readable(self) -> None:
        waiting = self._waiting
        if waiting is None:
            self._unwatch()
            return
        waiter, view = waiting
        if waiter.done():  # received already; the task has not run yet
            return
        # Read here, as the loop's own reader callback does: the bytes are consumed before the
        # selector is polled again, so it does not report them a second time.
        try:
            n = self.sock.recv_into(view)
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            waiter.set_exception(exc)
        else:
            waiter.set_result(n)

    def _unwatch(self) -> None:
        if self._watching:
            self._watching = False
            self.loop.remove_reader(self._fd)

    async def sendall(self, data: bytes | bytearray | memoryview) -> None:
        await self.loop.sock_sendall(self.sock, data)

    async def send_region(self, region: FileRegionLike) -> None:
        """Send a file region, zero-copy when the platform allows.

        ``os.sendfile`` is called directly while the socket takes the bytes: the loop's
        ``sock_sendfile`` costs an fstat, a writer registration, a loop iteration and an lseek
        even when one call sent everything, which is the usual case of a follower's or a
        caught-up consumer's fetch. Only a full socket buffer waits in the loop.
        """
        if self.use_sendfile:
            try:
                in_fd = region.file.fileno()
            except (AttributeError, io.UnsupportedOperation):
                self.use_sendfile = False
            else:
                await self._sendfile(in_fd, region)
                return
        await self.sendall(_region_bytes(region))

    async def _sendfile(self, in_fd: int, region: FileRegionLike) -> None:
        out_fd = self.sock.fileno()
        position, left = region.position, region.size
        while left > 0:
            try:
                sent = os.sendfile(out_fd, in_fd, position, left)
            except (BlockingIOError, InterruptedError):
                sent = await self.loop.sock_sendfile(self.sock, region.file, position, left, fallback=False)
            if sent == 0:
                # The file shrank under us (truncation): the frame length we announced is now
                # wrong, so the only safe move is to drop the connection.
                raise ConnectionError("log truncated while sending a fetch response")
            position += sent
            left -= sent

    def cork(self, on: bool) -> None:
        """Hold partial segments back while a response is written in pieces (TCP_CORK), so a
        fetch response of header, file region and trailer leaves as one segment and the peer
        wakes once for it, not once per piece; uncorking sends what is held."""
        if _TCP_CORK is not None:
            try:
                self.sock.setsockopt(socket.IPPROTO_TCP, _TCP_CORK, 1 if on else 0)
            except OSError:
                pass  # a closed socket: the write that follows reports it

    def peer_certificate(self) -> bytes | None:
        """The client's certificate (DER) when TLS client authentication gave one."""
        return None

    def close(self) -> None:
        self._unwatch()  # the loop must not watch a closed (and maybe reused) descriptor
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    async def linger_close(self, timeout: float) -> None:
        """Close after a last response without losing it.

        Closing a socket that still has unread input makes the kernel send a reset, and a reset
        can make the peer drop the response it has not read yet (a failed authentication's error,
        say). And a FIN right behind the response is not safe either: kafka-python 3 drops the
        bytes that arrive in the same read as the end of the stream. So: first give the peer half
        of `timeout` to read the response and hang up itself (clients close on such an error),
        then half-close and discard what it still sends until it closes or the time is up.
        """
        self._unwatch()  # the loop's sock_recv registers a reader of its own
        try:
            deadline = self.loop.time() + timeout
            if await self._drain_until(self.loop.time() + timeout / 2):
                self.close()
                return
            self.sock.shutdown(socket.SHUT_WR)
            await self._drain_until(deadline)
        except OSError:
            pass
        self.close()

    async def _drain_until(self, deadline: float) -> bool:
        """Discard input until the peer closes (True) or `deadline` passes (False)."""
        while (left := deadline - self.loop.time()) > 0:
            try:
                if not await asyncio.wait_for(self.loop.sock_recv(self.sock, 65536), left):
                    return True
            except TimeoutError:
                return False
        return False


def _region_bytes(region: FileRegionLike) -> bytes:
    data = region.read_bytes()
    if len(data) != region.size:
        raise ConnectionError("log truncated while sending a fetch response")
    return data


class TlsError(ConnectionError):
    """The TLS handshake or a TLS record failed; the message says why."""


class TlsChannel(Channel):
    """Server-side TLS over a plain socket, without transports (SSLObject + MemoryBIO)."""

    is_tls = True

    def __init__(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        super().__init__(sock)
        self.use_sendfile = False
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._in, self._out, server_side=True)
        self._eof = False

    async def start(self, timeout: float) -> None:
        """The TLS handshake, bounded by `timeout` seconds (a silent client must not hold a task)."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    try:
                        self._ssl.do_handshake()
                        break
                    except ssl.SSLWantReadError:
                        await self._flush()
                        if not await self._feed():
                            raise TlsError("connection closed during the TLS handshake") from None
        except TimeoutError:
            raise TlsError(f"TLS handshake not completed within {timeout:g} s") from None
        except ssl.SSLError as exc:
            # Send the alert (e.g. "certificate required") before the socket goes away.
            try:
                await self._flush()
            except OSError:
                pass
            raise TlsError(f"TLS handshake failed: {exc.reason or exc}") from None
        await self._flush()

    async def _feed(self) -> bool:
        """Move ciphertext from the socket into the TLS object; False at end of stream."""
        try:
            data = self.sock.recv(_TLS_READ)
        except (BlockingIOError, InterruptedError):
            self.waits += 1
            data = await self.loop.sock_recv(self.sock, _TLS_READ)
        if not data:
            self._in.write_eof()
            self._eof = True
            return False
        self._in.write(data)
        return True

    async def _flush(self) -> None:
        if self._out.pending:
            await self.loop.sock_sendall(self.sock, self._out.read())

    async def recv_into(self, view: memoryview) -> int:
        want = len(view)
        while True:
            try:
                # With a buffer, SSLObject.read returns the byte count (typeshed says bytes).
                n = cast(int, self._ssl.read(want, view))
            except ssl.SSLWantReadError:
                # TLS 1.3 may also need to write (a key update) before it can read more.
                await self._flush()
                if self._eof or not await self._feed():
                    return 0
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return 0
            except ssl.SSLError as exc:
                raise TlsError(f"TLS error: {exc.reason or exc}") from None
            if self._out.pending:
                await self._flush()
            return n

    async def sendall(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        pos = 0
        try:
            while pos < len(view):
                pos += self._ssl.write(view[pos : pos + _TLS_WRITE_CHUNK])
                await self._flush()
        except ssl.SSLError as exc:
            raise TlsError(f"TLS error: {exc.reason or exc}") from None

    def cork(self, on: bool) -> None:
        """Nothing to do: the TLS channel writes whole records, each with one send."""

    def peer_certificate(self) -> bytes | None:
        try:
            return self._ssl.getpeercert(binary_form=True)
        except ValueError:
            return None

    def close(self) -> None:
        # No close_notify round trip: the peer is gone or being dropped, and waiting for it would
        # let a client hold the task. Kafka also just closes the channel.
        super().close()


__all__ = ["Channel", "TlsChannel", "TlsError", "FileRegionLike"]
