"""replication-offset-checkpoint: LogManager writes every log's high watermark per log dir
(periodically and at shutdown) and starts each log from it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from kaflet.log.checkpoints import REPLICATION_OFFSET_CHECKPOINT
from kaflet.log.log_manager import LogManager
from kaflet.protocol.records import Record, build_batch


def _batch(n: int = 4) -> bytes:
    return build_batch([Record(i, 0, None, b"x" * 30) for i in range(n)], base_timestamp=1000)


def _fill(lm: LogManager, topic: str, partition: int, records: int, high_watermark: int) -> None:
    lg = lm.get_or_create_log(topic, partition)
    for _ in range(records // 4):
        lg.append_as_leader(_batch(), 0)
    lg.update_high_watermark(high_watermark)  # what the partition decided


def test_high_watermarks_survive_a_clean_restart(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    lm = LogManager(dirs)
    lm.startup()
    _fill(lm, "t", 0, 40, 28)
    _fill(lm, "t", 1, 20, 20)
    _fill(lm, "u", 0, 12, 0)
    where = {tp: lm.log_dir_of(*tp) for tp in [("t", 0), ("t", 1), ("u", 0)]}
    lm.shutdown()
    lines = {("t", 0): "t 0 28\n", ("t", 1): "t 1 20\n", ("u", 0): "u 0 0\n"}
    for d in dirs:
        mine = [tp for tp in lines if where[tp] == d]
        # Kafka's format: version 0, the entry count, then "<topic> <partition> <hw>" lines.
        assert Path(d, REPLICATION_OFFSET_CHECKPOINT).read_text() == f"0\n{len(mine)}\n" + "".join(
            lines[tp] for tp in mine)

    lm2 = LogManager(dirs)
    lm2.startup()
    try:
        hw = {tp: lg.high_watermark for tp, lg in lm2.all_logs().items()}
        assert hw == {("t", 0): 28, ("t", 1): 20, ("u", 0): 0}
        assert lm2.get_log("t", 0).log_end_offset == 40  # type: ignore[union-attr]
    finally:
        lm2.shutdown()


def test_missing_or_bad_checkpoint_starts_at_the_log_start(tmp_path: Path) -> None:
    d = str(tmp_path / "a")
    lm = LogManager([d])
    lm.startup()
    _fill(lm, "t", 0, 16, 16)
    lm.shutdown()
    os.unlink(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT))
    lm = LogManager([d])
    lm.startup()
    lg = lm.get_log("t", 0)
    assert lg is not None and lg.high_watermark == 0 and lg.log_end_offset == 16
    lg.update_high_watermark(16)
    lm.shutdown()
    Path(d, REPLICATION_OFFSET_CHECKPOINT).write_text("0\n2\nt 0 16\n")  # says 2 entries, has 1
    lm = LogManager([d])
    lm.startup()  # the logs still load; only the high watermarks are lost
    lg = lm.get_log("t", 0)
    assert lg is not None and lg.high_watermark == 0 and lg.log_end_offset == 16
    lm.shutdown()


async def test_checkpoint_written_every_interval(tmp_path: Path) -> None:
    d = str(tmp_path / "a")
    lm = LogManager([d], high_watermark_checkpoint_interval_ms=30, flush_check_interval_ms=1000)
    lm.startup()
    stop = asyncio.Event()
    task = asyncio.create_task(lm.run_background(stop))
    path = Path(d, REPLICATION_OFFSET_CHECKPOINT)
    try:
        _fill(lm, "t", 0, 8, 4)
        for _ in range(500):
            await asyncio.sleep(0.01)
            if path.exists() and path.read_text() == "0\n1\nt 0 4\n":
                break
        assert path.read_text() == "0\n1\nt 0 4\n"
        lm.get_log("t", 0).update_high_watermark(8)  # type: ignore[union-attr]
        for _ in range(500):
            await asyncio.sleep(0.01)
            if path.read_text() == "0\n1\nt 0 8\n":
                break
        assert path.read_text() == "0\n1\nt 0 8\n"
    finally:
        stop.set()
        await task
        lm.shutdown()
