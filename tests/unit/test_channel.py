"""A plain Channel's reads over a real socket pair: the socket stays registered with the loop's
selector while the peer is quiet, is dropped when bytes wait with nobody reading, and never
outlives the channel."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from kaflet.network.channel import Channel


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    yield ours, theirs
    theirs.close()
    ours.close()


def _watched(sock: socket.socket | int) -> bool:
    """Does the running loop's selector watch this socket (or descriptor) for reading?"""
    loop = asyncio.get_running_loop()
    try:
        key = loop._selector.get_key(sock if isinstance(sock, int) else sock.fileno())  # type: ignore[attr-defined]
    except KeyError:
        return False
    return key.data[0] is not None  # (reader handle, writer handle)


async def _settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_waiting_read_gets_the_bytes_and_stays_registered(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    channel = Channel(ours)
    buf = bytearray(16)
    for payload in (b"first", b"second", b"third"):
        read = asyncio.ensure_future(channel.recv_into(memoryview(buf)))
        await _settle()
        assert not read.done()
        assert _watched(ours)
        theirs.sendall(payload)
        n = await asyncio.wait_for(read, 5)
        assert bytes(buf[:n]) == payload
        # Quiet peer, nobody reading: the registration is kept for the next read.
        assert _watched(ours)
    fd = ours.fileno()
    channel.close()
    assert not _watched(fd)


async def test_bytes_with_nobody_reading_drop_the_registration(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    channel = Channel(ours)
    buf = bytearray(16)
    read = asyncio.ensure_future(channel.recv_into(memoryview(buf)))
    await _settle()
    theirs.sendall(b"a")
    assert await asyncio.wait_for(read, 5) == 1
    theirs.sendall(b"bc")  # arrives while "a request is handled"
    for _ in range(20):
        await asyncio.sleep(0.01)
        if not _watched(ours):
            break
    assert not _watched(ours)  # else the level-triggered selector would report it every turn
    n = await asyncio.wait_for(channel.recv_into(memoryview(buf)), 5)
    assert bytes(buf[:n]) == b"bc"
    channel.close()


async def test_end_of_stream_and_cancellation(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    channel = Channel(ours)
    buf = memoryview(bytearray(16))
    read = asyncio.ensure_future(channel.recv_into(buf))
    await _settle()
    read.cancel()
    with pytest.raises(asyncio.CancelledError):
        await read
    # A cancelled read leaves no waiter: bytes that arrive now unregister the socket.
    theirs.sendall(b"x")
    for _ in range(20):
        await asyncio.sleep(0.01)
        if not _watched(ours):
            break
    assert not _watched(ours)
    assert await asyncio.wait_for(channel.recv_into(buf), 5) == 1
    read = asyncio.ensure_future(channel.recv_into(buf))
    await _settle()
    theirs.shutdown(socket.SHUT_WR)
    assert await asyncio.wait_for(read, 5) == 0
    fd = ours.fileno()
    channel.close()
    assert not _watched(fd)
