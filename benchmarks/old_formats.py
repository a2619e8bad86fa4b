"""What message-format conversion costs: kcat as a modern client against kcat as a Kafka 0.9 client.

Starts a kaflet broker, writes `--records` records of `--size` bytes with confluent-kafka (one
topic per codec), then times kcat reading each topic from the start to its end, as a modern
client (Fetch v4+, batches sent as stored) and with `api.version.request=false
broker.version.fallback=0.9.0` (Fetch v1: every batch down-converted to magic 0); then kcat
producing the same records both ways (Produce v1: message sets up-converted). Records/s are
kcat's whole run, start-up included. The broker is stopped by PID. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import _QUIET, create_topic, started_broker
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

OLD = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.9.0"]


def fill(bootstrap: str, topic: str, codec: str, records: int, size: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20, **_QUIET})
    value = b"x" * size
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value=value)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        sys.exit("records left undelivered")


def timed_kcat(args: list[str], stdin: str | None = None) -> tuple[float, str]:
    start = time.monotonic()
    out = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=600)
    elapsed = time.monotonic() - start
    if out.returncode:
        sys.exit(f"kcat failed: {out.stderr[-500:]}")
    return elapsed, out.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--codecs", default="none,lz4")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, started_broker("kaflet", Path(tmp)) as broker:
        bootstrap = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap, **_QUIET})
        for codec in args.codecs.split(","):
            topic = create_topic(admin, 1)
            fill(bootstrap, topic, codec, args.records, args.size)
            for name, extra in (("modern (Fetch v4+)", []), ("0.9.0 (Fetch v1)", OLD)):
                elapsed, out = timed_kcat(["-b", bootstrap, *extra, "-C", "-t", topic, "-o", "beginning", "-e",
                                           "-q", "-f", "%o\n"])
                n = len(out.splitlines())
                print(f"consume {codec:6s} {name:20s} {n} records in {elapsed:.2f} s: "
                      f"{n / elapsed / 1000:.0f}k records/s", flush=True)
            lines = "".join("x" * args.size + "\n" for _ in range(args.records))
            for name, extra in (("modern (Produce v3+)", []), ("0.9.0 (Produce v1)", OLD)):
                topic = create_topic(admin, 1)
                elapsed, _ = timed_kcat(["-b", bootstrap, *extra, "-P", "-t", topic, "-z", codec], lines)
                print(f"produce {codec:6s} {name:20s} {args.records} records in {elapsed:.2f} s: "
                      f"{args.records / elapsed / 1000:.0f}k records/s", flush=True)


if __name__ == "__main__":
    main()
