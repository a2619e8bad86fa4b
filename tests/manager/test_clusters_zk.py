"""The cluster library against a 3-broker ZooKeeper cluster of real processes: racks, the
controller and up/down as ZooKeeper and the Kafka protocol see them, under-replicated
partitions after a broker dies, and the controller moving when its broker is killed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from kaflet.manager.clusters import ClusterAccess, ClusterClient, ClusterError, ClusterOverview
from kaflet.manager.sampling import ClusterObserver
from tests.support.cluster import Cluster

T = TypeVar("T")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    racks = {1: {"broker.rack": "rack-a"}, 2: {"broker.rack": "rack-b"}, 3: {"broker.rack": "rack-c"}}
    c = Cluster(tmp_path / "cluster", 3, broker_overrides=racks)
    try:
        c.start()
        c.wait_for_registered([1, 2, 3])
        yield c
    finally:
        c.close()


def eventually(fn: Callable[[], T], check: Callable[[T], bool], timeout: float = 60.0) -> T:
    """fn()'s value once check passes; a ClusterError (an election under way) counts as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = fn()
        except ClusterError:
            if time.monotonic() >= deadline:
                raise
        else:
            if check(value) or time.monotonic() >= deadline:
                return value
        time.sleep(0.2)


def states(ov: ClusterOverview) -> dict[int, tuple[bool, bool]]:
    return {b.id: (b.up, b.controller) for b in ov.brokers}


def test_brokers_controller_racks_and_failures(cluster: Cluster) -> None:
    controller = cluster.wait_for_controller()
    with ClusterClient(ClusterAccess(cluster.bootstrap, zookeeper_connect=cluster.zk_connect)) as zk_view, \
            ClusterClient(ClusterAccess(cluster.bootstrap)) as wire_view:
        for view in (zk_view, wire_view):
            ov = eventually(view.overview, lambda o: o.controller_id == controller)
            assert ov.controller_id == controller
            assert {b.id: b.rack for b in ov.brokers} == {1: "rack-a", 2: "rack-b", 3: "rack-c"}
            assert states(ov) == {b: (True, b == controller) for b in (1, 2, 3)}
            assert {f"{b.host}:{b.port}" for b in ov.brokers} == set(cluster.bootstrap.split(","))

        wire_view.create_topic("replicated", 6, 3)
        topic = eventually(lambda: wire_view.topic("replicated"),
                           lambda t: t.partition_count == 6 and all(p.leader is not None for p in t.partitions))
        assert topic.replication_factor == 3 and topic.under_replicated == 0

        # A follower broker dies: it shows as down in both views, and the partitions it
        # replicated are under-replicated once the controller shrinks their ISR.
        victim = next(b for b in (1, 2, 3) if b != controller)
        cluster.kill(victim)
        for view in (zk_view, wire_view):
            ov = eventually(view.overview, lambda o: not next(b for b in o.brokers if b.id == victim).up)
            assert states(ov) == {b: (b != victim, b == controller) for b in (1, 2, 3)}
            down = ov.down[0]
            assert (down.id, down.rack) == (victim, ["rack-a", "rack-b", "rack-c"][victim - 1])
        topic = eventually(lambda: wire_view.topic("replicated"), lambda t: t.under_replicated == 6)
        assert topic.under_replicated == 6 and topic.offline == 0
        assert all(victim not in p.isr and victim in p.replicas for p in topic.partitions)

        observer = ClusterObserver(wire_view, interval_s=60)
        snap = observer.sample()
        assert snap.under_replicated >= 6 and snap.topics["replicated"].under_replicated == 6
        assert [b.id for b in snap.overview.down] == [victim]
        load = snap.broker_load()
        assert sum(replicas for replicas, _ in load.values()) == sum(
            len(p.replicas) for t in snap.topics.values() for p in t.partitions)
        assert load[victim][0] >= 6 and load[victim][1] == 0  # it still holds replicas, leads nothing

        # The controller is killed: another broker takes over, and both views say which.
        cluster.kill(controller)
        successor = cluster.wait_for_controller(exclude=(controller,))
        survivor = ({1, 2, 3} - {victim, controller}).pop()
        assert successor == survivor
        for view in (zk_view, wire_view):
            ov = eventually(view.overview, lambda o: o.controller_id == successor
                            and [b.id for b in o.up] == [survivor])
            assert states(ov) == {b: (b == survivor, b == survivor) for b in (1, 2, 3)}

        # Back up: registered again, and back in every ISR.
        cluster.start_broker(victim)
        for view in (zk_view, wire_view):
            ov = eventually(view.overview, lambda o: next(b for b in o.brokers if b.id == victim).up)
            assert next(b for b in ov.brokers if b.id == victim).up
        topic = eventually(lambda: wire_view.topic("replicated"),
                           lambda t: all(victim in p.isr for p in t.partitions))
        assert all(victim in p.isr for p in topic.partitions)
        # It leads nothing until a preferred leader election ("leader rebalance") moves back
        # the partitions whose first replica it is; those of the killed controller (still
        # down) cannot move, and say why.
        preferred = [p.partition for p in topic.partitions if p.replicas[0] == victim]
        stuck = {("replicated", p.partition): "PREFERRED_LEADER_NOT_AVAILABLE"
                 for p in topic.partitions if p.replicas[0] == controller}
        assert preferred and stuck and all(p.leader == survivor for p in topic.partitions)
        assert wire_view.elect_preferred_leaders([("replicated", p) for p in range(6)]) == stuck
        topic = eventually(lambda: wire_view.topic("replicated"),
                           lambda t: [p.partition for p in t.partitions if p.leader == victim] == preferred)
        assert [p.partition for p in topic.partitions if p.leader == victim] == preferred
        # Those already led by their preferred replica are no failure.
        assert wire_view.elect_preferred_leaders([("replicated", p) for p in preferred]) == {}
