"""IndexFile.reset: the rebuild's entries replace the old file's in one later write (issue 21:
a recovery opened each index file twice more than it needed)."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from unittest import mock

from kaflet.log.offset_index import OffsetIndex


def _entries(path: Path) -> list[tuple[int, int]]:
    data = path.read_bytes()
    return [struct.unpack_from(">ii", data, i) for i in range(0, len(data), 8)]


def _index_with(path: Path, entries: list[tuple[int, int]], max_bytes: int = 80) -> OffsetIndex:
    idx = OffsetIndex(str(path), 100, max_bytes)
    for offset, position in entries:
        idx.append(offset, position)
    idx.trim()
    return OffsetIndex(str(path), 100, max_bytes)  # as a restart finds it


def test_reset_then_trim_leaves_only_the_rebuilt_entries_in_one_open(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    idx = _index_with(path, [(110, 0), (120, 500), (130, 900)])
    assert os.path.getsize(path) == 24
    real_open = os.open
    with mock.patch("kaflet.log.index_file.os.open", side_effect=real_open) as opened:
        idx.reset()
        assert opened.call_count == 0  # nothing touched until the rebuild writes
        idx.append(105, 0)
        idx.trim()
    assert opened.call_count == 1
    assert _entries(path) == [(5, 0)]  # relative offsets: the old entries are gone
    assert idx.entries == 1 and idx.lookup(120) == (105, 0)


def test_reset_with_nothing_rebuilt_empties_the_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    idx = _index_with(path, [(110, 0), (120, 500)])
    idx.reset()
    idx.trim()
    assert os.path.getsize(path) == 0 and idx.entries == 0


def test_write_after_reset_preallocates_as_the_old_reset_did(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    idx = _index_with(path, [(110, 0), (120, 500), (130, 900)])
    idx.reset()
    idx.append(101, 0)
    idx.write_pending()  # what a flush does before its fsync
    assert os.path.getsize(path) == 80  # zero-filled to max entries, the old entries gone
    assert _entries(path)[:2] == [(1, 0), (0, 0)]
    idx.resize(160)
    assert os.path.getsize(path) == 80  # resized by the next write, not at once
    idx.append(102, 10)
    idx.write_pending()
    assert os.path.getsize(path) == 160 and _entries(path)[:3] == [(1, 0), (2, 10), (0, 0)]
