"""Out-of-order, stale and oversized group requests get Kafka's error codes, and never wedge a
group (or the broker) for well-behaved members."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kaflet.protocol import codec
from kaflet.protocol.errors import ErrorCode as E
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.groups import join, subscription, sync
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic

HEARTBEAT, LEAVE, COMMIT, FETCH, FIND = 12, 13, 8, 9, 10


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000",
                 "offsets.topic.num.partitions": "1"}
    with running_broker(tmp_path_factory.mktemp("ghostile") / "data", overrides) as b:
        c = RawClient(b.bootstrap)
        r = c.request(FIND, 1, codec.request_class(FIND)(key="any", key_type=0))
        assert r.error_code == 0, r  # creates __consumer_offsets
        c.close()
        yield b


def _gid() -> str:
    return f"h-{uuid.uuid4().hex[:8]}"


def heartbeat(c: RawClient, group: str, gen: int, member: str, instance: str | None = None) -> int:
    return c.request(HEARTBEAT, 3, codec.request_class(HEARTBEAT)(
        group_id=group, generation_id=gen, member_id=member, group_instance_id=instance)).error_code


def commit(c: RawClient, group: str, gen: int, member: str, metadata: str = "", version: int = 7) -> int:
    R = codec.request_class(COMMIT)
    T = R.OffsetCommitRequestTopic
    req = R(group_id=group, generation_id_or_member_epoch=gen, member_id=member, group_instance_id=None,
            retention_time_ms=-1, topics=[T(name="hostile-t", partitions=[T.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=metadata)])])
    return c.request(COMMIT, version, req).topics[0].partitions[0].error_code


def test_sync_heartbeat_commit_before_join(broker: BrokerProcess) -> None:
    c = RawClient(broker.bootstrap)
    g = _gid()
    assert sync(c, g, 1, "nobody").error_code == E.UNKNOWN_MEMBER_ID
    assert heartbeat(c, g, 1, "nobody") == E.UNKNOWN_MEMBER_ID
    assert c.request(LEAVE, 1, codec.request_class(LEAVE)(group_id=g, member_id="nobody")).error_code \
        == E.UNKNOWN_MEMBER_ID
    if not _topic_exists(broker):
        create_topic(broker.bootstrap, "hostile-t", 1)
    assert commit(c, g, 3, "nobody") == E.ILLEGAL_GENERATION  # no group, positive generation
    assert join(c, g, member="made-up").error_code == E.UNKNOWN_MEMBER_ID
    assert join(c, "").error_code == E.INVALID_GROUP_ID
    c.close()


def _topic_exists(broker: BrokerProcess) -> bool:
    c = RawClient(broker.bootstrap)
    R = codec.request_class(3)
    r = c.request(3, 4, R(topics=[R.MetadataRequestTopic(name="hostile-t")], allow_auto_topic_creation=False))
    c.close()
    return r.topics[0].error_code == 0


def test_wrong_generation_and_member(broker: BrokerProcess) -> None:
    if not _topic_exists(broker):
        create_topic(broker.bootstrap, "hostile-t", 1)
    c = RawClient(broker.bootstrap)
    g = _gid()
    r = join(c, g)
    assert r.error_code == 0 and r.generation_id == 1 and r.leader == r.member_id and len(r.members) == 1
    me = r.member_id
    assert heartbeat(c, g, 1, me) == E.NONE  # CompletingRebalance: heartbeats are fine
    assert sync(c, g, 7, me).error_code == E.ILLEGAL_GENERATION
    assert sync(c, g, 1, "stranger").error_code == E.UNKNOWN_MEMBER_ID
    s = sync(c, g, 1, me, {me: b"assignment-bytes"})
    assert s.error_code == 0 and s.assignment == b"assignment-bytes"
    assert heartbeat(c, g, 0, me) == E.ILLEGAL_GENERATION
    assert heartbeat(c, g, 1, "stranger") == E.UNKNOWN_MEMBER_ID
    assert commit(c, g, 2, me) == E.ILLEGAL_GENERATION
    assert commit(c, g, 1, "stranger") == E.UNKNOWN_MEMBER_ID
    assert commit(c, g, 1, me, metadata="m" * 5000) == E.OFFSET_METADATA_TOO_LARGE
    assert commit(c, g, 1, me, metadata="ok") == E.NONE
    assert commit(c, g, -1, "") == E.UNKNOWN_MEMBER_ID  # a simple commit into an active group
    assert join(c, g, protocol_type="connect").error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert join(c, g, protocols=[("other", b"")]).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert join(c, g, session=10).error_code == E.INVALID_SESSION_TIMEOUT
    assert join(c, g, version=4).error_code == E.MEMBER_ID_REQUIRED
    # The real member is unaffected by all of that.
    assert heartbeat(c, g, 1, me) == E.NONE
    assert c.request(LEAVE, 1, codec.request_class(LEAVE)(group_id=g, member_id=me)).error_code == 0
    c.close()


def test_commit_while_completing_rebalance_checks_the_member_first(broker: BrokerProcess) -> None:
    """Kafka validates member and generation before the group state: only a current member of
    the current generation hears REBALANCE_IN_PROGRESS while the leader has not synced yet."""
    if not _topic_exists(broker):
        create_topic(broker.bootstrap, "hostile-t", 1)
    c = RawClient(broker.bootstrap)
    g = _gid()
    r = join(c, g)
    assert r.error_code == 0 and r.generation_id == 1
    me = r.member_id  # the group is in CompletingRebalance until this leader syncs
    assert commit(c, g, 1, "stranger") == E.UNKNOWN_MEMBER_ID
    assert commit(c, g, 5, me) == E.ILLEGAL_GENERATION
    assert commit(c, g, -1, "") == E.UNKNOWN_MEMBER_ID
    assert commit(c, g, 1, me) == E.REBALANCE_IN_PROGRESS
    assert sync(c, g, 1, me, {me: b"a"}).error_code == 0
    assert commit(c, g, 1, me) == E.NONE
    assert c.request(LEAVE, 1, codec.request_class(LEAVE)(group_id=g, member_id=me)).error_code == 0
    c.close()


def test_static_member_fencing(broker: BrokerProcess) -> None:
    c = RawClient(broker.bootstrap)
    g = _gid()
    r = join(c, g, version=5, instance="inst-1")
    assert r.error_code == 0
    assert sync(c, g, r.generation_id, r.member_id, {r.member_id: b"a"}).error_code == 0
    assert heartbeat(c, g, r.generation_id, "impostor", instance="inst-1") == E.FENCED_INSTANCE_ID
    # The same instance restarting gets a new member id and its old assignment, same generation.
    r2 = join(c, g, version=5, instance="inst-1")
    assert r2.error_code == 0 and r2.member_id != r.member_id and r2.generation_id == r.generation_id
    s = sync(c, g, r2.generation_id, r2.member_id)
    assert s.error_code == 0 and s.assignment == b"a"
    assert heartbeat(c, g, r.generation_id, r.member_id, instance="inst-1") == E.FENCED_INSTANCE_ID
    c.close()


def test_waiting_join_blocks_nobody_else(broker: BrokerProcess) -> None:
    g = _gid()
    a, b, other = RawClient(broker.bootstrap), RawClient(broker.bootstrap), RawClient(broker.bootstrap)
    ra = join(a, g)
    assert sync(a, g, 1, ra.member_id, {ra.member_id: b"x"}).error_code == 0
    result: dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.setdefault("b", join(b, g, rebalance=20000)))
    t.start()
    time.sleep(0.5)
    assert t.is_alive()  # b waits for a to rejoin
    t0 = time.monotonic()
    assert heartbeat(other, _gid(), 1, "x") == E.UNKNOWN_MEMBER_ID  # another connection is served at once
    assert heartbeat(a, g, 1, ra.member_id) == E.REBALANCE_IN_PROGRESS
    assert time.monotonic() - t0 < 2
    ra2 = join(a, g, member=ra.member_id)
    t.join(10)
    rb = result["b"]
    assert ra2.error_code == 0 and rb.error_code == 0 and ra2.generation_id == rb.generation_id == 2
    for c in (a, b, other):
        c.close()


def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout(broker: BrokerProcess) -> None:
    """KAFKA-12890 (Kafka 3.0+): a member that got its JoinGroup response but sends no SyncGroup
    within the rebalance timeout is removed and the group rebalances without it, so one stuck
    member cannot hold the group. Its session timeout (30 s) is far beyond the test's length."""
    g = _gid()
    a, b = RawClient(broker.bootstrap), RawClient(broker.bootstrap)
    session, rebalance = 30_000, 1500
    ra = join(a, g, session=session, rebalance=rebalance)
    assert sync(a, g, 1, ra.member_id, {ra.member_id: b"all"}).error_code == 0
    result: dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.setdefault("b", join(b, g, session=session, rebalance=rebalance)))
    t.start()
    deadline = time.monotonic() + 10
    while heartbeat(a, g, 1, ra.member_id) != E.REBALANCE_IN_PROGRESS:
        assert time.monotonic() < deadline, "b's JoinGroup did not start a rebalance"
        time.sleep(0.05)
    ra2 = join(a, g, member=ra.member_id, session=session, rebalance=rebalance)
    t.join(10)
    rb = result["b"]
    assert ra2.error_code == rb.error_code == 0 and ra2.generation_id == rb.generation_id == 2
    assert ra2.leader == ra.member_id and len(ra2.members) == 2
    # The leader syncs (the group becomes Stable); b never sends its SyncGroup.
    assert sync(a, g, 2, ra.member_id, {ra.member_id: b"p0", rb.member_id: b"p1"}).error_code == 0
    synced = time.monotonic()
    assert heartbeat(a, g, 2, ra.member_id) == E.NONE
    while (code := heartbeat(a, g, 2, ra.member_id)) == E.NONE:
        assert time.monotonic() - synced < 10, "the silent member was never removed"
        time.sleep(0.1)
    assert code == E.REBALANCE_IN_PROGRESS
    assert time.monotonic() - synced >= rebalance / 1000 * 0.9  # not before the rebalance timeout
    ra3 = join(a, g, member=ra.member_id, session=session, rebalance=rebalance)
    assert ra3.error_code == 0 and ra3.generation_id == 3
    assert [m.member_id for m in ra3.members] == [ra.member_id]  # a rejoined alone
    assert sync(a, g, 3, ra.member_id, {ra.member_id: b"all"}).error_code == 0
    assert heartbeat(b, g, 2, rb.member_id) == E.UNKNOWN_MEMBER_ID
    for c in (a, b):
        c.close()


def test_huge_member_metadata_does_not_wedge_others(broker: BrokerProcess) -> None:
    g = _gid()
    c = RawClient(broker.bootstrap, timeout=30)
    big = join(c, g, protocols=[("range", subscription(["t"], pad=2_000_000))])
    assert big.error_code == 0
    # Its generation cannot be stored (larger than max.message.bytes): Kafka's UNKNOWN_SERVER_ERROR.
    s = sync(c, g, big.generation_id, big.member_id, {big.member_id: b"a"})
    assert s.error_code == E.UNKNOWN_SERVER_ERROR
    # Others are not affected, on another group...
    d = RawClient(broker.bootstrap)
    g2 = _gid()
    r = join(d, g2)
    assert r.error_code == 0 and sync(d, g2, 1, r.member_id, {r.member_id: b""}).error_code == 0
    # ...nor on this one once the oversized member has gone.
    assert c.request(LEAVE, 1, codec.request_class(LEAVE)(group_id=g, member_id=big.member_id)).error_code == 0
    r = join(d, g)
    assert r.error_code == 0
    assert sync(d, g, r.generation_id, r.member_id, {r.member_id: b"ok"}).assignment == b"ok"
    c.close()
    d.close()


def test_find_coordinator_versions(broker: BrokerProcess) -> None:
    c = RawClient(broker.bootstrap)
    R = codec.request_class(FIND)
    r = c.request(FIND, 4, R(key_type=0, coordinator_keys=["a", "b"]))
    assert [x.error_code for x in r.coordinators] == [0, 0] and r.coordinators[0].port == broker.port
    r = c.request(FIND, 3, R(key="txn", key_type=1))
    assert r.error_code == 0 and r.port == broker.port  # the transaction coordinator
    r = c.request(FIND, 0, R(key="g"))
    assert r.error_code == 0 and r.port == broker.port
    c.close()
