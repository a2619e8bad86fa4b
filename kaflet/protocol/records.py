"""Record batches, magic v2: Kafka's on-wire and on-disk unit of data.

The hot paths (produce validation, offset assignment, fetch) only look at the fixed 61-byte batch
header and never decode individual records.  Record-level decoding and encoding exist for the
features that need them (recompression, tools, tests).

Header layout (big-endian)::

    0 base_offset int64 | 8 length int32 | 12 partition_leader_epoch int32 | 16 magic int8
    17 crc uint32 (CRC-32C of [21, end)) | 21 attributes int16 | 23 last_offset_delta int32
    27 base_timestamp int64 | 35 max_timestamp int64 | 43 producer_id int64
    51 producer_epoch int16 | 53 base_sequence int32 | 57 records_count int32 | 61 records...
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import crc32c

from kaflet.protocol import compression
from kaflet.protocol.errors import ErrorCode, KafkaError

BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12
#: Smallest legal value of the length field (a header with no records).
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
MAGIC_V2 = 2
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
PARTITION_LEADER_EPOCH_OFFSET = 12
LENGTH_OFFSET = 8
MAGIC_OFFSET = 16

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

COMPRESSION_NONE = compression.NONE
COMPRESSION_GZIP = compression.GZIP
COMPRESSION_SNAPPY = compression.SNAPPY
COMPRESSION_LZ4 = compression.LZ4
COMPRESSION_ZSTD = compression.ZSTD

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

INT32_MAX = 2**31 - 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")

Buffer = bytes | bytearray | memoryview


class RecordError(KafkaError):
    """A batch the broker must reject; ``error_code`` is the Kafka error code to answer with."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(ErrorCode(error_code), message)
        self.error_code = error_code


class RecordValidationError(RecordError):
    """A batch rejected for some of its records (KIP-467).

    ``record_errors`` holds (index of the record in its batch, message) of every offending
    record, in batch order, for the Produce response (v8+), so a client fails exactly those.
    """

    def __init__(self, error_code: int, message: str, record_errors: list[tuple[int, str | None]]) -> None:
        super().__init__(error_code, message)
        self.record_errors = record_errors


def _corrupt(msg: str) -> RecordError:
    return RecordError(ErrorCode.CORRUPT_MESSAGE, msg)


class BatchHeader(NamedTuple):
    """All fields of a v2 batch header."""

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Whole batch size in bytes, log overhead included."""
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """The delete horizon the log cleaner stored in BaseTimestamp, if the bit is set (KIP-534)."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_FLAG_MASK else None

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (wrapping at Int.MAX), or -1 without a sequence."""
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def increment_sequence(sequence: int, increment: int) -> int:
    """Add to a producer sequence number the way Kafka does: wrap past Int.MAX to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def parse_batch_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``pos``; the caller has checked that 61 bytes are there."""
    return BatchHeader._make(_HEADER.unpack_from(buf, pos))


class BatchInfo(NamedTuple):
    """A validated batch inside a produce record set: where it is, and its header."""

    position: int
    size: int
    header: BatchHeader


def validate_produce_batches(buf: Buffer, max_batch_bytes: int) -> list[BatchInfo]:
    """Walk and validate the record set of one partition of a produce request.

    Every length is checked before use.  Raises RecordError with Kafka's error code:
    CORRUPT_MESSAGE (truncated, bad length, bad CRC, trailing bytes), INVALID_RECORD (magic != 2,
    non-zero base offset, inconsistent record count, control batch, producer id without
    sequence), MESSAGE_TOO_LARGE (batch size incl. log overhead > ``max_batch_bytes``),
    UNSUPPORTED_COMPRESSION_TYPE (unknown codec bits).
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    n = len(mv)
    if n == 0:
        raise RecordError(ErrorCode.INVALID_RECORD, "produce record set holds no batch")
    pos = 0
    out: list[BatchInfo] = []
    unpack = _HEADER.unpack_from
    while pos < n:
        remaining = n - pos
        if remaining < MAGIC_OFFSET + 1:
            raise _corrupt(f"truncated batch at position {pos}")
        magic = mv[pos + MAGIC_OFFSET]
        if magic != MAGIC_V2:
            raise RecordError(
                ErrorCode.INVALID_RECORD, f"only record batches with magic 2 are accepted, got {magic}"
            )
        (length,) = _I32.unpack_from(mv, pos + LENGTH_OFFSET)
        if length < MIN_BATCH_LENGTH:
            raise _corrupt(f"batch length {length} is below the minimum {MIN_BATCH_LENGTH}")
        size = length + LOG_OVERHEAD
        if size > remaining:
            raise _corrupt(f"batch of {size} bytes at position {pos} exceeds the {remaining} bytes left")
        h = BatchHeader._make(unpack(mv, pos))
        if h.base_offset != 0:
            raise RecordError(ErrorCode.INVALID_RECORD, f"base offset of a produced batch must be 0, got {h.base_offset}")
        if size > max_batch_bytes:
            raise RecordError(
                ErrorCode.MESSAGE_TOO_LARGE, f"batch of {size} bytes exceeds max.message.bytes {max_batch_bytes}"
            )
        if crc32c.crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size]) != h.crc:
            raise _corrupt(f"batch at position {pos} fails its CRC check")
        if h.attributes & COMPRESSION_CODEC_MASK > COMPRESSION_ZSTD:
            raise RecordError(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                f"unknown compression codec {h.attributes & COMPRESSION_CODEC_MASK}",
            )
        if h.last_offset_delta < 0 or h.records_count != h.last_offset_delta + 1:
            raise RecordError(
                ErrorCode.INVALID_RECORD,
                f"inconsistent batch: {h.records_count} records, last offset delta {h.last_offset_delta}",
            )
        if h.attributes & CONTROL_FLAG_MASK:
            raise RecordError(ErrorCode.INVALID_RECORD, "clients may not write control batches")
        if h.producer_id >= 0 and h.base_sequence < 0:
            raise RecordError(ErrorCode.INVALID_RECORD, f"producer id {h.producer_id} with no sequence number")
        out.append(BatchInfo(pos, size, h))
        pos += size
    return out


def iter_batches(buf: Buffer, pos: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of every whole batch in ``buf[pos:end]``; stops at a partial one.

    Does no CRC check: use for trusted data (our own log) or follow with ``check_crc``.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    stop = len(mv) if end is None else end
    while stop - pos >= BATCH_HEADER_SIZE:
        h = BatchHeader._make(_HEADER.unpack_from(mv, pos))
        if h.length < MIN_BATCH_LENGTH or pos + h.length + LOG_OVERHEAD > stop:
            return
        yield pos, h
        pos += h.length + LOG_OVERHEAD


def check_crc(buf: Buffer, pos: int, header: BatchHeader) -> bool:
    """True if the stored CRC matches the batch's bytes."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    return crc32c.crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + header.length + LOG_OVERHEAD]) == header.crc


# ---- in-place mutation (on a bytearray holding the batch at ``pos``) ----


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Write the base offset; it lies outside the CRC'd range, so the CRC stays valid."""
    _I64.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Write the partition leader epoch; also outside the CRC'd range."""
    _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def recompute_crc(buf: bytearray | memoryview, pos: int) -> None:
    """Recompute and store the CRC of the batch at ``pos``."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    (length,) = _I32.unpack_from(mv, pos + LENGTH_OFFSET)
    _U32.pack_into(mv, pos + CRC_OFFSET, crc32c.crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + LOG_OVERHEAD + length]))


def set_max_timestamp(buf: bytearray | memoryview, pos: int, timestamp_type: int, timestamp_ms: int) -> None:
    """Write the timestamp type and MaxTimestamp of the batch at ``pos``, and fix the CRC.

    The records (compressed or not) are left alone, as Kafka's ``setMaxTimestamp`` does.
    """
    (attrs,) = _I16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    if timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
        attrs |= TIMESTAMP_TYPE_MASK
    else:
        attrs &= ~TIMESTAMP_TYPE_MASK
    _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attrs)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    recompute_crc(buf, pos)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp_ms: int) -> None:
    """Mark the batch LogAppendTime with ``timestamp_ms`` as max timestamp, and fix the CRC.

    Like Kafka, record timestamp deltas are left alone: readers of a LogAppendTime batch take
    every record's timestamp from the batch's max timestamp.
    """
    set_max_timestamp(buf, pos, TIMESTAMP_LOG_APPEND_TIME, timestamp_ms)


def has_trusted_timestamps(h: BatchHeader) -> bool:
    """True if a produced CreateTime batch's MaxTimestamp can be stored as it came.

    A base timestamp >= 0 with MaxTimestamp >= it is what every client writes for records
    that carry timestamps.  Anything else (base -1 for records without a timestamp, where
    librdkafka sends MaxTimestamp 0; MaxTimestamp below the base; a producer-set LogAppendTime
    bit) is only stored after the records are read, as Kafka's LogValidator always does.
    """
    return 0 <= h.base_timestamp <= h.max_timestamp and not h.attributes & TIMESTAMP_TYPE_MASK


# ---- varints ----


def encode_varint(value: int) -> bytes:
    """Zigzag + LEB128 encode a signed integer (int32 or int64 range)."""
    v = (value << 1) ^ (value >> 63)
    v &= 0xFFFFFFFFFFFFFFFF
    if v < 0x80:
        return bytes((v,))
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _write_varint(out: bytearray, value: int) -> None:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def decode_varint(buf: Buffer, pos: int, end: int | None = None, max_bytes: int = 5) -> tuple[int, int]:
    """Decode a zigzag varint at ``pos``; returns (value, new position).

    ``max_bytes`` is 5 for int32 varints and 10 for varlongs; longer encodings, values that do
    not fit the type, and truncation raise RecordError(CORRUPT_MESSAGE).
    """
    stop = len(buf) if end is None else end
    if pos >= stop:
        raise _corrupt("truncated varint")
    b = buf[pos]
    if b < 0x80:  # the common one-byte case
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    i = pos + 1
    last = pos + max_bytes
    while True:
        if i >= stop:
            raise _corrupt("truncated varint")
        if i >= last:
            raise _corrupt(f"varint longer than {max_bytes} bytes")
        b = buf[i]
        result |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            break
        shift += 7
    if result >> (32 if max_bytes == 5 else 64):
        raise _corrupt("varint out of range")
    return (result >> 1) ^ -(result & 1), i


def decode_varlong(buf: Buffer, pos: int, end: int | None = None) -> tuple[int, int]:
    """Decode a zigzag varlong (at most 10 bytes)."""
    return decode_varint(buf, pos, end, 10)


# ---- records ----


@dataclass(slots=True)
class Record:
    """One record of a batch, with its deltas relative to the batch's base offset/timestamp."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def _encode_record(out: bytearray, r: Record) -> None:
    body = bytearray(b"\x00")  # record attributes: unused, always 0
    _write_varint(body, r.timestamp_delta)
    _write_varint(body, r.offset_delta)
    if r.key is None:
        body.append(1)  # varint(-1)
    else:
        _write_varint(body, len(r.key))
        body += r.key
    if r.value is None:
        body.append(1)
    else:
        _write_varint(body, len(r.value))
        body += r.value
    _write_varint(body, len(r.headers))
    for hk, hv in r.headers:
        kb = hk.encode()
        _write_varint(body, len(kb))
        body += kb
        if hv is None:
            body.append(1)
        else:
            _write_varint(body, len(hv))
            body += hv
    _write_varint(out, len(body))
    out += body


def encode_records(records: Sequence[Record]) -> bytes:
    """Encode records back to back (the uncompressed record section of a batch)."""
    out = bytearray()
    for r in records:
        _encode_record(out, r)
    return bytes(out)


def _read_bytes(buf: Buffer, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = decode_varint(buf, pos, end)
    if n < 0:
        if n != -1:
            raise _corrupt(f"negative length {n}")
        return None, pos
    if pos + n > end:
        raise _corrupt("record field runs past the end of the record")
    return bytes(buf[pos : pos + n]), pos + n


def parse_records(data: Buffer, count: int) -> list[Record]:
    """Decode ``count`` records from an uncompressed record section; it must be consumed exactly."""
    mv = data if isinstance(data, memoryview) else memoryview(data)
    n = len(mv)
    if count < 0:
        raise _corrupt(f"negative record count {count}")
    pos = 0
    out: list[Record] = []
    while len(out) < count:
        rlen, pos = decode_varint(mv, pos, n)
        end = pos + rlen
        if rlen < 1 or end > n:
            raise _corrupt(f"bad record length {rlen}")
        pos += 1  # attributes
        ts_delta, pos = decode_varint(mv, pos, end, 10)
        off_delta, pos = decode_varint(mv, pos, end)
        key, pos = _read_bytes(mv, pos, end)
        value, pos = _read_bytes(mv, pos, end)
        nh, pos = decode_varint(mv, pos, end)
        if nh < 0:
            raise _corrupt(f"negative header count {nh}")
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(nh):
            hk, pos = _read_bytes(mv, pos, end)
            if hk is None:
                raise _corrupt("null header key")
            hv, pos = _read_bytes(mv, pos, end)
            try:
                headers.append((hk.decode(), hv))
            except UnicodeDecodeError as exc:
                raise _corrupt("header key is not UTF-8") from exc
        if pos != end:
            raise _corrupt("record length does not match its contents")
        out.append(Record(off_delta, ts_delta, key, value, headers))
    if pos != n:
        raise _corrupt("trailing bytes after the last record")
    return out


def _records_section(batch: Buffer, max_decompressed: int) -> tuple[BatchHeader, memoryview]:
    # The header and the (decompressed) record section of one whole batch.
    mv = batch if isinstance(batch, memoryview) else memoryview(batch)
    if len(mv) < BATCH_HEADER_SIZE:
        raise _corrupt("batch shorter than its header")
    h = parse_batch_header(mv)
    if h.magic != MAGIC_V2:
        raise RecordError(ErrorCode.INVALID_RECORD, f"unsupported magic {h.magic}")
    if h.length < MIN_BATCH_LENGTH or h.size > len(mv):
        raise _corrupt("bad batch length")
    body = mv[BATCH_HEADER_SIZE : h.size]
    codec = h.compression
    if codec != COMPRESSION_NONE:
        if codec > COMPRESSION_ZSTD:
            raise RecordError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")
        try:
            body = memoryview(compression.decompress(codec, body, max_decompressed))
        except compression.CompressionError as exc:
            raise RecordError(exc.error_code, str(exc)) from exc
    return h, body


def decode_records(
    batch: Buffer, max_decompressed: int = compression.DEFAULT_MAX_DECOMPRESSED
) -> list[Record]:
    """Decode (decompressing if needed) all records of one whole batch."""
    h, body = _records_section(batch, max_decompressed)
    return parse_records(body, h.records_count)


def scan_records(
    batch: Buffer, max_decompressed: int = compression.DEFAULT_MAX_DECOMPRESSED
) -> Iterator[tuple[int, int, int, int]]:
    """(offset delta, timestamp delta, key length, value length) of each record of one whole
    batch; a length of -1 is null.

    Decompresses if needed but copies no key, value or header: the produce path's record
    checks (compacted-topic keys, timestamps) need nothing more.  Raises RecordError
    (CORRUPT_MESSAGE) when a record's fields overrun it, for a record count that does not match
    the records, or for trailing bytes.
    """
    h, section = _records_section(batch, max_decompressed)
    body = bytes(section)  # one copy: indexing bytes is faster than a memoryview, per record
    n = len(body)
    pos = 0
    for _ in range(max(h.records_count, 0)):
        rlen, pos = decode_varint(body, pos, n)
        end = pos + rlen
        if rlen < 1 or end > n:
            raise _corrupt(f"bad record length {rlen}")
        ts_delta, p = decode_varint(body, pos + 1, end, 10)  # after the attributes byte
        off_delta, p = decode_varint(body, p, end)
        key_len, p = decode_varint(body, p, end)
        if key_len < -1 or p + key_len > end:
            raise _corrupt(f"bad key length {key_len}")
        value_len, p = decode_varint(body, p + max(key_len, 0), end)
        if value_len < -1 or p + value_len > end:
            raise _corrupt(f"bad value length {value_len}")
        yield off_delta, ts_delta, key_len, value_len
        pos = end
    if pos != n:
        raise _corrupt("the record count does not match the records")


def build_batch(
    records: Sequence[Record],
    base_offset: int = 0,
    compression: int = COMPRESSION_NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    timestamp_type: int = TIMESTAMP_CREATE_TIME,
    base_timestamp: int | None = None,
    is_transactional: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_control: bool = False,
    max_timestamp: int | None = None,
    delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Encode a complete v2 batch (header, CRC and records).

    ``base_timestamp`` defaults to now (ms); record timestamps are base + timestamp_delta.
    ``max_timestamp`` defaults to the largest record timestamp (pass it for LogAppendTime).
    ``delete_horizon_ms`` (the log cleaner's) sets the delete-horizon attribute bit and is
    stored as BaseTimestamp, so record timestamp deltas must then be relative to it.
    ``last_offset_delta`` overrides the one taken from the last record: the cleaner keeps a
    batch's original last offset (and so its last sequence) when it drops trailing records.
    ``compression_level`` is the codec's level (``compression.compress``).
    """
    from kaflet.protocol import compression as codecs  # the parameter shadows the module

    override_delta = last_offset_delta
    if records:
        if base_timestamp is None:
            base_timestamp = int(time.time() * 1000)
        last_offset_delta = records[-1].offset_delta
        if max_timestamp is None:
            max_timestamp = base_timestamp + max(r.timestamp_delta for r in records)
    else:
        base_timestamp = NO_TIMESTAMP if base_timestamp is None else base_timestamp
        last_offset_delta = 0
        if max_timestamp is None:
            max_timestamp = NO_TIMESTAMP
    if override_delta is not None:
        last_offset_delta = override_delta
    body: bytes = encode_records(records)
    if compression != COMPRESSION_NONE:
        body = codecs.compress(compression, body, compression_level)
    attrs = compression & COMPRESSION_CODEC_MASK
    if timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
        attrs |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attrs |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attrs |= CONTROL_FLAG_MASK
    if delete_horizon_ms is not None:
        attrs |= DELETE_HORIZON_FLAG_MASK
        base_timestamp = delete_horizon_ms
    length = BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body)
    buf = bytearray(BATCH_HEADER_SIZE + len(body))
    _HEADER.pack_into(
        buf, 0, base_offset, length, partition_leader_epoch, MAGIC_V2, 0, attrs, last_offset_delta,
        base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, len(records),
    )
    buf[BATCH_HEADER_SIZE:] = body
    recompute_crc(buf, 0)
    return bytes(buf)


def build_empty_batch(h: BatchHeader) -> bytes:
    """A header-only batch (no records) standing in for ``h``: same offsets, producer id, epoch,
    base sequence, flags and leader epoch, with both timestamps set to its max timestamp.

    The log cleaner writes one when it removes every record of a producer's last batch, so the
    producer's sequence state survives a reload (Kafka's RETAIN_EMPTY).
    """
    attrs = h.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)
    buf = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(
        buf, 0, h.base_offset, MIN_BATCH_LENGTH, h.partition_leader_epoch, MAGIC_V2, 0, attrs,
        h.last_offset_delta, h.max_timestamp, h.max_timestamp, h.producer_id, h.producer_epoch,
        h.base_sequence, 0,
    )
    recompute_crc(buf, 0)
    return bytes(buf)


def recompress_batch(
    batch: Buffer, codec: int, max_decompressed: int = compression.DEFAULT_MAX_DECOMPRESSED,
    level: int | None = None,
) -> bytes:
    """Re-encode one batch with another codec (at ``level``), keeping every header field but the CRC."""
    h = parse_batch_header(batch)
    records = decode_records(batch, max_decompressed)
    keep_max = h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    return build_batch(
        records,
        base_offset=h.base_offset,
        compression=codec,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        timestamp_type=h.timestamp_type,
        base_timestamp=h.base_timestamp,
        is_transactional=h.is_transactional,
        partition_leader_epoch=h.partition_leader_epoch,
        is_control=h.is_control,
        max_timestamp=h.max_timestamp if keep_max or not records else None,
        compression_level=level,
    )
