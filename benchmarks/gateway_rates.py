"""`kaflet gateway --mode proxy`: how closely the manager's request rates hold a real producer.

Starts a `kaflet manager`, one kaflet broker registered as cluster 7 and one gateway in proxy
mode (`gateway.sync.interval.ms` 1 s, its `/metrics` on), all as processes on this machine.
For each setting in turn (`appId-rate`, then an `sp-limit` for the application, then `ip-rate`)
it writes the rate in the manager, waits until the gateway holds it, and runs a confluent-kafka
producer through the gateway for ``--seconds`` (linger.ms 0, acks=1, so it sends requests as fast
as it is let). The requests it sent are read from the gateway's
``kaflet_gateway_app_requests_total`` at the start and the end, and reported per second against
the setting, over the whole run and after its first ``--settle`` seconds (a new client may send
about `degradation.burst.ms` worth at once). The setting is then raised to twice
its value in the manager, with the producer still running, and the rate after the next sync is
reported too. Nothing is asserted.

    python benchmarks/gateway_rates.py [--rate 40] [--seconds 20] [--settle 5]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench import _QUIET, create_topic  # noqa: E402
from benchmarks.gateway_proxy import SASL, USER, admin_setting, cluster_7, free_port  # noqa: E402
from tests.support.broker_process import BrokerProcess  # noqa: E402
from tests.support.gateway_process import GatewayProcess  # noqa: E402
from tests.support.manager import ManagerProcess  # noqa: E402

APP = USER.split(".", 1)[1]
SYNC_MS = 1000


def app_requests(metrics_url: str) -> float:
    """The gateway's count of the application's requests so far."""
    text = httpx.get(metrics_url, timeout=10).text
    m = re.search(r'^kaflet_gateway_app_requests_total\{[^}]*app="' + APP + r'"[^}]*\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


class Producing:
    """A producer thread sending 100-byte records through ``bootstrap`` until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, **SASL, **_QUIET, "linger.ms": 0, "acks": "1",
                                  "queue.buffering.max.messages": 1000})
        self.topic = topic
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        payload = b"x" * 100
        while not self.stopped.is_set():
            try:
                self.producer.produce(self.topic, payload)
            except BufferError:
                self.producer.poll(0.01)
            self.producer.poll(0)

    def __enter__(self) -> Producing:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(10)
        self.producer.flush(30)


def measure(metrics_url: str, seconds: float, settle: float) -> tuple[float, float]:
    """Requests/s over ``seconds`` and over the part after ``settle`` seconds."""
    start = app_requests(metrics_url)
    began = time.monotonic()
    time.sleep(settle)
    settled = app_requests(metrics_url)
    settled_at = time.monotonic()
    time.sleep(max(seconds - settle, 0.1))
    end = app_requests(metrics_url)
    ended = time.monotonic()
    return (end - start) / (ended - began), (end - settled) / (ended - settled_at)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=40, help="requests per second to set")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--settle", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        manager = ManagerProcess(work / "manager").start()
        broker: BrokerProcess | None = None
        gateway: GatewayProcess | None = None
        try:
            broker = cluster_7(work, manager)
            metrics_port = free_port()
            gateway = GatewayProcess(work / "gateway", ["--manager-url", manager.gateway_url, "--mode", "proxy",
                                                        "--listen", f"127.0.0.1:{free_port()}",
                                                        "--metrics-listener", f"http://127.0.0.1:{metrics_port}"],
                                     {"gateway.sync.interval.ms": str(SYNC_MS)})
            gateway.launch().wait_ready()
            metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
            topic = create_topic(AdminClient({"bootstrap.servers": gateway.bootstrap, **SASL, **_QUIET}), 1)
            cases = [("appId-rate", "SD_APP_RATE", "appId-rate"), ("sp-limit", "SD_SP_RATE", APP),
                     ("ip-rate", "SD_IP_RATE", "ip-rate")]
            for label, kind, name in cases:
                admin_setting(manager, kind, name, str(args.rate))
                time.sleep(3 * SYNC_MS / 1000)
                with Producing(gateway.bootstrap, topic):
                    whole, steady = measure(metrics_url, args.seconds, args.settle)
                    print(f"{label} {args.rate}/s: {whole:.1f} requests/s over {args.seconds:.0f} s "
                          f"({whole / args.rate:.2f}x), {steady:.1f}/s after the first {args.settle:.0f} s "
                          f"({steady / args.rate:.2f}x)", flush=True)
                    admin_setting(manager, kind, name, str(2 * args.rate))
                    time.sleep(3 * SYNC_MS / 1000)
                    _, raised = measure(metrics_url, args.seconds / 2, args.settle / 2)
                    print(f"  raised to {2 * args.rate}/s while producing: {raised:.1f}/s "
                          f"({raised / (2 * args.rate):.2f}x)", flush=True)
                # The next case starts from no limit of this kind: the highest one, far above.
                admin_setting(manager, kind, name, str(1_000_000))
        finally:
            if gateway is not None:
                gateway.stop()
            if broker is not None:
                broker.stop()
            manager.stop()


if __name__ == "__main__":
    main()
