"""Transactions per second of one confluent-kafka transactional producer against a kaflet broker.

Starts `kaflet broker` on a temporary directory, creates a topic, then runs `--transactions`
transactions of `--records` records each (begin, produce to every partition, commit) and
reports the commit rate and the commit_transaction() latency percentiles; `--abort-every N`
aborts every Nth one instead. Needs the whole transaction path (the coordinator's APIs and
WriteTxnMarkers): against a broker without it, init_transactions fails and the run says so.
The broker is stopped by PID at the end. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import create_topic, started_broker
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient


def run(bootstrap: str, transactions: int, records: int, partitions: int, abort_every: int) -> dict[str, float]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = create_topic(admin, partitions)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}", "linger.ms": 0})
    p.init_transactions(30)
    commits: list[float] = []
    aborted = 0
    start = time.perf_counter()
    for n in range(transactions):
        p.begin_transaction()
        for i in range(records):
            p.produce(topic, b"x" * 100, partition=i % partitions)
        t0 = time.perf_counter()
        if abort_every and (n + 1) % abort_every == 0:
            # Flushed first: librdkafka aborting while its AddPartitionsToTxn is still being
            # retried can get a fatal INVALID_TXN_STATE from Kafka too (librdkafka issue #4849).
            p.flush(30)
            p.abort_transaction(30)
            aborted += 1
        else:
            p.commit_transaction(30)
            commits.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    commits.sort()
    return {
        "transactions": transactions, "aborted": aborted, "records_per_transaction": records,
        "partitions": partitions, "seconds": round(elapsed, 3),
        "transactions_per_s": round(transactions / elapsed, 1),
        "commit_p50_ms": round(statistics.median(commits) * 1000, 2),
        "commit_p99_ms": round(commits[min(len(commits) - 1, int(len(commits) * 0.99))] * 1000, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=500)
    ap.add_argument("--records", type=int, default=10, help="records per transaction")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--abort-every", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kaflet-txn-bench-") as tmp, \
            started_broker("kaflet", Path(tmp)) as broker:
        try:
            result = run(broker.bootstrap, args.transactions, args.records, args.partitions, args.abort_every)
        except KafkaException as exc:
            print(f"transactions are not available on this broker: {exc}", file=sys.stderr)
            return 1
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
