"""Describing one wide topic: Metadata v12 in one answer vs DescribeTopicPartitions (KIP-966) pages.

Starts a kaflet broker (or uses --bootstrap), creates a topic of --partitions partitions (5,000),
then --rounds times (20) asks for it with Metadata v12 and with DescribeTopicPartitions v0,
following NextCursor at --limit partitions a page (the Java client's default is 2,000). It prints
the median time per way (all pages together for DescribeTopicPartitions), the pages taken and the
bytes answered. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import create_topic, started_broker
from confluent_kafka.admin import AdminClient

from kaflet.network.raw_connection import RawConnection, connect
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey

M = codec.request_class(ApiKey.METADATA)
D = codec.request_class(ApiKey.DESCRIBE_TOPIC_PARTITIONS)


def metadata(conn: RawConnection, topic: str) -> tuple[int, int]:
    """(pages, partitions) of one Metadata v12 answer."""
    resp = conn.request(ApiKey.METADATA, 12, M(topics=[M.MetadataRequestTopic(name=topic, topic_id=None)],
                                               allow_auto_topic_creation=False))
    return 1, len(resp.topics[0].partitions)


def describe_pages(conn: RawConnection, topic: str, limit: int) -> tuple[int, int]:
    """(pages, partitions) of DescribeTopicPartitions, following its cursor to the end."""
    cursor: Any = None
    pages = partitions = 0
    while True:
        resp = conn.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, D(
            topics=[D.TopicRequest(name=topic)], response_partition_limit=limit, cursor=cursor))
        pages += 1
        partitions += sum(len(t.partitions) for t in resp.topics)
        if resp.next_cursor is None:
            return pages, partitions
        cursor = D.Cursor(topic_name=resp.next_cursor.topic_name, partition_index=resp.next_cursor.partition_index)


def measure(bootstrap: str, partitions: int, rounds: int, limit: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = create_topic(admin, partitions, timeout_s=120)
    host, port = bootstrap.rsplit(":", 1)
    with connect(host, int(port), {}, 10) as conn:
        for name, way in (("Metadata v12", lambda: metadata(conn, topic)),
                          (f"DescribeTopicPartitions v0, {limit} a page", lambda: describe_pages(conn, topic, limit))):
            times = []
            for _ in range(rounds):
                start = time.perf_counter()
                pages, seen = way()
                times.append(time.perf_counter() - start)
            assert seen == partitions, f"{name} listed {seen} of {partitions} partitions"
            print(f"{name:45} {pages} page(s)  median {statistics.median(times) * 1000:8.1f} ms  "
                  f"min {min(times) * 1000:8.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="an already running broker (default: start kaflet)")
    parser.add_argument("--partitions", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--limit", type=int, default=2000, help="ResponsePartitionLimit of each page")
    args = parser.parse_args()
    if args.bootstrap:
        measure(args.bootstrap, args.partitions, args.rounds, args.limit)
        return 0
    with tempfile.TemporaryDirectory() as tmp, started_broker("kaflet", Path(tmp)) as broker:
        measure(broker.bootstrap, args.partitions, args.rounds, args.limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
