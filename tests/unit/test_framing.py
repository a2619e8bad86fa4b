"""The framer (kaflet/protocol/framing.py) without sockets: frames out whatever the chunking,
and a size over the bound refused before anything is allocated for it."""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaflet.protocol.framing import STAGING_BYTES, FrameReader, FrameSizeError, size_prefix


def _framed(frames: list[bytes]) -> bytes:
    return b"".join(size_prefix(len(f)) + f for f in frames)


@settings(max_examples=300, deadline=None)
@given(frames=st.lists(st.binary(max_size=200), max_size=8),
       cuts=st.lists(st.integers(min_value=1, max_value=300), max_size=40))
def test_frames_come_out_whole_whatever_the_chunks(frames: list[bytes], cuts: list[int]) -> None:
    # A small staging buffer, so frames smaller and larger than it both occur.
    stream = _framed(frames)
    reader = FrameReader(1000, staging_bytes=64)
    got: list[bytes] = []
    pos = 0
    for cut in [*cuts, len(stream)]:
        got += [bytes(f) for f in reader.feed(stream[pos:pos + cut])]
        pos += cut
        if pos >= len(stream):
            break
    assert got == frames
    assert not reader.pending


def test_socket_style_reads_fill_a_large_frame_in_place() -> None:
    """buffer()/received() as a socket's recv_into uses them: a frame larger than the staging
    buffer is received into its own buffer, which comes out as the frame."""
    big = bytes(range(256)) * (STAGING_BYTES // 128)
    stream = _framed([b"small", big, b"tail"])
    got = _socket_style(FrameReader(1 << 20), stream, lambda step: 10_000)
    assert got == [b"small", big, b"tail"]


def _socket_style(reader: FrameReader, stream: bytes, most: Callable[[int], int]) -> list[bytes]:
    """The frames of ``stream`` read as recv_into would, at most ``most(step)`` bytes a time."""
    got: list[bytes] = []
    pos, step = 0, 0
    while pos < len(stream):
        buf = reader.buffer()
        assert len(buf) > 0
        step += 1
        n = min(len(buf), most(step), len(stream) - pos)
        buf[:n] = stream[pos:pos + n]
        reader.received(n)
        pos += n
        while (frame := reader.next_frame()) is not None:
            got.append(bytes(frame))
    return got


def test_a_two_gigabyte_size_is_refused_before_allocating() -> None:
    reader = FrameReader(100 * 1024 * 1024, min_size=4)
    tracemalloc.start()
    try:
        with pytest.raises(FrameSizeError) as info:
            reader.feed(struct.pack(">i", 2**31 - 1) + b"\x00" * 100)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (info.value.size, info.value.max_size) == (2**31 - 1, 100 * 1024 * 1024)
    assert peak < 1024 * 1024


@pytest.mark.parametrize("size", [-1, -(2**31), 3])
def test_sizes_below_the_minimum_are_refused(size: int) -> None:
    with pytest.raises(FrameSizeError) as info:
        FrameReader(1000, min_size=4).feed(struct.pack(">i", size))
    assert info.value.size == size


def test_the_bound_applies_to_the_frame_being_read() -> None:
    """A server raises the bound once a client has authenticated; frames already buffered are
    judged by the bound in force when they are taken."""
    reader = FrameReader(10)
    assert [bytes(f) for f in reader.feed(_framed([b"a" * 10]))] == [b"a" * 10]
    with pytest.raises(FrameSizeError):
        reader.feed(size_prefix(50))
    reader.max_size = 50
    assert [bytes(f) for f in reader.feed(b"b" * 50)] == [b"b" * 50]


def test_pending_says_whether_a_frame_was_cut() -> None:
    reader = FrameReader(100)
    assert not reader.pending
    reader.feed(b"\x00\x00")
    assert reader.pending
    reader.feed(b"\x00\x01x")
    assert not reader.pending


def test_an_announced_size_within_the_bound_costs_only_what_arrived() -> None:
    """A peer that announces 90 MB (within the bound) and sends 1 KB holds ~64 KiB, not 90 MB;
    an eager reader (a trusted broker's answers) takes the announced size at once."""
    announced = 90 * 1024 * 1024
    for eager, bound in ((False, 1024 * 1024), (True, announced)):
        reader = FrameReader(100 * 1024 * 1024, eager=eager)
        tracemalloc.start()
        try:
            assert reader.feed(size_prefix(announced) + b"x" * 1000) == []
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert (peak < bound) if not eager else (peak >= bound)


@pytest.mark.parametrize("eager", [False, True])
def test_a_growing_frame_comes_out_whole(eager: bool) -> None:
    """A 3 MB frame read socket-style in uneven pieces: its buffer doubles as bytes arrive (or is
    taken whole) and the frame comes out byte for byte, between two small ones."""
    big = bytes(range(251)) * (3 * 1024 * 1024 // 251)
    stream = _framed([b"first", big, b"last"])
    reader = FrameReader(4 * 1024 * 1024, staging_bytes=4096, eager=eager)
    got = _socket_style(reader, stream, lambda step: 1000 + 7919 * step % 50_000)
    assert got == [b"first", big, b"last"]
