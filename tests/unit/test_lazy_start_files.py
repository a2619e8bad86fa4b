"""Start-up touches a loaded segment's files as little as it can (issue 21: a restart at 20,000
partitions opened each active segment's ``.log`` and both indexes, and preallocated the indexes,
before any client asked for anything)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from unittest import mock

from kaflet.log.checkpoints import read_small_file
from kaflet.log.config import LogConfig
from kaflet.log.log import Log
from kaflet.log.offset_index import OffsetIndex
from kaflet.protocol.records import Record, build_batch
from tests.support.open_files import open_paths


def _cfg() -> LogConfig:
    return LogConfig.from_props({"segment.bytes": 100_000, "index.interval.bytes": 100, "segment.index.bytes": 800})


def _batch(ts: int) -> bytes:
    return build_batch([Record(i, i, b"k", b"v" * 60) for i in range(3)], base_timestamp=ts)


def test_clean_restart_opens_nothing_and_preallocates_on_first_write(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    lg = Log(d, _cfg())
    for i in range(5):
        lg.append_as_leader(_batch(1000 + i), leader_epoch=0, now_ms=1)
    lg.close(sync=True)
    index = lg.active_segment.offset_index.path
    trimmed = os.path.getsize(index)
    assert 0 < trimmed < 800
    real_open = os.open
    with mock.patch("os.open", side_effect=real_open) as opens:
        again = Log(d, _cfg(), had_clean_shutdown=True, found=True)
    # The sanity check reads the indexes; nothing writes, resizes or creates a file.
    index_opens = [c.args for c in opens.call_args_list if str(c.args[0]).endswith((".index", ".timeindex"))]
    assert index_opens and all(flags == os.O_RDONLY for _, flags, *_ in index_opens)
    assert open_paths(d) == [again.active_segment.log_path]  # read for the log end offset
    assert os.path.getsize(index) == trimmed  # what a crash now would find: the valid entries
    assert again.log_end_offset == 15
    assert again.read_batches(3)[:8] == (3).to_bytes(8, "big")
    for i in range(5):
        again.append_as_leader(_batch(2000 + i), leader_epoch=0, now_ms=1)
    again.active_segment.write_index_entries()
    assert os.path.getsize(index) == 800  # preallocated by the first write, as Kafka's active index
    found = again.offset_for_timestamp(2003)
    assert found is not None and found.offset == 20
    again.close(sync=True)
    assert os.path.getsize(index) == again.active_segment.offset_index.entries * 8
    reopened = Log(d, _cfg(), had_clean_shutdown=True, found=True)
    found = reopened.offset_for_timestamp(2003)
    assert reopened.log_end_offset == 30 and found is not None and found.offset == 20
    reopened.close()


def test_restart_of_an_empty_log_opens_no_file(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    Log(d, _cfg()).close(sync=True)
    index = os.path.join(d, "00000000000000000000.index")
    assert os.path.getsize(index) == 0
    real_open = os.open
    with mock.patch("os.open", side_effect=real_open) as opens:
        again = Log(d, _cfg(), had_clean_shutdown=True, found=True)
    assert not [c for c in opens.call_args_list if str(c.args[0]).endswith((".index", ".timeindex", ".log"))]
    assert open_paths(d) == [] and os.path.getsize(index) == 0
    again.append_as_leader(_batch(1000), leader_epoch=0, now_ms=1)
    assert open_paths(d) == [again.active_segment.log_path]
    again.close(sync=True)
    assert Log(d, _cfg(), had_clean_shutdown=True, found=True).log_end_offset == 3


def test_crash_after_a_lazy_restart_recovers_every_record(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    lg = Log(d, _cfg())
    lg.append_as_leader(_batch(1000), leader_epoch=0, now_ms=1)
    lg.close(sync=True)
    again = Log(d, _cfg(), had_clean_shutdown=True, found=True)
    for i in range(10):
        again.append_as_leader(_batch(2000 + i), leader_epoch=0, now_ms=1)
    # A crash: the new index entries were never written, the file is still the trimmed one.
    crashed = str(tmp_path / "crash" / "t-0")
    shutil.copytree(d, crashed)
    assert os.path.getsize(os.path.join(crashed, "00000000000000000000.index")) < 800
    recovered = Log(crashed, _cfg(), had_clean_shutdown=False, found=True)
    assert recovered.log_end_offset == 33
    found = recovered.offset_for_timestamp(2009)
    assert found is not None and found.offset == 26
    idx = recovered.active_segment.offset_index
    assert idx.entries > 0 and idx.lookup(31)[0] <= 30
    recovered.close()
    again.close()


def test_read_small_file_reads_past_its_chunk(tmp_path: Path) -> None:
    p = tmp_path / "f"
    data = os.urandom(200_000)
    p.write_bytes(data)
    assert read_small_file(str(p)) == data
    (tmp_path / "empty").write_bytes(b"")
    assert read_small_file(str(tmp_path / "empty")) == b""


def test_crash_restart_of_an_empty_log_opens_no_file(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    Log(d, _cfg()).close(sync=True)
    running = Log(d, _cfg(), had_clean_shutdown=True, found=True)
    crashed = str(tmp_path / "crash" / "t-0")
    shutil.copytree(d, crashed)  # killed before any record arrived
    running.close()
    real_open = os.open
    with mock.patch("os.open", side_effect=real_open) as opens:
        recovered = Log(crashed, _cfg(), had_clean_shutdown=False, found=True)
    assert not [c for c in opens.call_args_list if str(c.args[0]).endswith((".index", ".timeindex", ".log"))]
    assert open_paths(crashed) == [] and recovered.log_end_offset == 0
    for i in range(3):
        recovered.append_as_leader(_batch(1000 + i), leader_epoch=0, now_ms=1)
    recovered.active_segment.write_index_entries()
    assert os.path.getsize(recovered.active_segment.offset_index.path) == 800  # the active index, preallocated
    recovered.close()


def test_a_trim_after_a_reset_of_an_empty_index_leaves_it_exact(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(b"")
    idx = OffsetIndex(str(path), 0, 800)
    idx.reset()
    idx.trim()  # what a recovery of an inactive segment ends with
    assert os.path.getsize(path) == 0
    idx.append(3, 100)
    idx.write_pending()
    assert os.path.getsize(path) == 8  # no preallocation left over from the reset


def test_a_log_made_at_run_time_opens_its_segment_at_once(tmp_path: Path) -> None:
    # A replica created by LeaderAndIsr over a directory an earlier, refused attempt left must
    # fail for want of a descriptor when it is made (KAFKA_STORAGE_ERROR), as a new one does.
    d = str(tmp_path / "t-0")
    Log(d, _cfg()).close(sync=True)
    again = Log(d, _cfg(), had_clean_shutdown=True)
    assert open_paths(d) == [again.active_segment.log_path]
    again.close()
