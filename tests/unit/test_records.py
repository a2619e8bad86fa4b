"""Record batches: header parsing, validation against hostile input, varints, build/decode,
and cross-checks with kafka-python's independent implementation."""

from __future__ import annotations

import struct
import types

import cramjam
import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaflet.protocol import records as R
from kaflet.protocol.records import Record, RecordError, build_batch, decode_records, validate_produce_batches


def _recs(n: int, size: int = 10) -> list[Record]:
    return [Record(i, i * 3, b"k%d" % i, bytes([i % 256]) * size, [("h", b"v")]) for i in range(n)]


# ---- varints ----

@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_varint_round_trip(v: int) -> None:
    enc = R.encode_varint(v)
    assert len(enc) <= 5
    assert R.decode_varint(enc, 0) == (v, len(enc))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varlong_round_trip(v: int) -> None:
    enc = R.encode_varint(v)
    assert len(enc) <= 10
    assert R.decode_varlong(enc, 0) == (v, len(enc))


def test_varint_bounds() -> None:
    with pytest.raises(RecordError):
        R.decode_varint(b"\xff\xff\xff\xff\xff\x01", 0)  # 6 bytes for an int32
    with pytest.raises(RecordError):
        R.decode_varint(b"\xff\xff\xff\xff\x7f", 0)  # 5 bytes but > 32 bits
    with pytest.raises(RecordError):
        R.decode_varint(b"\x80\x80", 0)  # truncated
    with pytest.raises(RecordError):
        R.decode_varlong(b"\xff" * 10 + b"\x01", 0)


# ---- build / decode ----

@settings(max_examples=40, deadline=None)
@given(
    codec=st.sampled_from([0, 1, 2, 3, 4]),
    recs=st.lists(
        st.tuples(st.one_of(st.none(), st.binary(max_size=20)), st.one_of(st.none(), st.binary(max_size=200)),
                  st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2),
                  st.integers(min_value=-1000, max_value=1000)),
        min_size=1, max_size=20),
)
def test_build_decode_round_trip(codec, recs) -> None:  # type: ignore[no-untyped-def]
    records = [Record(i, ts, k, v, list(h)) for i, (k, v, h, ts) in enumerate(recs)]
    batch = build_batch(records, compression=codec, base_timestamp=10_000)
    infos = validate_produce_batches(memoryview(batch), 1 << 30)
    assert len(infos) == 1 and infos[0].header.records_count == len(records)
    assert infos[0].header.max_timestamp == 10_000 + max(r.timestamp_delta for r in records)
    assert decode_records(batch) == records
    assert list(R.scan_records(batch)) == [
        (r.offset_delta, r.timestamp_delta, -1 if r.key is None else len(r.key), -1 if r.value is None else len(r.value))
        for r in records
    ]


def test_header_fields_and_mutation() -> None:
    b = bytearray(build_batch(_recs(3), producer_id=9, producer_epoch=2, base_sequence=5, base_timestamp=1000,
                              is_transactional=True))
    h = R.parse_batch_header(b)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta) == (9, 2, 5, 2)
    assert h.is_transactional and h.size == len(b) and h.last_sequence == 7
    R.set_base_offset(b, 0, 1234)
    R.set_partition_leader_epoch(b, 0, 7)
    h2 = R.parse_batch_header(b)
    assert h2.base_offset == 1234 and h2.partition_leader_epoch == 7 and R.check_crc(b, 0, h2)
    R.set_log_append_time(b, 0, 99_999)
    h3 = R.parse_batch_header(b)
    assert h3.timestamp_type == 1 and h3.max_timestamp == 99_999 and R.check_crc(b, 0, h3)


def test_sequence_wraps() -> None:
    assert R.increment_sequence(2**31 - 1, 1) == 0
    assert R.increment_sequence(2**31 - 2, 3) == 1


def test_recompress_keeps_fields() -> None:
    b = build_batch(_recs(5, 100), producer_id=3, producer_epoch=1, base_sequence=0, base_timestamp=50)
    for codec in (1, 2, 3, 4, 0):
        out = R.recompress_batch(b, codec)
        h = R.parse_batch_header(out)
        assert h.compression == codec and h.producer_id == 3 and h.records_count == 5
        assert decode_records(out) == decode_records(b)


# ---- validation ----

def _codes(fn) -> int:  # type: ignore[no-untyped-def]
    with pytest.raises(RecordError) as ei:
        fn()
    return ei.value.error_code


def test_validate_errors() -> None:
    good = build_batch(_recs(3))
    v = validate_produce_batches
    assert len(v(memoryview(good + good), 1 << 20)) == 2
    assert _codes(lambda: v(memoryview(good[:-1]), 1 << 20)) == 2  # truncated
    assert _codes(lambda: v(memoryview(good + b"\x00"), 1 << 20)) == 2  # trailing garbage
    assert _codes(lambda: v(memoryview(good), len(good) - 1)) == 10  # too large
    flipped = bytearray(good)
    flipped[-1] ^= 1
    assert _codes(lambda: v(memoryview(flipped), 1 << 20)) == 2  # CRC
    magic1 = bytearray(good)
    magic1[16] = 1
    assert _codes(lambda: v(memoryview(magic1), 1 << 20)) == 87
    short = bytearray(good)
    struct.pack_into(">i", short, 8, 10)
    assert _codes(lambda: v(memoryview(short), 1 << 20)) == 2
    codec7 = bytearray(good)
    struct.pack_into(">h", codec7, 21, 7)
    R.recompute_crc(codec7, 0)
    assert _codes(lambda: v(memoryview(codec7), 1 << 20)) == 76
    bad_count = bytearray(good)
    struct.pack_into(">i", bad_count, 57, 5)
    R.recompute_crc(bad_count, 0)
    assert _codes(lambda: v(memoryview(bad_count), 1 << 20)) == 87
    nonzero = bytearray(good)
    R.set_base_offset(nonzero, 0, 5)
    assert _codes(lambda: v(memoryview(nonzero), 1 << 20)) == 87
    control = build_batch(_recs(1), is_control=True)
    assert _codes(lambda: v(memoryview(control), 1 << 20)) == 87
    noseq = build_batch(_recs(1), producer_id=1, producer_epoch=0, base_sequence=-1)
    assert _codes(lambda: v(memoryview(noseq), 1 << 20)) == 87
    assert _codes(lambda: v(memoryview(b""), 1 << 20)) == 87


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_validate_never_raises_other_exceptions(data) -> None:  # type: ignore[no-untyped-def]
    good = build_batch(_recs(4), compression=data.draw(st.sampled_from([0, 1, 3])))
    blob = bytearray(good * data.draw(st.integers(1, 2)))
    mode = data.draw(st.sampled_from(["cut", "flip", "random", "length"]))
    if mode == "cut":
        blob = blob[: data.draw(st.integers(0, len(blob)))]
    elif mode == "flip":
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] ^= 1 << data.draw(st.integers(0, 7))
    elif mode == "random":
        blob = bytearray(data.draw(st.binary(max_size=200)))
    else:
        struct.pack_into(">i", blob, 8, data.draw(st.integers(-(2**31), 2**31 - 1)))
    try:
        validate_produce_batches(memoryview(bytes(blob)), 1 << 20)
    except RecordError:
        pass
    try:
        decode_records(bytes(blob))
    except RecordError:
        pass
    try:
        list(R.scan_records(bytes(blob)))
    except RecordError:
        pass


def test_decode_records_rejects_lying_count() -> None:
    b = bytearray(build_batch(_recs(3)))
    struct.pack_into(">i", b, 57, 1000)
    with pytest.raises(RecordError):
        decode_records(b)
    with pytest.raises(RecordError):
        list(R.scan_records(b))
    struct.pack_into(">i", b, 57, 2)
    with pytest.raises(RecordError):
        list(R.scan_records(b))  # a record left over


# ---- cross-check against kafka-python ----

@pytest.fixture
def kafka_python_codecs(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """kafka-python with its optional codec libraries stood in for by cramjam."""
    import kafka.codec as kc
    import kafka.record.default_records as dr

    snappy = types.SimpleNamespace(compress=lambda d: bytes(cramjam.snappy.compress_raw(bytes(d))),
                                   decompress=lambda d: bytes(cramjam.snappy.decompress_raw(bytes(d))))
    monkeypatch.setattr(kc, "snappy", snappy)
    monkeypatch.setattr(kc, "zstd", object())
    monkeypatch.setattr(kc, "lz4", object())
    monkeypatch.setattr(dr, "lz4_encode", lambda d: bytes(cramjam.lz4.compress(bytes(d))))
    monkeypatch.setattr(dr, "lz4_decode", lambda d: bytes(cramjam.lz4.decompress(bytes(d))))
    monkeypatch.setattr(dr, "zstd_encode", lambda d: bytes(cramjam.zstd.compress(bytes(d))))
    monkeypatch.setattr(dr, "zstd_decode", lambda d: bytes(cramjam.zstd.decompress(bytes(d))))
    return dr


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_kafka_python_batches_parse(kafka_python_codecs: types.ModuleType, codec: int) -> None:
    dr = kafka_python_codecs
    b = dr.DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=5,
                                     producer_epoch=1, base_sequence=7, batch_size=1 << 20)
    for i in range(4):
        b.append(i, timestamp=1000 + i, key=b"k%d" % i if i else None, value=b"v" * (i * 5000),
                 headers=[("h", b"x"), ("n", None)])
    raw = bytes(b.build())
    (info,) = validate_produce_batches(memoryview(raw), 1 << 20)
    assert info.header.producer_id == 5 and info.header.base_sequence == 7 and info.header.compression == codec
    recs = decode_records(raw)
    assert [(r.offset_delta, r.timestamp_delta, r.key, len(r.value or b"")) for r in recs] == [
        (i, i, b"k%d" % i if i else None, i * 5000) for i in range(4)]
    assert recs[0].headers == [("h", b"x"), ("n", None)]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_our_batches_parse_in_kafka_python(kafka_python_codecs: types.ModuleType, codec: int) -> None:
    dr = kafka_python_codecs
    recs = [Record(i, i, b"key" if i % 2 else None, b"value-%d" % i * 3000, [("a", b"b")]) for i in range(5)]
    mine = build_batch(recs, base_offset=100, compression=codec, producer_id=8, producer_epoch=3, base_sequence=11,
                       base_timestamp=5000)
    kb = dr.DefaultRecordBatch(mine)
    assert kb.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in kb]
    assert got == [(100 + i, 5000 + i, recs[i].key, recs[i].value, [("a", b"b")]) for i in range(5)]
    assert kb.producer_id == 8 and kb.base_sequence == 11 and kb.compression_type == codec


def test_crc_is_castagnoli() -> None:
    b = build_batch(_recs(1))
    assert struct.unpack_from(">I", b, 17)[0] == crc32c.crc32c(b[21:])
