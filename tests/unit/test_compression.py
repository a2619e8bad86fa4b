"""Codecs: round trips, xerial/raw snappy, independent lz4 blocks, decompression bombs."""

from __future__ import annotations

import os
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaflet.protocol import compression as c


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from([0, 1, 2, 3, 4]), data=st.binary(max_size=5000))
def test_round_trip(codec: int, data: bytes) -> None:
    assert bytes(c.decompress(codec, c.compress(codec, data))) == data


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_large_round_trip(codec: int) -> None:
    data = os.urandom(50_000) * 6 + bytes(200_000)
    assert bytes(c.decompress(codec, c.compress(codec, data))) == data


def test_snappy_writes_xerial_and_reads_raw() -> None:
    data = b"hello snappy " * 5000
    out = c.compress(c.SNAPPY, data)
    assert out.startswith(c.XERIAL_MAGIC) and struct.unpack(">ii", out[8:16]) == (1, 1)
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert bytes(c.decompress(c.SNAPPY, raw)) == data


def test_lz4_blocks_are_independent() -> None:
    out = c.compress(c.LZ4, os.urandom(300_000))
    flg = out[4]
    assert flg >> 6 == 1 and flg & 0x20  # version 01, block independence set


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_bomb_is_rejected(codec: int) -> None:
    bomb = c.compress(codec, bytes(4_000_000))
    with pytest.raises(c.CompressionError) as ei:
        c.decompress(codec, bomb, max_size=1_000_000)
    assert ei.value.error_code == 2


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_garbage_raises_compression_error(codec: int) -> None:
    for blob in (b"", b"\x00", os.urandom(64), c.compress(codec, b"abc" * 100)[:-5]):
        try:
            c.decompress(codec, blob)
        except c.CompressionError:
            pass


def test_unknown_codec() -> None:
    with pytest.raises(c.CompressionError) as ei:
        c.compress(7, b"x")
    assert ei.value.error_code == 76
