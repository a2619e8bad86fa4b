"""Checkpoint files, byte for byte as kafka-facts section 2 describes them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kaflet.log import checkpoints as cp
from kaflet.log.leader_epoch import LeaderEpochCache


def test_offset_checkpoint_bytes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = str(tmp_path / cp.RECOVERY_POINT_CHECKPOINT)
    cp.write_offset_checkpoint(p, {("orders", 0): 1234, ("__consumer_offsets", 17): 0})
    assert Path(p).read_bytes() == b"0\n2\norders 0 1234\n__consumer_offsets 17 0\n"
    assert not os.path.exists(p + ".tmp")
    assert cp.read_offset_checkpoint(p) == {("orders", 0): 1234, ("__consumer_offsets", 17): 0}
    cp.write_offset_checkpoint(p, {})
    assert Path(p).read_bytes() == b"0\n0\n"


def test_offset_checkpoint_reading(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "c"
    assert cp.read_offset_checkpoint(str(p)) == {}
    p.write_bytes(b"")
    assert cp.read_offset_checkpoint(str(p)) == {}
    p.write_bytes(b"0\n1\nt \t 3    9\n")
    assert cp.read_offset_checkpoint(str(p)) == {("t", 3): 9}
    for bad in (b"1\n0\n", b"0\n2\nt 0 1\n", b"0\n1\nt x 1\n", b"zz\n"):
        p.write_bytes(bad)
        with pytest.raises(cp.CheckpointError):
            cp.read_offset_checkpoint(str(p))


def test_leader_epoch_checkpoint(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = str(tmp_path / cp.LEADER_EPOCH_CHECKPOINT)
    cache = LeaderEpochCache(p)
    cache.assign(0, 0)
    cache.assign(0, 10)  # same epoch, later offset: no change
    cache.assign(3, 50)
    assert Path(p).read_bytes() == b"0\n2\n0 0\n3 50\n"
    assert cache.end_offset_for(0, 80) == (0, 50)
    assert cache.end_offset_for(2, 80) == (0, 50)
    assert cache.end_offset_for(3, 80) == (3, 80)
    assert cache.end_offset_for(4, 80) == (-1, -1)
    cache.assign(2, 40)  # lower epoch with a lower offset: newer entries go (Kafka's rule)
    assert cache.entries == [(0, 0), (2, 40)]
    cache.truncate_from_end(40)
    assert LeaderEpochCache(p).entries == [(0, 0)]


def test_partition_metadata_bytes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = str(tmp_path / cp.PARTITION_METADATA)
    cp.write_atomic(p, cp.format_partition_metadata("AAAAAAAAAAAAAAAAAAAAAA"))
    assert Path(p).read_bytes() == b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA"
    assert cp.read_partition_metadata(p) == "AAAAAAAAAAAAAAAAAAAAAA"


def test_meta_properties(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = str(tmp_path / cp.META_PROPERTIES)
    cp.write_meta_properties(p, {"version": "0", "broker.id": "1", "cluster.id": "a:b=c"})
    lines = Path(p).read_text().split("\n")
    assert lines[0] == "#" and lines[1].startswith("#") and lines[2] == "version=0"
    assert "cluster.id=a\\:b\\=c" in lines
    assert cp.read_meta_properties(p) == {"version": "0", "broker.id": "1", "cluster.id": "a:b=c"}
