"""A ZooKeeper-mode kaflet cluster of real processes, for cluster and fault tests.

``Cluster`` starts a ZooKeeper (a standalone server or an ensemble, its own unless one is
given) and N broker processes with ``broker.id`` 1..N, ``zookeeper.connect`` on the chroot
``/kaflet``, their own log dirs and port-0 listeners. It reads the cluster's state straight from
ZooKeeper with kazoo, in Kafka's layout (``/controller``, ``/brokers/ids``,
``/brokers/topics/<t>/partitions/<p>/state``), waits for conditions with a failure message that
shows the last state, and kills, stops and restarts brokers by id. :meth:`Cluster.close` stops
every process by PID, whatever state the test left it in::

    with Cluster(tmp_path, brokers=3) as cluster:
        old = cluster.wait_for_controller()
        cluster.kill(old)
        cluster.wait_for_controller(exclude=(old,))
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from kaflet.cli.broker_process import BrokerProcess
from kaflet.metadata import zkdata
from kaflet.metadata.zk_testing import ZooKeeperEnsemble, ZooKeeperServer
from tests.support.netns import Network

T = TypeVar("T")

# What a broker says when it cannot join a cluster at all (clustering not wired in yet).


@dataclass
class ClusterState:
    """What ZooKeeper and the processes said at one moment (printed when a wait fails)."""

    controller: int | None = None
    controller_epoch: int | None = None
    registered: list[int] = field(default_factory=list)
    processes: dict[int, str] = field(default_factory=dict)
    partitions: dict[str, dict[int, tuple[list[int], zkdata.LeaderAndIsr | None]]] = field(default_factory=dict)
    error: str = ""

    def __str__(self) -> str:
        lines = [
            f"controller: {self.controller} (epoch {self.controller_epoch})",
            f"registered brokers (/brokers/ids): {self.registered}",
            "processes: " + ", ".join(f"{bid} {what}" for bid, what in sorted(self.processes.items())),
        ]
        for topic, parts in sorted(self.partitions.items()):
            for p, (replicas, st) in sorted(parts.items()):
                if st is None:
                    lines.append(f"  {topic}-{p}: replicas={replicas} no state")
                else:
                    lines.append(f"  {topic}-{p}: replicas={replicas} leader={st.leader} "
                                 f"leader_epoch={st.leader_epoch} isr={st.isr} zk_version={st.zk_version}")
        if self.error:
            lines.append(f"(reading ZooKeeper failed: {self.error})")
        return "\n".join(lines)


#: Kafka's 18 s default would make every test that kills a broker wait 18 s for its ZooKeeper
#: session to expire; 6 s has held under the full suite's load. A test's overrides win.
_TEST_SESSION = {"zookeeper.session.timeout.ms": "6000"}


class Cluster:
    """ZooKeeper plus ``brokers`` kaflet broker processes (ids 1..N), cleaned up by PID.

    ``zookeeper``: a running server or ensemble to use (not stopped by :meth:`close`); without
    it the cluster starts its own standalone server, or an ensemble of ``ensemble`` nodes.
    ``overrides`` apply to every broker, ``broker_overrides[id]`` to one (e.g. ``broker.rack``);
    brokers hold 6 s ZooKeeper sessions unless an override says otherwise.

    With a started ``network`` (tests/support/netns.py) of at least N+1 hosts, broker ``i`` runs
    in host ``i`` (10.200.0.i) and ZooKeeper in host N+1, the :attr:`client_host`, where the
    harness's own ZooKeeper client lives too; cut a broker with ``network.cut(i)``, and create
    test clients there with :meth:`in_client_host`.
    """

    def __init__(
        self,
        base_dir: Path,
        brokers: int = 3,
        *,
        zookeeper: ZooKeeperServer | ZooKeeperEnsemble | None = None,
        ensemble: int = 0,
        chroot: str = "/kaflet",
        overrides: dict[str, str] | None = None,
        broker_overrides: dict[int, dict[str, str]] | None = None,
        tick_time_ms: int = 500,
        network: Network | None = None,
    ) -> None:
        if not chroot.startswith("/") or chroot == "/":
            raise ValueError(f"chroot must be a path below /, not {chroot!r}")
        unknown = set(broker_overrides or {}) - set(range(1, brokers + 1))
        if unknown:
            raise ValueError(f"broker_overrides for unknown broker ids {sorted(unknown)}")
        self.base_dir = Path(base_dir)
        self.chroot = chroot
        self.network = network
        self.client_host = brokers + 1
        self._own_zookeeper = zookeeper is None
        self.zookeeper: ZooKeeperServer | ZooKeeperEnsemble
        if network is not None:
            if zookeeper is not None or ensemble:
                raise ValueError("a cluster inside a network runs its own standalone ZooKeeper")
            if len(network.hosts) < brokers + 1:
                raise ValueError(f"{brokers} brokers and ZooKeeper need {brokers + 1} hosts in the network")
            host = network.host(self.client_host)
            # A fixed port is fine: the address is the namespace's own.
            self.zookeeper = ZooKeeperServer(2181, tick_time_ms, self.base_dir / "zookeeper", host=host.ip,
                                             command_prefix=host.exec_prefix,
                                             socket_factory=network.socket_factory(self.client_host))
        elif zookeeper is not None:
            self.zookeeper = zookeeper
        elif ensemble:
            self.zookeeper = ZooKeeperEnsemble(ensemble, tick_time_ms, self.base_dir / "zookeeper")
        else:
            self.zookeeper = ZooKeeperServer(tick_time_ms=tick_time_ms, data_dir=self.base_dir / "zookeeper")
        self.brokers: dict[int, BrokerProcess] = {}
        for bid in range(1, brokers + 1):
            config = {"broker.id": str(bid), **_TEST_SESSION, **(overrides or {}),
                      **(broker_overrides or {}).get(bid, {})}
            placement: dict[str, Any] = {}
            if network is not None:
                h = network.host(bid)
                placement = {"host": h.ip, "command_prefix": h.exec_prefix,
                             "socket_factory": network.socket_factory(self.client_host)}
            self.brokers[bid] = BrokerProcess(self.base_dir / f"broker-{bid}", config,
                                              log_path=self.base_dir / f"broker-{bid}.log", **placement)
        self._zk: KazooClient | None = None

    # -- processes ----------------------------------------------------------------------------

    @property
    def zk_connect(self) -> str:
        """The brokers' ``zookeeper.connect``: every ZooKeeper server, then the chroot."""
        return self.zookeeper.connect_string + self.chroot

    def start(self, timeout: float = 60.0) -> Cluster:
        """Start ZooKeeper (when owned) and every broker; wait until each one listens.

        On any failure everything started is stopped by PID before the error is raised.
        """
        try:
            if self._own_zookeeper:
                self.zookeeper.start(timeout)
            for broker in self.brokers.values():
                broker.overrides["zookeeper.connect"] = self.zk_connect
                broker.launch()
            deadline = time.monotonic() + timeout
            for bid, broker in self.brokers.items():
                self._wait_started(bid, broker, max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.close()
            raise
        return self

    def _wait_started(self, bid: int, broker: BrokerProcess, timeout: float) -> None:
        try:
            broker.wait_started(timeout)
        except RuntimeError as exc:
            raise RuntimeError(f"broker {bid} did not start: {exc}") from exc

    def broker(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id]

    @property
    def bootstrap(self) -> str:
        """``host:port`` of every running broker, comma separated."""
        return ",".join(b.bootstrap for b in self.brokers.values() if b.alive and b.port is not None)

    def running(self) -> list[int]:
        """Ids of the brokers whose process runs."""
        return [bid for bid, b in self.brokers.items() if b.alive]

    def kill(self, broker_id: int) -> None:
        """SIGKILL one broker by PID: a crash, no controlled shutdown."""
        self.brokers[broker_id].kill()

    def stop(self, broker_id: int, timeout: float = 30.0) -> int:
        """SIGTERM one broker and wait for it to exit (its controlled shutdown)."""
        return self.brokers[broker_id].stop(timeout)

    def restart(self, broker_id: int, hard: bool = False, timeout: float = 30.0) -> BrokerProcess:
        """Kill (hard) or stop one broker, then start it again on the same data and port."""
        broker = self.brokers[broker_id]
        if hard:
            broker.kill()
        elif broker.alive:
            broker.stop()
        return self.start_broker(broker_id, timeout)

    def start_broker(self, broker_id: int, timeout: float = 30.0) -> BrokerProcess:
        """Start a stopped or killed broker again (same data, same port)."""
        broker = self.brokers[broker_id]
        broker.overrides["zookeeper.connect"] = self.zk_connect
        broker.launch()
        self._wait_started(broker_id, broker, timeout)
        return broker

    def close(self) -> None:
        """SIGKILL every broker, stop the ZooKeeper client, then an owned ZooKeeper, each by PID;
        errors of one step do not skip the next.

        The test is over, so nothing reads the brokers' data again: a controlled shutdown here
        would only cost time (the last broker of a cluster retries it for
        ``controlled.shutdown.max.retries`` x ``retry.backoff.ms``, 15 s, as in Kafka). Tests of a
        clean stop call :meth:`stop` themselves."""
        errors: list[BaseException] = []
        for broker in self.brokers.values():
            try:
                broker.kill()
            except BaseException as exc:
                errors.append(exc)
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            except BaseException as exc:
                errors.append(exc)
            self._zk = None
        if self._own_zookeeper:
            try:
                self.zookeeper.stop()
            except BaseException as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- ZooKeeper state ----------------------------------------------------------------------

    @property
    def zk(self) -> KazooClient:
        """A kazoo client on the cluster's chroot (started on first use, closed by close())."""
        if self._zk is None:
            self._zk = self.in_client_host(self._start_kazoo)
        return self._zk

    def _start_kazoo(self) -> KazooClient:
        client = KazooClient(hosts=self.zookeeper.connect_string, timeout=10.0)
        client.start(timeout=15)
        # The chroot exists before the client uses it (kazoo warns otherwise; brokers create it
        # too when they come first).
        client.ensure_path(self.chroot)
        client.chroot = self.chroot
        return client

    def in_client_host(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call ``fn`` where clients of this cluster run: inside the client host of its network
        (threads ``fn`` starts stay there), or right here without a network."""
        if self.network is None:
            return fn(*args, **kwargs)
        return self.network.call_in(self.client_host, fn, *args, **kwargs)

    def _get(self, path: str) -> tuple[bytes | None, int] | None:
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return None
        return data, stat.version

    def controller_id(self) -> int | None:
        """The broker id in ``/controller``, or None while there is no controller."""
        node = self._get(zkdata.CONTROLLER_PATH)
        return zkdata.parse_controller(node[0]) if node else None

    def controller_epoch(self) -> int | None:
        node = self._get(zkdata.CONTROLLER_EPOCH_PATH)
        return zkdata.parse_controller_epoch(node[0]) if node else None

    def registered_brokers(self) -> list[int]:
        """Ids under ``/brokers/ids`` (the live brokers as ZooKeeper sees them)."""
        try:
            return sorted(int(c) for c in self.zk.get_children(zkdata.BROKER_IDS_PATH))
        except NoNodeError:
            return []

    def broker_registration(self, broker_id: int) -> zkdata.BrokerInfo | None:
        node = self._get(zkdata.broker_path(broker_id))
        return zkdata.parse_broker(broker_id, node[0]) if node else None

    def topics(self) -> list[str]:
        try:
            return sorted(self.zk.get_children(zkdata.TOPICS_PATH))
        except NoNodeError:
            return []

    def assignment(self, topic: str) -> dict[int, list[int]] | None:
        """Replicas by partition from ``/brokers/topics/<topic>``; None if the topic is absent."""
        node = self._get(zkdata.topic_path(topic))
        return zkdata.parse_topic(topic, node[0]).partitions if node else None

    def partition_state(self, topic: str, partition: int) -> zkdata.LeaderAndIsr | None:
        """Leader, leader epoch, ISR (and zk version) of one partition; None before it exists."""
        node = self._get(zkdata.partition_state_path(topic, partition))
        return zkdata.parse_partition_state(node[0], node[1]) if node else None

    def leader(self, topic: str, partition: int) -> int | None:
        """The partition's leader per ZooKeeper (None: no state or no leader)."""
        st = self.partition_state(topic, partition)
        return st.leader if st is not None and st.leader != zkdata.NO_LEADER else None

    def isr(self, topic: str, partition: int) -> list[int]:
        st = self.partition_state(topic, partition)
        return list(st.isr) if st is not None else []

    def state(self, topics: Iterable[str] | None = None) -> ClusterState:
        """A snapshot for failure messages; never raises (a ZooKeeper error goes in the text)."""
        snap = ClusterState()
        for bid, b in self.brokers.items():
            if b.alive:
                snap.processes[bid] = f"running (pid {b.pid})"
            elif b.proc is None:
                snap.processes[bid] = "not started"
            else:
                snap.processes[bid] = f"exited ({b.proc.returncode})"
        try:
            snap.controller = self.controller_id()
            snap.controller_epoch = self.controller_epoch()
            snap.registered = self.registered_brokers()
            for topic in list(topics if topics is not None else self.topics())[:20]:
                parts = self.assignment(topic) or {}
                snap.partitions[topic] = {p: (replicas, self.partition_state(topic, p))
                                          for p, replicas in sorted(parts.items())[:50]}
        except Exception as exc:  # the snapshot explains a failure; it must not hide it
            snap.error = f"{type(exc).__name__}: {exc}"
        return snap

    # -- waiting ------------------------------------------------------------------------------

    def wait_until(self, predicate: Callable[[], T], timeout: float = 30.0, what: str = "",
                   interval: float = 0.1, topics: Iterable[str] | None = None) -> T:
        """Poll ``predicate`` until it returns a truthy value, and return that value.

        Exceptions from the predicate count as "not yet". On timeout, AssertionError says what
        was awaited, the last exception and the cluster state at that moment.
        """
        deadline = time.monotonic() + timeout
        last_exc: BaseException | None = None
        while True:
            try:
                value = predicate()
                if value:
                    return value
                last_exc = None
            except Exception as exc:
                last_exc = exc
            if time.monotonic() >= deadline:
                break
            time.sleep(interval)
        desc = what or getattr(predicate, "__name__", "condition")
        extra = f"\nlast error: {type(last_exc).__name__}: {last_exc}" if last_exc else ""
        raise AssertionError(f"timed out after {timeout:g}s waiting for {desc}{extra}\n"
                             f"cluster state:\n{self.state(topics)}")

    def wait_for_controller(self, timeout: float = 30.0, exclude: Iterable[int] = ()) -> int:
        """Wait for a controller (not one of ``exclude``); returns its id."""
        excluded = set(exclude)

        def elected() -> int | None:
            cid = self.controller_id()
            return cid if cid is not None and cid not in excluded else None

        return self.wait_until(elected, timeout, f"a controller other than {sorted(excluded)}"
                               if excluded else "a controller")

    def wait_for_registered(self, broker_ids: Iterable[int] | None = None, timeout: float = 30.0) -> list[int]:
        """Wait until exactly ``broker_ids`` (default: the running brokers) are in /brokers/ids."""
        want = sorted(broker_ids) if broker_ids is not None else sorted(self.running())
        self.wait_until(lambda: self.registered_brokers() == want, timeout, f"/brokers/ids to be {want}")
        return want

    def wait_for_leader(self, topic: str, partition: int, timeout: float = 30.0,
                        exclude: Iterable[int] = ()) -> int:
        """Wait until the partition has a leader (not one of ``exclude``); returns it."""
        excluded = set(exclude)

        def led() -> int | None:
            leader = self.leader(topic, partition)
            return leader if leader is not None and leader not in excluded else None

        return self.wait_until(led, timeout, f"a leader of {topic}-{partition}"
                               + (f" other than {sorted(excluded)}" if excluded else ""), topics=[topic])

    def wait_for_isr(self, topic: str, partition: int, isr: Iterable[int], timeout: float = 30.0) -> list[int]:
        """Wait until the partition's ISR is exactly ``isr`` (any order)."""
        want = sorted(isr)
        self.wait_until(lambda: sorted(self.isr(topic, partition)) == want, timeout,
                        f"the ISR of {topic}-{partition} to be {want}", topics=[topic])
        return want


def create_topic_led_by_each(cluster: Cluster, topic: str) -> None:
    """A 3-partition topic on brokers 1-3: partition p led by broker p+1, each replicated on all
    three; returns once every ISR is complete."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assignment = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
    admin.create_topics([NewTopic(topic, num_partitions=3, replica_assignment=assignment)])[topic].result(60)
    for p in range(3):
        cluster.wait_for_isr(topic, p, [1, 2, 3], timeout=60)


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains ``text`` (every process of a cluster names its dir)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry))
    return found
