"""`kaflet gateway` in discovery mode: how many client bootstraps one gateway answers per second,
how soon a new client lands on another cluster after a change in the manager, and what 1,000
idle client connections cost the gateway.

Starts a `kaflet manager`, two single-broker kaflet clusters (SASL/PLAIN users from JAAS, the
gateway on) whose addresses are discovery settings in the manager, and one `kaflet gateway`, all
as processes on this machine. A bootstrap is what a client does first: connect, ApiVersions,
SaslHandshake, SaslAuthenticate, Metadata for one topic, then close; ``--workers`` of them run
at once from this process (which shares the cores with the gateway).

    python benchmarks/gateway_discovery.py [--seconds 10] [--workers 8] [--idle 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kaflet.network.client import PLAINTEXT, BrokerClient  # noqa: E402
from kaflet.security.sasl_client import run_async, sasl_exchange  # noqa: E402
from tests.support.broker_process import BrokerProcess  # noqa: E402
from tests.support.gateway_process import GatewayProcess  # noqa: E402
from tests.support.manager import ManagerProcess, Session  # noqa: E402
from tests.support.topics import create_topic  # noqa: E402

USER, PASSWORD = "7.app_bench", "pw-bench"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        f'password="admin-secret" user_admin="admin-secret" user_{USER}="{PASSWORD}";')
# Metadata v4 for the topic "orders", no auto-creation.
METADATA_V4 = struct.pack(">ih", 1, 6) + b"orders" + b"\x00"


def broker(work: Path, name: str, gateway_url: str) -> BrokerProcess:
    return BrokerProcess(work / name, {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS, "gateway.url": gateway_url, "cluster.id": "7",
    }).start()


async def bootstrap(port: int) -> int:
    """One client bootstrap through the gateway; the port of the broker its Metadata names."""
    async with await BrokerClient.connect("127.0.0.1", port, PLAINTEXT, client_id="bench") as client:
        await client.send_raw(18, 0, b"")
        await run_async(sasl_exchange("PLAIN", USER, PASSWORD), client.send)
        body = await client.send_raw(3, 4, METADATA_V4)
    # throttle_time_ms, brokers: [node_id, host, port, rack]; the first broker's port.
    (count,) = struct.unpack_from(">i", body, 4)
    assert count >= 1, "no brokers in the answer"
    (host_len,) = struct.unpack_from(">h", body, 12)
    return int(struct.unpack_from(">i", body, 14 + host_len)[0])


async def bootstraps_per_second(port: int, seconds: float, workers: int) -> float:
    done = 0
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal done
        while time.monotonic() < deadline:
            await bootstrap(port)
            done += 1

    began = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return done / (time.monotonic() - began)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 10 ms


async def idle_connections(port: int, n: int) -> list[BrokerClient]:
    clients = []
    for _ in range(n):
        client = await BrokerClient.connect("127.0.0.1", port, PLAINTEXT, client_id="idle")
        await client.send_raw(18, 0, b"")
        await run_async(sasl_exchange("PLAIN", USER, PASSWORD), client.send)
        clients.append(client)
    return clients


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--moves", type=int, default=5)
    parser.add_argument("--sync-ms", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        manager = ManagerProcess(work / "manager").start()
        brokers: list[BrokerProcess] = []
        gateways: list[GatewayProcess] = []
        try:
            brokers += [broker(work, "a", manager.gateway_url), broker(work, "b", manager.gateway_url)]
            for b in brokers:
                create_topic(b.bootstrap, "orders", partitions=1)
            assert manager.admin_password
            with httpx.Client(base_url=manager.url, timeout=30) as http:
                admin = Session(http, "admin", manager.admin_password)

                def point(b: BrokerProcess) -> None:
                    r = admin.form("/gateway-configs", {"type": "SD_CLUSTER_ID", "name": "7",
                                                        "value": b.bootstrap_for("SASL_PLAINTEXT")})
                    assert r.status_code == 303, r.text

                point(brokers[0])
                for cache_ms in (1000, 0):
                    gateway = GatewayProcess(work / f"gateway-{cache_ms}", [
                        "--manager-url", manager.gateway_url, "--listen", "127.0.0.1:0"],
                        {"gateway.sync.interval.ms": str(args.sync_ms), "discovery.metadata.cache.ms": str(cache_ms)})
                    gateways.append(gateway)
                    gateway.launch().wait_ready()
                    rate = asyncio.run(bootstraps_per_second(gateway.port, args.seconds, args.workers))
                    print(f"bootstraps (connect, ApiVersions, SASL/PLAIN, Metadata, close): {rate:.0f}/s with "
                          f"{args.workers} clients at once, discovery.metadata.cache.ms={cache_ms}")
                gateway = gateways[-1]

                ports = [int(b.bootstrap_for("SASL_PLAINTEXT").rsplit(":", 1)[1]) for b in brokers]
                took = []
                for i in range(args.moves):
                    target = (i + 1) % 2
                    point(brokers[target])
                    changed = time.monotonic()
                    while asyncio.run(bootstrap(gateway.port)) != ports[target]:
                        time.sleep(0.02)
                    took.append(time.monotonic() - changed)
                print(f"change in the manager to the first new client on the other cluster: median "
                      f"{statistics.median(took):.2f} s, worst {max(took):.2f} s over {args.moves} moves "
                      f"(gateway.sync.interval.ms={args.sync_ms})")

            assert gateway.proc is not None
            pid = gateway.proc.pid
            before = rss_kb(pid)

            async def hold() -> tuple[int, float]:
                clients = await idle_connections(gateway.port, args.idle)
                await asyncio.sleep(2)
                cpu0 = cpu_s(pid)
                await asyncio.sleep(10)
                idle_cpu = (cpu_s(pid) - cpu0) / 10
                held = rss_kb(pid)
                for c in clients:
                    c.close()
                return held, idle_cpu

            held, idle_cpu = asyncio.run(hold())
            print(f"gateway RSS: {before / 1024:.1f} MiB before, {held / 1024:.1f} MiB with {args.idle} idle "
                  f"authenticated client connections ({(held - before) / args.idle:.1f} KiB each); CPU while they "
                  f"idle {idle_cpu * 100:.1f}% of a core")
        finally:
            for g in gateways:
                g.stop()
            for b in brokers:
                b.stop()
                b.kill()
            manager.stop()


if __name__ == "__main__":
    main()
