"""A connection from this broker to another one: the controller's channel and the replica fetchers.

`BrokerClient.connect` opens TCP (with a deadline), then TLS and SASL as the inter-broker
listener requires (`ClientSecurity`, built from the broker config by kaflet/server/inter_broker_security.py).
Requests are pipelined: each gets the next correlation id and goes out at once; the other
broker answers a connection's requests in order, so every response must match the oldest
request in flight, and anything else is a broken connection.

Failures are one exception type, `BrokerConnectionError` (kaflet/protocol/broker_connection.py,
whose interfaces `BrokerClient` implements): the connection could not be opened, authentication
failed, the peer closed it, a response did not decode or was larger than the bound, or a request
timed out. As in Kafka's NetworkClient, each of them closes the connection and every other
request in flight fails with it; the caller reconnects.

Responses are bounded (`max_response_bytes`): a peer that announces a larger one has its
connection closed before anything is allocated for it. Kafka's inter-broker clients accept any
size (NetworkReceive.UNLIMITED); kaflet bounds it by what a kaflet or Kafka broker can answer
(`InterBrokerSettings.max_response_bytes`), so a confused or hostile peer cannot make this
broker allocate gigabytes.

The connection is an `asyncio.BufferedProtocol`, so the transport receives straight into the
buffers of the framer (kaflet/protocol/framing.py): small responses land in one reusable buffer,
a large one (a replica fetch) gets a buffer of its own and is handed over without a copy
(`send_raw`). No task is created, so closing leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
import struct
from dataclasses import dataclass, field
from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import api_name
from kaflet.protocol.broker_connection import (
    BrokerAuthenticationError,
    BrokerConnectionError,
    RequestTimeoutError,
)
from kaflet.protocol.framing import FrameReader, FrameSizeError, size_prefix
from kaflet.protocol.header import encode_request_header, parse_response_header
from kaflet.protocol.primitives import DecodeError
from kaflet.security.sasl_client import SaslClientError, run_async, sasl_exchange
from kaflet.security.tls import error_reason

_CORRELATION_ID = struct.Struct(">i")

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

#: The bound of a response with Kafka's defaults: socket.request.max.bytes (100 MiB) +
#: replica.fetch.response.max.bytes (10 MiB); see InterBrokerSettings.max_response_bytes.
DEFAULT_MAX_RESPONSE_BYTES = 104857600 + 10485760


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How to secure a connection: the security protocol, a client TLS context, SASL credentials."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown security protocol {self.protocol}")
        if self.protocol.endswith("SSL") and self.ssl_context is None:
            raise ValueError(f"{self.protocol} needs an SSL context")
        if self.protocol.startswith("SASL_") and not self.sasl_mechanism:
            raise ValueError(f"{self.protocol} needs a SASL mechanism")

    @property
    def uses_tls(self) -> bool:
        return self.protocol.endswith("SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


PLAINTEXT = ClientSecurity()

#: Kafka's default socket.connection.setup.timeout.ms.
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class InterBrokerSettings:
    """The inter-broker listener and how to connect to it on the other brokers
    (kaflet.server.inter_broker_security builds it from the broker config)."""

    listener: str = "PLAINTEXT"
    security: ClientSecurity = PLAINTEXT
    request_timeout_s: float = 30.0
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    #: The largest response accepted from another broker. A fetch response carries at most
    #: replica.fetch.response.max.bytes of records, or one larger batch, which a leader only
    #: has when it fitted in a request (socket.request.max.bytes); every other inter-broker
    #: response answers a request bounded by socket.request.max.bytes and is not larger than
    #: it. Their sum covers both, the smaller term being the headroom for framing.
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES


def _connect_error(exc: BaseException, address: str, timeout_s: float) -> BrokerConnectionError | None:
    """The BrokerConnectionError a failed connect raises; None for what is not a connection
    failure (a cancellation), which propagates as it is."""
    if isinstance(exc, BrokerConnectionError):
        return exc
    if isinstance(exc, TimeoutError):
        return BrokerConnectionError(f"cannot connect to {address} within {timeout_s:g} s")
    if isinstance(exc, ssl.SSLError | ssl.CertificateError):
        return BrokerAuthenticationError(f"TLS handshake with {address} failed: {error_reason(exc)}")
    if isinstance(exc, SaslClientError):
        return BrokerAuthenticationError(f"SASL authentication with {address} failed: {exc}")
    if isinstance(exc, OSError):
        return BrokerConnectionError(f"cannot connect to {address}: {error_reason(exc)}")
    return None


class _InFlight:
    __slots__ = ("correlation_id", "api_key", "version", "future", "timer")

    def __init__(self, correlation_id: int, api_key: int, version: int, future: asyncio.Future[memoryview]) -> None:
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.version = version
        self.future = future
        self.timer: asyncio.TimerHandle | None = None


class _Wire(asyncio.BufferedProtocol):
    """Framing and in-flight bookkeeping of one connection, driven by the transport's callbacks."""

    def __init__(self, address: str, max_response_bytes: int) -> None:
        self.address = address
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.inflight: collections.deque[_InFlight] = collections.deque()
        self.error: BrokerConnectionError | None = None
        self.lost = self.loop.create_future()
        # A response holds at least its correlation id.
        self._reader = FrameReader(max_response_bytes, min_size=4, eager=True)
        self._paused = False
        self._drain: asyncio.Future[None] | None = None

    # -- transport callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # Requests are small and latency matters (a controller's LeaderAndIsr, a fetch).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._reader.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        reader = self._reader
        reader.received(nbytes)
        while self.error is None:
            try:
                frame = reader.next_frame()
            except FrameSizeError as exc:
                if exc.size < exc.min_size:
                    self.fail(BrokerConnectionError(f"{self.address} sent a response of invalid size {exc.size}"))
                else:
                    self.fail(BrokerConnectionError(
                        f"{self.address} announced a response of {exc.size} bytes, more than the {exc.max_size} "
                        "accepted from another broker (socket.request.max.bytes + "
                        "replica.fetch.response.max.bytes); closing the connection"))
                return
            if frame is None:
                return
            self._deliver(frame)

    def eof_received(self) -> bool:
        return False  # close; connection_lost fails what is in flight

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None:
            self.fail(BrokerConnectionError(f"{self.address} closed the connection"))
        else:
            self.fail(BrokerConnectionError(f"connection to {self.address} lost: {error_reason(exc)}"))
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        self._drain = None

    # -- requests ---------------------------------------------------------------------------

    def _deliver(self, frame: memoryview) -> None:
        correlation_id = _CORRELATION_ID.unpack_from(frame, 0)[0]
        if not self.inflight or self.inflight[0].correlation_id != correlation_id:
            expected = self.inflight[0].correlation_id if self.inflight else None
            self.fail(BrokerConnectionError(f"{self.address} answered correlation id {correlation_id}, "
                                            f"expected {expected}"))
            return
        req = self.inflight.popleft()
        if req.timer is not None:
            req.timer.cancel()
        if not req.future.done():  # a caller that gave up has cancelled its future
            req.future.set_result(frame)

    def timed_out(self, req: _InFlight, timeout_s: float) -> None:
        if req.future.done():
            return
        req.future.set_exception(RequestTimeoutError(
            f"no response to {api_name(req.api_key)} v{req.version} from {self.address} within {timeout_s:g} s; "
            "closing the connection"))
        self.fail(BrokerConnectionError(f"connection to {self.address} closed after a request timed out"))

    async def wait_writable(self) -> None:
        while self._paused and self.error is None:
            if self._drain is None:
                self._drain = self.loop.create_future()
            await asyncio.shield(self._drain)
        if self.error is not None:
            raise self.failure()

    def failure(self) -> BrokerConnectionError:
        """A fresh exception saying why the connection failed (one per raiser, so tracebacks stay apart)."""
        assert self.error is not None
        return type(self.error)(*self.error.args)

    def fail(self, error: BrokerConnectionError) -> None:
        """Close the connection; every request in flight fails with `error` (the first one wins)."""
        if self.error is None:
            self.error = error
        while self.inflight:
            req = self.inflight.popleft()
            if req.timer is not None:
                req.timer.cancel()
            if not req.future.done():
                req.future.set_exception(self.failure())
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        if self.transport is not None:
            self.transport.abort()


class BrokerClient:
    """One connection to another broker, ready for requests (TLS and SASL done)."""

    def __init__(self, wire: _Wire, client_id: str, request_timeout_s: float) -> None:
        self._wire = wire
        self._client_id = client_id.encode()
        self.request_timeout_s = request_timeout_s
        self._next_correlation = 0

    @classmethod
    async def connect(cls, host: str, port: int, security: ClientSecurity = PLAINTEXT, *,
                      client_id: str = "kaflet", connect_timeout_s: float = CONNECT_TIMEOUT_S,
                      request_timeout_s: float = 30.0,
                      max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> BrokerClient:
        """Connect, then TLS and SASL as `security` says, all within `connect_timeout_s`.

        Raises BrokerConnectionError (BrokerAuthenticationError when TLS or SASL fail).
        """
        host = host.strip("[]")
        address = f"{host}:{port}"
        loop = asyncio.get_running_loop()
        wire = _Wire(address, max_response_bytes)
        client = cls(wire, client_id, request_timeout_s)
        try:
            async with asyncio.timeout(connect_timeout_s):
                if security.ssl_context is not None:
                    await loop.create_connection(lambda: wire, host, port, ssl=security.ssl_context,
                                                 server_hostname=host, ssl_handshake_timeout=connect_timeout_s)
                else:
                    await loop.create_connection(lambda: wire, host, port)
                if security.uses_sasl:
                    await client._authenticate(security)
        except BaseException as exc:
            client.close()
            error = _connect_error(exc, address, connect_timeout_s)
            if error is None:
                raise
            raise error from None
        return client

    async def _authenticate(self, security: ClientSecurity) -> None:
        # A failed SaslAuthenticate is answered before the broker closes the connection, so it
        # surfaces as SaslRejectedError rather than as the lost connection.
        await run_async(sasl_exchange(security.sasl_mechanism, security.sasl_username, security.sasl_password),
                        self.send)

    @property
    def address(self) -> str:
        return self._wire.address

    @property
    def closed(self) -> bool:
        """True once the connection failed or was closed; it cannot be used again."""
        return self._wire.error is not None

    async def send(self, api_key: int, version: int, request: Any, *, timeout_s: float | None = None) -> Any:
        """Send a request object (kaflet.protocol.codec) and return the decoded response.

        Raises BrokerConnectionError; a response that does not decode closes the connection.
        """
        body = await self.send_raw(api_key, version, request, timeout_s=timeout_s)
        try:
            return codec.decode_response(api_key, version, body)
        except DecodeError as exc:
            error = BrokerConnectionError(f"{self.address} sent a response that does not decode: {exc}")
            self._wire.fail(error)
            raise error from None

    async def send_raw(self, api_key: int, version: int, request: Any, *,
                       timeout_s: float | None = None) -> memoryview:
        """Send a request (a codec object, or its encoded body as bytes) and return the response
        body after the response header: a memoryview into the received buffer, for hand-written
        decoders such as the Fetch response's."""
        await self.writable()
        body = request if isinstance(request, bytes | bytearray | memoryview) else request.encode(version=version)
        pending = self.submit_raw(api_key, version, body, timeout_s=timeout_s)
        assert pending is not None
        return await self.response_body(api_key, version, pending)

    async def writable(self) -> None:
        """Wait until the connection takes more requests (the peer reads as fast as we write);
        BrokerConnectionError when it has failed."""
        await self._wire.wait_writable()

    def submit_raw(self, api_key: int, version: int, body: bytes | bytearray | memoryview, *,
                   timeout_s: float | None = None, expect_response: bool = True) -> asyncio.Future[memoryview] | None:
        """Write a request body now, without waiting, and return the future of its response
        frame (for `response_body`), or None for a request the peer does not answer (a Produce
        with acks=0). Requests submitted one after another reach the peer in that order, which
        is what a proxy needs; the caller awaits `writable` first for flow control."""
        wire = self._wire
        if wire.error is not None:
            raise wire.failure()
        self._next_correlation = (self._next_correlation + 1) & 0x7FFFFFFF
        correlation_id = self._next_correlation
        header = encode_request_header(api_key, version, correlation_id, self._client_id)
        future: asyncio.Future[memoryview] | None = None
        if expect_response:
            req = _InFlight(correlation_id, api_key, version, wire.loop.create_future())
            timeout = self.request_timeout_s if timeout_s is None else timeout_s
            req.timer = wire.loop.call_later(timeout, wire.timed_out, req, timeout)
            wire.inflight.append(req)
            future = req.future
        assert wire.transport is not None
        wire.transport.writelines((size_prefix(len(header) + len(body)), header, body))
        return future

    async def response_body(self, api_key: int, version: int, pending: asyncio.Future[memoryview]) -> memoryview:
        """The response body of a request `submit_raw` wrote, after its response header."""
        frame = await pending
        try:
            _, offset = parse_response_header(frame, api_key, version)
        except DecodeError as exc:
            error = BrokerConnectionError(f"{self.address} sent a malformed response header: {exc}")
            self._wire.fail(error)
            raise error from None
        return frame[offset:]

    def close(self) -> None:
        """Close now; requests in flight fail with BrokerConnectionError."""
        self._wire.fail(BrokerConnectionError(f"connection to {self.address} closed"))

    async def aclose(self) -> None:
        """Close and wait until the transport has let go of the socket."""
        self.close()
        if self._wire.transport is not None:
            await self._wire.lost

    async def __aenter__(self) -> BrokerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
