"""Record-batch compression codecs, as Kafka clients write and read them.

Codec ids are the low three bits of a v2 batch's attributes: 0 none, 1 gzip, 2 snappy,
3 lz4, 4 zstd.  Wire-format choices, checked against what Kafka's Java client does:

* gzip: a standard single-member gzip stream.
* snappy: the Java client writes xerial-framed snappy (``SnappyOutputStream``) and reads it with
  ``SnappyInputStream``; librdkafka and kafka-python read both xerial and raw blocks.  We
  therefore *write* xerial framing, the one format every client is known to read, and *read*
  both xerial and raw snappy.
* lz4: the LZ4 frame format.  Kafka's Java reader decompresses every block on its own, so we
  write frames with independent blocks (cramjam's one-shot ``compress`` links blocks, which
  breaks Java consumers once a batch exceeds one 64 KiB block).
* zstd: standard zstd frames.

Decompression is bounded: an output larger than ``max_size`` raises ``RecordError`` with
CORRUPT_MESSAGE instead of exhausting memory (a decompression bomb).
"""

from __future__ import annotations

import struct
import zlib

import cramjam

from kaflet.protocol.errors import ErrorCode, KafkaError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES: dict[int, str] = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_BY_NAME: dict[str, int] = {v: k for k, v in CODEC_NAMES.items()}

#: Default cap on one batch's decompressed record section.
DEFAULT_MAX_DECOMPRESSED = 256 * 1024 * 1024

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
# Same block size as snappy-java's default (32 KiB).
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")


class CompressionError(KafkaError):
    """Raised for undecodable or oversized compressed data (or an unknown codec)."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(ErrorCode(error_code), message)
        self.error_code = error_code


def _corrupt(msg: str) -> CompressionError:
    return CompressionError(ErrorCode.CORRUPT_MESSAGE, msg)


#: Kafka's default levels (KIP-390): gzip -1 (zlib's own default, 6), lz4 9, zstd 3.
GZIP_DEFAULT_LEVEL = -1
LZ4_DEFAULT_LEVEL = 9


def compress(codec: int, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """Compress ``data`` with the codec id ``codec`` in the format Kafka clients read.

    ``level`` is the codec's compression level as Kafka's ``compression.<codec>.level`` gives
    it (KIP-390; ignored by snappy); None: the codec library's default. As Kafka's lz4 stream
    does, lz4 at the default level 9 uses the fast compressor and any other level the
    high-compression one (from its lowest level, 3, which the levels 1 and 2 also get, to 12,
    the frame format's cap for the levels above).
    """
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        if level is None or level == GZIP_DEFAULT_LEVEL:
            return bytes(cramjam.gzip.compress(data))
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        if level is None or level == LZ4_DEFAULT_LEVEL:
            c = cramjam.lz4.Compressor(block_linked=False, content_checksum=False)
        else:
            c = cramjam.lz4.Compressor(level=max(level, 3), block_linked=False, content_checksum=False)
        c.compress(data)
        return bytes(c.finish())
    if codec == ZSTD:
        if level is None:
            return bytes(cramjam.zstd.compress(data))
        return bytes(cramjam.zstd.compress(data, level=level))
    raise CompressionError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")


def decompress(
    codec: int, data: bytes | bytearray | memoryview, max_size: int = DEFAULT_MAX_DECOMPRESSED
) -> bytes | bytearray:
    """Decompress ``data``; raises CompressionError if corrupt or larger than ``max_size``."""
    try:
        if codec == NONE:
            if len(data) > max_size:
                raise _corrupt("uncompressed data exceeds the size limit")
            return bytes(data)
        if codec == GZIP:
            return _gzip_decompress(data, max_size)
        if codec == SNAPPY:
            return _snappy_decompress(data, max_size)
        if codec == LZ4:
            return _bounded(cramjam.lz4.decompress_into, data, max_size)
        if codec == ZSTD:
            return _bounded(cramjam.zstd.decompress_into, data, max_size)
    except CompressionError:
        raise
    except Exception as exc:  # cramjam/zlib raise assorted types for bad input
        raise _corrupt(f"failed to decompress {CODEC_NAMES.get(codec)} data: {exc}") from exc
    raise CompressionError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")


def _gzip_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    # zlib's max_length bounds the output without inflating the whole bomb first.
    d = zlib.decompressobj(wbits=31)
    out = d.decompress(data, max_size + 1)
    if len(out) > max_size or d.unconsumed_tail:
        raise _corrupt("gzip data decompresses beyond the size limit")
    if not d.eof:
        raise _corrupt("truncated gzip data")
    return out


def _bounded(fn: object, data: bytes | bytearray | memoryview, max_size: int) -> bytearray:
    """Run a cramjam ``decompress_into`` with growing buffers, never beyond ``max_size``."""
    size = min(max_size + 1, max(len(data) * 6, 64 * 1024))
    while True:
        out = bytearray(size)
        try:
            n = fn(data, out)  # type: ignore[operator]
        except Exception as exc:
            # cramjam reports a too-small buffer as a generic DecompressionError.
            if "whole buffer" not in str(exc) and "smaller than" not in str(exc):
                raise
            if size > max_size:
                raise _corrupt("compressed data decompresses beyond the size limit") from exc
            size = min(max_size + 1, size * 4)
            continue
        if n > max_size:
            raise _corrupt("compressed data decompresses beyond the size limit")
        del out[n:]
        return out


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    mv = memoryview(data)
    parts = [_XERIAL_HEADER]
    for i in range(0, len(mv), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(mv[i : i + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _raw_snappy(block: bytes | bytearray | memoryview, budget: int) -> bytes:
    n = cramjam.snappy.decompress_raw_len(block)
    if n > budget:
        raise _corrupt("snappy data decompresses beyond the size limit")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    mv = memoryview(data)
    if len(mv) < 16 or bytes(mv[:8]) != XERIAL_MAGIC:
        return _raw_snappy(mv, max_size)
    # xerial: 8-byte magic, int32 version, int32 min-compatible version, then
    # (int32 length, raw snappy block) pairs.
    pos = 16
    end = len(mv)
    parts: list[bytes] = []
    total = 0
    while pos < end:
        if end - pos < 4:
            raise _corrupt("truncated xerial snappy block length")
        (blen,) = _INT32.unpack_from(mv, pos)
        pos += 4
        if blen < 0 or blen > end - pos:
            raise _corrupt("bad xerial snappy block length")
        chunk = _raw_snappy(mv[pos : pos + blen], max_size - total)
        total += len(chunk)
        parts.append(chunk)
        pos += blen
    return b"".join(parts)
