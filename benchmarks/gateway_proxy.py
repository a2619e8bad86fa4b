"""`kaflet gateway --mode proxy`: what passing every request through the gateway costs, against
the same broker reached directly, in the same run.

Starts a `kaflet manager`, one kaflet broker (SASL/PLAIN users from JAAS, the gateway on) whose
SASL listener is cluster 7's discovery setting in the manager, and one gateway in proxy mode,
all as processes on this machine (sharing its cores with the clients in this process). Both
targets are reached with the same confluent-kafka client and login, the broker at its SASL
listener and the gateway at its bootstrap port. Each round measures, direct then through the
gateway: 1 KiB records produced as fast as the client sends them (acks=1, linger.ms 5) and read
back with one consumer (MB/s), and produce latency paced at 1,000 msg/s (acks=1, linger.ms 0,
librdkafka's produce-to-report time), with the gateway's CPU time per 1,000 of those records
(from /proc, so a loaded machine's waits do not count in it). The figures are the median of
``--rounds``. ``--baseline DIR`` adds a second gateway running the kaflet of another checkout
(such as the main branch's), measured in the same rounds, for a before/after in one run.

    python benchmarks/gateway_proxy.py [--messages 100000] [--rounds 3] [--latency-seconds 10] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
from pathlib import Path

import httpx
from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench import _QUIET, Result, Scenario, consume_phase, create_topic, produce_phase  # noqa: E402
from tests.support.broker_process import BrokerProcess  # noqa: E402
from tests.support.gateway_process import GatewayProcess  # noqa: E402
from tests.support.manager import ManagerProcess, Session  # noqa: E402

USER, PASSWORD = "7.app_bench", "pw-bench"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        f'password="admin-secret" user_admin="admin-secret" user_{USER}="{PASSWORD}";')
SASL = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": USER,
        "sasl.password": PASSWORD}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mb_s(rate: float | None) -> float:
    """MB/s of 1 KiB records at ``rate`` records per second."""
    return (rate or 0.0) * 1024 / 1e6


def cpu_seconds(pid: int | None) -> float:
    """User and system CPU seconds of process ``pid`` so far (0 without one)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cluster_7(work: Path, manager: ManagerProcess) -> BrokerProcess:
    """A broker with SASL/PLAIN users (the gateway on), registered in the manager as cluster 7."""
    broker = BrokerProcess(work / "broker", {
        "broker.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "gateway.url": manager.gateway_url, "cluster.id": "7"}).start()
    try:
        admin_setting(manager, "SD_CLUSTER_ID", "7", broker.bootstrap_for("SASL_PLAINTEXT"))
    except BaseException:
        broker.stop()
        raise
    return broker


def admin_setting(manager: ManagerProcess, kind: str, name: str, value: str) -> None:
    """Write a discovery setting in the manager as its admin."""
    assert manager.admin_password
    with httpx.Client(base_url=manager.url, timeout=30) as http:
        r = Session(http, "admin", manager.admin_password).form("/gateway-configs",
                                                                {"type": kind, "name": name, "value": value})
        if r.status_code != 303:
            raise SystemExit(f"the manager refused {kind} {name}={value}: {r.text[:200]}")


def one_round(target: str, bootstrap: str, args: argparse.Namespace,
              pid: int | None = None) -> tuple[Result, Result, float]:
    """Throughput (produce then consume), paced latency against one target, and the CPU ms
    process ``pid`` spent per 1,000 paced records."""
    client = argparse.Namespace(linger_ms=5, batch_size=1_048_576, compression="none", client_config=SASL)
    admin = AdminClient({"bootstrap.servers": bootstrap, **SASL, **_QUIET})
    throughput = Result(target, "1 KiB throughput", size=1024)
    sc = Scenario("throughput", 1024, 1, "1", args.messages, 120)
    topic = create_topic(admin, 1)
    produce_phase(bootstrap, topic, sc, client, throughput)
    consume_phase(bootstrap, topic, sc, throughput.produced, throughput, SASL)
    latency = Result(target, "paced 1,000 msg/s")
    paced = Scenario("latency", 1024, 1, "1", 1000 * args.latency_seconds, args.latency_seconds + 30, rate=1000,
                     duration_s=args.latency_seconds)
    paced_topic = create_topic(admin, 1)
    cpu_before = cpu_seconds(pid)
    produce_phase(bootstrap, paced_topic, paced, client, latency)
    cpu_ms = (cpu_seconds(pid) - cpu_before) * 1000 / max(latency.produced or 1, 1) * 1000
    for res in (throughput, latency):
        if res.notes:
            print(f"  {target} {res.scenario}: {'; '.join(res.notes)}", file=sys.stderr)
    return throughput, latency, cpu_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-seconds", type=int, default=10)
    parser.add_argument("--baseline", metavar="DIR", help="another kaflet checkout whose gateway is measured too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        manager = ManagerProcess(work / "manager").start()
        broker: BrokerProcess | None = None
        gateway: GatewayProcess | None = None
        baseline: GatewayProcess | None = None
        try:
            broker = cluster_7(work, manager)
            listen = free_port()
            gateway = GatewayProcess(work / "gateway", ["--manager-url", manager.gateway_url, "--mode", "proxy",
                                                        "--listen", f"127.0.0.1:{listen}"])
            gateway.launch().wait_ready()
            targets = {"direct": (broker.bootstrap_for("SASL_PLAINTEXT"), None),
                       "gateway": (gateway.bootstrap, gateway.proc)}
            if args.baseline:
                baseline = GatewayProcess(work / "baseline", ["--manager-url", manager.gateway_url, "--mode", "proxy",
                                                              "--listen", f"127.0.0.1:{free_port()}"],
                                          env={"PYTHONPATH": str(Path(args.baseline).resolve())})
                baseline.launch().wait_ready()
                targets["baseline gateway"] = (baseline.bootstrap, baseline.proc)
            rounds: dict[str, list[tuple[Result, Result, float]]] = {t: [] for t in targets}
            for i in range(args.rounds):
                for target, (bootstrap, proc) in targets.items():
                    rounds[target].append(one_round(target, bootstrap, args, proc.pid if proc else None))
                    t, lat, cpu = rounds[target][-1]
                    print(f"round {i + 1} {target}: produce {mb_s(t.produce_rate):.1f} MB/s, consume "
                          f"{mb_s(t.consume_rate):.1f} MB/s, paced p50 {lat.p50_ms or 0.0:.2f} ms p99 {lat.p99_ms or 0.0:.2f} ms"
                          + (f", gateway CPU {cpu:.0f} ms per 1,000 records" if proc else ""),
                          file=sys.stderr, flush=True)
            median: dict[str, dict[str, float]] = {}
            for target, results in rounds.items():
                median[target] = {
                    "produce": statistics.median(mb_s(t.produce_rate) for t, _, _ in results),
                    "consume": statistics.median(mb_s(t.consume_rate) for t, _, _ in results),
                    "p50": statistics.median(lat.p50_ms or 0.0 for _, lat, _ in results),
                    "p99": statistics.median(lat.p99_ms or 0.0 for _, lat, _ in results),
                    "cpu": statistics.median(cpu for _, _, cpu in results),
                }
            d, g = median["direct"], median["gateway"]
            print(f"1 KiB records, median of {args.rounds} rounds ({args.messages} records each):")
            print(f"  produce: direct {d['produce']:.1f} MB/s, through the gateway {g['produce']:.1f} MB/s "
                  f"({g['produce'] / d['produce']:.2f}x)")
            print(f"  consume: direct {d['consume']:.1f} MB/s, through the gateway {g['consume']:.1f} MB/s "
                  f"({g['consume'] / d['consume']:.2f}x)")
            print(f"  produce latency at 1,000 msg/s: direct p50 {d['p50']:.2f} ms p99 {d['p99']:.2f} ms; through "
                  f"the gateway p50 {g['p50']:.2f} ms p99 {g['p99']:.2f} ms (added at p99: "
                  f"{g['p99'] - d['p99']:.2f} ms); gateway CPU {g['cpu']:.0f} ms per 1,000 records")
            if "baseline gateway" in median:
                b = median["baseline gateway"]
                print(f"  baseline gateway ({args.baseline}): produce {b['produce']:.1f} MB/s, consume "
                      f"{b['consume']:.1f} MB/s, p50 {b['p50']:.2f} ms p99 {b['p99']:.2f} ms, CPU {b['cpu']:.0f} ms "
                      "per 1,000 records")
        finally:
            for process in (gateway, baseline):
                if process is not None:
                    process.stop()
            if broker is not None:
                broker.stop()
            manager.stop()


if __name__ == "__main__":
    main()
