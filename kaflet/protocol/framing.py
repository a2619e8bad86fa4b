"""Kafka's framing, without I/O: a 4-byte big-endian size, then that many bytes.

`FrameReader` is the one reader of frames for every socket kaflet reads Kafka frames from: the
broker's client connections (kaflet/network/connection.py), its connections to other brokers
(kaflet/network/client.py) and the tools' blocking connection (kaflet/network/raw_connection.py).
The caller owns the socket: it receives into `buffer()`, reports the count with `received()`,
and takes whole frames from `next_frame()` until it returns None. A size outside the bounds
raises `FrameSizeError` as soon as the four size bytes are in, before anything is allocated for
the frame (Kafka's NetworkReceive checks its maxSize the same way), so a peer announcing 2 GiB
costs nothing.

Small frames are received into one reusable staging buffer and copied out; a frame larger than
that buffer gets a buffer of its own, which the socket fills directly and which is handed over
without a copy. That buffer grows with what has arrived (doubling from LARGE_FIRST_BYTES up to
the frame's size) rather than taking the announced size at once: a peer that announces a
100 MB request within the limit and sends a few bytes holds 64 KiB, not 100 MB, and the copies
of the doublings add up to less than the frame. A reader of a trusted peer's answers (a
broker's, read by kaflet's clients) takes the announced size at once (``eager``), sparing the
copies.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")
SIZE_BYTES = _SIZE.size
#: Frames up to this size (with their size field) are received in the reusable staging buffer.
STAGING_BYTES = 65536
#: The first buffer of a frame larger than the staging buffer (it doubles as bytes arrive).
LARGE_FIRST_BYTES = 65536


def size_prefix(size: int) -> bytes:
    """The size field that goes before a frame of `size` bytes."""
    return _SIZE.pack(size)


class FrameSizeError(ValueError):
    """A frame announced a size outside the reader's bounds; the connection should be closed."""

    def __init__(self, size: int, min_size: int, max_size: int) -> None:
        super().__init__(f"frame size {size} outside [{min_size}, {max_size}]")
        self.size = size
        self.min_size = min_size
        self.max_size = max_size


class FrameReader:
    """Whole frames out of a byte stream, each at most `max_size` bytes (which the caller may
    change between frames: a server lowers it until a client has authenticated).

    Contract: after `received`, call `next_frame` until it returns None before asking for
    `buffer` again; then `buffer` always has room.
    """

    __slots__ = ("max_size", "min_size", "eager", "_staging", "_start", "_end", "_frame", "_frame_pos", "_frame_size")

    def __init__(self, max_size: int, *, min_size: int = 0, staging_bytes: int = STAGING_BYTES,
                 eager: bool = False) -> None:
        if staging_bytes < SIZE_BYTES:
            raise ValueError("the staging buffer must hold a size field")
        self.max_size = max_size
        self.eager = eager
        self.min_size = min_size
        self._staging = bytearray(staging_bytes)
        self._start = 0  # unread bytes of the staging buffer are [_start, _end)
        self._end = 0
        self._frame: bytearray | None = None  # a large frame being received into its own buffer
        self._frame_pos = 0
        self._frame_size = 0  # the large frame's announced size (its buffer may be shorter yet)

    @property
    def pending(self) -> bool:
        """Part of a frame has been received (an end of stream now would cut a frame)."""
        return self._frame is not None or self._end > self._start

    def buffer(self) -> memoryview:
        """Where the next bytes from the peer go: the rest of a large frame, or the staging buffer's free tail."""
        frame = self._frame
        if frame is not None:
            if self._frame_pos == len(frame):
                # Full but the frame is not: a buffer twice as large (never the old one resized,
                # which a view handed out before may still hold).
                grown = bytearray(min(2 * len(frame), self._frame_size))
                grown[:self._frame_pos] = frame
                self._frame = frame = grown
            return memoryview(frame)[self._frame_pos:]
        if self._start == self._end:
            self._start = self._end = 0
        elif self._start:
            # Move the partial frame to the front, so the rest of it fits behind it.
            n = self._end - self._start
            self._staging[:n] = self._staging[self._start:self._end]
            self._start, self._end = 0, n
        return memoryview(self._staging)[self._end:]

    def received(self, nbytes: int) -> None:
        """`nbytes` were written at the start of the last `buffer()`."""
        if self._frame is not None:
            self._frame_pos += nbytes
        else:
            self._end += nbytes

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Take `data` (copying it in) and return the frames it completed."""
        frames: list[memoryview] = []
        view = memoryview(data)
        while True:
            while (frame := self.next_frame()) is not None:
                frames.append(frame)
            if not view:
                return frames
            buf = self.buffer()
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            self.received(n)
            view = view[n:]

    def next_frame(self) -> memoryview | None:
        """The next whole frame (without its size field), or None until more bytes arrive.

        Raises FrameSizeError for a size outside [min_size, max_size].
        """
        frame = self._frame
        if frame is not None:
            if self._frame_pos < self._frame_size:
                return None
            self._frame = None
            return memoryview(frame)
        have = self._end - self._start - SIZE_BYTES
        if have < 0:
            return None
        size = _SIZE.unpack_from(self._staging, self._start)[0]
        if size < self.min_size or size > self.max_size:
            raise FrameSizeError(size, self.min_size, self.max_size)
        begin = self._start + SIZE_BYTES
        if have >= size:
            self._start = begin + size
            # A copy: the staging buffer is reused for the next bytes.
            return memoryview(bytes(self._staging[begin:begin + size]))
        if size + SIZE_BYTES > len(self._staging):
            large = bytearray(size if self.eager else min(size, max(have, LARGE_FIRST_BYTES)))
            large[:have] = self._staging[begin:self._end]
            self._frame, self._frame_pos, self._frame_size = large, have, size
            self._start = self._end = 0
        return None
