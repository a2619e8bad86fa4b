"""One client connection: read a frame, hand it to the broker, write the response, repeat.

Requests on a connection are handled one at a time and answered in order, as Kafka does (it
mutes a channel while a request is in flight). Pipelined requests wait in the socket buffer.
Reading one that is already there, or answering one, suspends nothing, so a connection whose
next request is always in by the time the last answer is written (a pipelining client, or even
one request at a time from a client on another core: on loopback the answer's send takes long
enough for the next request to arrive) would keep the event loop to itself. After `SLICE_S` of
that, the connection hands the loop back before its next request (Kafka's network processor
likewise serves each ready channel in turn).
One exception: a handler may answer with a `DeferredResponse` once the request needs nothing
more of the connection's order (a Produce whose batches are appended and that only waits for
its followers or an fsync). The connection then reads the next request; if that is a Produce
too it is handled at once (its batches are appended after the previous ones, as they would be),
anything else waits until every deferred response has gone out. Responses always leave in
request order.
Bytes move through a `Channel` (channel.py): a plain socket driven with the loop's sock_* calls,
so file regions go out with sendfile, or sans-io TLS over the same calls.

A connection on a TLS listener first completes the TLS handshake; one on a SASL listener then
has to authenticate before anything but ApiVersions and SaslHandshake is served. Until then it
has a deadline, and its frames are bounded by sasl.server.max.receive.size, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from kaflet.network.channel import Channel, FileRegionLike, TlsChannel, TlsError
from kaflet.protocol.framing import STAGING_BYTES, FrameReader, FrameSizeError, size_prefix
from kaflet.security.principal import ANONYMOUS, KafkaPrincipal
from kaflet.security.session import SaslSession

log = logging.getLogger("kaflet.network")

#: Deferred responses a connection may owe before it stops reading (the requests behind them
#: wait in the socket buffer, as all of them do under Kafka's one-at-a-time rule).
MAX_DEFERRED = 8
_PRODUCE_KEY = b"\x00\x00"  # api key 0, the first two bytes of a request header
#: Longest a connection serves requests without the event loop running anything else: other
#: connections' requests wait that long at most per busy connection. Handing the loop back costs
#: one loop iteration (10-20 us here), about 1% of a connection that never has to wait.
SLICE_S = 0.002


Chunk = bytes | bytearray | memoryview | FileRegionLike


class DeferredResponse:
    """A response that is not ready yet, for a request whose effects are all in place: the
    connection goes on reading while ``completion`` finishes, and sends its result in turn.

    A handler's completion gives its response object; the dispatcher wraps it in one that gives
    the encoded chunks (or None: no response), which is what the connection receives."""

    __slots__ = ("completion",)

    def __init__(self, completion: Coroutine[Any, Any, Any]) -> None:
        self.completion = completion


#: What a connection's handler gives back for a request frame.
HandlerResult = Sequence[Chunk] | DeferredResponse | None


class FrameError(Exception):
    """The peer sent something that is not a Kafka frame we accept; the connection is closed."""


@dataclass(slots=True)
class ListenerSecurity:
    """How a listener secures its connections (its security protocol, resolved at start-up)."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    #: Creates the per-connection SASL session (kaflet.security.session.SaslSession) on SASL listeners.
    sasl_session_factory: Callable[[], SaslSession] | None = None
    #: Time a connection has to finish the TLS handshake and SASL authentication.
    auth_timeout_s: float = 10.0
    #: Largest frame accepted before authentication completes (sasl.server.max.receive.size).
    sasl_max_receive: int = 524288
    #: Builds the principal of a TLS client from its DER certificate (None: no certificate).
    tls_principal: Callable[[bytes | None], KafkaPrincipal] | None = None


_PLAIN = ListenerSecurity()


class Connection:
    """A client connection and the per-connection state the broker's handlers may use."""

    def __init__(
        self,
        sock: socket.socket,
        peer: tuple[str, int],
        listener: str,
        handler: Callable[[Connection, memoryview], Awaitable[HandlerResult]],
        max_request_bytes: int,
        conn_id: str,
        security: ListenerSecurity | None = None,
        staging_bytes: int = STAGING_BYTES,
        pipelined: int = 0,
    ) -> None:
        """``pipelined``: with more than 0, any request (not only Produce) may be answered with a
        `DeferredResponse`, up to that many owed at once: a proxy, whose upstream connection keeps
        the requests' order, reads on while earlier ones are still travelling."""
        self.sock = sock
        self.pipelined = pipelined
        self.peer = peer
        self.listener = listener
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.conn_id = conn_id
        self.security = security or _PLAIN
        self.channel: Channel = (TlsChannel(sock, self.security.ssl_context)
                                 if self.security.ssl_context is not None else Channel(sock))
        self.loop = asyncio.get_running_loop()
        self.last_active = time.monotonic()
        self._handling = False
        #: When this connection's task last started a step of the loop, as far as it knows: a
        #: read that had to wait for the socket, or its own hand-back (waits inside a handler are
        #: not seen; they only make the next hand-back come early).
        self._slice_began = 0.0
        self._waits = 0
        self.closed = False
        self.client_software: tuple[str, str] = ("", "")
        #: The authenticated principal, for the authorizer (ANONYMOUS until authenticated).
        self.principal: KafkaPrincipal = ANONYMOUS
        #: The SASL session on SASL listeners, else None.
        self.sasl: SaslSession | None = (self.security.sasl_session_factory()
                          if self.security.sasl_session_factory is not None else None)
        #: Set by a handler whose response must be the last one (a failed authentication).
        self.close_after_response = False
        #: Set by a handler with work that must end before this connection's next request is
        #: read, but that need not hold its response (EndTxn's marker round): awaited once the
        #: response is written, so the client reads it while the work goes on.
        self.after_response: Callable[[], Awaitable[None]] | None = None
        #: Set by the quota enforcer: the next request is not read before this time.monotonic()
        #: (Kafka mutes a throttled client's channel after sending its response).
        self.throttled_until = 0.0
        self._auth_deadline: float | None = time.monotonic() + self.security.auth_timeout_s
        self._reader = FrameReader(max_request_bytes, staging_bytes=staging_bytes)
        self.task: asyncio.Task[None] | None = None
        #: Completions of deferred responses, oldest first, and the task that sends them.
        self._owed: deque[asyncio.Task[Sequence[Chunk] | None]] = deque()
        self._sender: asyncio.Task[None] | None = None
        self._sent: asyncio.Future[None] | None = None  # set when the sender has sent one

    @property
    def busy(self) -> bool:
        """A request is being handled or a response is still owed (idle reaping and draining
        leave the connection alone)."""
        return self._handling or bool(self._owed)

    @property
    def use_sendfile(self) -> bool:
        return self.channel.use_sendfile

    @property
    def authenticated(self) -> bool:
        """True once the TLS handshake and (on SASL listeners) SASL authentication are done."""
        return self._auth_deadline is None

    async def serve(self) -> None:
        """Serve requests until the peer disconnects, sends garbage, or the broker closes us."""
        try:
            await self.channel.start(self.security.auth_timeout_s)
            if self.sasl is None:
                self._authenticated()
            while not self.closed:
                if self._auth_deadline is not None and self.sasl is not None and self.sasl.complete:
                    self._authenticated()
                frame = await self._read_frame_in_time()
                if frame is None:
                    if self._owed:
                        await self._settle(0)  # the peer stopped sending; what it asked for still goes out
                    return
                now = time.monotonic()
                if self.channel.waits != self._waits:
                    self._waits = self.channel.waits
                    self._slice_began = now
                elif now - self._slice_began >= SLICE_S:
                    await asyncio.sleep(0)
                    now = self._slice_began = time.monotonic()
                self._handling = True
                self.last_active = now
                if self._owed:
                    # Another Produce may go ahead of the answers owed (up to MAX_DEFERRED of them);
                    # anything else waits until they are all out.
                    if self.pipelined:
                        await self._settle(self.pipelined - 1)
                    else:
                        await self._settle(MAX_DEFERRED - 1 if frame[:2] == _PRODUCE_KEY else 0)
                result = await self.handler(self, frame)
                if isinstance(result, DeferredResponse):
                    self._owe(result.completion)
                elif self._owed:
                    self._owe(_ready(result))  # behind deferred responses: it waits its turn
                elif result is not None:
                    await self._write(result)
                if self.after_response is not None:
                    after, self.after_response = self.after_response, None
                    await after()
                self._handling = False
                self.last_active = time.monotonic()
                if self.close_after_response:
                    await self.channel.linger_close(1.0)
                    return
                if self.throttled_until:
                    await self._sit_out_throttle()
        except FrameError as exc:
            log.warning("closing connection %s from %s:%d: %s", self.conn_id, self.peer[0], self.peer[1], exc)
        except TlsError as exc:
            log.info("closing connection %s from %s:%d: %s", self.conn_id, self.peer[0], self.peer[1], exc)
        except (ConnectionError, TimeoutError, BrokenPipeError):
            pass
        except OSError as exc:
            if not self.closed:
                log.info("connection %s closed: %s", self.conn_id, exc.strerror or exc)
        finally:
            self._handling = False
            self._drop_owed()
            self.close()

    # -- deferred responses -------------------------------------------------------------------

    def _owe(self, completion: Coroutine[Any, Any, Sequence[Chunk] | None]) -> None:
        self._owed.append(self.loop.create_task(completion))
        if self._sender is None or self._sender.done():
            self._sender = self.loop.create_task(self._send_owed())

    async def _send_owed(self) -> None:
        """Send deferred responses as they complete, in request order. A response is taken off
        the queue only once written, so the reading side never writes while this one does."""
        owed = self._owed
        try:
            while owed:
                chunks = await owed[0]
                if chunks is not None:
                    await self._write(chunks)
                owed.popleft()
                self.last_active = time.monotonic()
                if self._sent is not None and not self._sent.done():
                    self._sent.set_result(None)
        except asyncio.CancelledError:
            raise
        except FrameError as exc:
            log.warning("closing connection %s from %s:%d: %s", self.conn_id, self.peer[0], self.peer[1], exc)
            self.abort()
        except Exception as exc:  # the peer is gone, or the request failed: the connection ends
            if not self.closed and not isinstance(exc, ConnectionError | OSError):
                log.warning("closing connection %s: %s", self.conn_id, exc)
            self.abort()

    async def _settle(self, keep: int) -> None:
        """Wait until at most ``keep`` deferred responses are still owed."""
        while len(self._owed) > keep:
            sender = self._sender
            if sender is None or sender.done():  # it failed: the connection is being closed
                raise ConnectionError("connection closed while responses were owed")
            self._sent = self.loop.create_future()
            # Woken by the next response sent, or by the sender's end (whatever ended it).
            await asyncio.wait((self._sent, sender), return_when=asyncio.FIRST_COMPLETED)

    def _drop_owed(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
        while self._owed:
            self._owed.popleft().cancel()

    async def _sit_out_throttle(self) -> None:
        delay = self.throttled_until - time.monotonic()
        self.throttled_until = 0.0
        if delay > 0:
            await asyncio.sleep(delay)
            self.last_active = time.monotonic()

    def _authenticated(self) -> None:
        self._auth_deadline = None
        if self.sasl is not None:
            self.principal = self.sasl.principal
        elif self.security.tls_principal is not None:
            self.principal = self.security.tls_principal(self.channel.peer_certificate())

    async def _read_frame_in_time(self) -> memoryview | None:
        if self._auth_deadline is None:
            return await self._read_frame()
        try:
            async with asyncio.timeout_at(self.loop.time() + max(self._auth_deadline - time.monotonic(), 0)):
                return await self._read_frame()
        except TimeoutError:
            raise FrameError("authentication not completed in time") from None

    @property
    def _frame_limit(self) -> int:
        if self._auth_deadline is not None and self.sasl is not None:
            return min(self.max_request_bytes, self.security.sasl_max_receive)
        return self.max_request_bytes

    async def _read_frame(self) -> memoryview | None:
        reader = self._reader
        reader.max_size = self._frame_limit
        while True:
            try:
                frame = reader.next_frame()
            except FrameSizeError as exc:
                if exc.size > 0 and exc.max_size < self.max_request_bytes:
                    raise FrameError(f"frame of {exc.size} bytes before authentication is larger than "
                                     f"sasl.server.max.receive.size ({exc.max_size})") from None
                raise FrameError(
                    f"request size {exc.size} is larger than socket.request.max.bytes ({self.max_request_bytes})"
                    if exc.size > 0 else f"invalid request size {exc.size}") from None
            if frame is not None:
                return frame
            n = await self.channel.recv_into(reader.buffer())
            if n == 0:
                if reader.pending:
                    raise FrameError("connection closed in the middle of a request")
                return None
            reader.received(n)

    async def _write(self, chunks: Sequence[Chunk]) -> None:
        total = 0
        regions = False
        for c in chunks:
            if isinstance(c, bytes | bytearray | memoryview):
                total += len(c)
            else:
                total += c.size
                regions = True
        pending = bytearray(size_prefix(total))
        if not regions:
            for c in chunks:
                pending += c  # type: ignore[arg-type]
            await self.channel.sendall(pending)
            return
        # Bytes and file regions go out in several calls: corked, they leave as full segments.
        self.channel.cork(True)
        try:
            for c in chunks:
                if isinstance(c, bytes | bytearray | memoryview):
                    pending += c
                    continue
                if pending:
                    await self.channel.sendall(pending)
                    pending = bytearray()
                await self.channel.send_region(c)
            if pending:
                await self.channel.sendall(pending)
        finally:
            self.channel.cork(False)

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
        self.channel.close()
        if self.sasl is not None:
            self.sasl.close()


def configure_socket(sock: socket.socket, send_buf: int, recv_buf: int) -> None:
    """Low latency (no Nagle) and the configured buffer sizes (-1: the OS default)."""
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if send_buf > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buf)
    if recv_buf > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buf)


async def _ready(chunks: Sequence[Chunk] | None) -> Sequence[Chunk] | None:
    return chunks


__all__ = ["Connection", "DeferredResponse", "FrameError", "ListenerSecurity", "configure_socket", "Chunk",
           "FileRegionLike", "HandlerResult"]
