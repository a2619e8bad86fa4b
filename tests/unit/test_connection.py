"""A connection's request order with deferred responses, over a real socket on 127.0.0.1.

Frames here are two bytes of api key (0: Produce, anything else: another API) and a one-byte
request number; the handler answers with the number. A Produce numbered with the high bit set
is answered with a DeferredResponse that completes when the test says so. A request of api 7
is answered at once and leaves work behind it (``Connection.after_response``) that ends when
the test releases its number.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Sequence

import pytest

from kaflet.network.connection import MAX_DEFERRED, Chunk, Connection, DeferredResponse, HandlerResult

DEFER = 0x80
AFTER = 7


class Peer:
    """The broker side (a Connection and its handler) and the client socket."""

    def __init__(self) -> None:
        self.started: list[int] = []  # request numbers, in the order handlers started
        self.release: dict[int, asyncio.Future[None]] = {}
        self.conn: Connection | None = None
        self.client: socket.socket | None = None
        self.fail: set[int] = set()

    async def handler(self, conn: Connection, frame: memoryview) -> HandlerResult:
        api, number = struct.unpack(">hB", frame)
        self.started.append(number)
        if api == 0 and number & DEFER:
            fut = self.release.setdefault(number, asyncio.get_running_loop().create_future())
            return DeferredResponse(self._complete(number, fut))
        if api == AFTER:
            fut = self.release.setdefault(number, asyncio.get_running_loop().create_future())

            async def after() -> None:
                await fut

            conn.after_response = after
        return [bytes([number])]

    async def _complete(self, number: int, fut: asyncio.Future[None]) -> Sequence[Chunk] | None:
        await fut
        if number in self.fail:
            raise ConnectionError("request failed")
        return [bytes([number])]

    def done(self, number: int) -> None:
        self.release.setdefault(number, asyncio.get_running_loop().create_future()).set_result(None)

    async def send(self, api: int, number: int) -> None:
        assert self.client is not None
        await asyncio.get_running_loop().sock_sendall(self.client, struct.pack(">ihB", 3, api, number))

    async def receive(self, count: int, timeout: float = 5.0) -> list[int]:
        assert self.client is not None
        loop = asyncio.get_running_loop()
        got = b""
        async with asyncio.timeout(timeout):
            while len(got) < 5 * count:
                chunk = await loop.sock_recv(self.client, 1024)
                if not chunk:
                    break
                got += chunk
        return [got[i + 4] for i in range(0, len(got), 5)]

    async def nothing_received(self, wait: float = 0.2) -> bool:
        try:
            await self.receive(1, wait)
        except TimeoutError:
            return True
        return False


@pytest.fixture
async def peer() -> AsyncIterator[Peer]:
    p = Peer()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    loop = asyncio.get_running_loop()
    client = socket.socket()
    client.setblocking(False)
    await loop.sock_connect(client, server.getsockname())
    sock, addr = await loop.sock_accept(server)
    sock.setblocking(False)
    p.client = client
    p.conn = Connection(sock, addr, "PLAINTEXT", p.handler, 1 << 20, "c1")
    p.conn.task = loop.create_task(p.conn.serve())
    yield p
    p.conn.abort()
    await asyncio.gather(p.conn.task, return_exceptions=True)
    client.close()
    server.close()


async def test_deferred_produces_are_answered_in_request_order(peer: Peer) -> None:
    await peer.send(0, DEFER | 1)
    await peer.send(0, DEFER | 2)
    await peer.send(0, 3)  # answered at once by its handler, but after the two before it
    await asyncio.sleep(0.1)
    # Every Produce was handled (appended) without waiting for the answers before it.
    assert peer.started == [DEFER | 1, DEFER | 2, 3]
    peer.done(DEFER | 2)
    assert await peer.nothing_received()
    peer.done(DEFER | 1)
    assert await peer.receive(3) == [DEFER | 1, DEFER | 2, 3]
    assert peer.conn is not None and not peer.conn.busy


async def test_another_request_waits_for_the_deferred_answers(peer: Peer) -> None:
    await peer.send(0, DEFER | 1)
    await peer.send(3, 2)  # e.g. Metadata: handled only once the Produce is answered
    await asyncio.sleep(0.1)
    assert peer.started == [DEFER | 1]
    assert peer.conn is not None and peer.conn.busy
    peer.done(DEFER | 1)
    assert await peer.receive(2) == [DEFER | 1, 2]
    assert peer.started == [DEFER | 1, 2]


async def test_at_most_max_deferred_are_owed(peer: Peer) -> None:
    for n in range(1, MAX_DEFERRED + 2):
        await peer.send(0, DEFER | n)
    await asyncio.sleep(0.1)
    assert len(peer.started) == MAX_DEFERRED  # the next one waits in the socket buffer
    peer.done(DEFER | 1)
    assert await peer.receive(1) == [DEFER | 1]
    await asyncio.sleep(0.05)
    assert len(peer.started) == MAX_DEFERRED + 1
    for n in range(2, MAX_DEFERRED + 2):
        peer.done(DEFER | n)
    assert await peer.receive(MAX_DEFERRED) == [DEFER | n for n in range(2, MAX_DEFERRED + 2)]


async def test_answers_owed_when_the_peer_stops_sending_still_go_out(peer: Peer) -> None:
    await peer.send(0, DEFER | 1)
    await asyncio.sleep(0.05)
    assert peer.client is not None
    peer.client.shutdown(socket.SHUT_WR)
    await asyncio.sleep(0.05)
    peer.done(DEFER | 1)
    assert await peer.receive(1) == [DEFER | 1]


async def test_a_failed_deferred_request_closes_the_connection(peer: Peer) -> None:
    peer.fail.add(DEFER | 1)
    await peer.send(0, DEFER | 1)
    await peer.send(0, DEFER | 2)
    await asyncio.sleep(0.05)
    peer.done(DEFER | 2)
    peer.done(DEFER | 1)
    assert await peer.receive(2) == []  # closed, nothing sent
    assert peer.conn is not None and peer.conn.task is not None
    await asyncio.wait_for(asyncio.gather(peer.conn.task, return_exceptions=True), 5)
    assert peer.conn.closed and not peer.conn.busy


async def test_work_after_a_response_holds_the_next_request_not_the_answer(peer: Peer) -> None:
    await peer.send(AFTER, 1)
    await peer.send(3, 2)
    # Answered before its work ended; the next request is read only once it has.
    assert await peer.receive(1) == [1]
    await asyncio.sleep(0.1)
    assert peer.started == [1]
    assert peer.conn is not None and peer.conn.busy
    peer.done(1)
    assert await peer.receive(1) == [2]
    assert peer.started == [1, 2]
    assert not peer.conn.busy and peer.conn.after_response is None
