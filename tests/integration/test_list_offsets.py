"""ListOffsets as clients use it: earliest, latest, by timestamp, max timestamp."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from tests.support.topics import create_topic

BASE_TS = 1_700_000_000_000


def _produce_with_timestamps(bootstrap: str, topic: str, timestamps: list[int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i, ts in enumerate(timestamps):
        p.produce(topic, value=f"v{i}".encode(), timestamp=ts)
        p.flush(10)  # one batch per record, so lookups must walk batches
    assert p.flush(10) == 0


def test_offsets_for_times_and_specs(kaflet_broker):
    bootstrap = kaflet_broker.bootstrap
    topic = f"lo-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    stamps = [BASE_TS + d for d in (0, 1000, 5000, 3000, 9000, 2000)]
    _produce_with_timestamps(bootstrap, topic, stamps)

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    tp = lambda ts: TopicPartition(topic, 0, ts)  # noqa: E731
    # The first offset whose timestamp is >= the target.
    assert c.offsets_for_times([tp(BASE_TS + 500)], timeout=10)[0].offset == 1
    assert c.offsets_for_times([tp(BASE_TS + 4000)], timeout=10)[0].offset == 2
    assert c.offsets_for_times([tp(BASE_TS)], timeout=10)[0].offset == 0
    # Later than every record: no offset (-1).
    assert c.offsets_for_times([tp(BASE_TS + 10_000)], timeout=10)[0].offset == -1
    lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    assert (lo, hi) == (0, 6)
    c.close()

    admin = AdminClient({"bootstrap.servers": bootstrap})
    part = TopicPartition(topic, 0)
    res = admin.list_offsets({part: OffsetSpec.max_timestamp()})
    info = res[part].result(10)
    assert (info.offset, info.timestamp) == (4, BASE_TS + 9000)
    assert admin.list_offsets({part: OffsetSpec.earliest()})[part].result(10).offset == 0
    assert admin.list_offsets({part: OffsetSpec.latest()})[part].result(10).offset == 6


def test_log_append_time_topic(kaflet_broker):
    bootstrap = kaflet_broker.bootstrap
    topic = f"lat-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1, config={"message.timestamp.type": "LogAppendTime"})
    _produce_with_timestamps(bootstrap, topic, [BASE_TS, BASE_TS + 1])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    msgs = []
    while len(msgs) < 2:
        m = c.poll(10)
        assert m is not None and m.error() is None
        msgs.append(m)
    c.close()
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

    for m in msgs:
        kind, ts = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME and ts > BASE_TS + 10_000_000
