"""Disk load protection with real consumers (confluent-kafka): while the disk is overloaded, a
consumer reading segments that are not in the page cache is throttled and a tail consumer is not.

The overload signal is the broker's own setting: `diskloadprotector.util.threshold=0` counts the
log dir's disk as overloaded at any utilisation (the real /proc/diskstats sampler runs), and
`diskloadprotector.cold.fetch.rate=0` admits no cold read. The segments are dropped from the
page cache with posix_fadvise(POSIX_FADV_DONTNEED), so the broker's mincore check sees them cold.
"""

from __future__ import annotations

import glob
import os
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from kaflet.embedded_broker import embedded_broker
from kaflet.log.disk_load import in_page_cache
from kaflet.protocol import codec
from kaflet.protocol.records import decode_records
from tests.support.metrics import scrape
from tests.support.raw_client import RawClient

TOPIC = "history"
THROTTLE_MS = 200
VALUE = b"v" * 1000
COLD_RECORDS = 150


def drop_from_page_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # dirty pages stay in the cache
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        # The broker's judgement rests on this: say so if the kernel kept the pages.
        size = os.fstat(fd).st_size
        assert size == 0 or in_page_cache(fd, 0, size) is False, f"{path} stayed in the page cache"
    finally:
        os.close(fd)


def warm(path: str) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass


def wait_overloaded(broker: object) -> None:
    protector = broker.disk_load_protector  # type: ignore[attr-defined]
    assert protector is not None
    deadline = time.monotonic() + 10
    while not protector.overloaded:
        assert time.monotonic() < deadline, "the sampler never reported the disk"
        time.sleep(0.05)


def consumer(bootstrap: str, group: str, throttles: list[float]) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "fetch.wait.max.ms": 100, "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})


def test_cold_consumer_is_throttled_while_the_tail_consumer_is_not() -> None:
    cfg = {"diskloadprotector.enable": "true", "diskloadprotector.util.threshold": "0",
           "diskloadprotector.cold.fetch.rate": "0", "diskloadprotector.throttle.ms": str(THROTTLE_MS),
           "diskloadprotector.sample.interval.ms": "50", "log.segment.bytes": str(1 << 20),
           "metrics.listener": "http://127.0.0.1:0"}
    with embedded_broker(cfg) as (broker, _loop):
        bootstrap = broker.bootstrap
        # Batches of at most 64 KiB fill each 1 MiB segment nearly whole. With librdkafka's 1 MB
        # batches a first segment of 60-230 KB happened (the next batch did not fit), and a
        # refused read's header scan brings that much in by the kernel's read-ahead: the next
        # fetch found the segment hot and was served (1 run in 12 here).
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 65536})
        for i in range(4000):
            producer.produce(TOPIC, value=VALUE, key=str(i).encode(), partition=0)
        assert producer.flush(30) == 0
        part_dir = os.path.join(broker.log_dirs[0], f"{TOPIC}-0")
        segments = sorted(glob.glob(os.path.join(part_dir, "*.log")))
        assert len(segments) >= 3
        assert os.path.getsize(segments[0]) > (1 << 20) - 65536 - 1024
        for seg in segments:
            drop_from_page_cache(seg)
        wait_overloaded(broker)
        protector = broker.disk_load_protector
        assert protector is not None

        tail_throttles: list[float] = []
        cold_throttles: list[float] = []
        tail = consumer(bootstrap, "tail", tail_throttles)
        cold = consumer(bootstrap, "catch-up", cold_throttles)
        try:
            end = 4000
            tail.assign([TopicPartition(TOPIC, 0, end)])
            cold.assign([TopicPartition(TOPIC, 0, 0)])
            for i in range(50):
                producer.produce(TOPIC, value=VALUE, key=b"new-%d" % i, partition=0)
            assert producer.flush(30) == 0

            tail_offsets: list[int] = []
            cold_offsets: list[int] = []
            deadline = time.monotonic() + 60
            while len(tail_offsets) < 50 or sum(t > 0 for t in cold_throttles) < 3:
                assert time.monotonic() < deadline, (len(tail_offsets), len(cold_throttles))
                for c, got in ((tail, tail_offsets), (cold, cold_offsets)):
                    m = c.poll(0.05)
                    if m is not None and m.error() is None:
                        got.append(m.offset())
            assert tail_offsets == list(range(end, end + 50))
            assert tail_throttles == []
            # The catch-up consumer got nothing of the cold segments, only throttle times.
            assert cold_offsets == []
            # (librdkafka also reports the end of a throttle, as 0.)
            assert {round(t * 1000) for t in cold_throttles} <= {THROTTLE_MS, 0}
            refused = sum(d.refused for d in protector.disks.values())
            assert refused >= 3
            # The same counts on the metrics endpoint, per device.
            samples = scrape(broker)
            scraped = {dict(labels)["device"]: v for (name, labels), v in samples.items()
                       if name == "kaflet_diskloadprotector_coldreads_refused_total"}
            assert set(scraped) == set(protector.disks) and sum(scraped.values()) >= refused

            # The first segment read back into the page cache is hot again: it is served, and
            # the consumer stops at the next segment, still cold.
            warm(segments[0])
            second_base = int(os.path.basename(segments[1]).split(".")[0])
            deadline = time.monotonic() + 30
            while len(cold_offsets) < second_base:
                assert time.monotonic() < deadline, len(cold_offsets)
                m = cold.poll(0.1)
                if m is not None and m.error() is None:
                    cold_offsets.append(m.offset())
            assert cold_offsets == list(range(second_base))
            stop = time.monotonic() + 1.5
            while time.monotonic() < stop:
                m = cold.poll(0.1)
                assert m is None or m.error() is not None, m.offset()
        finally:
            tail.close()
            cold.close()
            del producer  # its connections go before the broker does


def test_a_refused_cold_read_answers_at_once_with_the_throttle_and_the_hot_partitions() -> None:
    """On the wire: the cold partition has no records and no error, the hot one its records, the
    response its throttle time, and the fetch does not long-poll for min_bytes.

    The cold partition is small (150 KB): the read's own header scan pulls a quarter MiB into
    the page cache through the kernel's read-ahead, so a check made after it would find the
    whole partition hot."""
    cfg = {"diskloadprotector.enable": "true", "diskloadprotector.util.threshold": "0",
           "diskloadprotector.cold.fetch.rate": "0", "diskloadprotector.throttle.ms": str(THROTTLE_MS),
           "diskloadprotector.sample.interval.ms": "50", "log.segment.bytes": str(1 << 20),
           "num.partitions": "2"}
    with embedded_broker(cfg) as (broker, _loop):
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for _ in range(COLD_RECORDS):
            producer.produce(TOPIC, value=VALUE, partition=0)
        for i in range(10):
            producer.produce(TOPIC, value=b"hot-%d" % i, partition=1)
        assert producer.flush(30) == 0
        del producer
        for seg in glob.glob(os.path.join(broker.log_dirs[0], f"{TOPIC}-0", "*.log")):
            drop_from_page_cache(seg)
        wait_overloaded(broker)

        F = codec.request_class(1)
        zero = uuid.UUID(int=0)
        req = F(replica_id=-1, replica_state=F.ReplicaState(replica_id=-1, replica_epoch=-1),
                max_wait_ms=30000, min_bytes=10 << 20, max_bytes=50 << 20, isolation_level=0,
                session_id=0, session_epoch=-1,
                topics=[F.FetchTopic(topic=TOPIC, topic_id=zero, partitions=[F.FetchTopic.FetchPartition(
                    partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                    log_start_offset=-1, partition_max_bytes=1 << 20) for p in (0, 1)])],
                forgotten_topics_data=[], rack_id="", cluster_id=None)
        client = RawClient(broker.bootstrap, timeout=60)
        try:
            started = time.monotonic()
            resp = client.request(1, 12, req)
            # Far below the 30 s the fetch would otherwise wait for its 10 MiB.
            assert time.monotonic() - started < 20, "the fetch waited for min_bytes"
        finally:
            client.close()
        assert resp.error_code == 0 and resp.throttle_time_ms == THROTTLE_MS
        parts = {p.partition_index: p for t in resp.responses for p in t.partitions}
        cold, hot = parts[0], parts[1]
        assert (cold.error_code, cold.high_watermark) == (0, COLD_RECORDS)
        assert not cold.records
        assert hot.error_code == 0
        assert [r.value for r in decode_records(bytes(hot.records))] == [b"hot-%d" % i for i in range(10)]
