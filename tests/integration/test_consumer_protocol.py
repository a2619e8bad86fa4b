"""KIP-848's consumer group protocol with librdkafka (``group.protocol=consumer``): members
join and leave while a producer runs, every record is consumed exactly once with commits, no
partition is held by two members at once, and a member joining a stable group leaves the
partitions that do not move unrevoked."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from tests.support import cli
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.consumer_protocol import Ownership, ProtocolMember, SteadyProducer, wait_for
from tests.support.topics import create_topic

# Heartbeats every 500 ms so rebalances take a second or two rather than 5 s per step.
OVERRIDES = {"offsets.topic.num.partitions": "3", "group.consumer.heartbeat.interval.ms": "500",
             "group.consumer.min.heartbeat.interval.ms": "500"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("kip848") / "data", OVERRIDES) as b:
        yield b


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _stable(members: list[ProtocolMember], partitions: int) -> bool:
    held = [m.parts() for m in members]
    sizes = sorted(len(h) for h in held)
    return set().union(*held) == set(range(partitions)) and sum(sizes) == partitions and sizes[-1] - sizes[0] <= 1


def test_members_join_and_leave_while_a_producer_runs(broker: BrokerProcess) -> None:
    topic, group = _name("kt"), _name("kg")
    create_topic(broker.bootstrap, topic, 6)
    ownership = Ownership()
    producer = SteadyProducer(broker.bootstrap, topic, 6)
    producer.start()
    members: list[ProtocolMember] = []
    try:
        for i in range(3):  # 1, 2, then 3 members
            m = ProtocolMember(f"m{i}", broker.bootstrap, group, topic, ownership)
            m.start()
            members.append(m)
            wait_for(lambda: _stable(members, 6), 30, f"{len(members)} members sharing 6 partitions")
        members[0].stop()  # one leaves; the others take its partitions
        live = members[1:]
        wait_for(lambda: _stable(live, 6), 30, "2 members after one left")
        late = ProtocolMember("m3", broker.bootstrap, group, topic, ownership)
        late.start()
        members.append(late)
        live.append(late)
        wait_for(lambda: _stable(live, 6), 30, "3 members again")
    finally:
        sent = producer.stop()
    try:
        wait_for(lambda: sent <= {v for m in members for v in m.values}, 60, "every record consumed")
    finally:
        for m in members:
            if m.is_alive():
                m.stop()
    counts = Counter(v for m in members for v in m.values)
    assert set(counts) == sent
    assert [v for v, n in counts.items() if n > 1] == [], "records consumed twice"
    assert ownership.violations == []
    assert not [e for m in members for e in m.errors if "commit" in e], [m.errors for m in members]


def test_a_fourth_member_moves_only_the_partitions_it_takes(broker: BrokerProcess) -> None:
    topic, group = _name("kt"), _name("kg")
    create_topic(broker.bootstrap, topic, 12)
    ownership = Ownership()
    three = [ProtocolMember(f"s{i}", broker.bootstrap, group, topic, ownership) for i in range(3)]
    for m in three:
        m.start()
    fourth = ProtocolMember("s3", broker.bootstrap, group, topic, ownership)
    try:
        wait_for(lambda: _stable(three, 12), 30, "3 members with 4 partitions each")
        before = {m.name: m.parts() for m in three}
        marks = {m.name: len(m.events) for m in three}
        fourth.start()
        everyone = [*three, fourth]
        wait_for(lambda: _stable(everyone, 12), 30, "4 members with 3 partitions each")
        for m in three:
            after = m.parts()
            revoked = set().union(*(p for _t, kind, p in m.events[marks[m.name]:] if kind == "revoke"))
            assigned = set().union(*(p for _t, kind, p in m.events[marks[m.name]:] if kind == "assign"))
            assert after <= before[m.name], f"{m.name} was given a partition it did not have"
            assert revoked == before[m.name] - after, f"{m.name} revoked {revoked}, lost {before[m.name] - after}"
            assert not assigned
        assert len(fourth.parts()) == 3
        assert ownership.violations == []
        # The group as ConsumerGroupDescribe tells it.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        desc = admin.describe_consumer_groups([group])[group].result(30)
        assert str(desc.type).endswith("CONSUMER") and len(desc.members) == 4
        assert {m.assignment.topic_partitions[0].topic for m in desc.members} == {topic}
        # And as `kaflet groups --describe` shows it: the protocol, the epochs, each member's assignment.
        state = cli.run("groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group, "--state")
        assert state.returncode == 0, state.stderr
        header, row = (line.split() for line in state.stdout.splitlines()[:2])
        fields = dict(zip(header, row, strict=True))  # "COORDINATOR (ID)" is two words in both
        assert (fields["PROTOCOL"], fields["ASSIGNOR"], fields["STATE"], fields["#MEMBERS"]) == (
            "consumer", "uniform", "Stable", "4")
        assert int(fields["GROUP-EPOCH"]) == int(fields["ASSIGNMENT-EPOCH"]) == 4
        members = cli.run("groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group, "--members")
        assert members.returncode == 0, members.stderr
        rows = [line.split() for line in members.stdout.splitlines()[1:] if line.strip()]
        assert len(rows) == 4 and {r[4] for r in rows} == {"4"}  # every member at the group's epoch
        shown = sorted(p for r in rows for p in r[6].split(","))
        assert shown == sorted(f"{topic}({p})" for p in range(12)) and all(r[6] == r[7] for r in rows)
    finally:
        for m in [*three, fourth]:
            if m.is_alive():
                m.stop()
