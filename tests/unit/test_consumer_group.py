"""KIP-848's consumer groups in the group coordinator, without sockets: ConsumerGroupHeartbeat's
join, reconciliation (revocation before assignment), fencing, leaving, static members, timers,
metadata changes, and the member-epoch checks of offset commits and fetches."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from kaflet.coordinator.group import schemas
from kaflet.coordinator.group.consumer_coordinator import (
    ConsumerGroupConfig,
    HeartbeatRequest,
    HeartbeatResult,
)
from kaflet.coordinator.group.consumer_group import ConsumerGroupMember, MemberState, reconcile
from kaflet.coordinator.group.coordinator import GroupConfig, GroupCoordinator
from kaflet.metadata.metadata_cache import PartitionInfo, TopicInfo
from kaflet.protocol.errors import ErrorCode as E
from tests.unit.test_group_coordinator import MemoryStore

TID = b"\x07" * 16
OTHER = b"\x08" * 16


def _topic(name: str, tid: bytes, n: int) -> TopicInfo:
    return TopicInfo(name, tid, tid.hex(), {i: PartitionInfo(i, 1, 0, [1], [1]) for i in range(n)})


async def _coordinator(topics: dict[str, TopicInfo], session_timeout_ms: int = 5000) -> GroupCoordinator:
    config = ConsumerGroupConfig(session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=500)
    c = GroupCoordinator(GroupConfig(min_session_timeout_ms=10, initial_rebalance_delay_ms=0, num_partitions=1),
                         MemoryStore(), consumer_config=config, topics=lambda: topics)
    c.on_became_leader(0)
    for _ in range(10):
        await asyncio.sleep(0)
    return c


async def _hb(c: GroupCoordinator, member: str, epoch: int, owned: dict[bytes, list[int]] | None = None,
        topics: list[str] | None = None, group: str = "g", rebalance_timeout_ms: int | None = None,
        instance_id: str | None = None, server_assignor: str | None = None,
        subscribed_topic_regex: str | None = None, version: int = 1) -> HeartbeatResult:
    """A heartbeat as a client sends it: a join (epoch 0) carries everything, the rest only changes."""
    joining = epoch == 0
    if rebalance_timeout_ms is None:
        rebalance_timeout_ms = 30000 if joining else -1
    return await c.consumer_group_heartbeat(HeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, instance_id=instance_id,
        rebalance_timeout_ms=rebalance_timeout_ms,
        subscribed_topic_names=topics if topics is not None else (["t"] if joining else None),
        subscribed_topic_regex=subscribed_topic_regex, server_assignor=server_assignor,
        owned=owned if owned is not None else ({} if joining else None), version=version))


def _parts(result: HeartbeatResult) -> set[int]:
    assert result.assignment is not None
    return set(result.assignment.get(TID, frozenset()))


def _no_double_owner(c: GroupCoordinator, group: str = "g") -> None:
    seen: dict[tuple[bytes, int], str] = {}
    for m in c.consumer.groups[group].members.values():
        for a in (m.assigned, m.revoking):
            for t, ps in a.items():
                for p in ps:
                    assert (t, p) not in seen, f"partition {p} held by {seen[(t, p)]} and {m.member_id}"
                    seen[(t, p)] = m.member_id


async def test_a_partition_moves_only_after_its_owner_released_it() -> None:
    c = await _coordinator({"t": _topic("t", TID, 4)})
    a = (await _hb(c, "a", 0))
    assert a.error == E.NONE and a.member_epoch == 1 and _parts(a) == {0, 1, 2, 3}
    b = (await _hb(c, "b", 0))
    # b joins at group epoch 2, but a still owns everything: b gets the epoch and nothing yet.
    assert b.member_epoch == 2 and _parts(b) == set()
    assert c.consumer.groups["g"].members["b"].state == MemberState.UNRELEASED_PARTITIONS
    # a learns what it keeps, stays on epoch 1 until it has revoked the rest.
    a = (await _hb(c, "a", 1, owned={TID: [0, 1, 2, 3]}))
    keep = _parts(a)
    assert a.member_epoch == 1 and len(keep) == 2
    assert c.consumer.groups["g"].members["a"].state == MemberState.UNREVOKED_PARTITIONS
    _no_double_owner(c)
    # b asks again: the partitions are still a's.
    assert (await _hb(c, "b", 2, owned={})).assignment is None
    a = (await _hb(c, "a", 1, owned={TID: sorted(keep)}))
    assert a.member_epoch == 2 and a.assignment is None  # same partitions, new epoch
    b = (await _hb(c, "b", 2, owned={}))
    assert _parts(b) == {0, 1, 2, 3} - keep and b.member_epoch == 2
    _no_double_owner(c)
    assert c.consumer.describe("g").state == "Stable"


async def test_a_member_that_already_released_skips_the_revocation_state() -> None:
    c = await _coordinator({"t": _topic("t", TID, 2)})
    (await _hb(c, "a", 0))
    (await _hb(c, "b", 0))
    a = (await _hb(c, "a", 1, owned={}))  # it says it owns nothing any more
    assert a.member_epoch == 2 and c.consumer.groups["g"].members["a"].state == MemberState.STABLE


def test_reconcile_keeps_a_partition_the_member_is_itself_revoking() -> None:
    member = ConsumerGroupMember("m", member_epoch=3, state=MemberState.UNREVOKED_PARTITIONS,
                                 assigned={TID: frozenset({0})}, revoking={TID: frozenset({1})})
    # It released 1, which the new target gives back to it: 1 still carries this member's own
    # partition epoch, so it is not waited for as if another member held it.
    step = reconcile(member, 4, {TID: frozenset({0, 1})}, {TID: frozenset({0})}, lambda tp: 3)
    assert step.member_epoch == 4 and step.state == MemberState.STABLE
    assert step.assigned == {TID: frozenset({0, 1})}
    # Another member's partition is waited for.
    step = reconcile(member, 4, {TID: frozenset({0, 2})}, {TID: frozenset({0})}, lambda tp: 3)
    assert step.state == MemberState.UNRELEASED_PARTITIONS and step.assigned == {TID: frozenset({0})}


async def test_fencing_and_unknown_members() -> None:
    c = await _coordinator({"t": _topic("t", TID, 2)})
    (await _hb(c, "a", 0))
    assert (await _hb(c, "a", 5)).error == E.FENCED_MEMBER_EPOCH
    assert (await _hb(c, "nobody", 1)).error == E.UNKNOWN_MEMBER_ID
    (await _hb(c, "b", 0))
    (await _hb(c, "a", 1, owned={TID: [0, 1]}))
    a = (await _hb(c, "a", 1, owned={TID: sorted(c.consumer.groups["g"].members["a"].assigned[TID])}))
    assert a.member_epoch == 2
    # The previous epoch with a subset of the assignment is accepted (a lost response) ...
    assert (await _hb(c, "a", 1, owned={TID: sorted(c.consumer.groups["g"].members["a"].assigned[TID])})).error == E.NONE
    # ... but not with partitions it does not own, nor an older epoch.
    assert (await _hb(c, "a", 1, owned={TID: [0, 1]})).error == E.FENCED_MEMBER_EPOCH
    assert (await _hb(c, "a", -3)).error == E.INVALID_REQUEST


async def test_invalid_requests_get_kafkas_messages() -> None:
    c = await _coordinator({"t": _topic("t", TID, 1)})
    r = (await _hb(c, "", 0, version=1))
    assert (r.error, r.message) == (E.INVALID_REQUEST, "MemberId can't be empty.")
    assert (await _hb(c, "", 0, version=0)).error == E.NONE  # v0: the coordinator names the member
    r = (await _hb(c, "m", 0, rebalance_timeout_ms=-1))
    assert r.message == "RebalanceTimeoutMs must be provided in first request."
    r = (await _hb(c, "m", 0, owned={TID: [0]}))
    assert r.message == "TopicPartitions must be empty when (re-)joining."
    assert (await _hb(c, "m", 0, server_assignor="sticky")).error == E.UNSUPPORTED_ASSIGNOR
    assert (await _hb(c, "m", 0, topics=[], subscribed_topic_regex="(")).error == E.INVALID_REGULAR_EXPRESSION
    assert (await _hb(c, "m", 0, group="")).error == E.INVALID_REQUEST


async def test_leaving_frees_the_partitions_and_bumps_the_group_epoch() -> None:
    c = await _coordinator({"t": _topic("t", TID, 2)})
    (await _hb(c, "a", 0))
    (await _hb(c, "b", 0))
    epoch = c.consumer.groups["g"].group_epoch
    left = (await _hb(c, "b", -1))
    assert left.error == E.NONE and left.member_epoch == -1
    assert c.consumer.groups["g"].group_epoch == epoch + 1 and "b" not in c.consumer.groups["g"].members
    a = (await _hb(c, "a", 1, owned={TID: [0, 1]}))
    assert a.member_epoch == 3 and set(c.consumer.groups["g"].members["a"].assigned[TID]) == {0, 1}
    assert (await _hb(c, "a", -1)).error == E.NONE
    assert c.consumer.describe("g").state == "Empty"


async def test_a_static_member_finds_its_partitions_again() -> None:
    c = await _coordinator({"t": _topic("t", TID, 4)})
    (await _hb(c, "a", 0, instance_id="i1"))
    (await _hb(c, "b", 0, instance_id="i2"))
    (await _hb(c, "a", 1, owned={TID: [0, 1, 2, 3]}, instance_id="i1"))
    a = (await _hb(c, "a", 1, owned={TID: sorted(c.consumer.groups["g"].members["a"].assigned[TID])}))
    mine = set(c.consumer.groups["g"].members["a"].assigned[TID])
    # Another process with the same instance id while i1 is live: refused.
    assert (await _hb(c, "a2", 0, instance_id="i1")).error == E.UNRELEASED_INSTANCE_ID
    left = (await _hb(c, "a", -2, instance_id="i1"))
    assert left.member_epoch == -2
    epoch = c.consumer.groups["g"].group_epoch
    back = (await _hb(c, "a2", 0, instance_id="i1"))
    assert back.error == E.NONE and _parts(back) == mine and back.member_epoch == a.member_epoch
    assert c.consumer.groups["g"].group_epoch == epoch  # no rebalance for a static member's return
    assert "a" not in c.consumer.groups["g"].members
    assert (await _hb(c, "a", 2, instance_id="i1")).error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID)


async def test_session_and_rebalance_timeouts_fence_members() -> None:
    c = await _coordinator({"t": _topic("t", TID, 2)}, session_timeout_ms=150)
    (await _hb(c, "a", 0, rebalance_timeout_ms=100))
    (await _hb(c, "b", 0))
    for _ in range(3):  # b keeps heartbeating; a neither heartbeats nor revokes
        await asyncio.sleep(0.08)
        (await _hb(c, "b", c.consumer.groups["g"].members["b"].member_epoch, owned={}))
    assert "a" not in c.consumer.groups["g"].members
    assert set(c.consumer.groups["g"].members["b"].assigned[TID]) == {0, 1}
    # a member in revocation that does not revoke within its rebalance timeout is fenced too
    (await _hb(c, "c", 0))
    b_epoch = c.consumer.groups["g"].members["b"].member_epoch
    (await _hb(c, "b", b_epoch, owned={TID: [0, 1]}, rebalance_timeout_ms=60))
    assert c.consumer.groups["g"].members["b"].state == MemberState.UNREVOKED_PARTITIONS
    await asyncio.sleep(0.1)
    assert "b" not in c.consumer.groups["g"].members


async def test_new_partitions_and_matching_topics_bump_the_group_epoch() -> None:
    topics = {"t": _topic("t", TID, 1)}
    c = await _coordinator(topics)
    (await _hb(c, "a", 0, topics=[], subscribed_topic_regex="t|u.*"))
    assert c.consumer.groups["g"].group_epoch == 1
    topics["t"] = _topic("t", TID, 3)
    topics["u1"] = _topic("u1", OTHER, 2)
    topics["__consumer_offsets"] = _topic("__consumer_offsets", b"\x09" * 16, 1)
    a = (await _hb(c, "a", 1, owned={TID: [0]}))
    assert a.member_epoch == 2 and a.assignment is not None
    assert a.assignment == {TID: frozenset({0, 1, 2}), OTHER: frozenset({0, 1})}


async def test_offset_commits_and_fetches_check_the_member_epoch() -> None:
    c = await _coordinator({"t": _topic("t", TID, 1)})
    (await _hb(c, "a", 0))
    off = {("t", 0): schemas.OffsetValue(5)}
    assert await c.commit_offsets("g", "a", None, 1, off, api_version=9) == {("t", 0): E.NONE}
    assert await c.commit_offsets("g", "a", None, 0, off, api_version=9) == {("t", 0): E.STALE_MEMBER_EPOCH}
    assert await c.commit_offsets("g", "a", None, 1, off, api_version=8) == {("t", 0): E.UNSUPPORTED_VERSION}
    assert await c.commit_offsets("g", "", None, -1, off, api_version=9) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    fetched = c.fetch_offsets("g", [("t", 0)], "a", 1)[1][("t", 0)]
    assert fetched is not None and fetched.offset == 5
    assert c.fetch_offsets("g", [("t", 0)], "a", 7)[0] == E.STALE_MEMBER_EPOCH
    assert c.fetch_offsets("g", [("t", 0)])[0] == E.NONE  # an admin client names no member
    (await _hb(c, "a", -1))
    # Empty again: an admin client may reset the offsets.
    assert await c.commit_offsets("g", "", None, -1, off, api_version=9) == {("t", 0): E.NONE}


async def test_classic_and_consumer_groups_keep_to_their_protocol() -> None:
    c = await _coordinator({"t": _topic("t", TID, 1)})
    (await _hb(c, "a", 0, group="new"))
    joined = await c.join_group("new", "", None, False, "cl", "/h", 1000, 5000, "consumer", [("range", b"")])
    assert joined.error == E.INCONSISTENT_GROUP_PROTOCOL
    classic = asyncio.ensure_future(c.join_group("old", "", None, False, "cl", "/h", 1000, 5000, "consumer",
                                                 [("range", b"")]))
    await asyncio.sleep(0.05)
    r = (await _hb(c, "b", 0, group="old"))
    assert (r.error, r.message) == (
        E.GROUP_ID_NOT_FOUND, "Cannot upgrade classic group old to consumer group because online upgrade is disabled.")
    classic.cancel()
    err, groups = c.list_groups(types={"Consumer"})
    assert err == E.NONE and [g[0] for g in groups] == ["new"] and groups[0][1:] == ("consumer", "Stable", "consumer")
    assert c.consumer_group_describe("nope").error == E.GROUP_ID_NOT_FOUND
    assert c.describe_group("new")[1].state == "Dead"  # DescribeGroups is for classic groups
    (await _hb(c, "a", -1, group="new"))
    assert await c.delete_groups(["new"]) == {"new": E.NONE}
    assert "new" not in c.consumer.groups


@pytest.mark.parametrize("members", [2, 3, 5])
async def test_rolling_joins_never_give_a_partition_two_owners(members: int) -> None:
    c = await _coordinator({"t": _topic("t", TID, 7)})
    owned: dict[str, list[int]] = {}
    epochs: dict[str, int] = {}
    for i in range(members):
        mid = f"m{i}"
        r = (await _hb(c, mid, 0))
        epochs[mid], owned[mid] = r.member_epoch, sorted(_parts(r))
        for step in itertools.count():
            assert step < 50, "the group never became stable"
            for m in list(epochs):
                r = (await _hb(c, m, epochs[m], owned={TID: owned[m]}))
                assert r.error == E.NONE
                epochs[m] = r.member_epoch
                if r.assignment is not None:
                    owned[m] = sorted(_parts(r))  # revoked at once, as a client would
                _no_double_owner(c)
            if c.consumer.describe("g").state == "Stable":
                break
    assert sorted(p for ps in owned.values() for p in ps) == list(range(7))


async def test_a_new_coordinator_loads_the_group_from_its_records() -> None:
    topics = {"t": _topic("t", TID, 4)}
    store = MemoryStore()
    config = ConsumerGroupConfig(session_timeout_ms=5000, heartbeat_interval_ms=500)
    first = GroupCoordinator(GroupConfig(num_partitions=1), store, consumer_config=config, topics=lambda: topics)
    first.on_became_leader(0)
    await asyncio.sleep(0.01)
    await first.consumer_group_heartbeat(HeartbeatRequest("g", "a", 0, instance_id="i", rebalance_timeout_ms=9000,
                                                          subscribed_topic_names=["t"], owned={}))
    await first.consumer_group_heartbeat(HeartbeatRequest("g", "b", 0, rebalance_timeout_ms=9000,
                                                          subscribed_topic_names=["t"], owned={},
                                                          server_assignor="range"))
    # a is now revoking half of its partitions.
    await first.consumer_group_heartbeat(HeartbeatRequest("g", "a", 1, owned={TID: [0, 1, 2, 3]}))
    assert await first.commit_offsets("g", "a", None, 1, {("t", 0): schemas.OffsetValue(42)}, api_version=9) == {
        ("t", 0): E.NONE}
    old = first.consumer.groups["g"]
    first.on_resigned(0)
    # Every record is one of Kafka's consumer group keys (versions 3-8) or the offset commit.
    assert {int.from_bytes(k[:2], "big") for k, _ in store.records[0]} <= {1, 3, 4, 5, 6, 7, 8}

    second = GroupCoordinator(GroupConfig(num_partitions=1), store, consumer_config=config, topics=lambda: topics)
    second.on_became_leader(0)
    await asyncio.sleep(0.01)
    new = second.consumer.groups["g"]
    assert (new.group_epoch, new.assignment_epoch, new.target) == (old.group_epoch, old.assignment_epoch, old.target)
    for mid, m in old.members.items():
        n = new.members[mid]
        assert (n.member_epoch, n.previous_member_epoch, n.state, n.assigned, n.revoking, n.instance_id,
                n.subscribed_topic_names, n.server_assignor, n.rebalance_timeout_ms) == (
            m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.revoking, m.instance_id,
            m.subscribed_topic_names, m.server_assignor, m.rebalance_timeout_ms)
    assert new.partition_epochs == old.partition_epochs and new.static_members == {"i": "a"}
    fetched = second.fetch_offsets("g", [("t", 0)], "a", 1)[1][("t", 0)]
    assert fetched is not None and fetched.offset == 42
    # The members carry on where they were: a finishes its revocation, b gets its partitions.
    keep = sorted(new.members["a"].assigned[TID])
    a = await second.consumer_group_heartbeat(HeartbeatRequest("g", "a", 1, owned={TID: keep}))
    b = await second.consumer_group_heartbeat(HeartbeatRequest("g", "b", 2, owned={}))
    assert a.error == b.error == E.NONE and a.member_epoch == b.member_epoch == 2
    assert b.assignment is not None and set(b.assignment[TID]) == {0, 1, 2, 3} - set(keep)
    # Deleting the empty group leaves tombstones: a third coordinator finds no group.
    for mid in ("a", "b"):
        await second.consumer_group_heartbeat(HeartbeatRequest("g", mid, -1))
    assert await second.delete_groups(["g"]) == {"g": E.NONE}
    await asyncio.sleep(0.01)
    third = GroupCoordinator(GroupConfig(num_partitions=1), store, consumer_config=config, topics=lambda: topics)
    third.on_became_leader(0)
    await asyncio.sleep(0.01)
    assert "g" not in third.consumer.groups
    for c in (second, third):
        c.shutdown()


async def test_an_empty_consumer_group_expires_with_its_offsets() -> None:
    topics = {"t": _topic("t", TID, 1)}
    now = [1_000_000]
    c = GroupCoordinator(GroupConfig(num_partitions=1, retention_ms=1000), MemoryStore(), now_ms=lambda: now[0],
                         consumer_config=ConsumerGroupConfig(), topics=lambda: topics)
    c.on_became_leader(0)
    await asyncio.sleep(0.01)
    await c.consumer_group_heartbeat(HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1000,
                                                      subscribed_topic_names=["t"], owned={}))
    await c.commit_offsets("g", "a", None, 1, {("t", 0): schemas.OffsetValue(1, "", now[0])}, api_version=9)
    now[0] += 5000
    assert await c.expire_offsets() == 0  # a group with members keeps its offsets
    await c.consumer_group_heartbeat(HeartbeatRequest("g", "a", -1))
    assert await c.expire_offsets() == 1
    await asyncio.sleep(0.01)
    assert "g" not in c.consumer.groups and "g" not in c.groups
    c.shutdown()


def test_group_consumer_configs_have_kafkas_defaults_and_bounds() -> None:
    from kaflet.server.config import BrokerConfig, ConfigError

    c = ConsumerGroupConfig.from_broker(BrokerConfig().values)
    assert (c.session_timeout_ms, c.heartbeat_interval_ms, c.assignors) == (45000, 5000, ("uniform", "range"))
    assert ConsumerGroupConfig.from_broker(BrokerConfig({
        "group.consumer.assignors": "org.apache.kafka.coordinator.group.assignor.RangeAssignor"}).values
    ).assignors == ("range",)
    for bad in ({"group.consumer.session.timeout.ms": "30000"},
                {"group.consumer.heartbeat.interval.ms": "16000"},
                {"group.consumer.min.session.timeout.ms": "10", "group.consumer.session.timeout.ms": "10"},
                {"group.consumer.assignors": "sticky"},
                {"group.consumer.migration.policy": "bidirectional"}):
        with pytest.raises(ConfigError):
            BrokerConfig(bad)
