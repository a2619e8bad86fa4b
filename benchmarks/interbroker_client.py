"""How fast kaflet's broker-to-broker client moves requests and fetched bytes.

Starts a kaflet broker process, fills a topic, then measures with BrokerClient:
  * Metadata round trips, one at a time (the controller channel's pattern) and pipelined;
  * Fetch v12 of the whole topic through send_raw + decode_fetch_response (the follower's
    path), in MB/s, over PLAINTEXT.

    python benchmarks/interbroker_client.py [--records 100000] [--size 1024]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kaflet.network.client import BrokerClient  # noqa: E402
from kaflet.protocol import codec  # noqa: E402
from kaflet.protocol.api_keys import ApiKey  # noqa: E402
from kaflet.protocol.fetch import decode_fetch_response  # noqa: E402
from tests.support.broker_process import running_broker  # noqa: E402
from tests.support.topics import create_topic  # noqa: E402


def _metadata() -> Any:
    M = codec.request_class(ApiKey.METADATA)
    return M(topics=[M.MetadataRequestTopic(name="bench")], allow_auto_topic_creation=False,
             include_cluster_authorized_operations=False, include_topic_authorized_operations=False)


def _fetch(offset: int, max_bytes: int) -> Any:
    F = codec.request_class(ApiKey.FETCH)
    T = F.FetchTopic
    return F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0, session_id=0,
             session_epoch=-1, topics=[T(topic="bench", partitions=[T.FetchPartition(
                 partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                 log_start_offset=-1, partition_max_bytes=max_bytes)])], forgotten_topics_data=[], rack_id="")


async def measure(port: int, records: int) -> None:
    async with await BrokerClient.connect("127.0.0.1", port) as client:
        n = 2000
        start = time.perf_counter()
        for _ in range(n):
            await client.send(ApiKey.METADATA, 9, _metadata())
        serial = time.perf_counter() - start
        start = time.perf_counter()
        await asyncio.gather(*(client.send(ApiKey.METADATA, 9, _metadata()) for _ in range(n)))
        pipelined = time.perf_counter() - start
        print(f"Metadata v9, {n} requests: one at a time {n / serial:,.0f}/s "
              f"({serial / n * 1e6:.0f} us each), pipelined {n / pipelined:,.0f}/s")

        total = fetched = 0
        offset = 0
        start = time.perf_counter()
        while offset < records:
            body = await client.send_raw(ApiKey.FETCH, 12, _fetch(offset, 4 << 20))
            [(_, [part])] = decode_fetch_response(body, 12).topics
            total += len(body)
            fetched += len(part.records)
            offset = _next_offset(part.records)
        elapsed = time.perf_counter() - start
        print(f"Fetch v12 through send_raw + decode_fetch_response: {fetched / 1e6:.1f} MB of records in "
              f"{elapsed:.2f} s = {fetched / elapsed / 1e6:.0f} MB/s")


def _next_offset(records: memoryview) -> int:
    from kaflet.protocol.records import iter_batches

    last = -1
    for _, h in iter_batches(records):
        last = h.last_offset
    return last + 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100000)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, running_broker(Path(tmp) / "data") as broker:
        create_topic(broker.bootstrap, "bench")
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                             "log.connection.close": False})
        value = b"x" * args.size
        for _ in range(args.records):
            while True:
                try:
                    producer.produce("bench", value)
                    break
                except BufferError:
                    producer.poll(0.1)
        assert producer.flush(60) == 0
        del producer  # before the broker stops, so it does not retry against a closed port
        asyncio.run(measure(broker.port or 0, args.records))


if __name__ == "__main__":
    main()
