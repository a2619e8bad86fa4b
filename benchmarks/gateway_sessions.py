"""Gateway logins against max.sessions.per.user: how many are refused, how fast logins go, and
how soon a closed connection's session is free again.

A broker process with one gateway SASL_PLAINTEXT listener (Logi-Kafka's login module) and
``max.sessions.per.user=--limit``; ``--connections`` PLAIN logins of one application are made from
``--threads`` threads and held open; then one is closed and a new login is retried until the
broker has released the session.

    PYTHONPATH=. python benchmarks/gateway_sessions.py [--limit 2000] [--connections 2100] [--threads 8]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from kaflet.cli.broker_process import BrokerProcess
from kaflet.security.sasl_client import SaslRejectedError, run_blocking, sasl_exchange
from tests.support.raw_client import RawClient

JAAS = ('com.didichuxing.datachannel.kafka.security.sasl.plain.PlainLoginModule required '
        'username="admin" password="admin-secret";')


def login(bootstrap: str) -> RawClient | None:
    """An authenticated connection, or None when the broker refused the login."""
    raw = RawClient(bootstrap, timeout=30)
    try:
        run_blocking(sasl_exchange("PLAIN", "0.app_1", "pw"), raw.request)
    except SaslRejectedError:
        raw.close()
        return None
    return raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--connections", type=int, default=2100)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "com.didichuxing.datachannel.kafka.security.authorizer.DidiAuthorizer",
            "cluster.id": "0",
            "max.sessions.per.user": str(args.limit),
            "gateway.default.users": "app_1:pw:false",
            "connections.max.idle.ms": "600000",
        })
        broker.start()
        held: list[RawClient] = []
        refused = 0
        lock = threading.Lock()
        try:
            bootstrap = broker.bootstrap_for("SASL_PLAINTEXT")

            def worker(count: int) -> None:
                nonlocal refused
                for _ in range(count):
                    raw = login(bootstrap)
                    with lock:
                        if raw is None:
                            refused += 1
                        else:
                            held.append(raw)

            share = [args.connections // args.threads + (i < args.connections % args.threads)
                     for i in range(args.threads)]
            start = time.perf_counter()
            threads = [threading.Thread(target=worker, args=(n,)) for n in share]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - start
            print(f"logins attempted {args.connections}, accepted {len(held)}, refused {refused} "
                  f"(max.sessions.per.user={args.limit}); {args.connections / elapsed:.0f} logins/s "
                  f"over {elapsed:.2f} s with {args.threads} threads")
            held.pop().close()
            closed = time.perf_counter()
            attempts = 0
            while True:
                attempts += 1
                raw = login(bootstrap)
                if raw is not None:
                    held.append(raw)
                    break
            print(f"after closing one connection, a new login succeeded {1000 * (time.perf_counter() - closed):.1f} ms "
                  f"later (attempt {attempts})")
        finally:
            for raw in held:
                raw.close()
            try:
                broker.stop(timeout=20)
            finally:
                broker.kill()


if __name__ == "__main__":
    main()
