"""The group coordinator's state machine and offsets, without sockets (in-memory store)."""

from __future__ import annotations

import asyncio

import pytest

from kaflet.coordinator.group import schemas
from kaflet.coordinator.group.coordinator import GroupConfig, GroupCoordinator
from kaflet.coordinator.group.group import Group, GroupState, IllegalStateTransition
from kaflet.coordinator.group.store import KeyValue, LoadedPartition, replay
from kaflet.protocol.errors import ErrorCode as E

PROTOS = [("range", b"meta")]


class MemoryStore:
    """A GroupStore that keeps the records of each partition in a list."""

    def __init__(self) -> None:
        self.records: dict[int, list[KeyValue]] = {}
        self.fail: E = E.NONE

    async def append(self, partition: int, records: list[KeyValue], producer_id: int = -1,
                     producer_epoch: int = -1) -> E:
        assert producer_id == -1  # transactional offsets are tested over a real log (test_txn_offsets)
        if self.fail != E.NONE:
            return self.fail
        self.records.setdefault(partition, []).extend(records)
        return E.NONE

    async def load(self, partition: int) -> LoadedPartition:
        loaded = LoadedPartition()
        for k, v in self.records.get(partition, []):
            replay(loaded, k, v)
        return loaded


async def _coordinator(store: MemoryStore | None = None, **cfg: int) -> GroupCoordinator:
    config = GroupConfig(min_session_timeout_ms=10, initial_rebalance_delay_ms=0, num_partitions=1,
                         retention_ms=60_000, **cfg)
    c = GroupCoordinator(config, store or MemoryStore())
    c.on_became_leader(0)
    for _ in range(10):
        await asyncio.sleep(0)
    assert 0 in c.owned
    return c


def _join(c: GroupCoordinator, group: str = "g", member: str = "", session: int = 5000, rebalance: int = 1000,
          instance: str | None = None, protocols: list[tuple[str, bytes]] | None = None, require_known: bool = False):
    return c.join_group(group, member, instance, require_known, "client", "/127.0.0.1", rebalance, session,
                        "consumer", protocols or PROTOS)


async def test_single_member_join_sync_stable() -> None:
    c = await _coordinator()
    r = await _join(c)
    assert r.error == E.NONE and r.generation_id == 1 and r.leader_id == r.member_id
    assert r.members == [(r.member_id, None, b"meta")] and r.protocol_name == "range"
    assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE
    s = await c.sync_group("g", 1, r.member_id, None, None, None, {r.member_id: b"A"})
    assert s.error == E.NONE and s.assignment == b"A"
    assert c.groups["g"].state is GroupState.STABLE
    assert c.heartbeat("g", r.member_id, None, 1) == E.NONE
    c.shutdown()


async def test_second_member_triggers_rebalance() -> None:
    c = await _coordinator()
    a = await _join(c)
    await c.sync_group("g", 1, a.member_id, None, None, None, {a.member_id: b"A"})
    join_b = asyncio.ensure_future(_join(c))
    await asyncio.sleep(0.01)
    assert not join_b.done()
    assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert c.heartbeat("g", a.member_id, None, 1) == E.REBALANCE_IN_PROGRESS
    a2 = await _join(c, member=a.member_id)
    b = await join_b
    assert a2.generation_id == b.generation_id == 2
    assert len(a2.members) == 2 and b.members == []  # only the leader gets the member list
    # A follower's sync waits for the leader's.
    sync_b = asyncio.ensure_future(c.sync_group("g", 2, b.member_id, None, None, None, {}))
    await asyncio.sleep(0.01)
    assert not sync_b.done()
    await c.sync_group("g", 2, a.member_id, None, None, None, {a.member_id: b"1", b.member_id: b"2"})
    assert (await sync_b).assignment == b"2"
    c.shutdown()


async def test_dead_member_is_removed_after_session_timeout() -> None:
    c = await _coordinator()
    a = await _join(c, session=100)
    await c.sync_group("g", 1, a.member_id, None, None, None, {})
    await asyncio.sleep(0.3)
    g = c.groups["g"]
    assert not g.members and g.state is GroupState.EMPTY and g.generation_id == 2
    c.shutdown()


async def test_member_not_rejoining_is_dropped_at_rebalance_timeout() -> None:
    c = await _coordinator()
    a = await _join(c, session=5000, rebalance=200)
    await c.sync_group("g", 1, a.member_id, None, None, None, {})
    b = await asyncio.wait_for(_join(c, rebalance=200), 2)  # a never rejoins
    assert b.error == E.NONE and b.generation_id == 2 and list(c.groups["g"].members) == [b.member_id]
    c.shutdown()


async def test_member_id_required_and_pending_expiry() -> None:
    c = await _coordinator()
    r = await _join(c, require_known=True, session=100)
    assert r.error == E.MEMBER_ID_REQUIRED and r.member_id.startswith("client-")
    assert r.member_id in c.groups["g"].pending_members
    await asyncio.sleep(0.2)
    assert r.member_id not in c.groups["g"].pending_members
    r = await _join(c, require_known=True)
    ok = await _join(c, member=r.member_id, require_known=True)
    assert ok.error == E.NONE and ok.member_id == r.member_id
    c.shutdown()


async def test_errors() -> None:
    small = await _coordinator(max_size=1)
    await _join(small)
    assert (await _join(small)).error == E.GROUP_MAX_SIZE_REACHED
    small.shutdown()
    c = await _coordinator()
    a = await _join(c)
    assert (await _join(c, session=1)).error == E.INVALID_SESSION_TIMEOUT
    assert (await _join(c, protocols=[("x", b"")])).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert (await _join(c, group="other", member="ghost")).error == E.UNKNOWN_MEMBER_ID
    assert (await c.sync_group("g", 9, a.member_id, None, None, None, {})).error == E.ILLEGAL_GENERATION
    assert (await c.sync_group("g", 1, a.member_id, "connect", None, None, {})).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert (await c.sync_group("nope", 1, "m", None, None, None, {})).error == E.UNKNOWN_MEMBER_ID
    c.loading.add(0)
    assert (await _join(c)).error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert c.heartbeat("g", a.member_id, None, 1) == E.NONE  # loading: heartbeats pass
    assert (await c.sync_group("g", 1, a.member_id, None, None, None, {})).error == E.REBALANCE_IN_PROGRESS
    c.loading.discard(0)
    c.owned.discard(0)
    assert (await _join(c)).error == E.NOT_COORDINATOR
    c.shutdown()


async def test_static_member_rejoin_keeps_generation_and_assignment() -> None:
    store = MemoryStore()
    c = await _coordinator(store)
    a = await _join(c, instance="i1")
    await c.sync_group("g", 1, a.member_id, None, None, "i1", {a.member_id: b"mine"})
    again = await _join(c, instance="i1")
    assert again.error == E.NONE and again.generation_id == 1 and again.member_id != a.member_id
    assert again.leader_id == a.member_id  # the old leader id: no assignment to compute
    s = await c.sync_group("g", 1, again.member_id, None, None, "i1", {})
    assert s.assignment == b"mine"
    assert c.heartbeat("g", a.member_id, "i1", 1) == E.FENCED_INSTANCE_ID
    c.shutdown()


async def test_commits_and_group_survive_reload() -> None:
    store = MemoryStore()
    c = await _coordinator(store)
    a = await _join(c)
    await c.sync_group("g", 1, a.member_id, None, None, None, {a.member_id: b"A"})
    res = await c.commit_offsets("g", a.member_id, None, 1, {("t", 0): schemas.OffsetValue(5, "meta", 1)})
    assert res == {("t", 0): E.NONE}
    res = await c.commit_offsets("simple", "", None, -1, {("t", 1): schemas.OffsetValue(7, "", 1)})
    assert res == {("t", 1): E.NONE}
    big = await c.commit_offsets("g", a.member_id, None, 1, {("t", 2): schemas.OffsetValue(1, "x" * 5000, 1)})
    assert big == {("t", 2): E.OFFSET_METADATA_TOO_LARGE}
    c.shutdown()
    c2 = await _coordinator(store)
    err, offsets = c2.fetch_offsets("g", [("t", 0), ("t", 9)])
    assert err == E.NONE and offsets[("t", 0)].offset == 5 and offsets[("t", 0)].metadata == "meta"
    assert offsets[("t", 9)] is None
    assert c2.fetch_offsets("simple", None)[1][("t", 1)].offset == 7
    g = c2.groups["g"]
    assert g.state is GroupState.STABLE and g.generation_id == 1 and g.members[a.member_id].assignment == b"A"
    c2.shutdown()


async def test_delete_groups_and_offsets() -> None:
    store = MemoryStore()
    c = await _coordinator(store)
    a = await _join(c)
    await c.sync_group("g", 1, a.member_id, None, None, None, {})
    await c.commit_offsets("g", a.member_id, None, 1, {("t", 0): schemas.OffsetValue(5)})
    assert await c.delete_groups(["g", "missing"]) == {"g": E.NON_EMPTY_GROUP, "missing": E.GROUP_ID_NOT_FOUND}
    assert (await c.delete_offsets("g", [("t", 0)]))[1] == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC}
    c.leave_group("g", [(a.member_id, None)])
    assert c.groups["g"].state is GroupState.EMPTY
    assert await c.delete_groups(["g"]) == {"g": E.NONE}
    assert "g" not in c.groups
    tail = store.records[0][-2:]
    assert tail[0] == (schemas.encode_offset_key("g", "t", 0), None)
    assert tail[1] == (schemas.encode_group_key("g"), None)
    c.shutdown()
    c2 = await _coordinator(store)
    assert "g" not in c2.groups
    c2.shutdown()


async def test_offsets_of_empty_group_expire() -> None:
    store = MemoryStore()
    now = [1_000_000]
    config = GroupConfig(min_session_timeout_ms=10, initial_rebalance_delay_ms=0, num_partitions=1, retention_ms=1000)
    c = GroupCoordinator(config, store, now_ms=lambda: now[0])
    c.on_became_leader(0)
    await asyncio.sleep(0)
    await c.commit_offsets("s", "", None, -1, {("t", 0): schemas.OffsetValue(1, "", now[0])})
    assert await c.expire_offsets() == 0
    now[0] += 1000
    assert await c.expire_offsets() == 1
    assert "s" not in c.groups
    c.shutdown()


async def test_store_failure_propagates_to_sync() -> None:
    store = MemoryStore()
    c = await _coordinator(store)
    a = await _join(c)
    store.fail = E.MESSAGE_TOO_LARGE
    s = await c.sync_group("g", 1, a.member_id, None, None, None, {})
    assert s.error == E.UNKNOWN_SERVER_ERROR
    assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
    store.fail = E.NOT_LEADER_OR_FOLLOWER
    res = await c.commit_offsets("x", "", None, -1, {("t", 0): schemas.OffsetValue(1)})
    assert res == {("t", 0): E.NOT_COORDINATOR}
    c.shutdown()


def test_illegal_transitions_raise() -> None:
    g = Group("g", 0)
    with pytest.raises(IllegalStateTransition):
        g.transition_to(GroupState.STABLE, 1)
    g.transition_to(GroupState.PREPARING_REBALANCE, 1)
    g.transition_to(GroupState.COMPLETING_REBALANCE, 2)
    with pytest.raises(IllegalStateTransition):
        g.transition_to(GroupState.EMPTY, 3)
    g.transition_to(GroupState.DEAD, 4)


async def _second_generation_of_two(c: GroupCoordinator):
    """a joins and syncs alone, then b joins and a rejoins: generation 2 with a as the leader,
    waiting for both SyncGroups (sessions far longer than the 300 ms rebalance timeout)."""
    a = await _join(c, session=10_000, rebalance=300)
    await c.sync_group("g", 1, a.member_id, None, None, None, {})
    join_b = asyncio.ensure_future(_join(c, session=10_000, rebalance=300))
    await asyncio.sleep(0.01)
    a2 = await _join(c, member=a.member_id, session=10_000, rebalance=300)
    return a, a2, await join_b


async def test_member_that_never_syncs_is_removed_after_rebalance_timeout() -> None:
    # KAFKA-12890: the leader syncs (the group is Stable), the follower never does; after the
    # rebalance timeout the follower is removed and a rebalance begins for the leader alone.
    c = await _coordinator()
    a, a2, b = await _second_generation_of_two(c)
    g = c.groups["g"]
    assert a2.generation_id == b.generation_id == 2 and g.pending_sync == {a.member_id, b.member_id}
    s = await c.sync_group("g", 2, a.member_id, None, None, None, {a.member_id: b"A", b.member_id: b"B"})
    assert s.error == E.NONE and g.state is GroupState.STABLE and g.pending_sync == {b.member_id}
    assert c.heartbeat("g", a.member_id, None, 2) == E.NONE
    await asyncio.sleep(0.45)
    assert b.member_id not in g.members and g.state is GroupState.PREPARING_REBALANCE
    assert c.heartbeat("g", a.member_id, None, 2) == E.REBALANCE_IN_PROGRESS
    a3 = await asyncio.wait_for(_join(c, member=a.member_id, session=10_000, rebalance=300), 2)
    assert a3.error == E.NONE and a3.generation_id == 3 and [m[0] for m in a3.members] == [a.member_id]
    assert c.heartbeat("g", b.member_id, None, 2) == E.UNKNOWN_MEMBER_ID
    c.shutdown()


async def test_follower_waiting_for_a_silent_leader_is_told_to_rejoin() -> None:
    # The follower syncs and waits for the leader's assignment; the leader never syncs. At the
    # rebalance timeout the leader goes and the follower's SyncGroup gets REBALANCE_IN_PROGRESS.
    c = await _coordinator()
    a, _, b = await _second_generation_of_two(c)
    assert c.groups["g"].leader_id == a.member_id
    s = await asyncio.wait_for(c.sync_group("g", 2, b.member_id, None, None, None, {}), 2)
    assert s.error == E.REBALANCE_IN_PROGRESS
    g = c.groups["g"]
    assert list(g.members) == [b.member_id] and g.state is GroupState.PREPARING_REBALANCE
    b2 = await asyncio.wait_for(_join(c, member=b.member_id, session=10_000, rebalance=300), 2)
    assert b2.generation_id == 3 and b2.leader_id == b.member_id
    c.shutdown()


async def test_all_members_syncing_cancels_the_pending_sync_timer() -> None:
    c = await _coordinator()
    a = await _join(c, session=10_000, rebalance=100)
    assert c.groups["g"].sync_timer is not None
    await c.sync_group("g", 1, a.member_id, None, None, None, {})
    g = c.groups["g"]
    assert g.sync_timer is None and not g.pending_sync
    await asyncio.sleep(0.2)
    assert g.state is GroupState.STABLE and list(g.members) == [a.member_id]
    c.shutdown()
