"""Consumer groups with real clients: assignment, failover, cooperative rebalancing, static
membership, several client libraries, and committed offsets surviving a broker crash."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.consumer_protocol import wait_for as _wait
from tests.support.topics import create_topic

# Short timeouts so failover tests take seconds, not minutes.
OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000",
             "offsets.topic.num.partitions": "5"}
SESSION_MS = 4000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("groups") / "data", OVERRIDES) as b:
        yield b


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _produce(bootstrap: str, topic: str, n: int, partitions: int) -> set[bytes]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = set()
    for i in range(n):
        v = f"m{i}".encode()
        p.produce(topic, v, partition=i % partitions)
        values.add(v)
    assert p.flush(30) == 0
    return values


class GroupMember(threading.Thread):
    """A confluent-kafka consumer in a thread: records messages and assignment callbacks,
    commits synchronously after processing each batch."""

    def __init__(self, bootstrap: str, group: str, topic: str, **conf: object) -> None:
        super().__init__(daemon=True)
        self.conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": SESSION_MS,
                     "heartbeat.interval.ms": 300, **conf}
        self.topic = topic
        self.values: list[bytes] = []
        self.assigned: set[int] = set()
        self.events: list[tuple[str, set[int]]] = []
        self.stop_flag = threading.Event()
        self.crash = False
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        got = {p.partition for p in parts}
        with self.lock:
            self.events.append(("assign", got))
            if self.conf.get("partition.assignment.strategy") == "cooperative-sticky":
                self.assigned |= got
            else:
                self.assigned = got

    def _on_revoke(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        lost = {p.partition for p in parts}
        with self.lock:
            self.events.append(("revoke", lost))
            self.assigned -= lost

    def run(self) -> None:
        c = Consumer(self.conf)
        c.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        try:
            while not self.stop_flag.is_set():
                msgs = c.consume(100, 0.2)
                good = [m for m in msgs if not m.error()]
                self.errors += [str(m.error()) for m in msgs if m.error()]
                if good:
                    with self.lock:
                        self.values += [m.value() for m in good]
                    try:
                        c.commit(asynchronous=False)
                    except Exception as exc:  # a commit racing a rebalance may fail; it is retried
                        self.errors.append(f"commit: {exc}")
        finally:
            if not self.crash:
                c.close()
            # On a "crash" the consumer is dropped without LeaveGroup: only the session timeout
            # tells the coordinator it is gone.

    def parts(self) -> set[int]:
        with self.lock:
            return set(self.assigned)


def _run_failover(bootstrap: str, strategy: str) -> list[GroupMember]:
    topic, group = _name("gt"), _name("gg")
    create_topic(bootstrap, topic, 6)
    first = _produce(bootstrap, topic, 600, 6)
    members = [GroupMember(bootstrap, group, topic, **{"partition.assignment.strategy": strategy})
               for _ in range(3)]
    for m in members:
        m.start()
    _wait(lambda: sorted(len(m.parts()) for m in members) == [2, 2, 2]
          and set().union(*(m.parts() for m in members)) == set(range(6)), 30, "2 partitions each")
    _wait(lambda: len({v for m in members for v in m.values}) >= len(first), 30, "first batch consumed")
    before = [m.parts() for m in members]
    marks = [len(m.events) for m in members]

    victim = members[2]
    victim.crash = True
    victim.stop_flag.set()
    victim.join(10)
    t0 = time.monotonic()
    survivors = members[:2]
    _wait(lambda: set().union(*(m.parts() for m in survivors)) == set(range(6)), SESSION_MS / 1000 + 15,
          "survivors take over")
    assert time.monotonic() - t0 < SESSION_MS / 1000 + 10
    second = _produce(bootstrap, topic, 600, 6)
    everything = first | second
    _wait(lambda: everything <= {v for m in survivors for v in m.values}, 30, "all messages consumed")
    for m in survivors:
        m.settled = list(m.events)  # type: ignore[attr-defined]  # before close() revokes everything
        m.settled_parts = m.parts()  # type: ignore[attr-defined]
        m.stop_flag.set()
        m.join(15)
    consumed = [v for m in members for v in m.values]
    assert set(consumed) == everything  # at least once, nothing skipped
    for m, parts, mark in zip(survivors, before[:2], marks[:2], strict=True):
        m.before = parts  # type: ignore[attr-defined]
        m.mark = mark  # type: ignore[attr-defined]
    return members


def test_three_consumers_share_six_partitions_and_fail_over(broker: BrokerProcess) -> None:
    _run_failover(broker.bootstrap, "range")


def test_cooperative_sticky_survivors_keep_their_partitions(broker: BrokerProcess) -> None:
    members = _run_failover(broker.bootstrap, "cooperative-sticky")
    for m in members[:2]:
        # After the initial assignment a survivor is never asked to give anything back, and
        # still owns what it had: the takeover only added the victim's partitions.
        later = m.settled[m.mark:]
        assert not [e for e in later if e[0] == "revoke" and e[1] & m.before], later
        assert any(e[0] == "assign" and e[1] for e in later), later  # it did take partitions over
        assert m.before <= m.settled_parts


def test_static_member_restart_keeps_generation(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient

    bootstrap = broker.bootstrap
    topic, group = _name("st"), _name("sg")
    create_topic(bootstrap, topic, 2)
    _produce(bootstrap, topic, 10, 2)
    conf = {"group.instance.id": "static-1", "session.timeout.ms": 10000}
    m1 = GroupMember(bootstrap, group, topic, **conf)
    m1.start()
    _wait(lambda: m1.parts() == {0, 1}, 30, "static member assigned")
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def describe():
        return admin.describe_consumer_groups([group])[group].result(10)

    before = describe()
    old_member_id = before.members[0].member_id
    m1.stop_flag.set()
    m1.join(15)  # close() of a static member sends no LeaveGroup
    m2 = GroupMember(bootstrap, group, topic, **conf)
    m2.start()
    try:
        _wait(lambda: m2.parts() == {0, 1}, 20, "restarted static member assigned")
        after = describe()
        assert after.state.name == "STABLE"
        assert after.members[0].member_id != old_member_id
        assert after.members[0].group_instance_id == "static-1"
        log = broker.new_log()
        assert f"stabilized group {group} generation 1 " in log
        assert f"group {group} generation 2" not in log, "the restart caused a rebalance"
    finally:
        m2.stop_flag.set()
        m2.join(15)


def test_commit_survives_sigkill(fresh_broker: BrokerProcess) -> None:
    b = fresh_broker
    b.overrides.update(OVERRIDES)
    b.start()
    topic, group = _name("ck"), _name("cg")
    create_topic(b.bootstrap, topic, 3)
    _produce(b.bootstrap, topic, 30, 3)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "session.timeout.ms": SESSION_MS})
    offsets = [TopicPartition(topic, p, 5 + p, metadata=f"meta-{p}") for p in range(3)]
    c.commit(offsets=offsets, asynchronous=False)
    c.close()
    b.kill()
    b.start()
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(3)], timeout=20)
    finally:
        c.close()
    assert [(t.partition, t.offset, t.metadata) for t in got] == [(p, 5 + p, f"meta-{p}") for p in range(3)]


def test_group_state_survives_restart(fresh_broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient

    b = fresh_broker
    b.overrides.update(OVERRIDES)
    b.start()
    topic, group = _name("gs"), _name("gsg")
    create_topic(b.bootstrap, topic, 2)
    m = GroupMember(b.bootstrap, group, topic, **{"session.timeout.ms": 30000})
    m.crash = True
    m.start()
    _wait(lambda: m.parts() == {0, 1}, 30, "assigned")
    b.kill()
    m.stop_flag.set()
    m.join(10)
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    d = admin.describe_consumer_groups([group])[group].result(20)
    # The generation record brings the group back Stable with its member until the session expires.
    assert d.state.name == "STABLE" and len(d.members) == 1
    assert {tp.partition for tp in d.members[0].assignment.topic_partitions} == {0, 1}


def test_kafka_python_and_aiokafka_groups(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer

    bootstrap = broker.bootstrap
    topic = _name("kp")
    create_topic(bootstrap, topic, 2)
    produced = _produce(bootstrap, topic, 50, 2)

    group = _name("kpg")
    kc = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                       enable_auto_commit=False, consumer_timeout_ms=15000)
    got = set()
    for msg in kc:
        got.add(msg.value)
        if len(got) == len(produced):
            break
    kc.commit()
    committed = {p: kc.committed(p) for p in kc.assignment()}
    kc.close()
    assert got == produced
    assert sum(committed.values()) == len(produced)

    async def aio() -> tuple[set[bytes], int]:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition as ATP

        g = _name("aiog")
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=g, auto_offset_reset="earliest",
                             enable_auto_commit=False)
        await c.start()
        seen: set[bytes] = set()
        try:
            async with asyncio.timeout(30):
                while len(seen) < len(produced):
                    batch = await c.getmany(timeout_ms=500)
                    for msgs in batch.values():
                        seen |= {m.value for m in msgs}
            await c.commit()
            total = sum([await c.committed(ATP(topic, p)) or 0 for p in range(2)])
        finally:
            await c.stop()
        return seen, total

    seen, total = asyncio.run(aio())
    assert seen == produced and total == len(produced)


def test_group_mixing_two_client_libraries(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer

    bootstrap = broker.bootstrap
    topic, group = _name("mx"), _name("mxg")
    create_topic(bootstrap, topic, 4)
    # librdkafka and kafka-python share "range" (both also speak "roundrobin").
    m = GroupMember(bootstrap, group, topic, **{"partition.assignment.strategy": "range"})
    m.start()
    _wait(lambda: m.parts() == {0, 1, 2, 3}, 30, "librdkafka member assigned")
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    kc = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                       session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300,
                       partition_assignment_strategy=[RangePartitionAssignor])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            kc.poll(200)
            mine = {p.partition for p in kc.assignment()}
            if len(mine) == 2 and len(m.parts()) == 2 and not (mine & m.parts()):
                break
        else:
            raise AssertionError(f"no split: kafka-python {kc.assignment()}, librdkafka {m.parts()}")
    finally:
        kc.close()
        m.stop_flag.set()
        m.join(15)
