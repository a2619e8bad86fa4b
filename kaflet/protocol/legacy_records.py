"""Message sets, magic v0 and v1: the record format of Produce v0-2 and Fetch v0-3.

kaflet stores only v2 record batches (docs/design.md: batches are bytes).  Old clients still
speak the message format of Kafka 0.8-0.10, so, as Kafka does since it moved to v2, a produced
message set is up-converted into one v2 batch before the log assigns offsets, and what an old
consumer fetches is down-converted from the stored batches.

One message (a "shallow entry" of a message set), big-endian::

    offset int64 | size int32 | crc uint32 (CRC-32 of [magic, end)) | magic int8 |
    attributes int8 (bits 0-2 codec, bit 3 LogAppendTime, v1 only) | timestamp int64 (v1 only) |
    key bytes (int32 length, -1 null) | value bytes (int32 length, -1 null)

A compressed message (a "wrapper") has a null key and, as value, a compressed message set of
inner messages.  In v1 the inner offsets are relative (0, 1, ...) and the wrapper's offset is
the absolute offset of the last inner message; in v0 the inner offsets are absolute.

LZ4 in v0: Kafka 0.8-0.9 computed the LZ4 frame header checksum over the frame's magic number
too, and v0 consumers expect that broken checksum; v1 uses the correct one (KIP-57).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from kaflet.protocol import compression
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    NO_TIMESTAMP,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_TYPE_MASK,
    Buffer,
    Record,
    RecordError,
    build_batch,
    decode_records,
    iter_batches,
)

MAGIC_V0 = 0
MAGIC_V1 = 1
#: crc, magic, attributes, key length, value length (v0); v1 adds the timestamp.
RECORD_OVERHEAD_V0 = 14
RECORD_OVERHEAD_V1 = 22
_CODEC_MASK = 0x07

_ENTRY_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_HEAD_V0 = struct.Struct(">qiIbbi")  # offset, size, crc, magic, attributes, key length
_HEAD_V1 = struct.Struct(">qiIbbqi")  # ... timestamp, key length
_CRC_START = 16  # the CRC covers the message from its magic byte on


class LegacyRecord(NamedTuple):
    """A message of a v0/v1 message set (``timestamp`` is -1 in v0)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


class MessageSet(NamedTuple):
    """A decoded produce message set: its magic, the wrapper's codec (0 when uncompressed), the
    timestamp type the producer set, and its messages in order."""

    magic: int
    codec: int
    timestamp_type: int
    records: list[LegacyRecord]


def _corrupt(msg: str) -> RecordError:
    return RecordError(ErrorCode.CORRUPT_MESSAGE, msg)


def _invalid(msg: str) -> RecordError:
    return RecordError(ErrorCode.INVALID_RECORD, msg)


def record_set_magic(buf: Buffer) -> int | None:
    """The magic byte of the first entry of a record set (the same place for every format), or
    None when the set is too short to hold one."""
    return buf[MAGIC_OFFSET] if len(buf) > MAGIC_OFFSET else None


# ---- decoding (produce) ---------------------------------------------------------------------


def _entries(mv: memoryview, max_message_bytes: int, what: str) -> Iterable[tuple[int, int, int, int, int]]:
    """(position, size incl. log overhead, offset, magic, attributes) of each entry, CRC checked.

    Raises CORRUPT_MESSAGE for a truncated entry, a size below the minimum overhead, an invalid
    magic byte or a CRC mismatch; MESSAGE_TOO_LARGE for an entry above ``max_message_bytes``.
    """
    n = len(mv)
    pos = 0
    while pos < n:
        if n - pos < LOG_OVERHEAD + RECORD_OVERHEAD_V0:
            raise _corrupt(f"truncated {what} at position {pos}")
        offset, size, crc, magic, attributes = _ENTRY_HEAD.unpack_from(mv, pos)
        if size < RECORD_OVERHEAD_V0:
            raise _corrupt(f"message size {size} is less than the minimum message overhead")
        if magic not in (MAGIC_V0, MAGIC_V1):
            if magic == MAGIC_V2:
                raise _invalid(f"a record batch with magic 2 inside a magic {mv[MAGIC_OFFSET]} {what}")
            raise _corrupt(f"invalid magic {magic} in {what}")
        if magic == MAGIC_V1 and size < RECORD_OVERHEAD_V1:
            raise _corrupt(f"message size {size} is less than the minimum v1 message overhead")
        end = pos + LOG_OVERHEAD + size
        if end > n:
            raise _corrupt(f"truncated {what}: a message of {size} bytes at position {pos} runs past the end")
        if size + LOG_OVERHEAD > max_message_bytes:
            raise RecordError(ErrorCode.MESSAGE_TOO_LARGE,
                              f"message of {size + LOG_OVERHEAD} bytes exceeds max.message.bytes {max_message_bytes}")
        if zlib.crc32(mv[pos + _CRC_START:end]) != crc:
            raise _corrupt(f"message at position {pos} is corrupt (stored crc = {crc})")
        yield pos, size + LOG_OVERHEAD, offset, magic, attributes
        pos = end


def _key_value(mv: memoryview, pos: int, end: int, magic: int) -> tuple[int, bytes | None, bytes | None]:
    """(timestamp, key, value) of the message at ``pos`` (its entry ends at ``end``)."""
    p = pos + LOG_OVERHEAD + 6  # crc, magic, attributes
    timestamp = NO_TIMESTAMP
    if magic == MAGIC_V1:
        (timestamp,) = _I64.unpack_from(mv, p)
        p += 8
    fields: list[bytes | None] = []
    for name in ("key", "value"):
        if p + 4 > end:
            raise _corrupt(f"message {name} length runs past the message")
        (length,) = _I32.unpack_from(mv, p)
        p += 4
        if length < 0:
            if length != -1:
                raise _corrupt(f"negative {name} length {length}")
            fields.append(None)
            continue
        if p + length > end:
            raise _corrupt(f"message {name} runs past the message")
        fields.append(bytes(mv[p:p + length]))
        p += length
    if p != end:
        raise _corrupt("message size does not match its key and value")
    return timestamp, fields[0], fields[1]


def decode_message_set(buf: Buffer, max_message_bytes: int,
                       max_decompressed: int = compression.DEFAULT_MAX_DECOMPRESSED) -> MessageSet:
    """Decode and validate a produce message set of magic v0 or v1, as Kafka's LogValidator does.

    Uncompressed messages may come several to a set; a compressed set must be exactly one
    wrapper.  Raises RecordError: CORRUPT_MESSAGE (truncated, bad size, CRC mismatch of an
    entry or of an inner message, invalid magic), INVALID_RECORD (messages of different
    magics, more than one compressed wrapper, nested compression, an inner message whose magic
    is not the wrapper's), MESSAGE_TOO_LARGE, UNSUPPORTED_COMPRESSION_TYPE (zstd, or an unknown
    codec: zstd needs magic v2).
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if len(mv) == 0:
        raise _invalid("produce message set holds no message")
    entries = list(_entries(mv, max_message_bytes, "message set"))
    magic = entries[0][3]
    codec = 0
    ts_type = TIMESTAMP_CREATE_TIME
    records: list[LegacyRecord] = []
    for pos, size, offset, m, attributes in entries:
        if m != magic:
            raise _invalid(f"message magic {m} is not the same as the first message's magic {magic}")
        c = attributes & _CODEC_MASK
        if c > compression.LZ4:
            raise RecordError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                              f"compression codec {c} is not supported with message format v{magic}")
        if magic == MAGIC_V1 and attributes & TIMESTAMP_TYPE_MASK:
            ts_type = TIMESTAMP_LOG_APPEND_TIME
        timestamp, key, value = _key_value(mv, pos, pos + size, magic)
        if c == 0:
            records.append(LegacyRecord(offset, timestamp, key, value))
            continue
        if len(entries) > 1:
            raise _invalid("compressed message set has more than one wrapper message")
        codec = c
        if value is None:
            raise _corrupt("compressed wrapper message has a null value")
        inner = memoryview(decompress(c, value, magic, max_decompressed))
        for ipos, isize, ioffset, im, iattributes in _entries(inner, max_decompressed, "compressed message set"):
            if im != magic:
                raise _invalid(f"inner message magic {im} does not match the wrapper's magic {magic}")
            if iattributes & _CODEC_MASK:
                raise _invalid("compressed wrapper message holds a compressed inner message")
            its, ikey, ivalue = _key_value(inner, ipos, ipos + isize, im)
            records.append(LegacyRecord(ioffset, its, ikey, ivalue))
        if not records:
            raise _invalid("compressed wrapper message holds no message")
    return MessageSet(magic, codec, ts_type, records)


def to_record_batch(ms: MessageSet) -> bytes:
    """Up-convert a decoded message set to one v2 batch (base offset 0, offsets 0..n-1; the log
    assigns the real ones), compressed with the message set's codec, timestamps as they came
    (-1, NO_TIMESTAMP, from v0)."""
    base_ts = ms.records[0].timestamp
    records = [Record(i, r.timestamp - base_ts, r.key, r.value) for i, r in enumerate(ms.records)]
    return build_batch(records, compression=ms.codec, timestamp_type=ms.timestamp_type, base_timestamp=base_ts)


# ---- encoding (fetch) -----------------------------------------------------------------------


def _message(out: bytearray, offset: int, magic: int, attributes: int, timestamp: int,
             key: bytes | None, value: bytes | Buffer | None) -> None:
    """Append one message (with its log overhead) to ``out``."""
    klen = -1 if key is None else len(key)
    vlen = -1 if value is None else len(value)
    start = len(out)
    size = (RECORD_OVERHEAD_V1 if magic == MAGIC_V1 else RECORD_OVERHEAD_V0) + max(klen, 0) + max(vlen, 0)
    if magic == MAGIC_V1:
        out += _HEAD_V1.pack(offset, size, 0, magic, attributes, timestamp, klen)
    else:
        out += _HEAD_V0.pack(offset, size, 0, magic, attributes, klen)
    if key is not None:
        out += key
    out += _I32.pack(vlen)
    if value is not None:
        out += value
    _U32.pack_into(out, start + 12, zlib.crc32(memoryview(out)[start + _CRC_START:]))


def encode_message_set(records: Sequence[LegacyRecord], magic: int, codec: int = 0,
                       timestamp_type: int = TIMESTAMP_CREATE_TIME, log_append_time: int = NO_TIMESTAMP) -> bytes:
    """Encode messages as a v0/v1 message set; compressed: one wrapper holding them all.

    Offsets are the records' (absolute).  In a v1 wrapper the inner offsets are made relative
    to the first record and the wrapper carries the last offset and, as timestamp, the largest
    one (or ``log_append_time`` for LogAppendTime, which then stands for every inner message's).
    Timestamps are dropped in v0.
    """
    out = bytearray()
    ts_attr = TIMESTAMP_TYPE_MASK if magic == MAGIC_V1 and timestamp_type == TIMESTAMP_LOG_APPEND_TIME else 0
    lat = ts_attr != 0
    if codec == 0:
        for r in records:
            _message(out, r.offset, magic, ts_attr, log_append_time if lat else r.timestamp, r.key, r.value)
        return bytes(out)
    if not records:
        return b""
    inner = bytearray()
    base = records[0].offset if magic == MAGIC_V1 else 0
    for r in records:
        _message(inner, r.offset - base, magic, ts_attr, log_append_time if lat else r.timestamp, r.key, r.value)
    wrapper_ts = log_append_time if lat else max(r.timestamp for r in records)
    return encode_wrapper(bytes(inner), records[-1].offset, magic, codec, wrapper_ts, timestamp_type)


def encode_wrapper(inner: bytes, offset: int, magic: int, codec: int, timestamp: int = NO_TIMESTAMP,
                   timestamp_type: int = TIMESTAMP_CREATE_TIME) -> bytes:
    """A compressed wrapper message holding the message set ``inner`` (compressed here)."""
    out = bytearray()
    ts_attr = TIMESTAMP_TYPE_MASK if magic == MAGIC_V1 and timestamp_type == TIMESTAMP_LOG_APPEND_TIME else 0
    _message(out, offset, magic, codec | ts_attr, timestamp, None, compress(codec, inner, magic))
    return bytes(out)


class DownConverted(NamedTuple):
    """A fetch's record data down-converted: the message set, and how many records it holds."""

    data: bytes
    record_count: int


def down_convert(data: Buffer, magic: int, fetch_offset: int, max_bytes: int,
                 min_one_message: bool = True) -> DownConverted:
    """Down-convert the v2 batches of a log read to a magic ``magic`` message set (Kafka's
    RecordsUtil.downConvert, for a consumer's Fetch v0-3).

    Control batches are left out (old clients know no transaction markers), record headers are
    dropped, offsets and timestamps kept (v0: none).  An uncompressed batch becomes one message
    per record from ``fetch_offset`` on; a compressed one becomes one wrapper compressed with the
    same codec.  Whole messages (wrappers) are added while the set stays within ``max_bytes``;
    the first is always added (with ``min_one_message``, the first partition of a response's)
    so a large one is never stuck.  A trailing partial batch of the
    read is ignored.  Raises RecordError UNSUPPORTED_COMPRESSION_TYPE when the first batch to
    convert is zstd-compressed (an old format cannot carry zstd); a later zstd batch ends the
    conversion there, so the consumer gets the error when it fetches from that batch.
    """
    out = bytearray()
    count = 0
    for pos, h in iter_batches(data):
        if h.magic != MAGIC_V2 or h.is_control or h.records_count == 0:
            continue
        codec = h.compression
        if codec == compression.ZSTD or codec > compression.ZSTD:
            if out:
                break
            raise RecordError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                              "Down-conversion of zstandard-compressed batches is not supported")
        lat = h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
        ts_type = TIMESTAMP_LOG_APPEND_TIME if lat else TIMESTAMP_CREATE_TIME
        records = [LegacyRecord(h.base_offset + r.offset_delta,
                                h.max_timestamp if lat else h.base_timestamp + r.timestamp_delta, r.key, r.value)
                   for r in decode_records(memoryview(data)[pos:pos + h.size])]
        if codec == compression.NONE:
            ts_attr = TIMESTAMP_TYPE_MASK if magic == MAGIC_V1 and lat else 0
            for r in records:
                if r.offset < fetch_offset:
                    continue
                before = len(out)
                _message(out, r.offset, magic, ts_attr, r.timestamp, r.key, r.value)
                if (before or not min_one_message) and len(out) > max_bytes:
                    del out[before:]
                    return DownConverted(bytes(out), count)
                count += 1
            continue
        piece = encode_message_set(records, magic, codec, ts_type, h.max_timestamp)
        if (out or not min_one_message) and len(out) + len(piece) > max_bytes:
            break
        out += piece
        count += len(records)
    return DownConverted(bytes(out), count)


# ---- compression --------------------------------------------------------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 (the LZ4 frame format's checksum); only ever run over a frame header's few bytes."""
    n = len(data)
    p = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while p + 16 <= n:
            for i in range(4):
                (lane,) = struct.unpack_from("<I", data, p)
                v[i] = (_rotl((v[i] + lane * _P2) & _M32, 13) * _P1) & _M32
                p += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while p + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, p)
        h = (_rotl((h + lane * _P3) & _M32, 17) * _P4) & _M32
        p += 4
    while p < n:
        h = (_rotl((h + data[p] * _P5) & _M32, 11) * _P1) & _M32
        p += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def _lz4_header_checksum_at(frame: Buffer) -> int:
    """The position of an LZ4 frame's header checksum byte (after FLG, BD and the optional
    content size and dictionary id); raises CORRUPT_MESSAGE for what is not an LZ4 frame."""
    if len(frame) < 7 or bytes(frame[:4]) != _LZ4_MAGIC:
        raise _corrupt("lz4 data does not start with an LZ4 frame")
    flg = frame[4]
    pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if pos >= len(frame):
        raise _corrupt("truncated LZ4 frame descriptor")
    return pos


def _with_lz4_checksum(frame: Buffer, broken: bool) -> bytes:
    """The frame with its header checksum recomputed: the correct one, or (``broken``) the one
    Kafka 0.8-0.9 wrote, taken over the frame's magic number too."""
    out = bytearray(frame)
    hc = _lz4_header_checksum_at(out)
    out[hc] = (xxh32(bytes(out[0 if broken else 4:hc])) >> 8) & 0xFF
    return bytes(out)


def compress(codec: int, data: Buffer, magic: int) -> bytes:
    """Compress an inner message set for a ``magic`` wrapper (v0 LZ4: Kafka's broken checksum)."""
    packed = compression.compress(codec, data)
    if codec == compression.LZ4 and magic == MAGIC_V0:
        return _with_lz4_checksum(packed, broken=True)
    return packed


def decompress(codec: int, data: Buffer, magic: int, max_size: int) -> bytes | bytearray:
    """Decompress a wrapper's value.  LZ4 frames are accepted with either header checksum
    (v0 producers write Kafka's broken one), so it is recomputed before decompressing."""
    try:
        if codec == compression.LZ4:
            data = _with_lz4_checksum(data, broken=False)
        return compression.decompress(codec, data, max_size)
    except compression.CompressionError as exc:
        raise RecordError(exc.error_code, str(exc)) from exc


__all__ = [
    "BATCH_HEADER_SIZE",
    "DownConverted",
    "LegacyRecord",
    "MAGIC_V0",
    "MAGIC_V1",
    "MessageSet",
    "decode_message_set",
    "down_convert",
    "encode_message_set",
    "encode_wrapper",
    "record_set_magic",
    "to_record_batch",
    "xxh32",
]
