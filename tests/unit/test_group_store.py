"""Loading the group coordinator's state from a real __consumer_offsets partition log."""

from __future__ import annotations

from pathlib import Path

from kaflet.coordinator.group import schemas
from kaflet.coordinator.group.store import GROUP_METADATA_TOPIC, OffsetsTopicStore
from kaflet.log.config import LogConfig
from kaflet.log.log import Log
from kaflet.protocol.records import Record, build_batch
from kaflet.replication.partition import Partition


def _commit(group: str, offset: int) -> memoryview:
    key = schemas.encode_offset_key(group, "t", 0)
    value = schemas.encode_offset_value(schemas.OffsetValue(offset, "", 1000))
    return memoryview(build_batch([Record(0, 0, key, value)]))


async def test_load_replays_past_a_lagging_high_watermark(tmp_path: Path) -> None:
    # A broker that just became leader of the partition: the old leader acknowledged these
    # commits (they are in this log) but this broker's high watermark has not caught up yet.
    log = Log(str(tmp_path / f"{GROUP_METADATA_TOPIC}-0"), LogConfig.from_props({}))
    part = Partition(GROUP_METADATA_TOPIC, 0, "AAAAAAAAAAAAAAAAAAAAAA", log, broker_id=1)
    part.make_leader(1, [1, 2], [1, 2])
    part.append(_commit("g", 5), -1)
    part.append(_commit("g", 9), -1)
    assert (log.high_watermark, log.log_end_offset) == (0, 2)  # broker 2 has not fetched yet

    loaded = await OffsetsTopicStore(lambda topic, index: part, 5000).load(0)
    assert loaded.offsets["g"][("t", 0)].offset == 9
    log.close()
