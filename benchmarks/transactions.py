"""Transactions per second of one confluent-kafka transactional producer against a kaflet broker.

Starts `kaflet broker` on a temporary directory, creates a topic, then runs `--transactions`
transactions of `--records` records each (begin, produce to every partition, commit) and
reports the commit rate and the commit_transaction() latency percentiles; `--abort-every N`
aborts every Nth one instead.

`--compare ROUNDS` instead takes turns, ROUNDS times, between a transactional producer
(`--transactions` transactions of `--records` records of `--record-bytes` bytes) and an
idempotent non-transactional producer sending the same records (then flush), and prints the
records/s of each and their ratio; `--compare-records 100,1000` does so for each size in the
same run (`--compare-total` records a round). `--latency N` measures, over N transactions
(paced to `--latency-rate` records/s if given), the time from commit_transaction() returning to
a read_committed consumer receiving the transaction's last record (p50/p99). Needs the whole transaction path (the coordinator's APIs and
WriteTxnMarkers): against a broker without it, init_transactions fails and the run says so.
`--target tansu` runs against Tansu's memory engine instead, `--target both` against each (the
--compare rounds taking turns between them) and adds kaflet's records/s over Tansu's. Brokers
are stopped by PID at the end. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench import BrokerProcess, cpu_seconds, create_topic, percentile, started_broker
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient


def run(bootstrap: str, transactions: int, records: int, partitions: int, abort_every: int,
        record_bytes: int = 100) -> dict[str, float]:
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
            p.produce(topic, b"x" * record_bytes, partition=i % partitions)
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


def _transactional(bootstrap: str, topic: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "linger.ms": 5})
    p.init_transactions(30)
    return p


class _CompareSide:
    """One broker's side of --compare: a topic, a transactional and an idempotent producer."""

    def __init__(self, bootstrap: str, record_bytes: int, partitions: int) -> None:
        self.topic = create_topic(AdminClient({"bootstrap.servers": bootstrap}), partitions)
        self.partitions = partitions
        self.value = b"x" * record_bytes
        self.txn = _transactional(bootstrap, self.topic)
        self.idem = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})

    def round(self, transactions: int, records: int) -> tuple[float, float]:
        """Seconds the transactional producer took for ``transactions`` of ``records`` records,
        then the idempotent one for as many records (flushed)."""
        topic, value, partitions = self.topic, self.value, self.partitions
        t0 = time.perf_counter()
        for _t in range(transactions):
            self.txn.begin_transaction()
            for i in range(records):
                self.txn.produce(topic, value, partition=i % partitions)
            self.txn.commit_transaction(30)
        t1 = time.perf_counter()
        for i in range(transactions * records):
            while True:
                try:
                    self.idem.produce(topic, value, partition=i % partitions)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    self.idem.poll(0.01)
        if self.idem.flush(60) != 0:
            raise KafkaException("idempotent producer did not deliver every record")
        return t1 - t0, time.perf_counter() - t1


def compare(bootstraps: dict[str, str], rounds: int, transactions: int, records: int, record_bytes: int,
            partitions: int) -> dict[str, dict[str, object]]:
    """Transactional vs idempotent throughput of the same records on each broker (name ->
    bootstrap), taking turns round by round and broker by broker so all see the same machine
    load; records/s summed over the rounds, per broker."""
    sides = {name: _CompareSide(bootstrap, record_bytes, partitions) for name, bootstrap in bootstraps.items()}
    spent = {name: [0.0, 0.0] for name in sides}
    per_round: dict[str, list[float]] = {name: [] for name in sides}
    n = transactions * records
    for _ in range(rounds):
        for name, side in sides.items():
            txn_s, idem_s = side.round(transactions, records)
            spent[name][0] += txn_s
            spent[name][1] += idem_s
            per_round[name].append(idem_s / txn_s)
    total = rounds * n
    return {name: {
        "rounds": rounds, "transactions_per_round": transactions, "records_per_transaction": records,
        "record_bytes": record_bytes, "partitions": partitions,
        "transactional_records_per_s": round(total / txn_s),
        "idempotent_records_per_s": round(total / idem_s),
        "transactional_over_idempotent": round(idem_s / txn_s, 3),
        "per_round_ratio": [round(r, 3) for r in per_round[name]],
    } for name, (txn_s, idem_s) in spent.items()}


def latency(bootstrap: str, transactions: int, records: int, record_bytes: int, fetch_wait_ms: int,
            rate: int = 0) -> dict[str, object]:
    """Per transaction: commit_transaction() returns, then a read_committed consumer (already
    caught up) polls until the transaction's last record arrives. ``rate`` (records/s, 0 = as
    fast as it goes) paces the transactions: each starts no earlier than its records' share of
    the schedule."""
    topic = create_topic(AdminClient({"bootstrap.servers": bootstrap}), 1)
    p = _transactional(bootstrap, topic)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}", "isolation.level": "read_committed",
                  "enable.auto.commit": False, "fetch.wait.max.ms": fetch_wait_ms})
    c.assign([TopicPartition(topic, 0, 0)])
    value = b"x" * record_bytes
    delays: list[float] = []
    start = time.perf_counter()
    try:
        for n in range(transactions):
            if rate:
                wait = start + n * records / rate - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
            last = f"last-{n}".encode()
            p.begin_transaction()
            for _ in range(records - 1):
                p.produce(topic, value, partition=0)
            p.produce(topic, value, key=last, partition=0)
            p.commit_transaction(30)
            t0 = time.perf_counter()
            deadline = t0 + 30
            while True:
                m = c.poll(0.05)
                if m is not None and m.error() is None and m.key() == last:
                    delays.append(time.perf_counter() - t0)
                    break
                if time.perf_counter() > deadline:
                    raise KafkaException(f"transaction {n} never reached the read_committed consumer")
    finally:
        c.close()
    delays.sort()
    return {
        "transactions": transactions, "records_per_transaction": records, "record_bytes": record_bytes,
        "fetch_wait_max_ms": fetch_wait_ms, "records_per_s": rate or "unpaced",
        "commit_to_consume_p50_ms": round(statistics.median(delays) * 1000, 2),
        "commit_to_consume_p99_ms": round((percentile(delays, 99) or 0.0) * 1000, 2),
        "commit_to_consume_max_ms": round(delays[-1] * 1000, 2),
    }


def probe(bootstrap: str, broker_pid: int, rounds: int, transactions: int, records: int, record_bytes: int,
          partitions: int) -> dict[str, object]:
    """Wall time, the broker's CPU time (user + system, /proc) and this client process's (its
    librdkafka threads included) per transaction, against the same records from the idempotent
    producer (then flush), taking turns ROUNDS times: what a transaction's fixed cost is on
    each side."""
    topic = create_topic(AdminClient({"bootstrap.servers": bootstrap}), partitions)
    value = b"x" * record_bytes
    txn = _transactional(bootstrap, topic)
    idem = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    rows: list[dict[str, float]] = []
    for _ in range(rounds):
        c0, t0, p0 = cpu_seconds(broker_pid), time.perf_counter(), time.process_time()
        for _t in range(transactions):
            txn.begin_transaction()
            for i in range(records):
                txn.produce(topic, value, partition=i % partitions)
            txn.commit_transaction(30)
        c1, t1, p1 = cpu_seconds(broker_pid), time.perf_counter(), time.process_time()
        for _t in range(transactions):
            for i in range(records):
                idem.produce(topic, value, partition=i % partitions)
            idem.flush(30)
        c2, t2, p2 = cpu_seconds(broker_pid), time.perf_counter(), time.process_time()
        per = 1000 / transactions
        rows.append({"txn_wall_ms": round((t1 - t0) * per, 3), "txn_broker_cpu_ms": round((c1 - c0) * per, 3),
                     "txn_client_cpu_ms": round((p1 - p0) * per, 3),
                     "idem_wall_ms": round((t2 - t1) * per, 3), "idem_broker_cpu_ms": round((c2 - c1) * per, 3),
                     "idem_client_cpu_ms": round((p2 - p1) * per, 3)})
    return {"rounds": rounds, "transactions_per_round": transactions, "records_per_transaction": records,
            "record_bytes": record_bytes, "partitions": partitions, "per_round": rows,
            **{f"median_{k}": statistics.median(r[k] for r in rows) for k in rows[0]}}


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",")]
    except ValueError:
        raise SystemExit(f"--compare-records wants comma-separated counts, not {text!r}") from None
    if any(n <= 0 for n in sizes):
        raise SystemExit("--compare-records counts must be positive")
    return sizes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=500)
    ap.add_argument("--records", type=int, default=10, help="records per transaction")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--abort-every", type=int, default=0)
    ap.add_argument("--record-bytes", type=int, default=100,
                    help="value size (default 100; the --compare/--latency figures use 1024)")
    ap.add_argument("--compare", type=int, metavar="ROUNDS", default=0,
                    help="transactional vs idempotent throughput, taking turns ROUNDS times")
    ap.add_argument("--compare-records", metavar="N,N,...",
                    help="--compare for each of these records-per-transaction counts (e.g. 100,1000), each "
                         "with --compare-total records a round")
    ap.add_argument("--compare-total", type=int, default=20_000, help="records a round (--compare-records)")
    ap.add_argument("--latency", type=int, metavar="N", default=0,
                    help="commit_transaction() to read_committed delivery over N transactions")
    ap.add_argument("--fetch-wait-ms", type=int, default=500, help="the consumer's fetch.wait.max.ms (--latency)")
    ap.add_argument("--latency-rate", type=int, default=0, metavar="RECORDS_PER_S",
                    help="pace the --latency transactions to this many records/s (default: unpaced)")
    ap.add_argument("--latency-records", type=int, default=0, metavar="N",
                    help="records per transaction of the --latency run (default: --records)")
    ap.add_argument("--probe", type=int, metavar="ROUNDS", default=0,
                    help="wall and broker CPU ms per transaction (--transactions of --records) against the "
                         "idempotent producer's flush of the same records, taking turns ROUNDS times")
    ap.add_argument("--target", choices=["kaflet", "tansu", "both"], default="kaflet",
                    help="the broker(s) to start: both runs each measurement on kaflet and on Tansu's memory "
                         "engine, --compare rounds taking turns between them")
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args()
    sizes = _sizes(args.compare_records) if args.compare_records else []
    targets = ["kaflet", "tansu"] if args.target == "both" else [args.target]
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="kaflet-txn-bench-") as tmp, contextlib.ExitStack() as stack:
        live: dict[str, BrokerProcess] = {}
        for target in targets:
            try:
                live[target] = stack.enter_context(started_broker(target, Path(tmp) / target))
            except (RuntimeError, OSError, ImportError) as exc:
                print(f"[{target}] could not start broker: {exc}", file=sys.stderr)
        if not live:
            return 1
        target = ""
        try:
            results = {name: {} for name in live}
            bootstraps = {name: broker.bootstrap for name, broker in live.items()}
            if args.compare:
                # Both brokers take turns round by round: a busy moment falls on both.
                for size in sizes or [0]:
                    key, n, records = ((f"compare_{size}", max(1, args.compare_total // size), size) if size
                                       else ("compare", args.transactions, args.records))
                    target = "/".join(live)
                    for name, row in compare(bootstraps, args.compare, n, records, args.record_bytes,
                                             args.partitions).items():
                        results[name][key] = row
            for target, broker in live.items():
                result = results[target]
                if args.probe:
                    result["probe"] = probe(broker.bootstrap, broker.proc.pid, args.probe, args.transactions,
                                            args.records, args.record_bytes, args.partitions)
                if args.latency:
                    result["latency"] = latency(broker.bootstrap, args.latency,
                                                args.latency_records or args.records, args.record_bytes,
                                                args.fetch_wait_ms, args.latency_rate)
                if not result:
                    result.update(run(broker.bootstrap, args.transactions, args.records, args.partitions,
                                      args.abort_every, args.record_bytes))
        except KafkaException as exc:
            print(f"[{target}] transactions are not available on this broker: {exc}", file=sys.stderr)
            return 1
    out: dict[str, object] = dict(next(iter(results.values()))) if len(results) == 1 else dict(results)
    if len(results) == 2:
        out["kaflet_over_tansu"] = _ratios(results["kaflet"], results["tansu"])
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


def _ratios(kaflet: dict[str, object], tansu: dict[str, object]) -> dict[str, dict[str, float]]:
    """Per --compare size: kaflet's records/s over Tansu's, transactional and idempotent."""
    out: dict[str, dict[str, float]] = {}
    for key, row in kaflet.items():
        other = tansu.get(key)
        if not key.startswith("compare") or not isinstance(row, dict) or not isinstance(other, dict):
            continue
        out[key] = {field: round(row[field] / other[field], 3)
                    for field in ("transactional_records_per_s", "idempotent_records_per_s") if other[field]}
    return out

if __name__ == "__main__":
    sys.exit(main())
