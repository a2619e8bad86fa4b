"""Message sets v0/v1: decoding and validation, up-conversion to v2 and down-conversion back."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaflet.protocol import compression
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.legacy_records import (
    LegacyRecord,
    decode_message_set,
    down_convert,
    encode_message_set,
    encode_wrapper,
    to_record_batch,
    xxh32,
)
from kaflet.protocol.records import (
    Record,
    RecordError,
    build_batch,
    decode_records,
    parse_batch_header,
    recompute_crc,
    set_base_offset,
    set_log_append_time,
)

CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4]
_bytes = st.one_of(st.none(), st.binary(max_size=300))


def _stored(batch: bytes, base_offset: int) -> bytes:
    """The batch as the log stores it: its base offset assigned."""
    b = bytearray(batch)
    set_base_offset(b, 0, base_offset)
    recompute_crc(b, 0)
    return bytes(b)


@settings(max_examples=60, deadline=None)
@given(magic=st.sampled_from([0, 1]), codec=st.sampled_from(CODECS),
       values=st.lists(st.tuples(_bytes, _bytes, st.integers(0, 2**41)), min_size=1, max_size=20),
       base_offset=st.integers(0, 2**40))
def test_round_trip_through_v2(magic: int, codec: int, values: list[tuple[bytes | None, bytes | None, int]],
                               base_offset: int) -> None:
    """A produced message set -> one v2 batch -> stored at an offset -> down-converted to the
    same magic: the same keys, values, timestamps (v1; none in v0) at the offsets the log gave."""
    produced = [LegacyRecord(i, ts if magic else -1, k, v) for i, (k, v, ts) in enumerate(values)]
    ms = decode_message_set(encode_message_set(produced, magic, codec), 1 << 30)
    assert (ms.magic, ms.codec) == (magic, codec)
    batch = to_record_batch(ms)
    h = parse_batch_header(batch)
    assert (h.compression, h.records_count, h.base_offset) == (codec, len(values), 0)
    assert [(r.key, r.value) for r in decode_records(batch)] == [(k, v) for k, v, _ in values]

    back = down_convert(_stored(batch, base_offset), magic, base_offset, 1 << 30)
    assert back.record_count == len(values)
    got = decode_message_set(back.data, 1 << 30)
    assert (got.magic, got.codec) == (magic, codec)
    first = 0 if codec and magic == 1 else base_offset  # v1 inner offsets are relative
    assert [(r.offset, r.timestamp, r.key, r.value) for r in got.records] == [
        (first + i, ts if magic else -1, k, v) for i, (k, v, ts) in enumerate(values)]
    if codec:
        # The wrapper carries the last offset (and, in v1, the largest timestamp).
        offset, = struct.unpack_from(">q", back.data)
        assert offset == base_offset + len(values) - 1


@settings(max_examples=40, deadline=None)
@given(codec=st.sampled_from(CODECS), magic=st.sampled_from([0, 1]),
       records=st.lists(st.tuples(_bytes, _bytes), min_size=1, max_size=10), fetch_from=st.integers(0, 12))
def test_down_convert_v2_batch(codec: int, magic: int, records: list[tuple[bytes | None, bytes | None]],
                               fetch_from: int) -> None:
    """A v2 batch with headers and timestamps: headers dropped, offsets kept; an uncompressed
    batch answers from the fetch offset on, a compressed one whole (as Kafka does)."""
    batch = _stored(build_batch([Record(i, i * 7, k, v, [("h", b"x")]) for i, (k, v) in enumerate(records)],
                                compression=codec, base_timestamp=10_000), 100)
    got = decode_message_set(down_convert(batch, magic, 100 + fetch_from, 1 << 30).data or b"", 1 << 30) \
        if codec or fetch_from < len(records) else None
    if got is None:
        assert down_convert(batch, magic, 100 + fetch_from, 1 << 30).data == b""
        return
    start = 0 if codec else fetch_from
    base = 0 if codec and magic == 1 else 100
    assert [(r.offset, r.timestamp, r.key, r.value) for r in got.records] == [
        (base + i, 10_000 + 7 * i if magic else -1, k, v) for i, (k, v) in enumerate(records) if i >= start]


def test_down_convert_log_append_time() -> None:
    batch = bytearray(_stored(build_batch([Record(0, 0, b"a", b"1"), Record(1, 5, b"b", b"2")],
                                          base_timestamp=7), 3))
    set_log_append_time(batch, 0, 99_999)
    recompute_crc(batch, 0)
    got = decode_message_set(down_convert(bytes(batch), 1, 0, 1 << 20).data, 1 << 20)
    assert got.timestamp_type == 1
    assert [(r.offset, r.timestamp) for r in got.records] == [(3, 99_999), (4, 99_999)]


def test_down_convert_skips_control_batches_and_keeps_within_max_bytes() -> None:
    control = _stored(build_batch([Record(0, 0, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
                                  is_control=True, is_transactional=True, producer_id=1, producer_epoch=0), 0)
    data = _stored(build_batch([Record(i, 0, None, b"v" * 100) for i in range(10)], base_timestamp=1), 1)
    whole = down_convert(control + data, 1, 0, 1 << 20)
    assert whole.record_count == 10
    assert [r.offset for r in decode_message_set(whole.data, 1 << 20).records] == list(range(1, 11))
    one = len(encode_message_set([LegacyRecord(1, 1, None, b"v" * 100)], 1))
    part = down_convert(control + data, 1, 0, 3 * one + 5)
    assert part.record_count == 3 and len(part.data) == 3 * one
    # The first message always goes, however small max_bytes is: for the response's first
    # partition with data; a later one gets nothing that does not fit.
    assert down_convert(data, 1, 0, 1).record_count == 1
    assert down_convert(data, 1, 0, 1, min_one_message=False) == (b"", 0)
    assert down_convert(data, 1, 0, one, min_one_message=False).record_count == 1
    gz = _stored(build_batch([Record(i, 0, None, b"v" * 100) for i in range(10)], compression=compression.GZIP,
                             base_timestamp=1), 1)
    assert down_convert(gz, 1, 0, 10, min_one_message=False) == (b"", 0)
    assert down_convert(gz, 1, 0, 10).record_count == 10
    # A trailing partial batch of a read is left out.
    assert down_convert(data + data[:30], 0, 0, 1 << 20).record_count == 10


def test_zstd_is_not_down_converted() -> None:
    zstd = _stored(build_batch([Record(0, 0, None, b"z")], compression=compression.ZSTD), 0)
    plain = _stored(build_batch([Record(0, 0, None, b"p")]), 1)
    with pytest.raises(RecordError) as exc:
        down_convert(zstd + plain, 1, 0, 1 << 20)
    assert exc.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    # After converted data the conversion stops before it: the next fetch gets the error.
    first = _stored(build_batch([Record(0, 0, None, b"p")]), 0)
    assert down_convert(first + _stored(build_batch([Record(0, 0, None, b"z")], compression=compression.ZSTD), 1),
                        1, 0, 1 << 20).record_count == 1


def test_lz4_header_checksum_of_magic_0() -> None:
    """Magic 0 LZ4 wrappers carry Kafka 0.8's checksum over the frame magic too; both kinds are read."""
    inner = encode_message_set([LegacyRecord(0, -1, b"k", b"v" * 50)], 0)
    v0 = decode_message_set(encode_message_set([LegacyRecord(0, -1, b"k", b"v" * 50)], 0, compression.LZ4), 1 << 20)
    assert v0.records == [LegacyRecord(0, -1, b"k", b"v" * 50)]
    frame = compression.compress(compression.LZ4, inner)
    hc = 6
    assert frame[hc] == (xxh32(frame[4:hc]) >> 8) & 0xFF  # cramjam writes the correct one
    wrapped = encode_wrapper(inner, 0, 0, compression.LZ4)
    value = wrapped[12 + 14:]  # log overhead, then crc, magic, attributes, null key, value length
    assert value[:4] == frame[:4]
    assert value[hc] == (xxh32(value[:hc]) >> 8) & 0xFF != frame[hc]  # the broken one
    assert decode_message_set(wrapped, 1 << 20).records == v0.records
    # v1 wrappers carry the correct checksum.
    v1 = encode_wrapper(encode_message_set([LegacyRecord(0, 1, b"k", b"v")], 1), 0, 1, compression.LZ4, 1)
    assert v1[12 + 22 + hc] == (xxh32(v1[12 + 22 + 4:12 + 22 + hc]) >> 8) & 0xFF


def test_xxh32_known_values() -> None:
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def _msg(magic: int) -> bytearray:
    return bytearray(encode_message_set([LegacyRecord(0, 5 if magic else -1, b"k", b"v")], magic))


@pytest.mark.parametrize(("what", "data", "error"), [
    ("empty", b"", ErrorCode.INVALID_RECORD),
    ("truncated header", bytes(_msg(1))[:20], ErrorCode.CORRUPT_MESSAGE),
    ("truncated message", bytes(_msg(1))[:-1], ErrorCode.CORRUPT_MESSAGE),
    ("size below overhead", struct.pack(">qiIbbii", 0, 13, 0, 0, 0, -1, -1), ErrorCode.CORRUPT_MESSAGE),
    ("v1 size below its overhead", struct.pack(">qiIbbii", 0, 14, 0, 1, 0, -1, -1), ErrorCode.CORRUPT_MESSAGE),
    ("invalid magic", bytes(_msg(1)[:16]) + b"\x05" + bytes(_msg(1)[17:]), ErrorCode.CORRUPT_MESSAGE),
    ("mixed magics", bytes(_msg(0) + _msg(1)), ErrorCode.INVALID_RECORD),
])
def test_bad_message_sets(what: str, data: bytes, error: int) -> None:
    with pytest.raises(RecordError) as exc:
        decode_message_set(data, 1 << 20)
    assert exc.value.code == error, what


def _with_crc(msg: bytearray) -> bytes:
    struct.pack_into(">I", msg, 12, zlib.crc32(msg[16:]))
    return bytes(msg)


def test_crc_and_wrapper_rules() -> None:
    good = _msg(1)
    bad = bytearray(good)
    bad[-1] ^= 1
    with pytest.raises(RecordError) as exc:
        decode_message_set(bytes(bad), 1 << 20)
    assert exc.value.code == ErrorCode.CORRUPT_MESSAGE
    # zstd needs magic 2
    zstd = bytearray(encode_wrapper(bytes(good), 0, 1, compression.GZIP))
    zstd[17] = (zstd[17] & ~7) | compression.ZSTD
    with pytest.raises(RecordError) as exc:
        decode_message_set(_with_crc(zstd), 1 << 20)
    assert exc.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    # an inner message of another magic, a nested wrapper, a corrupt inner message
    for inner, error in [(bytes(_msg(0)), ErrorCode.INVALID_RECORD),
                         (encode_wrapper(bytes(good), 0, 1, compression.GZIP), ErrorCode.INVALID_RECORD),
                         (bytes(bad), ErrorCode.CORRUPT_MESSAGE)]:
        with pytest.raises(RecordError) as exc:
            decode_message_set(encode_wrapper(inner, 0, 1, compression.GZIP), 1 << 20)
        assert exc.value.code == error
    # two compressed wrappers in one set
    wrapper = encode_wrapper(bytes(good), 0, 1, compression.SNAPPY)
    with pytest.raises(RecordError) as exc:
        decode_message_set(wrapper + wrapper, 1 << 20)
    assert exc.value.code == ErrorCode.INVALID_RECORD
    # a message above max.message.bytes
    with pytest.raises(RecordError) as exc:
        decode_message_set(bytes(good), len(good) - 1)
    assert exc.value.code == ErrorCode.MESSAGE_TOO_LARGE
    # garbage where the compressed data should be
    junk = bytearray(encode_wrapper(bytes(good), 0, 1, compression.GZIP))
    junk[-3] ^= 0xFF
    with pytest.raises(RecordError) as exc:
        decode_message_set(_with_crc(junk), 1 << 20)
    assert exc.value.code == ErrorCode.CORRUPT_MESSAGE


def test_v1_producer_log_append_time_is_carried_to_v2() -> None:
    """The producer-set LogAppendTime bit reaches the v2 batch, where the log refuses it as
    Kafka does (log_validator._check_records: INVALID_TIMESTAMP on a LogAppendTime topic)."""
    ms = decode_message_set(encode_message_set([LegacyRecord(0, 5, None, b"v")], 1, 0, 1, 5), 1 << 20)
    assert ms.timestamp_type == 1
    assert parse_batch_header(to_record_batch(ms)).timestamp_type == 1


@settings(max_examples=300, deadline=None)
@given(magic=st.sampled_from([0, 1]), codec=st.sampled_from(CODECS), data=st.data())
def test_damaged_message_sets_raise_record_errors_only(magic: int, codec: int, data: st.DataObject) -> None:
    """Flipped, cut or inserted bytes anywhere (CRCs recomputed or not): the decoder answers with
    a Kafka error or a result, never another exception (the broker must stay up)."""
    good = bytearray(encode_message_set([LegacyRecord(i, 10 + i, b"k%d" % i, b"v" * (i * 7)) for i in range(4)],
                                        magic, codec))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(good) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            good[pos] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del good[pos:pos + data.draw(st.integers(1, 8))]
        else:
            good[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        if not good:
            good = bytearray(b"\x00")
    if data.draw(st.booleans()) and len(good) >= 26:
        struct.pack_into(">I", good, 12, zlib.crc32(good[16:12 + max(int.from_bytes(good[8:12], "big"), 0)]))
    try:
        ms = decode_message_set(bytes(good), 1 << 20)
    except RecordError as exc:
        assert exc.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD, ErrorCode.MESSAGE_TOO_LARGE,
                            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
    else:
        assert ms.magic in (0, 1) and ms.records


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_record_errors_only(junk: bytes) -> None:
    try:
        ms = decode_message_set(junk, 1 << 20)
    except RecordError as exc:
        assert exc.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD, ErrorCode.MESSAGE_TOO_LARGE,
                            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
    else:
        assert ms.magic in (0, 1) and ms.records
