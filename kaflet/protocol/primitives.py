"""Bounds-checked readers and writers for Kafka's primitive types.

Every length, count and varint read from the wire is checked against what remains in the
buffer before it is used, so a hostile frame can cost at most its own size.
"""

from __future__ import annotations

import struct

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


class DecodeError(ValueError):
    """The bytes do not form a valid message of the expected type."""


class Reader:
    """Sequential reads over a memoryview."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.buf = buf if isinstance(buf, memoryview) else memoryview(buf)
        self.pos = pos
        self.end = len(self.buf) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > self.end:
            raise DecodeError(f"need {n} bytes at {self.pos}, only {self.end - self.pos} left")

    def int8(self) -> int:
        self._need(1)
        v = _I8.unpack_from(self.buf, self.pos)[0]
        self.pos += 1
        return v

    def boolean(self) -> bool:
        return self.int8() != 0

    def int16(self) -> int:
        self._need(2)
        v = _I16.unpack_from(self.buf, self.pos)[0]
        self.pos += 2
        return v

    def int32(self) -> int:
        self._need(4)
        v = _I32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return v

    def uint32(self) -> int:
        self._need(4)
        v = _U32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return v

    def int64(self) -> int:
        self._need(8)
        v = _I64.unpack_from(self.buf, self.pos)[0]
        self.pos += 8
        return v

    def uuid(self) -> bytes:
        self._need(16)
        v = bytes(self.buf[self.pos : self.pos + 16])
        self.pos += 16
        return v

    def uvarint(self) -> int:
        result = 0
        shift = 0
        buf = self.buf
        while True:
            if self.pos >= self.end:
                raise DecodeError("truncated varint")
            b = buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise DecodeError("varint longer than 5 bytes")

    def raw(self, n: int) -> memoryview:
        self._need(n)
        v = self.buf[self.pos : self.pos + n]
        self.pos += n
        return v

    def _utf8(self, n: int) -> str:
        try:
            return str(self.raw(n), "utf-8")
        except UnicodeDecodeError:
            raise DecodeError(f"invalid UTF-8 in a string at {self.pos - n}") from None

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise DecodeError("null where a string is required")
        return self._utf8(n)

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        return self._utf8(n)

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise DecodeError("null where a string is required")
        return self._utf8(n)

    def compact_nullable_string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        return self._utf8(n)

    def nullable_bytes(self) -> memoryview | None:
        n = self.int32()
        if n < 0:
            return None
        return self.raw(n)

    def compact_nullable_bytes(self) -> memoryview | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        return self.raw(n)

    def array_len(self, min_item_size: int = 1) -> int:
        """An int32 array count, bounded by what the buffer could hold (-1 means null: 0)."""
        n = self.int32()
        if n < 0:
            return 0
        if n * min_item_size > self.end - self.pos:
            raise DecodeError(f"array of {n} items cannot fit in {self.end - self.pos} bytes")
        return n

    def compact_array_len(self, min_item_size: int = 1) -> int:
        n = self.uvarint() - 1
        if n < 0:
            return 0
        if n * min_item_size > self.end - self.pos:
            raise DecodeError(f"array of {n} items cannot fit in {self.end - self.pos} bytes")
        return n

    def skip_tagged_fields(self) -> None:
        count = self.uvarint()
        for _ in range(count):
            self.uvarint()  # tag
            size = self.uvarint()
            self._need(size)
            self.pos += size


def uvarint_bytes(n: int) -> bytes:
    """Unsigned LEB128 encoding of a non-negative int."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL_UVARINTS = [uvarint_bytes(i) for i in range(128)]


class Writer:
    """Appends Kafka primitives to a bytearray."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def int8(self, v: int) -> None:
        self.buf += _I8.pack(v)

    def boolean(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def int16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def int32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def int64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def uvarint(self, v: int) -> None:
        self.buf += _SMALL_UVARINTS[v] if v < 128 else uvarint_bytes(v)

    def raw(self, b: bytes | bytearray | memoryview) -> None:
        self.buf += b

    def string(self, s: str, compact: bool) -> None:
        b = s.encode()
        if compact:
            self.uvarint(len(b) + 1)
        else:
            self.int16(len(b))
        self.buf += b

    def nullable_string(self, s: str | None, compact: bool) -> None:
        if s is None:
            if compact:
                self.buf.append(0)
            else:
                self.int16(-1)
            return
        self.string(s, compact)

    def nullable_bytes(self, b: bytes | None, compact: bool) -> None:
        if b is None:
            if compact:
                self.buf.append(0)
            else:
                self.int32(-1)
            return
        if compact:
            self.uvarint(len(b) + 1)
        else:
            self.int32(len(b))
        self.buf += b

    def array_len(self, n: int, compact: bool) -> None:
        if compact:
            self.uvarint(n + 1)
        else:
            self.int32(n)

    def tagged_fields(self, compact: bool) -> None:
        """An empty tagged-field section (flexible versions only)."""
        if compact:
            self.buf.append(0)
