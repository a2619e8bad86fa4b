"""What failures cost a kaflet cluster: ZooKeeper and three broker processes on this machine.

Three figures, each on a fresh cluster (brokers 1..3, one ZooKeeper, all stopped by PID at the end):

  loss      acknowledged records lost and records stored twice over --kills random SIGKILLs
            (each followed by a restart) of any broker (leader, follower or controller), with
            an idempotent acks=all confluent-kafka producer, replication factor 3 and
            min.insync.replicas=2. Every partition is read back at the end. Both must be 0.
  failover  time from the SIGKILL of a partition's leader to the first acknowledged produce to
            that partition (necessarily on the new leader), with the zookeeper.session.timeout.ms
            used: a killed broker is noticed when its ZooKeeper session expires, as in Kafka.
  rejoin    time for a restarted follower to rejoin the ISR of a partition that took
            --catch-up-mb MB (acks=all, min.insync.replicas=2) while it was down.

    python benchmarks/cluster_faults.py [--only loss|failover|rejoin] [--kills 10] [--failovers 3]
        [--session-timeout-ms 6000] [--catch-up-mb 100] [--seed 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.cluster import Cluster  # noqa: E402
from tests.support.faults import FAST_FAILOVER, AckedProducer, check_delivery, read_partitions  # noqa: E402

ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]


def _cluster(base: Path, session_timeout_ms: int) -> Cluster:
    overrides = {**FAST_FAILOVER, "zookeeper.session.timeout.ms": str(session_timeout_ms)}
    return Cluster(base, 3, overrides=overrides)  # started by `with`


def _topic(cluster: Cluster, name: str, assignment: list[list[int]]) -> str:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment,
                     config={"min.insync.replicas": "2"})
    admin.create_topics([topic], request_timeout=30)[name].result(timeout=40)
    _wait_in_sync(cluster, name, assignment)
    return name


def _wait_in_sync(cluster: Cluster, topic: str, assignment: list[list[int]], timeout: float = 180) -> None:
    for p, replicas in enumerate(assignment):
        cluster.wait_for_isr(topic, p, replicas, timeout=timeout)


def loss(base: Path, args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    """N random SIGKILLs and restarts under an idempotent acks=all producer; then read back."""
    with _cluster(base, args.session_timeout_ms) as cluster:
        topic = _topic(cluster, "loss", ASSIGNMENT)
        producer = AckedProducer(cluster.bootstrap, topic, len(ASSIGNMENT), rate=args.rate).start()
        try:
            producer.wait_acked(200)
            victims = []
            for i in range(args.kills):
                victim = rng.choice([1, 2, 3])
                role = ("controller" if victim == cluster.controller_id() else
                        "leader" if victim in {cluster.leader(topic, p) for p in range(3)} else "follower")
                victims.append(f"{victim} ({role})")
                cluster.kill(victim)
                time.sleep(rng.uniform(0, 3))
                cluster.start_broker(victim, timeout=60)
                _wait_in_sync(cluster, topic, ASSIGNMENT)
                producer.wait_more(50, timeout=120)
                print(f"  kill {i + 1}/{args.kills}: broker {victims[-1]}, back in every ISR; "
                      f"{producer.log.counts()[0]} acknowledged", flush=True)
                time.sleep(rng.uniform(0, 2))
            delivered = producer.stop()
        finally:
            producer.close()
        stored = read_partitions(cluster.bootstrap, topic, range(len(ASSIGNMENT)))
        verdict = check_delivery(delivered, stored)
        failures = producer.failure_summary()
    return {"kills": args.kills, "victims": victims, "acknowledged": verdict.acked, "stored": verdict.stored,
            "lost": len(verdict.missing), "duplicated": len(verdict.duplicated), "misplaced": len(verdict.misplaced),
            "failed_sends": failures}


def failover(base: Path, args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    """SIGKILL the leader of partition 0 (never the controller, so only one thing fails) and time
    the first acknowledged produce to it; the broker is restarted between trials."""
    times, elected = [], []
    with _cluster(base, args.session_timeout_ms) as cluster:
        for trial in range(args.failovers):
            controller = cluster.wait_for_controller()
            others = [b for b in (1, 2, 3) if b != controller]
            rng.shuffle(others)
            # The preferred replica leads: a broker other than the controller.
            topic = _topic(cluster, f"failover-{trial}", [[*others, controller]])
            leader = cluster.wait_for_leader(topic, 0)
            # Traffic before the kill, so the leader is busy when it dies; and an idle probe
            # that already knows the leader: its one record, sent at the kill, can only be
            # acknowledged by the new leader.
            producer = AckedProducer(cluster.bootstrap, topic, 1, rate=args.rate).start()
            acked: list[float] = []
            probe = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                              "linger.ms": 0, "message.timeout.ms": 300_000, "retry.backoff.ms": 100,
                              "topic.metadata.refresh.interval.ms": 1000})
            try:
                producer.wait_acked(100)
                probe.produce(topic, b"warm-up", partition=0)
                assert probe.flush(30) == 0
                t0 = time.monotonic()
                cluster.kill(leader)
                probe.produce(topic, b"probe", partition=0,
                              on_delivery=lambda err, msg, acked=acked: acked.append(time.monotonic()) if err is None else None)
                new = cluster.wait_for_leader(topic, 0, timeout=args.session_timeout_ms / 1000 * 4 + 30,
                                              exclude=(leader,))
                t_elected = time.monotonic()
                assert probe.flush(300) == 0 and acked, "the probe record was not acknowledged"
                times.append(acked[0] - t0)
                elected.append(t_elected - t0)
                print(f"  trial {trial + 1}: leader {leader} killed, {new} elected after {elected[-1]:.2f} s "
                      f"(seen in ZooKeeper), first acknowledged produce after {times[-1]:.2f} s", flush=True)
                producer.stop()
            finally:
                producer.close()
                del probe
            cluster.start_broker(leader, timeout=60)
            _wait_in_sync(cluster, topic, [[*others, controller]])
            time.sleep(rng.uniform(0, 1))
    return {"session_timeout_ms": args.session_timeout_ms, "trials": len(times),
            "first_produce_s": [round(t, 3) for t in times], "median_s": round(statistics.median(times), 3),
            "elected_s": [round(t, 3) for t in elected]}


def rejoin(base: Path, args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    """A follower is killed, the partition takes --catch-up-mb MB, the follower is restarted:
    time until it is back in the ISR."""
    with _cluster(base, args.session_timeout_ms) as cluster:
        topic = _topic(cluster, "rejoin", [[1, 2, 3]])
        controller = cluster.wait_for_controller()
        follower = 3 if controller != 3 else 2
        cluster.kill(follower)
        cluster.wait_for_isr(topic, 0, sorted({1, 2, 3} - {follower}), timeout=args.session_timeout_ms / 1000 * 4 + 30)
        size = 1024
        count = int(args.catch_up_mb * 1e6 / size)
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000})
        value = b"x" * size
        start = time.monotonic()
        for _ in range(count):
            while True:
                try:
                    p.produce(topic, value=value, partition=0)
                    break
                except BufferError:
                    p.poll(0.01)
        assert p.flush(300) == 0
        produce_s = time.monotonic() - start
        launched = time.monotonic()
        cluster.start_broker(follower, timeout=60)
        listening = time.monotonic()
        cluster.wait_until(lambda: follower in cluster.isr(topic, 0), 600, f"broker {follower} back in the ISR",
                           interval=0.02)
        back = time.monotonic()
    mb = count * size / 1e6
    # The follower starts fetching when the controller's LeaderAndIsr arrives, which may come
    # before the broker logs that it listens; so the time counts from the process's launch
    # (log recovery and registration included) and the rate is a lower bound.
    return {"catch_up_mb": round(mb, 1), "produce_s": round(produce_s, 2),
            "rejoin_s": round(back - launched, 2), "listening_s": round(listening - launched, 2),
            "catch_up_mb_per_s_at_least": round(mb / (back - launched), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["loss", "failover", "rejoin"], action="append")
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--catch-up-mb", type=float, default=100.0)
    parser.add_argument("--rate", type=float, default=300.0, help="producer rate of loss and failover, msgs/s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kaflet-faults-") as tmp:
        for name, run in (("loss", loss), ("failover", failover), ("rejoin", rejoin)):
            if args.only and name not in args.only:
                continue
            print(f"{name}:", flush=True)
            results[name] = run(Path(tmp) / name, args, rng)
            print(f"  {json.dumps(results[name])}", flush=True)
    if "loss" in results:
        r = results["loss"]
        print(f"loss: {r['kills']} SIGKILLs, {r['acknowledged']} acknowledged, {r['lost']} lost, "
              f"{r['duplicated']} duplicated, failed sends {r['failed_sends'] or 0}")
    if "failover" in results:
        r = results["failover"]
        print(f"failover: zookeeper.session.timeout.ms={r['session_timeout_ms']}: first produce on the new leader "
              f"after {', '.join(f'{t:.2f}' for t in r['first_produce_s'])} s (median {r['median_s']:.2f} s)")
    if "rejoin" in results:
        r = results["rejoin"]
        print(f"rejoin: {r['catch_up_mb']} MB behind: back in the ISR {r['rejoin_s']:.2f} s after its launch "
              f"(it reported itself started after {r['listening_s']:.2f} s), at least {r['catch_up_mb_per_s_at_least']} MB/s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
