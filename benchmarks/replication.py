"""How fast a kaflet follower copies its leader, with two broker processes on this machine.

Starts brokers 1 and 2, makes 1 the leader and 2 the follower of a one-partition topic with
UpdateMetadata and LeaderAndIsr (as tests/integration/test_replication.py does), then measures:
  * produce throughput with confluent-kafka at acks=1 and at acks=all (each acks=all batch
    waits until the follower has fetched it);
  * catch-up: the follower is stopped, the leader takes --catch-up-mb alone, the follower is
    started and made follower again; the time until its segment files hold every byte.

    python benchmarks/replication.py [--messages 100000] [--size 1024] [--catch-up-mb 200]
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
from kaflet.protocol.api_keys import ApiKey  # noqa: E402
from tests.support.broker_process import BrokerProcess, running_broker  # noqa: E402
from tests.support.replication import leader_and_isr, update_metadata  # noqa: E402

TOPIC = "bench"


async def _send(broker: BrokerProcess, api_key: ApiKey, version: int, request: Any) -> Any:
    async with await BrokerClient.connect("127.0.0.1", broker.port) as client:
        return await client.send(api_key, version, request)


async def _elect(brokers: dict[int, BrokerProcess], epoch: int) -> None:
    live = [(b, "127.0.0.1", p.port) for b, p in brokers.items()]
    state = [{"index": 0, "leader": 1, "leader_epoch": epoch, "isr": [1, 2], "replicas": [1, 2]}]
    for proc in brokers.values():
        assert (await _send(proc, ApiKey.UPDATE_METADATA, 7, update_metadata(
            100, live, TOPIC, state))).error_code == 0
        assert (await _send(proc, ApiKey.LEADER_AND_ISR, 5, leader_and_isr(
            100, TOPIC, state, live_leaders=[(1, "127.0.0.1", brokers[1].port)]))).error_code == 0


def _log_bytes(broker: BrokerProcess) -> int:
    return sum(f.stat().st_size for f in (broker.data_dir / f"{TOPIC}-0").glob("*.log"))


def _produce(bootstrap: str, messages: int, size: int, acks: str) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 1_000_000})
    value = b"x" * size
    start = time.monotonic()
    for _ in range(messages):
        while True:
            try:
                p.produce(TOPIC, value=value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    return time.monotonic() - start


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        overrides = {"auto.create.topics.enable": "false"}
        with running_broker(Path(tmp) / "b1", {**overrides, "broker.id": "1"}) as b1, \
                running_broker(Path(tmp) / "b2", {**overrides, "broker.id": "2"}) as b2:
            brokers = {1: b1, 2: b2}
            await _elect(brokers, 0)
            mb = args.messages * args.size / 1e6
            for acks in ("1", "all"):
                took = _produce(b1.bootstrap, args.messages, args.size, acks)
                print(f"produce acks={acks:<3} {args.messages} x {args.size} B: {args.messages / took:9.0f} msg/s "
                      f"{mb / took:7.1f} MB/s (follower fetching)")
            b2.stop()
            had = _log_bytes(b2)
            count = int(args.catch_up_mb * 1e6 / args.size)
            _produce(b1.bootstrap, count, args.size, "1")
            target = _log_bytes(b1)
            b2.start()
            start = time.monotonic()
            await _elect(brokers, 1)
            while _log_bytes(b2) < target:
                await asyncio.sleep(0.02)
            took = time.monotonic() - start
            behind = (target - had) / 1e6
            print(f"catch-up: follower copied {behind:.0f} MB of segments in {took:.2f} s: {behind / took:.0f} MB/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--catch-up-mb", type=float, default=200.0)
    asyncio.run(main(parser.parse_args()))
