"""`kaflet dump-log`: batch and record lines, index checks, and one-line errors."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c
from click.testing import CliRunner

from kaflet.cli.dump_log import DumpOptions, run
from kaflet.cli.main import kaflet
from kaflet.log.config import LogConfig
from kaflet.log.log import Log
from kaflet.protocol.records import Record, build_batch


def _write_log(d: Path) -> str:
    lg = Log(str(d / "t-0"), LogConfig.from_props({"index.interval.bytes": 100}))
    lg.append_as_leader(build_batch([Record(0, 0, b"k0", b"hello", [("h1", b"x"), ("h2", None)]),
                                     Record(1, 5, None, b"v1")], base_timestamp=1000), 3, 2000)
    lg.append_as_leader(build_batch([Record(0, 0, b"k2", None)], base_timestamp=1010, producer_id=7,
                                    producer_epoch=2, base_sequence=5, compression=1), 3, 2000)
    for i in range(6):
        lg.append_as_leader(build_batch([Record(0, 0, b"a", b"b" * 60)], base_timestamp=1020 + i), 3, 2000)
    lg.close()
    return str(d / "t-0")


def _run(files: list[str], **opts: bool) -> tuple[int, list[str], list[str]]:
    out: list[str] = []
    err: list[str] = []
    code = run(files, DumpOptions(**opts), out.append, err.append)
    return code, out, err


def test_batches_and_records(tmp_path: Path) -> None:
    d = _write_log(tmp_path)
    code, out, err = _run([os.path.join(d, "00000000000000000000.log")], print_data_log=True)
    assert code == 0 and err == []
    assert out[1] == "Log starting offset: 0"
    first = out[2]
    assert first.startswith("baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 "
                            "producerEpoch: -1 partitionLeaderEpoch: 3 isTransactional: false isControl: false "
                            "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1005 size: ")
    with open(os.path.join(d, "00000000000000000000.log"), "rb") as f:
        batch = f.read(int(first.split("size: ")[1].split()[0]))
    assert first.endswith(f"magic: 2 compresscodec: none crc: {crc32c.crc32c(batch[21:])} isvalid: true")
    assert out[3] == ("| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 5 sequence: -1 headerKeys: [h1,h2] "
                      "key: k0 payload: hello")
    assert out[4] == "| offset: 1 CreateTime: 1005 keySize: -1 valueSize: 2 sequence: -1 headerKeys: [] payload: v1"
    assert "baseSequence: 5 lastSequence: 5 producerId: 7 producerEpoch: 2" in out[5]
    assert "compresscodec: gzip" in out[5] and f"position: {first.split('size: ')[1].split()[0]} " in out[5]
    assert out[6] == "| offset: 2 CreateTime: 1010 keySize: 2 valueSize: -1 sequence: 5 headerKeys: [] key: k2"
    # Without --print-data-log or --deep-iteration only batch lines are printed.
    code, shallow, _ = _run([os.path.join(d, "00000000000000000000.log")])
    assert [x for x in shallow if x.startswith("|")] == [] and len(shallow) == 2 + 8
    code, skip, _ = _run([os.path.join(d, "00000000000000000000.log")], print_data_log=True,
                         skip_record_metadata=True)
    assert "| key: k0 payload: hello" in skip


def test_crc_damage_and_torn_tail(tmp_path: Path) -> None:
    d = _write_log(tmp_path)
    path = os.path.join(d, "00000000000000000000.log")
    with open(path, "r+b") as f:
        f.seek(70)  # inside the first batch's records
        f.write(b"Z")
    with open(path, "ab") as f:
        f.write(b"\x00" * 20)
    code, out, _ = _run([path])
    assert code == 0
    assert out[2].endswith("isvalid: false") and out[3].endswith("isvalid: true")
    assert out[-1] == "Found 20 invalid bytes at the end of 00000000000000000000.log"


def test_index_and_time_index_checks(tmp_path: Path) -> None:
    d = _write_log(tmp_path)
    idx = os.path.join(d, "00000000000000000000.index")
    tidx = os.path.join(d, "00000000000000000000.timeindex")
    code, out, err = _run([idx, tidx])
    assert code == 0 and err == []
    offsets = [line for line in out if line.startswith("offset: ")]
    stamps = [line for line in out if line.startswith("timestamp: ")]
    assert offsets and stamps
    assert all(int(s.split()[1]) >= 1020 for s in stamps)
    code, out, _ = _run([idx, tidx], index_sanity_check=True)
    assert code == 0 and out[1].endswith("passed sanity check.") and out[3].endswith("passed sanity check.")
    # Point the first index entry at the wrong batch: reported on stderr, nothing printed with verify-only.
    with open(idx, "r+b") as f:
        rel, pos = struct.unpack(">ii", f.read(8))
        f.seek(0)
        f.write(struct.pack(">ii", rel + 1, pos))
    code, out, err = _run([idx], verify_index_only=True)
    assert code == 0 and out == [f"Dumping {idx}"]
    assert err[0] == f"Mismatches in :{os.path.abspath(idx)}"
    assert err[1] == f"  Index offset: {rel + 1}, log offset: {rel}"


def test_errors_are_one_line(tmp_path: Path) -> None:
    code, _, err = _run([str(tmp_path / "00000000000000000000.log")])
    assert code == 1 and len(err) == 1 and err[0].startswith("Error: ") and "does not exist" in err[0]
    garbage = tmp_path / "00000000000000000000.log"
    garbage.write_text("this is not a kafka log at all\n")
    code, _, err = _run([str(garbage)])
    assert code == 1 and err == [f"Error: {garbage} is not a Kafka log segment: no record batch at position 0"]
    bad_index = tmp_path / "00000000000000000000.index"
    bad_index.write_bytes(b"\x00" * 13)
    code, _, err = _run([str(bad_index)])
    assert code == 1 and len(err) == 1 and "is corrupt" in err[0]
    odd = tmp_path / "segment.log"
    odd.write_bytes(b"")
    code, _, err = _run([str(odd)])
    assert code == 1 and "not a segment file" in err[0]
    code, _, err = _run([str(tmp_path / "x.txt")])
    assert code == 1


def test_cli_entry_point(tmp_path: Path) -> None:
    d = _write_log(tmp_path)
    res = CliRunner().invoke(kaflet, ["dump-log", "--files", os.path.join(d, "00000000000000000000.log"),
                                      "--deep-iteration"])
    assert res.exit_code == 0, res.output
    assert "| offset: 8 CreateTime: 1025" in res.output
    res = CliRunner().invoke(kaflet, ["dump-log", "--files", str(tmp_path / "missing.log")])
    assert res.exit_code == 1
