"""Listening sockets, accepted connections, and the idle-connection reaper."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable

from kaflet.network.connection import Connection, HandlerResult, ListenerSecurity, configure_socket
from kaflet.protocol.framing import STAGING_BYTES

log = logging.getLogger("kaflet.network")

Handler = Callable[[Connection, memoryview], Awaitable[HandlerResult]]


class Listener:
    """Accepts connections on one endpoint and serves each with a Connection task."""

    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        *,
        max_request_bytes: int,
        idle_ms: int,
        send_buf: int,
        recv_buf: int,
        security: ListenerSecurity | None = None,
        staging_bytes: int = STAGING_BYTES,
        pipelined: int = 0,
    ) -> None:
        """``staging_bytes``: each connection's reusable receive buffer (protocol/framing.py);
        a listener of many idle connections with small requests saves memory with less.
        ``pipelined``: see `Connection` (a proxy's listener)."""
        self.name = name
        self.pipelined = pipelined
        self.staging_bytes = staging_bytes
        self.host = host
        self.port = port
        self.max_request_bytes = max_request_bytes
        self.idle_ms = idle_ms
        self.send_buf = send_buf
        self.recv_buf = recv_buf
        self.security = security or ListenerSecurity()
        self.connections: dict[Connection, asyncio.Task[None]] = {}
        self._sock: socket.socket | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._ids = itertools.count()

    async def start(self, handler: Handler) -> None:
        """Bind and start accepting; an unusable address raises OSError with its reason."""
        self.bind()
        self.serve(handler)

    def bind(self) -> None:
        """Bind the listening socket (resolving port 0) without accepting yet."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host or "0.0.0.0", self.port))
        except OSError:
            sock.close()
            raise
        sock.listen(512)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self._sock = sock

    def serve(self, handler: Handler) -> None:
        """Start accepting connections on the bound socket, each request handled by ``handler``."""
        self._tasks.append(asyncio.create_task(self._accept_loop(handler), name=f"accept-{self.name}"))
        if self.idle_ms > 0:
            self._tasks.append(asyncio.create_task(self._reap_idle(), name=f"idle-{self.name}"))

    async def _accept_loop(self, handler: Handler) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        reserve = _DescriptorReserve()
        refused = 0  # connections closed at once since descriptors ran out
        try:
            while True:
                try:
                    sock, addr = await loop.sock_accept(self._sock)
                except asyncio.CancelledError:
                    raise
                except OSError as exc:
                    if self._sock is None or self._sock.fileno() < 0:
                        return
                    if exc.errno in (errno.EMFILE, errno.ENFILE) and reserve.accept_and_close(self._sock):
                        # The client sees its connection closed and retries, rather than
                        # hanging in the backlog, and the loop does not spin on the error.
                        if not refused:
                            log.warning("out of file descriptors (%s): closing new connections on %s until "
                                        "some are free", exc.strerror, self.name)
                        refused += 1
                    else:
                        log.warning("accept failed on %s: %s", self.name, exc)
                    await asyncio.sleep(0.1)
                    continue
                if refused:
                    log.info("accepting connections on %s again (%d closed while out of file descriptors)",
                             self.name, refused)
                    refused = 0
                self._serve_connection(sock, addr, handler)
        finally:
            reserve.close()

    def _serve_connection(self, sock: socket.socket, addr: tuple[str, int], handler: Handler) -> None:
        configure_socket(sock, self.send_buf, self.recv_buf)
        conn_id = f"{self.host}:{self.port}-{addr[0]}:{addr[1]}-{next(self._ids)}"
        conn = Connection(sock, (addr[0], addr[1]), self.name, handler, self.max_request_bytes, conn_id,
                          self.security, self.staging_bytes, self.pipelined)
        task = asyncio.create_task(conn.serve(), name=f"conn-{conn_id}")
        conn.task = task
        self.connections[conn] = task
        task.add_done_callback(self._forget(conn))

    def _forget(self, conn: Connection) -> Callable[[asyncio.Task[None]], None]:
        def done(_task: asyncio.Task[None]) -> None:
            self.connections.pop(conn, None)

        return done

    async def _reap_idle(self) -> None:
        # Kafka closes connections idle for connections.max.idle.ms; a scan a few times per
        # period is as precise as clients need and costs nothing per request.
        period = max(self.idle_ms / 4000, 0.05)
        while True:
            await asyncio.sleep(period)
            cutoff = time.monotonic() - self.idle_ms / 1000
            for conn in list(self.connections):
                if not conn.busy and conn.last_active < cutoff:
                    log.debug("closing idle connection %s", conn.conn_id)
                    conn.abort()

    def stop_accepting(self) -> None:
        """Close the listening socket; existing connections go on."""
        for t in self._tasks:
            t.cancel()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    async def drain_and_close(self, timeout: float) -> None:
        """Let in-flight requests finish (up to `timeout` s), then close every connection."""
        deadline = time.monotonic() + timeout
        for conn in list(self.connections):
            if not conn.busy:
                conn.abort()
        while any(c.busy for c in self.connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self.connections):
            conn.abort()
        for task in list(self.connections.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class _DescriptorReserve:
    """One descriptor held back for the listener: when the process is out of descriptors, it
    is released to accept one waiting connection and close it at once, then taken again."""

    def __init__(self) -> None:
        self._fd = self._take()

    @staticmethod
    def _take() -> int:
        try:
            return os.open(os.devnull, os.O_RDONLY)
        except OSError:
            return -1

    def accept_and_close(self, listening: socket.socket) -> bool:
        """Accept and close one pending connection; False when there is no reserve to use."""
        if self._fd < 0:
            self._fd = self._take()
            return False
        os.close(self._fd)
        try:
            conn, _ = listening.accept()
            conn.close()
        except OSError:
            pass  # nothing was waiting any more
        finally:
            self._fd = self._take()
        return True

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
