"""Faults on a real ZooKeeper + 3-broker cluster: no acknowledged record is lost, none is
stored twice, and unmodified clients keep working.

Each test produces with an idempotent acks=all producer (tests/support/faults.py) to a topic
with replication factor 3 and min.insync.replicas=2, injects a fault by PID (SIGKILL, SIGTERM)
or by cutting a network namespace, and then reads every partition back with a fresh consumer.
The cluster runs with short timeouts (FAST_FAILOVER) so each test takes seconds, not minutes.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KPTopicPartition

from kaflet.cli.broker_process import BrokerProcess, stop_brokers
from kaflet.coordinator.group.hashing import partition_for
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from tests.support.cluster import Cluster
from tests.support.faults import (
    FAST_FAILOVER,
    AckedProducer,
    check_delivery,
    payload_number,
    read_partitions,
    replica_log_bytes,
)
from tests.support.netns import Network
from tests.support.raw_client import RawClient

pytestmark = pytest.mark.timeout(240)

ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]


@pytest.fixture
def producers() -> Iterator[Callable[..., AckedProducer]]:
    """``make(cluster, topic, partitions, **kwargs)`` starts an AckedProducer; any left running
    by a failing test is stopped before the cluster goes."""
    made: list[AckedProducer] = []

    def make(cluster: Cluster, topic: str, partitions: int = 3, **kwargs: Any) -> AckedProducer:
        producer = AckedProducer(cluster.bootstrap, topic, partitions, make=cluster.in_client_host, **kwargs)
        made.append(producer)
        return producer.start()

    yield make
    for producer in made:
        producer.close()


def new_topic(cluster: Cluster, assignment: list[list[int]] = ASSIGNMENT, min_isr: int = 2,
              configs: dict[str, str] | None = None) -> str:
    name = f"f-{uuid.uuid4().hex[:8]}"
    admin = cluster.in_client_host(AdminClient, {"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment,
                     config={"min.insync.replicas": str(min_isr), **(configs or {})})
    admin.create_topics([topic], request_timeout=30)[name].result(timeout=40)
    for p, replicas in enumerate(assignment):
        cluster.wait_for_isr(name, p, replicas, timeout=30)
    return name


def verify(cluster: Cluster, producer: AckedProducer, topic: str, partitions: int) -> None:
    """Stop the producer, read everything back, and check the delivery reports against it: no
    acknowledged record missing and, from an idempotent producer, none stored twice (a plain
    producer's retries may store a record twice, as in Kafka)."""
    delivered = producer.stop()
    stored = read_partitions(cluster.bootstrap, topic, range(partitions), make=cluster.in_client_host)
    verdict = check_delivery(delivered, stored, producer.tag)
    if not producer.idempotent:
        verdict.duplicated.clear()
    assert verdict.ok, f"producer {producer.tag}: {verdict}\nfailures: {producer.failure_summary()}\n{cluster.state([topic])}"
    assert verdict.acked > 0
    assert not [e for e in producer.errors if "FATAL" in e.upper()], producer.errors


def wait_all_in_sync(cluster: Cluster, topic: str, assignment: list[list[int]] = ASSIGNMENT,
                     timeout: float = 60) -> None:
    for p, replicas in enumerate(assignment):
        cluster.wait_for_isr(topic, p, replicas, timeout=timeout)


def assert_replicas_identical(cluster: Cluster, topic: str, assignment: list[list[int]] = ASSIGNMENT,
                              timeout: float = 30) -> None:
    """Once production stopped and every replica is back in the ISR, each replica holds exactly
    the leader's log (a returning broker truncated what was never replicated, then caught up)."""
    for p, replicas in enumerate(assignment):
        def same(p: int = p, replicas: list[int] = replicas) -> bool:
            logs = {b: replica_log_bytes(cluster.broker(b).data_dir, topic, p) for b in replicas}
            return len(set(logs.values())) == 1
        cluster.wait_until(same, timeout, f"identical replicas of {topic}-{p}", topics=[topic])


@pytest.mark.parametrize("victim", ["leader", "follower", "controller"])
def test_sigkill_loses_no_acknowledged_record(cluster_factory: Callable[..., Cluster],
                                              producers: Callable[..., AckedProducer], victim: str) -> None:
    cluster = cluster_factory(3, overrides=FAST_FAILOVER)
    topic = new_topic(cluster)
    producer = producers(cluster, topic)
    producer.wait_acked(300)
    controller = cluster.wait_for_controller()
    leader = cluster.leader(topic, 0)
    assert leader is not None
    if victim == "leader":
        target = leader if leader != controller else cluster.leader(topic, 1)
    elif victim == "follower":
        target = next(b for b in ASSIGNMENT[0] if b not in (leader, controller))
    else:
        target = controller
    assert target is not None
    cluster.kill(target)
    if victim == "controller":
        cluster.wait_for_controller(exclude=(target,))
    for p in range(3):
        cluster.wait_until(lambda p=p: target not in cluster.isr(topic, p) and cluster.leader(topic, p) not in
                           (None, target), 30, f"{target} out of {topic}-{p}", topics=[topic])
    producer.wait_more(300)  # the survivors take every write: min.insync.replicas=2 still holds
    cluster.start_broker(target)
    wait_all_in_sync(cluster, topic)
    producer.wait_more(200)
    verify(cluster, producer, topic, 3)
    assert_replicas_identical(cluster, topic)


def leader_other_than_controller(cluster: Cluster, topic: str) -> int:
    """A broker that leads a partition of ``topic`` and is not the controller (each broker leads
    one partition of an ASSIGNMENT topic)."""
    controller = cluster.wait_for_controller()
    leaders = {cluster.wait_for_leader(topic, p) for p in range(len(ASSIGNMENT))}
    return min(leaders - {controller})


def wait_preferred_leaders(cluster: Cluster, topic: str, assignment: list[list[int]] = ASSIGNMENT,
                           timeout: float = 60) -> None:
    for p, replicas in enumerate(assignment):
        cluster.wait_until(lambda p=p, r=replicas: cluster.leader(topic, p) == r[0], timeout,
                           f"the preferred leader {replicas[0]} back on {topic}-{p}", topics=[topic])


@pytest.mark.parametrize("victim", ["leader", "controller"])
def test_sigterm_moves_leaderships_first_and_preferred_leaders_return(
        cluster_factory: Callable[..., Cluster], producers: Callable[..., AckedProducer], victim: str) -> None:
    # Auto leader rebalance every second (Kafka checks every 300 s by default).
    cluster = cluster_factory(3, overrides={**FAST_FAILOVER, "leader.imbalance.check.interval.seconds": "1"})
    topic = new_topic(cluster)
    idempotent = producers(cluster, topic)
    # A plain producer with a few retries: a leader that goes away without warning would
    # exhaust them; one that hands its leadership over first costs at most a metadata refresh.
    retrying = producers(cluster, topic, tag="r", rate=100, config={"enable.idempotence": False, "retries": 3,
                                                            "max.in.flight.requests.per.connection": 1})
    idempotent.wait_acked(300)
    retrying.wait_acked(100)
    target = cluster.wait_for_controller() if victim == "controller" else leader_other_than_controller(cluster, topic)
    assert cluster.stop(target) == 0
    log = cluster.broker(target).new_log()
    assert "controlled shutdown succeeded" in log, log[-3000:]
    # Its leaderships were handed over before it exited; leaving the ISRs may take the
    # controller a moment more (a follower that is shutting down still fetches, as in Kafka).
    for p in range(3):
        assert cluster.leader(topic, p) not in (None, target), cluster.state([topic])
    for p in range(3):
        cluster.wait_until(lambda p=p: target not in cluster.isr(topic, p), 30, f"{target} out of the ISR of {topic}-{p}")
    idempotent.wait_more(300)
    retrying.wait_more(100)
    cluster.start_broker(target)
    wait_all_in_sync(cluster, topic)
    wait_preferred_leaders(cluster, topic)  # auto.leader.rebalance.enable brings them back
    idempotent.wait_more(300)
    retrying.wait_more(100)
    for producer in (idempotent, retrying):
        verify(cluster, producer, topic, 3)
        assert producer.failure_summary() == {}


def test_not_enough_replicas_with_two_brokers_down_then_recovery(
        cluster_factory: Callable[..., Cluster], producers: Callable[..., AckedProducer]) -> None:
    cluster = cluster_factory(3, overrides=FAST_FAILOVER)
    topic = new_topic(cluster)
    producer = producers(cluster, topic)
    producer.wait_acked(300)
    survivor = 1
    for bid in (2, 3):
        cluster.kill(bid)
    for p in range(3):
        cluster.wait_until(lambda p=p: cluster.isr(topic, p) == [survivor] and cluster.leader(topic, p) == survivor,
                           60, f"{topic}-{p} down to its ISR [{survivor}]", topics=[topic])
    # A producer that does not retry sees the error itself.
    reports: list[Any] = []
    probe = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "retries": 0,
                      "enable.idempotence": False, "message.timeout.ms": 20_000})
    for p in range(3):
        probe.produce(topic, b"probe", partition=p, on_delivery=lambda err, msg: reports.append(err))
    assert probe.flush(30) == 0
    assert [e.code() if e else None for e in reports] == [KafkaError.NOT_ENOUGH_REPLICAS] * 3, reports
    stalled = producer.log.counts()[0]
    time.sleep(1)
    assert producer.log.counts()[0] == stalled  # nothing acknowledged while the ISR is short
    cluster.start_broker(2)
    for p in range(3):
        cluster.wait_until(lambda p=p: sorted(cluster.isr(topic, p)) == [1, 2], 60,
                           f"broker 2 back in the ISR of {topic}-{p}", topics=[topic])
    producer.wait_more(300)  # the waiting records go through, then new ones
    cluster.start_broker(3)
    wait_all_in_sync(cluster, topic)
    verify(cluster, producer, topic, 3)
    assert_replicas_identical(cluster, topic)


def test_zookeeper_node_and_broker_killed(cluster_factory: Callable[..., Cluster],
                                          producers: Callable[..., AckedProducer]) -> None:
    cluster = cluster_factory(3, overrides=FAST_FAILOVER, ensemble=3)
    ensemble = cluster.zookeeper
    topic = new_topic(cluster)
    producer = producers(cluster, topic)
    producer.wait_acked(300)
    zk_leader = ensemble.leader_id()  # type: ignore[union-attr]
    ensemble.kill(zk_leader)  # type: ignore[union-attr]
    ensemble.wait_for_leader(exclude=(zk_leader,))  # type: ignore[union-attr]
    producer.wait_more(200)
    # With one ZooKeeper node down the controller still moves leaderships.
    target = leader_other_than_controller(cluster, topic)
    cluster.kill(target)
    for p in range(3):
        cluster.wait_until(lambda p=p: cluster.leader(topic, p) not in (None, target), 30,
                           f"{topic}-{p} led by a live broker", topics=[topic])
    producer.wait_more(300)
    ensemble.restart(zk_leader)  # type: ignore[union-attr]
    cluster.start_broker(target)
    wait_all_in_sync(cluster, topic)
    assert sorted(cluster.registered_brokers()) == [1, 2, 3]
    producer.wait_more(200)
    verify(cluster, producer, topic, 3)
    assert_replicas_identical(cluster, topic)


def test_session_expiry_of_a_partitioned_leader(network: Network, tmp_path: Path,
                                                producers: Callable[..., AckedProducer]) -> None:
    cluster = Cluster(tmp_path / "c", 3, network=network, overrides=FAST_FAILOVER)
    try:
        cluster.start(timeout=90)
        cluster.wait_for_registered([1, 2, 3])
        topic = new_topic(cluster)
        producer = producers(cluster, topic)
        producer.wait_acked(300)
        target = leader_other_than_controller(cluster, topic)
        (led,) = [p for p in range(3) if cluster.leader(topic, p) == target]
        # First its followers lose it: what it appends now (acks=1, never acknowledged by the
        # acks=all producer) stays on it alone, a suffix the next leader will not have.
        for other in {1, 2, 3} - {target}:
            network.cut_pair(target, other)
        unreplicated = cluster.in_client_host(Producer, {"bootstrap.servers": cluster.bootstrap, "acks": "1"})
        for i in range(20):
            unreplicated.produce(topic, b"unreplicated-%d" % i, partition=led)
        assert unreplicated.flush(10) == 0
        network.cut(target)  # then everyone, for longer than zookeeper.session.timeout.ms
        cluster.wait_for_registered(sorted({1, 2, 3} - {target}), timeout=60)
        cluster.wait_for_leader(topic, led, timeout=60, exclude=(target,))
        producer.wait_more(300, timeout=90)
        for other in {1, 2, 3} - {target}:
            network.restore_pair(target, other)
        network.restore(target)
        cluster.wait_for_registered([1, 2, 3], timeout=60)
        wait_all_in_sync(cluster, topic, timeout=90)
        producer.wait_more(200)
        verify(cluster, producer, topic, 3)
        # The returning broker truncated its suffix to where its successor's epoch starts.
        assert_replicas_identical(cluster, topic)
        assert f"truncating {topic}-{led} to offset " in cluster.broker(target).new_log()
        records = read_partitions(cluster.bootstrap, topic, [led], make=cluster.in_client_host)[led]
        assert not [v for _, v in records if v.startswith(b"unreplicated-")]
    finally:
        cluster.close()


def offset_fetch(bootstrap: str, group: str, topic: str, partitions: int) -> tuple[int, dict[int, int]]:
    """OffsetFetch v5 sent to one broker: (top-level error, committed offset by partition)."""
    R = codec.request_class(ApiKey.OFFSET_FETCH)
    client = RawClient(bootstrap)
    try:
        resp = client.request(ApiKey.OFFSET_FETCH, 5, R(group_id=group, topics=[
            R.OffsetFetchRequestTopic(name=topic, partition_indexes=list(range(partitions)))]))
    finally:
        client.close()
    offsets = {p.partition_index: p.committed_offset for t in resp.topics for p in t.partitions}
    return resp.error_code, offsets


class GroupMember:
    """One consumer of a group through an unmodified client, committing synchronously."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str) -> None:
        self.client = client
        self.seen: list[int] = []
        self.errors: list[Any] = []
        self.commit_errors: list[BaseException] = []
        if client == "confluent-kafka":
            self.c: Any = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                    "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                    "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
            self.c.subscribe([topic])
        else:
            self.c = KafkaConsumer(topic, bootstrap_servers=bootstrap.split(","), group_id=group,
                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                   session_timeout_ms=6000, heartbeat_interval_ms=500,
                                   request_timeout_ms=10_000, retry_backoff_ms=200)

    def consume(self, count: int = 0, timeout: float = 60.0, until: Callable[[], bool] | None = None) -> None:
        """Read ``count`` more records (or until ``until()`` holds) and commit them, as an
        application does: a commit that fails while the coordinator moves or the group
        rebalances is tried again after the next poll (which lets the client rejoin)."""
        want = len(self.seen) + count
        done = until or (lambda: len(self.seen) >= want)
        deadline = time.monotonic() + timeout
        dirty = False
        while dirty or not done():
            assert time.monotonic() < deadline, f"{self.client}: {len(self.seen)} records after {timeout:g}s, " \
                                                f"last commit error: {self.commit_errors[-1:]}"
            if self.client == "confluent-kafka":
                msgs = self.c.consume(200, 0.2)
                for m in msgs:
                    if m.error():
                        # librdkafka reports what it recovers from itself (e.g. a restarted
                        # broker's UNKNOWN_TOPIC_OR_PARTITION before its first UpdateMetadata,
                        # as Kafka answers then); only a fatal error ends the consumer.
                        assert not m.error().fatal(), m.error()
                        self.errors.append(m.error())
                        continue
                    self.seen.append(payload_number(m.value()))  # type: ignore[arg-type]
            else:
                batches = self.c.poll(timeout_ms=200, max_records=200)
                msgs = [m for records in batches.values() for m in records]
                self.seen += [payload_number(m.value) for m in msgs]  # type: ignore[misc]
            if msgs or dirty:
                dirty = not self.commit()

    def commit(self) -> bool:
        """Commit the positions; False when it failed (NOT_COORDINATOR, a rebalance, ...)."""
        try:
            if self.client == "confluent-kafka":
                self.c.commit(asynchronous=False)
            else:
                self.c.commit()
            return True
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError._NO_OFFSET:
                return True  # a rebalance took back what was consumed: nothing of ours to commit
            self.commit_errors.append(exc)
        except Exception as exc:  # kafka-python's CommitFailedError, timeouts
            self.commit_errors.append(exc)
        return False

    def committed(self, topic: str, partitions: int) -> dict[int, int]:
        if self.client == "confluent-kafka":
            tps = self.c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=20)
            return {tp.partition: tp.offset for tp in tps}
        return {p: self.c.committed(KPTopicPartition(topic, p)) for p in range(partitions)}

    def positions(self, topic: str, partitions: int) -> dict[int, int]:
        if self.client == "confluent-kafka":
            return {tp.partition: tp.offset for tp in self.c.position([TopicPartition(topic, p) for p in range(partitions)])}
        return {p: self.c.position(KPTopicPartition(topic, p)) for p in range(partitions)}

    def close(self) -> None:
        self.c.close()


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_group_coordinator_follows_its_offsets_partition(
        cluster_factory: Callable[..., Cluster], producers: Callable[..., AckedProducer], client: str) -> None:
    cluster = cluster_factory(3, overrides={**FAST_FAILOVER, "leader.imbalance.check.interval.seconds": "1"})
    topic = new_topic(cluster)
    group = f"g-{uuid.uuid4().hex[:8]}"
    producer = producers(cluster, topic, rate=200)
    producer.wait_acked(300)
    member = GroupMember(client, cluster.bootstrap, group, topic)
    try:
        member.consume(200)
        offsets_partition = partition_for(group, int(FAST_FAILOVER["offsets.topic.num.partitions"]))
        coordinator = cluster.wait_for_leader("__consumer_offsets", offsets_partition)
        before = member.committed(topic, 3)
        assert before == member.positions(topic, 3) and sum(o for o in before.values() if o > 0) >= 200, before

        cluster.kill(coordinator)
        successor = cluster.wait_for_leader("__consumer_offsets", offsets_partition, exclude=(coordinator,))
        # The new leader loaded the group: what was committed is there.
        assert cluster.wait_until(lambda: member.committed(topic, 3) == before, 60,
                                  "the committed offsets from the new coordinator")
        member.consume(300)  # consuming and committing go on through the new coordinator

        cluster.start_broker(coordinator)
        # The preferred leader takes the partition back, and with it the group.
        cluster.wait_until(lambda: cluster.leader("__consumer_offsets", offsets_partition) == coordinator, 60,
                           "the offsets partition back on its preferred leader")
        member.consume(200)
        delivered = producer.stop()
        member.consume(until=lambda: set(delivered.acked) <= set(member.seen))
        final = member.committed(topic, 3)
        assert final == member.positions(topic, 3) and min(final.values()) > 0, final

        def not_coordinator() -> bool:
            return offset_fetch(cluster.broker(successor).bootstrap, group, topic, 3)[0] == ErrorCode.NOT_COORDINATOR

        cluster.wait_until(not_coordinator, 30, f"broker {successor} to answer NOT_COORDINATOR for {group}")
        assert offset_fetch(cluster.broker(coordinator).bootstrap, group, topic, 3) == (ErrorCode.NONE, final)
    finally:
        member.close()


def test_restart_right_after_sigkill(cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    cluster = cluster_factory(3, overrides=FAST_FAILOVER)
    topic = new_topic(cluster)
    old_registration = cluster.broker_registration(2)
    cluster.kill(2)
    # Its previous session still holds /brokers/ids/2 for up to the session timeout.
    assert 2 in cluster.registered_brokers()
    cluster.start_broker(2)
    cluster.wait_for_registered([1, 2, 3])
    assert cluster.broker_registration(2) != old_registration
    wait_all_in_sync(cluster, topic)

    # A second broker with a live broker's id waits, then refuses to start in Kafka's words.
    twin = BrokerProcess(tmp_path / "twin", {"broker.id": "1", "zookeeper.connect": cluster.zk_connect,
                                             "zookeeper.session.timeout.ms": "1000"})
    try:
        with pytest.raises(RuntimeError) as refused:
            twin.start(timeout=30)
        assert "Error while creating ephemeral at /brokers/ids/1, node already exists" in str(refused.value)
        assert "is another broker running with broker.id 1?" in str(refused.value)
        assert "Traceback" not in twin.new_log()
    finally:
        twin.kill()
    assert cluster.registered_brokers() == [1, 2, 3]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_soak_random_faults(cluster_factory: Callable[..., Cluster], producers: Callable[..., AckedProducer]) -> None:
    """Random SIGKILLs, SIGTERMs and ZooKeeper node kills, one at a time, each followed by a
    restart, for ``KAFLET_SOAK_ROUNDS`` rounds (20) under an idempotent producer and a consumer
    group; then every acknowledged record is there once, the replicas are identical and the group
    committed what it consumed. Run with ``pytest -m slow tests/cluster/test_faults.py``."""
    rounds = int(os.environ.get("KAFLET_SOAK_ROUNDS", "20"))
    rng = random.Random(int(os.environ.get("KAFLET_SOAK_SEED", "1")))
    cluster = cluster_factory(3, overrides={**FAST_FAILOVER, "leader.imbalance.check.interval.seconds": "5"},
                              ensemble=3)
    ensemble = cluster.zookeeper
    topic = new_topic(cluster)
    producer = producers(cluster, topic)
    group = f"soak-{uuid.uuid4().hex[:8]}"
    member = GroupMember("confluent-kafka", cluster.bootstrap, group, topic)
    stop = threading.Event()
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            member.consume(until=stop.is_set, timeout=3600)
        except BaseException as exc:
            errors.append(exc)

    consumer = threading.Thread(target=consume, name="soak-consumer", daemon=True)
    consumer.start()
    try:
        producer.wait_acked(300)
        for _ in range(rounds):
            fault = rng.choice(["kill", "kill", "term", "zookeeper"])
            if fault == "zookeeper":
                node = rng.choice([1, 2, 3])
                ensemble.kill(node)  # type: ignore[union-attr]
                time.sleep(rng.uniform(0, 3))
                ensemble.restart(node)  # type: ignore[union-attr]
            else:
                victim = rng.choice([1, 2, 3])
                if fault == "kill":
                    cluster.kill(victim)
                else:
                    assert cluster.stop(victim) == 0
                time.sleep(rng.uniform(0, 3))
                cluster.start_broker(victim)
            wait_all_in_sync(cluster, topic, timeout=120)
            producer.wait_more(100, timeout=120)
            assert not errors, errors
    finally:
        stop.set()
        consumer.join(60)
    assert not errors, errors
    verify(cluster, producer, topic, 3)
    assert_replicas_identical(cluster, topic)
    acked = set(producer.log.acked)
    member.consume(until=lambda: acked <= set(member.seen), timeout=120)
    assert member.committed(topic, 3) == member.positions(topic, 3)
    member.close()


def test_a_whole_cluster_stopped_at_once_shuts_down_without_waiting_the_back_off(
        cluster_factory: Callable[..., Cluster]) -> None:
    """Every broker SIGTERMed at once: an attempt meets a controller that is going away, or
    partitions whose other replicas are leaving too. The retry waits for the next controller or
    the next view of the live brokers, not the whole back-off (ten minutes here, so waiting it
    out would fail the 60 s stop), and the last broker, with no one left to lead its
    partitions, does not retry at all."""
    cluster = cluster_factory(3, overrides={"controlled.shutdown.retry.backoff.ms": "600000"})
    new_topic(cluster)
    killed = stop_brokers(list(cluster.brokers.values()), timeout=60)
    assert killed == [], [b.log_tail(15) for b in killed]
    for b in (1, 2, 3):
        log = cluster.broker(b).new_log()
        assert "controlled shutdown did not complete" not in log, log[-3000:]
        assert cluster.broker(b).proc is not None and cluster.broker(b).proc.returncode == 0
        # The last to go either finds no other live broker for what it still leads, or (when it
        # is the controller, which took the others' partitions offline as they left) leads
        # nothing any more: both end the controlled shutdown without a retry.
        assert "no other live broker can lead" in log or "controlled shutdown succeeded" in log, log[-3000:]


@pytest.mark.slow
def test_whole_cluster_restarts(cluster_factory: Callable[..., Cluster],
                                producers: Callable[..., AckedProducer]) -> None:
    """Every broker stopped (SIGTERM) and started again, then every broker SIGKILLed at once
    (a power cut the page cache survives) and started again; the producer rides both out."""
    cluster = cluster_factory(3, overrides=FAST_FAILOVER)
    topic = new_topic(cluster)
    producer = producers(cluster, topic)
    producer.wait_acked(300)
    for stop in (lambda: stop_brokers(list(cluster.brokers.values()), timeout=60),
                 lambda: [cluster.kill(b) for b in (1, 2, 3)]):
        stop()
        for b in (1, 2, 3):
            cluster.broker(b).launch()
        for b in (1, 2, 3):
            cluster.broker(b).wait_started(60)
        wait_all_in_sync(cluster, topic)
        producer.wait_more(300)
    verify(cluster, producer, topic, 3)
    assert_replicas_identical(cluster, topic)


@pytest.mark.slow
def test_whole_zookeeper_ensemble_down(cluster_factory: Callable[..., Cluster],
                                       producers: Callable[..., AckedProducer]) -> None:
    """Every ZooKeeper node killed, once for less and once for longer than the brokers'
    session timeout: the leaders keep taking writes meanwhile, and the brokers register again
    (new sessions) when ZooKeeper is back."""
    cluster = cluster_factory(3, overrides=FAST_FAILOVER, ensemble=3)
    ensemble = cluster.zookeeper
    topic = new_topic(cluster)
    producer = producers(cluster, topic)
    producer.wait_acked(300)
    for outage in (3.0, 10.0):
        for node in (1, 2, 3):
            ensemble.kill(node)  # type: ignore[union-attr]
        producer.wait_more(300)
        time.sleep(outage)
        for node in (1, 2, 3):
            ensemble.server(node).launch()  # type: ignore[union-attr]
        ensemble.wait_for_leader(timeout=60)  # type: ignore[union-attr]
        cluster.wait_for_registered([1, 2, 3], timeout=60)
        wait_all_in_sync(cluster, topic)
        producer.wait_more(300)
    verify(cluster, producer, topic, 3)
    assert_replicas_identical(cluster, topic)
