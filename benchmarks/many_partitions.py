"""Broker CPU and end-to-end latency with one consumer on many partitions and a trickle of data.

One confluent-kafka (librdkafka) consumer is assigned every partition of a topic (1,000 by
default). Two phases are measured: the consumer idling (no records at all), then a producer
sending a trickle of records (10 msg/s by default) round-robin over the partitions. For each the
broker's CPU is read from /proc/<pid>/stat (utime + stime) and reported as a share of one core;
in the trickle phase each record carries its send time, so the consumer gives the end-to-end
latency (produce() to delivery by poll()).

``--scale`` measures what many partitions cost a kaflet broker at rest instead: it creates
``--partitions`` partitions as topics of ``--topic-partitions`` (500) each, one topic at a time,
then reports the broker's open descriptors (and per partition), RSS, Metadata for every topic
(the broker's answer on a raw connection, and librdkafka's ``list_topics``), idle CPU, and the time a clean restart and a SIGKILL restart take until every partition has a
leader again (with the new process's CPU by then). ``--nofile N`` starts the broker under an open file limit of N (``prlimit``).

``--failover`` starts ZooKeeper and three kaflet brokers (tests/support/cluster.py, stopped by PID
at the end), creates ``--partitions`` partitions RF=3 as topics of ``--topic-partitions``, waits
for complete ISRs, then (a) SIGKILLs the controller, (b) SIGKILLs another broker leading about a
third, (c) SIGTERMs (controlled shutdown) a broker leading about a third, restarting the broker
and running a preferred leader election between steps. Each step times, from the signal: the
exit, the registration's removal, the new controller, and the moment every partition the broker
led has a live leader, in ZooKeeper's state znodes and in a survivor's Metadata. See
benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import _QUIET, _raise_interrupt, create_topic, percentile, started_broker
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kaflet.protocol import codec  # noqa: E402
from tests.support.cluster import Cluster  # noqa: E402
from tests.support.faults import FAST_FAILOVER  # noqa: E402
from tests.support.raw_client import RawClient  # noqa: E402

_STAMP = struct.Struct(">d")
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_times(pid: int) -> tuple[float, float]:
    """utime and stime of a process, in seconds (fields 14 and 15 of /proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) may hold spaces; the fields after it start past its ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) / _TICKS, int(fields[12]) / _TICKS


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    return sum(cpu_times(pid))


class RdkafkaConsumer:
    """confluent-kafka (librdkafka): no fetch sessions, Fetch v16 by topic id."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"many-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, **_QUIET})
        self.consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in range(partitions)])

    def poll(self) -> list[bytes]:
        msg = self.consumer.poll(0.1)
        return [msg.value() or b""] if msg is not None and msg.error() is None else []

    def close(self) -> None:
        self.consumer.close()


class KafkaPythonConsumer:
    """kafka-python: incremental fetch sessions (KIP-227), Fetch v12 by topic name."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KafkaTopicPartition

        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        self.consumer.assign([KafkaTopicPartition(topic, p) for p in range(partitions)])
        self.consumer.seek_to_end()

    def poll(self) -> list[bytes]:
        return [r.value or b"" for records in self.consumer.poll(timeout_ms=100).values() for r in records]

    def close(self) -> None:
        self.consumer.close()


CLIENTS = {"librdkafka": RdkafkaConsumer, "kafka-python": KafkaPythonConsumer}


class ConsumerLoop(threading.Thread):
    """Polls the consumer; records the end-to-end latency of each stamped record."""

    def __init__(self, consumer: RdkafkaConsumer | KafkaPythonConsumer) -> None:
        super().__init__(daemon=True)
        self.consumer = consumer
        self.latencies: list[float] = []
        self.received = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            values = self.consumer.poll()
            now = time.time()
            for value in values:
                if len(value) >= _STAMP.size:
                    self.received += 1
                    self.latencies.append(now - _STAMP.unpack_from(value)[0])


def measure(pid: int, seconds: float) -> float:
    """The broker's CPU over `seconds`, as a percentage of one core."""
    start_cpu, start = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - start_cpu) / (time.monotonic() - start) * 100


def trickle(bootstrap: str, topic: str, partitions: int, rate: float, seconds: float, size: int) -> int:
    """Send `rate` stamped records per second round-robin over the partitions; returns how many."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "1", **_QUIET})
    producer.list_topics(topic, timeout=10)
    pad = b"x" * max(0, size - _STAMP.size)
    start = time.monotonic()
    sent = 0
    while (due := start + sent / rate) < start + seconds:
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, _STAMP.pack(time.time()) + pad, partition=sent % partitions)
        producer.poll(0)
        sent += 1
    producer.flush(10)
    return sent


def run(bootstrap: str, pid: int, args: argparse.Namespace) -> dict[str, float | int | None]:
    topic = create_topic(AdminClient({"bootstrap.servers": bootstrap, **_QUIET}), args.partitions, 60.0)
    consumer = CLIENTS[args.client](bootstrap, topic, args.partitions)
    loop = ConsumerLoop(consumer)
    result: dict[str, float | int | None] = {}
    try:
        loop.start()
        time.sleep(args.warmup)  # offsets resolved, fetching in its steady state
        print(f"[many] idle phase ({args.seconds:g} s)", file=sys.stderr, flush=True)
        idle_cpu = measure(pid, args.seconds)
        sender = threading.Thread(target=lambda: result.__setitem__(
            "sent", trickle(bootstrap, topic, args.partitions, args.rate, args.seconds + 2, args.size)))
        sender.start()
        time.sleep(1)
        print(f"[many] trickle phase ({args.seconds:g} s)", file=sys.stderr, flush=True)
        trickle_cpu = measure(pid, args.seconds)
        sender.join()
        time.sleep(2)  # the last records reach the consumer
    finally:
        loop.stop.set()
        loop.join(5)
        consumer.close()
        with contextlib.suppress(Exception):
            admin = AdminClient({"bootstrap.servers": bootstrap, **_QUIET})
            admin.delete_topics([topic], request_timeout=30)[topic].result(60)
    lat = sorted(loop.latencies)
    p50, p99 = percentile(lat, 50), percentile(lat, 99)
    result.update({
        "idle_cpu_pct": idle_cpu,
        "trickle_cpu_pct": trickle_cpu,
        "received": loop.received,
        "p50_ms": p50 * 1000 if p50 is not None else None,
        "p99_ms": p99 * 1000 if p99 is not None else None,
        "max_ms": lat[-1] * 1000 if lat else None,
    })
    return result


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def leading(admin: AdminClient) -> tuple[int, int]:
    """(partitions with a leader, partitions) over every topic but the internal ones."""
    md = admin.list_topics(timeout=60)
    parts = [p for name, t in md.topics.items() if not name.startswith("__") for p in t.partitions.values()]
    return sum(1 for p in parts if p.leader >= 0), len(parts)


def wait_all_leading(admin: AdminClient, expected: int, timeout: float) -> float:
    """Seconds until every one of ``expected`` partitions has a leader."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            led, total = leading(admin)
            if total >= expected and led == total:
                return time.monotonic() - start
        except Exception:  # noqa: BLE001 - not answering yet
            pass
        time.sleep(0.2)
    raise RuntimeError(f"not every partition led after {timeout:g} s")


def _spy_pid(pid: int, out: Path, name: str) -> subprocess.Popen[bytes]:
    """py-spy record (raw stacks, 100 Hz, every thread, idle ones too: a restart's time is
    mostly system calls) of one process until the caller interrupts it."""
    out.mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    deadline = time.monotonic() + 5
    # A just launched broker may still be its command prefix (prlimit) or an interpreter that
    # has not loaded its libpython yet, which py-spy cannot attach to.
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if "python" in os.readlink(f"/proc/{pid}/exe") and "libpython" in Path(f"/proc/{pid}/maps").read_text():
                break
        time.sleep(0.01)
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "100", "--nonblocking", "--idle",
                             "--threads", "--format", "raw", "-o", str(out / f"{name}.txt")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _unspy(spy: subprocess.Popen[bytes] | None) -> None:
    if spy is None:
        return
    spy.send_signal(signal.SIGINT)  # py-spy writes its profile on SIGINT
    try:
        spy.wait(60)
    except subprocess.TimeoutExpired:
        spy.kill()
        spy.wait()


def scale(workdir: Path, args: argparse.Namespace) -> dict[str, float | int]:
    """Create the partitions topic by topic, then measure the broker at rest and its restarts."""
    from kaflet.cli.broker_process import BrokerProcess

    spy: subprocess.Popen[bytes] | None = None

    prefix = ["prlimit", f"--nofile={args.nofile}:{args.nofile}", "--"] if args.nofile else []
    broker = BrokerProcess(workdir / "data", {}, own_session=True,
                           command_prefix=prefix, log_path=workdir / "broker.log")
    out: dict[str, float | int] = {}
    try:
        start = time.monotonic()
        broker.start(timeout=120)
        out["start_s"] = time.monotonic() - start
        assert broker.pid is not None
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **_QUIET})
        out["fds_empty"] = open_files(broker.pid)
        times = []
        topics = args.partitions // args.topic_partitions
        # Creating is mostly the kernel's work (files, fsyncs), and how much depends on the file
        # system's state (see benchmarks/README.md): the user and system CPU tell them apart.
        user0, system0 = cpu_times(broker.pid)
        for i in range(topics):
            if args.profile and i == topics // 2:  # the later half of the topics
                spy = _spy_pid(broker.pid, args.profile, "create-later-half")
            t0 = time.monotonic()
            topic = f"scale-{i}"
            admin.create_topics([NewTopic(topic, args.topic_partitions, 1)],
                                request_timeout=300)[topic].result(300)
            times.append(time.monotonic() - t0)
            print(f"[scale] {(i + 1) * args.topic_partitions} partitions, last topic {times[-1]:.2f} s, "
                  f"{open_files(broker.pid)} open files", file=sys.stderr, flush=True)
        _unspy(spy)
        spy = None
        total = len(times) * args.topic_partitions
        user1, system1 = cpu_times(broker.pid)
        out.update(partitions=total, create_first_s=times[0], create_last_s=times[-1],
                   create_total_s=sum(times), create_median_s=statistics.median(times),
                   create_user_s=user1 - user0, create_system_s=system1 - system0)
        wait_all_leading(admin, total, 300)
        time.sleep(5)  # flushes of new segments, checkpoints
        out["fds"] = open_files(broker.pid)
        out["fds_per_partition"] = (out["fds"] - out["fds_empty"]) / total
        out["rss_mb"] = rss_mb(broker.pid)
        leading(admin)  # a warm client
        meta = []
        for _ in range(3):
            t0 = time.monotonic()
            assert leading(admin)[1] >= total
            meta.append(time.monotonic() - t0)
        out["metadata_all_s"] = sorted(meta)[1]
        out["metadata_answer_s"], out["metadata_answer_bytes"] = metadata_answer(broker.bootstrap)
        out["idle_cpu_pct"] = measure(broker.pid, args.seconds)
        for kind in ("clean", "sigkill"):
            t0 = time.monotonic()
            if kind == "clean":
                broker.stop(timeout=300)
            else:
                broker.kill()
            out[f"{kind}_stop_s"] = time.monotonic() - t0
            t0 = time.monotonic()
            broker.launch()
            if args.profile:
                assert broker.proc is not None
                spy = _spy_pid(broker.proc.pid, args.profile, f"{kind}-restart")
            broker.wait_started(timeout=600)
            listening = time.monotonic() - t0
            admin = AdminClient({"bootstrap.servers": broker.bootstrap, **_QUIET})
            out[f"{kind}_restart_s"] = listening + wait_all_leading(admin, total, 600)
            assert broker.pid is not None
            # The new process's CPU so far: less sensitive than the wall time to what else runs.
            user, system = cpu_times(broker.pid)
            out[f"{kind}_cpu_s"], out[f"{kind}_user_s"] = user + system, user
            if args.profile:
                time.sleep(args.seconds)  # what the broker still does after every partition leads
                _unspy(spy)
                spy = None
            assert broker.pid is not None
            out[f"{kind}_fds"] = open_files(broker.pid)
            out[f"{kind}_rss_mb"] = rss_mb(broker.pid)
    finally:
        _unspy(spy)
        broker.stop(timeout=300)
        broker.kill()
    return out


# -- --failover: three brokers, many partitions RF=3, a broker lost ---------------------------

Partition = tuple[str, int]


def metadata_answer(bootstrap: str, rounds: int = 7) -> tuple[float, int]:
    """The broker's part of a Metadata request for every topic (v12, as librdkafka sends it):
    the median over ``rounds`` of the time from sending it to the answer's last byte on a raw
    connection, and the answer's size. librdkafka's ``list_topics`` adds its own parsing and
    the binding's objects, which grow faster than the partitions (about 10 ms at 5,000
    partitions and 75 ms at 20,000 here, where the broker answered in 0.2 and 0.5 ms)."""
    raw = RawClient(bootstrap, 60)
    try:
        req = codec.request_class(3)(topics=None, allow_auto_topic_creation=False,
                                     include_topic_authorized_operations=False)
        frame = raw.frame(3, 12, bytes(req.encode(version=12)))
        times = []
        size = 0
        for _ in range(rounds + 1):  # the first answer encodes what the later ones reuse
            t0 = time.perf_counter()
            raw.send_raw(frame)
            size = len(raw.read_frame())
            times.append(time.perf_counter() - t0)
        return statistics.median(times[1:]), size
    finally:
        raw.close()


class View:
    """One Metadata answer over every topic but the internal ones: leader, ISR size and
    preferred replica of each partition."""

    def __init__(self, admin: AdminClient) -> None:
        md = admin.list_topics(timeout=60)
        self.leader: dict[Partition, int] = {}
        self.isr: dict[Partition, int] = {}
        self.preferred: dict[Partition, int] = {}
        for name, t in md.topics.items():
            if name.startswith("__"):
                continue
            for p in t.partitions.values():
                self.leader[(name, p.id)] = p.leader
                self.isr[(name, p.id)] = len(p.isrs)
                self.preferred[(name, p.id)] = p.replicas[0] if p.replicas else -1

    def led_by(self, broker: int) -> set[Partition]:
        return {tp for tp, leader in self.leader.items() if leader == broker}

    def counts(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for leader in self.leader.values():
            out[leader] = out.get(leader, 0) + 1
        return dict(sorted(out.items()))


def _poll_view(admin: AdminClient, done: Callable[[View], bool], timeout: float, what: str,
               interval: float = 0.2) -> tuple[float, View]:
    """Seconds until a Metadata answer satisfies ``done``, and that answer."""
    start = time.monotonic()
    last = ""
    while time.monotonic() - start < timeout:
        try:
            view = View(admin)
            if done(view):
                return time.monotonic() - start, view
            last = f"leaders per broker {view.counts()}"
        except Exception as exc:  # noqa: BLE001 - a broker not answering yet
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(interval)
    raise RuntimeError(f"{what}: not after {timeout:g} s (last: {last})")


class ZkWatch(threading.Thread):
    """Reads ZooKeeper from a broker's loss on: when its registration (/brokers/ids) goes, when
    /controller names a live broker, and when the state znode of each partition it led names
    another leader. The state znodes are read asynchronously, only those not yet moved; after a
    SIGKILL only once the registration has gone (the controller acts on nothing earlier), in a
    controlled shutdown (``early``) from the start."""

    def __init__(self, cluster: Cluster, victim: int, partitions: set[Partition], t0: float,
                 timeout: float, early: bool = False) -> None:
        super().__init__(daemon=True)
        self.cluster, self.victim, self.t0, self.timeout = cluster, victim, t0, timeout
        self.early = early
        self.remaining = set(partitions)
        self.unregistered: float | None = None
        self.controller: float | None = None
        self.controller_id: int | None = None
        self.all_moved: float | None = None
        self.error = ""
        self.stop = threading.Event()

    def _read(self, tps: list[Partition]) -> list[tuple[Partition, tuple[bytes, Any]]]:
        """The state znodes by ZooKeeper's multiRead, as the controller reads them: one kazoo
        request per znode would cost this process (and the machine the brokers share) seconds
        per sweep at 10,000 partitions."""
        from kaflet.metadata import zkdata
        from kaflet.metadata.zookeeper import MULTI_READ_PATHS, _MultiRead

        zk = self.cluster.zk
        root = zk.chroot or ""
        pending = []
        for i in range(0, len(tps), MULTI_READ_PATHS):
            chunk = tps[i:i + MULTI_READ_PATHS]
            result = zk.handler.async_result()
            zk._call(_MultiRead([root + zkdata.partition_state_path(*tp) for tp in chunk]), result)
            pending.append((chunk, result))
        out = []
        for chunk, result in pending:
            for tp, got in zip(chunk, result.get(timeout=30), strict=True):
                if isinstance(got, BaseException):
                    raise got
                out.append((tp, got))
        return out

    def run(self) -> None:
        from kaflet.metadata import zkdata

        try:
            while not self.stop.is_set() and time.monotonic() - self.t0 < self.timeout:
                now = time.monotonic() - self.t0
                if self.unregistered is None and self.victim not in self.cluster.registered_brokers():
                    self.unregistered = now
                if self.controller is None:
                    cid = self.cluster.controller_id()
                    if cid is not None and cid != self.victim and self.cluster.brokers[cid].alive:
                        self.controller, self.controller_id = now, cid
                if (self.early or self.unregistered is not None) and self.remaining:
                    for tp, (data, stat) in self._read(sorted(self.remaining)):
                        state = zkdata.parse_partition_state(data, stat.version)
                        if state.leader not in (zkdata.NO_LEADER, self.victim):
                            self.remaining.discard(tp)
                    if not self.remaining:
                        self.all_moved = time.monotonic() - self.t0
                if None not in (self.controller, self.all_moved, self.unregistered):
                    return
                time.sleep(0.05)
        except Exception as exc:  # noqa: BLE001 - reported with the figures
            self.error = f"{type(exc).__name__}: {exc}"


def _rejoin(cluster: Cluster, admin: AdminClient, broker: int, total: int, timeout: float) -> float:
    """Start ``broker`` again, wait until every ISR is complete, then run a preferred leader
    election so that it leads its third again; returns the seconds all that took."""
    from confluent_kafka import ElectionType

    start = time.monotonic()
    cluster.start_broker(broker, timeout=timeout)
    _poll_view(admin, lambda v: len(v.isr) >= total and min(v.isr.values()) == 3, timeout,
               f"broker {broker} back in every ISR", interval=1.0)
    tps = [TopicPartition(t, p) for t, p in View(admin).leader]
    admin.elect_leaders(ElectionType.PREFERRED, tps).result(timeout)
    _poll_view(admin, lambda v: all(v.leader[tp] == v.preferred[tp] for tp in v.leader), timeout,
               "every partition led by its preferred replica", interval=1.0)
    return time.monotonic() - start


def row_name(how: str, victim: int) -> str:
    return f"{how}-{victim}-{time.strftime('%H%M%S')}"


def _spy(cluster: Cluster, victim: int | None, out: Path, name: str) -> list[subprocess.Popen[bytes]]:
    """py-spy record (collapsed stacks, 100 Hz, without pausing them) of every running broker
    but ``victim``, from now until the caller interrupts it."""
    out.mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return [subprocess.Popen([spy, "record", "--pid", str(b.pid), "--rate", "100", "--nonblocking",
                              "--format", "raw", "-o", str(out / f"{name}-broker{bid}.txt")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for bid, b in cluster.brokers.items() if bid != victim and b.pid is not None]


def _lose(cluster: Cluster, admin: AdminClient, victim: int, how: str, args: argparse.Namespace,
          total: int) -> dict[str, Any]:
    """SIGKILL (``how`` "kill") or SIGTERM ("stop") ``victim``; time the figures of one step."""
    before = View(admin)
    led = before.led_by(victim)
    limit = args.session_timeout_ms / 1000 * 4 + 300
    t0 = time.monotonic()
    watch = ZkWatch(cluster, victim, led, t0, limit, early=how == "stop")
    exited: list[float] = []
    stopper: threading.Thread | None = None
    if how == "kill":
        cluster.kill(victim)
        exited.append(time.monotonic() - t0)
    else:
        def stop() -> None:
            cluster.stop(victim, timeout=limit)
            exited.append(time.monotonic() - t0)
        stopper = threading.Thread(target=stop, daemon=True)
        stopper.start()
    watch.start()
    # A stopping broker is profiled too (its shutdown is part of the step); py-spy ends with it.
    spies = _spy(cluster, victim if how == "kill" else None, args.profile, row_name(how, victim)) if args.profile else []
    try:
        # Every partition the victim led is led by a live broker in a survivor's Metadata (the
        # victim, once dead or stopping, is not asked: librdkafka asks a broker it reaches).
        metadata_s, after = _poll_view(
            admin, lambda v: len(v.leader) >= total and all(v.leader[tp] not in (-1, victim) for tp in led),
            limit, f"every partition of broker {victim} led elsewhere", interval=args.probe_interval)
        watch.join(limit)
        if stopper is not None:
            stopper.join(limit)
    finally:
        watch.stop.set()
        for spy in spies:
            spy.send_signal(signal.SIGINT)  # py-spy writes its profile on SIGINT
        for spy in spies:
            try:
                spy.wait(60)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
    if watch.error or watch.all_moved is None:
        raise RuntimeError(f"ZooKeeper watch: {watch.error or 'did not see every partition move'}")
    return {"victim": victim, "led": len(led), "exit_s": exited[0] if exited else None,
            "unregistered_s": watch.unregistered, "controller_s": watch.controller,
            "controller": watch.controller_id, "zk_all_led_s": watch.all_moved,
            "metadata_all_led_s": metadata_s, "leaders_after": after.counts()}


def failover(workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Create the partitions on three brokers, then (a) SIGKILL the controller, (b) SIGKILL
    another broker leading a third, (c) SIGTERM one leading a third; restarts between steps."""
    overrides = {**FAST_FAILOVER, "zookeeper.session.timeout.ms": str(args.session_timeout_ms),
                 # The steps move leaderships themselves; a rebalance in the middle would blur them.
                 "auto.leader.rebalance.enable": "false"}
    out: dict[str, Any] = {}
    with Cluster(workdir, 3, overrides=overrides) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **_QUIET})
        t0 = time.monotonic()
        for i in range(args.partitions // args.topic_partitions):
            topic = f"failover-{i}"
            admin.create_topics([NewTopic(topic, args.topic_partitions, 3)],
                                request_timeout=300)[topic].result(300)
            print(f"[failover] {(i + 1) * args.topic_partitions} partitions, "
                  f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        total = args.partitions // args.topic_partitions * args.topic_partitions
        _poll_view(admin, lambda v: len(v.leader) >= total and min(v.isr.values()) == 3
                   and -1 not in v.leader.values(), 600, "every ISR complete", interval=1.0)
        out.update(partitions=total, create_s=time.monotonic() - t0,
                   fds={bid: open_files(b.pid) for bid, b in cluster.brokers.items() if b.pid},
                   rss_mb={bid: round(rss_mb(b.pid)) for bid, b in cluster.brokers.items() if b.pid})
        print(f"[failover] created and in sync after {out['create_s']:.0f} s; open files {out['fds']}",
              file=sys.stderr, flush=True)
        steps = []
        chosen = args.steps.split(",")
        for key, step, how in (("controller", "controller SIGKILL", "kill"), ("kill", "leader SIGKILL", "kill"),
                               ("term", "leader SIGTERM", "stop")):
            if key not in chosen:
                continue
            controller = cluster.wait_for_controller(timeout=120)
            counts = View(admin).counts()
            victim = controller if step.startswith("controller") else max(
                (b for b in cluster.brokers if b != controller), key=lambda b: counts.get(b, 0))
            print(f"[failover] {step} of broker {victim} (controller {controller}, leaders {counts})",
                  file=sys.stderr, flush=True)
            row = _lose(cluster, admin, victim, how, args, total)
            row["step"] = step
            print(f"[failover] {row}", file=sys.stderr, flush=True)
            row["rejoin_s"] = _rejoin(cluster, admin, victim, total, 900)
            steps.append(row)
        out["steps"] = steps
    return out


def print_failover(r: dict[str, Any], args: argparse.Namespace) -> None:
    def s(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    print(f"kaflet: 3 brokers, {r['partitions']} partitions RF=3 in topics of {args.topic_partitions}, "
          f"zookeeper.session.timeout.ms={args.session_timeout_ms}")
    print(f"  created and in sync in {r['create_s']:.0f} s; open files {r['fds']}, RSS MB {r['rss_mb']}")
    print("  seconds from the signal: | step | broker (leads) | exits | unregistered | new controller "
          "| all led, ZooKeeper | all led, Metadata | restart to balanced |")
    for row in r["steps"]:
        ctl = f"{s(row['controller_s'])} ({row['controller']})" if row["step"].startswith("controller") else "-"
        print(f"  | {row['step']} | {row['victim']} ({row['led']}) | {s(row['exit_s'])} | {s(row['unregistered_s'])} "
              f"| {ctl} | {s(row['zk_all_led_s'])} | {s(row['metadata_all_led_s'])} | {row['rejoin_s']:.0f} |")


def _fmt(v: float | int | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--target", choices=["kaflet", "tansu"], help="start the broker ourselves")
    where.add_argument("--bootstrap", metavar="HOST:PORT", help="an already running broker (needs --pid)")
    where.add_argument("--failover", action="store_true",
                       help="ZooKeeper and 3 kaflet brokers, partitions RF=3: a broker lost (see above)")
    p.add_argument("--pid", type=int, help="the running broker's process id (with --bootstrap)")
    p.add_argument("--partitions", type=int, default=1000)
    p.add_argument("--client", choices=sorted(CLIENTS), default="librdkafka",
                   help="the consumer: librdkafka (sessionless) or kafka-python (fetch sessions)")
    p.add_argument("--rate", type=float, default=10.0, help="records per second in the trickle phase")
    p.add_argument("--size", type=int, default=100, help="record value size in bytes")
    p.add_argument("--seconds", type=float, default=30.0, help="length of each measured phase")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds after assign() before measuring")
    p.add_argument("--scale", action="store_true",
                   help="kaflet at rest: descriptors, RSS, create and restart times (see above)")
    p.add_argument("--topic-partitions", type=int, default=500, help="--scale: partitions per topic")
    p.add_argument("--nofile", type=int, default=0, help="--scale: the broker's open file limit (0: inherited)")
    p.add_argument("--session-timeout-ms", type=int, default=6000, help="--failover: zookeeper.session.timeout.ms")
    p.add_argument("--steps", default="controller,kill,term",
                   help="--failover: which steps, of controller (SIGKILL the controller), kill (SIGKILL "
                        "another leader), term (SIGTERM another leader)")
    p.add_argument("--keep", action="store_true", help="--failover: keep the brokers' logs and data")
    p.add_argument("--probe-interval", type=float, default=0.1, metavar="SECONDS",
                   help="--failover: pause between the Metadata requests (each of every partition) that time "
                        "the clients' view of a step")
    p.add_argument("--profile", type=Path, metavar="DIR",
                   help="--failover: py-spy record every surviving broker during each step into DIR; "
                        "--scale: the broker while it creates the later half of the topics and "
                        "during each restart (until every partition leads, then --seconds more)")
    args = p.parse_args(argv)
    if args.bootstrap and not args.pid:
        p.error("--bootstrap needs --pid (the broker's CPU is read from /proc/<pid>/stat)")
    signal.signal(signal.SIGTERM, _raise_interrupt)  # clean-up (the broker we started) as on Ctrl-C
    workdir = Path(tempfile.mkdtemp(prefix="kaflet-many-"))
    if args.failover:
        try:
            print_failover(failover(workdir, args), args)
        finally:
            if args.keep:
                print(f"kept {workdir} (broker logs, data)", file=sys.stderr)
            else:
                shutil.rmtree(workdir, ignore_errors=True)
        return 0
    if args.scale:
        if args.target != "kaflet":
            p.error("--scale starts a kaflet broker itself: use --target kaflet")
        try:
            r = scale(workdir, args)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        limit = f", open file limit {args.nofile}" if args.nofile else ""
        print(f"kaflet: {r['partitions']} partitions in topics of {args.topic_partitions}{limit}")
        print(f"  create               first topic {r['create_first_s']:.2f} s, last {r['create_last_s']:.2f} s, "
              f"median {r['create_median_s']:.2f} s, all {r['create_total_s']:.1f} s "
              f"(broker CPU user {r['create_user_s']:.1f} s, system {r['create_system_s']:.1f} s)")
        print(f"  open files           {r['fds']} ({r['fds_empty']} before any topic): "
              f"{r['fds_per_partition']:.3f} per partition")
        print(f"  RSS                  {r['rss_mb']:.0f} MB")
        print(f"  Metadata (all)       broker's answer {r['metadata_answer_s'] * 1000:.1f} ms "
              f"({r['metadata_answer_bytes'] / 1e6:.2f} MB), librdkafka's list_topics {r['metadata_all_s'] * 1000:.0f} ms")
        print(f"  broker CPU idle      {r['idle_cpu_pct']:.1f} % of one core")
        for kind in ("clean", "sigkill"):
            print(f"  {kind} restart {'':<{7 - len(kind)}}    stop {r[f'{kind}_stop_s']:.1f} s, until every partition "
                  f"leads {r[f'{kind}_restart_s']:.1f} s (broker CPU {r[f'{kind}_cpu_s']:.1f} s, "
                  f"user {r[f'{kind}_user_s']:.1f} s); then "
                  f"{r[f'{kind}_fds']} open files, "
                  f"RSS {r[f'{kind}_rss_mb']:.0f} MB")
        return 0
    try:
        if args.bootstrap:
            target, result = "broker", run(args.bootstrap, args.pid, args)
        else:
            target = args.target
            with started_broker(target, workdir) as broker:
                result = run(broker.bootstrap, broker.proc.pid, args)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{target}: {args.partitions} partitions, one {args.client} consumer (assign), trickle {args.rate:g} msg/s "
          f"of {args.size} B, {args.seconds:g} s per phase")
    print(f"  broker CPU idle      {_fmt(result['idle_cpu_pct'], '.1f')} % of one core")
    print(f"  broker CPU trickle   {_fmt(result['trickle_cpu_pct'], '.1f')} % of one core")
    print(f"  end-to-end latency   p50 {_fmt(result['p50_ms'], '.1f')} ms, p99 {_fmt(result['p99_ms'], '.1f')} ms, "
          f"max {_fmt(result['max_ms'], '.1f')} ms ({result['received']}/{result.get('sent', '?')} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
