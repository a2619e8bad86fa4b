"""Fetch sessions (KIP-227): contexts, epochs, incremental answers and Kafka's cache eviction."""

from __future__ import annotations

import random

from kaflet.protocol import codec
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.fetch import PartitionFetchData
from kaflet.protocol.response import encode_body
from kaflet.server.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchManager,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorContext,
    SessionFetchResponse,
    SessionlessFetchContext,
    next_epoch,
)

TID = bytes(range(16))


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000.0

    def __call__(self) -> float:
        return self.ms


def request(*parts: tuple[str | bytes, int, int], name: str = "t") -> dict:
    """fetch_data of a request: (topic key, partition, fetch offset) each."""
    out = {}
    for key, p, offset in parts:
        out[(key, p)] = CachedPartition(key, name if isinstance(key, bytes) else key, (p, -1, offset, -1, -1, 1000))
    return out


def answer(context, hw: dict[int, int], records: dict[int, bytes] | None = None,
           errors: dict[int, int] | None = None):
    """Answer every partition the context reads with a high watermark (and records, errors)."""
    records, errors = records or {}, errors or {}
    parts = [(cp, PartitionFetchData(cp.partition, errors.get(cp.partition, 0), hw[cp.partition],
                                     hw[cp.partition], 0, [records[cp.partition]] if cp.partition in records else []))
             for cp in context.partitions()]
    return context.respond(parts)


def open_session(manager: FetchManager, *parts, version: int = 12, privileged: bool = False) -> int:
    ctx = manager.new_context(version, 0, INITIAL_EPOCH, privileged, request(*parts), [], {})
    assert isinstance(ctx, FullFetchContext)
    error, session_id, sent = answer(ctx, {p: 5 for _, p, _ in parts})
    assert error == ErrorCode.NONE and len(sent) == len(parts)
    return session_id


def test_epochs_advance_and_wrap():
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(41) == 42
    assert next_epoch(0x7FFFFFFF) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_sessionless_request_gets_every_partition_and_no_session():
    manager = FetchManager(FetchSessionCache(10), Clock())
    ctx = manager.new_context(12, 0, FINAL_EPOCH, False, request(("t", 0, 0), ("t", 1, 0)), [], {})
    assert isinstance(ctx, SessionlessFetchContext)
    error, session_id, sent = answer(ctx, {0: 0, 1: 0})
    assert (error, session_id, len(sent)) == (ErrorCode.NONE, INVALID_SESSION_ID, 2)
    assert len(manager.cache) == 0


def test_incremental_fetch_answers_only_what_changed():
    clock = Clock()
    manager = FetchManager(FetchSessionCache(10), clock)
    sid = open_session(manager, ("t", 0, 5), ("t", 1, 5), ("t", 2, 5))
    assert sid != INVALID_SESSION_ID and manager.cache.get(sid).epoch == 1

    # Nothing changed: every partition is still read, none is sent.
    ctx = manager.new_context(12, sid, 1, False, {}, [], {})
    assert isinstance(ctx, IncrementalFetchContext) and len(ctx.partitions()) == 3
    assert answer(ctx, {0: 5, 1: 5, 2: 5}) == (ErrorCode.NONE, sid, [])

    # New records on partition 1 only (its high watermark moved too).
    ctx = manager.new_context(12, sid, 2, False, {}, [], {})
    error, _, sent = answer(ctx, {0: 5, 1: 6, 2: 5}, records={1: b"batch"})
    assert [(cp.partition, data.records) for cp, data in sent] == [(1, [b"batch"])]
    # It moved to the back, so the next fetch's byte budget reaches the others first.
    assert [cp.partition for cp in manager.cache.get(sid).partitions.values()] == [0, 2, 1]

    # The client moves partition 1's position (sends only it); partition 2 gets an error.
    ctx = manager.new_context(12, sid, 3, False, request(("t", 1, 6)), [], {})
    error, _, sent = answer(ctx, {0: 5, 1: 6, 2: 5}, errors={2: ErrorCode.NOT_LEADER_OR_FOLLOWER})
    assert [cp.partition for cp, _ in sent] == [2]
    assert manager.cache.get(sid).partitions[("t", 1)].fetch_offset == 6
    # Once the error is gone, the partition is sent again (its high watermark was forgotten).
    ctx = manager.new_context(12, sid, 4, False, {}, [], {})
    assert [cp.partition for cp, _ in answer(ctx, {0: 5, 1: 6, 2: 5})[2]] == [2]


def test_forgetting_every_partition_closes_the_session():
    manager = FetchManager(FetchSessionCache(10), Clock())
    sid = open_session(manager, ("t", 0, 0), ("t", 1, 0))
    ctx = manager.new_context(12, sid, 1, False, {}, [("t", 0)], {})
    assert len(ctx.partitions()) == 1
    ctx = manager.new_context(12, sid, 2, False, {}, [("t", 1)], {})
    assert isinstance(ctx, SessionlessFetchContext) and manager.cache.get(sid) is None


def test_session_errors():
    manager = FetchManager(FetchSessionCache(10), Clock())
    sid = open_session(manager, ("t", 0, 0))
    ctx = manager.new_context(12, sid + 1, 1, False, {}, [], {})
    assert isinstance(ctx, SessionErrorContext) and ctx.error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert answer(ctx, {}) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, INVALID_SESSION_ID, [])
    assert manager.new_context(12, sid, 7, False, {}, [], {}).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    # A session by name cannot go on with topic ids, nor the other way round.
    assert manager.new_context(13, sid, 1, False, {}, [], {}).error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    # The failed attempts did not advance the epoch.
    assert manager.new_context(12, sid, 1, False, {}, [], {}).error == ErrorCode.NONE


def test_a_request_overtaken_by_another_of_its_session_gets_invalid_epoch():
    manager = FetchManager(FetchSessionCache(10), Clock())
    sid = open_session(manager, ("t", 0, 0))
    slow = manager.new_context(12, sid, 1, False, {}, [], {})  # long-polling
    fast = manager.new_context(12, sid, 2, False, {}, [], {})
    assert answer(fast, {0: 5})[0] == ErrorCode.NONE
    assert answer(slow, {0: 5}) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, sid, [])


def test_full_request_closes_the_session_it_names():
    manager = FetchManager(FetchSessionCache(10), Clock())
    sid = open_session(manager, ("t", 0, 0))
    ctx = manager.new_context(12, sid, FINAL_EPOCH, False, request(("t", 0, 0)), [], {})
    assert isinstance(ctx, SessionlessFetchContext) and manager.cache.get(sid) is None
    sid = open_session(manager, ("t", 0, 0))
    ctx = manager.new_context(12, sid, INITIAL_EPOCH, False, request(("t", 0, 0)), [], {})
    _, new_sid, _ = answer(ctx, {0: 0})
    assert manager.cache.get(sid) is None and manager.cache.get(new_sid) is not None


def test_sessions_by_topic_id_resolve_names_at_each_request():
    manager = FetchManager(FetchSessionCache(10), Clock())
    names: dict[bytes, str] = {}
    ctx = manager.new_context(13, 0, INITIAL_EPOCH, False, request((TID, 0, 0), name=None), [], names)
    _, sid, _ = answer(ctx, {0: 0})
    assert [cp.topic for cp in manager.cache.get(sid).partitions.values()] == [None]
    names[TID] = "created-later"
    ctx = manager.new_context(13, sid, 1, False, {}, [], names)
    assert [cp.topic for cp in ctx.partitions()] == ["created-later"]
    del names[TID]
    ctx = manager.new_context(13, sid, 2, False, {}, [], names)
    assert [cp.topic for cp in ctx.partitions()] == [None]


def test_full_cache_admits_no_new_consumer_session_while_others_are_fresh():
    clock = Clock()
    manager = FetchManager(FetchSessionCache(2), clock)
    a = open_session(manager, ("a", 0, 0))
    b = open_session(manager, ("b", 0, 0))
    clock.ms += 1000
    # Both are younger than 2 minutes and were used less than 2 minutes ago: no slot.
    assert open_session(manager, ("c", 0, 0), ("c", 1, 0), ("c", 2, 0)) == INVALID_SESSION_ID
    assert manager.cache.get(a) and manager.cache.get(b) and manager.cache.evictions == 0


def test_stale_session_is_evicted_first():
    clock = Clock()
    manager = FetchManager(FetchSessionCache(2), clock)
    a = open_session(manager, ("a", 0, 0))
    b = open_session(manager, ("b", 0, 0), ("b", 1, 0))
    clock.ms += 60_000
    manager.new_context(12, b, 1, False, {}, [], {})  # b is used, a is not
    clock.ms += 60_001
    c = open_session(manager, ("c", 0, 0))
    assert c != INVALID_SESSION_ID and manager.cache.get(a) is None and manager.cache.get(b) is not None
    assert manager.cache.evictions == 1


def test_privileged_session_evicts_a_consumer_session_at_once():
    clock = Clock()
    manager = FetchManager(FetchSessionCache(2), clock)
    small = open_session(manager, ("a", 0, 0))
    big = open_session(manager, ("b", 0, 0), ("b", 1, 0))
    follower = open_session(manager, ("f", 0, 0), privileged=True)
    # The least valuable consumer session went: the one with fewer partitions.
    assert follower != INVALID_SESSION_ID and manager.cache.get(small) is None and manager.cache.get(big)
    # Followers' sessions are safe from consumers and, for 2 minutes, from other followers.
    assert open_session(manager, ("g", 0, 0), privileged=True) != INVALID_SESSION_ID  # evicts `big`
    assert manager.cache.get(big) is None
    assert open_session(manager, ("h", 0, 0), privileged=True) == INVALID_SESSION_ID
    assert open_session(manager, *[("x", p, 0) for p in range(50)]) == INVALID_SESSION_ID


def test_bigger_session_evicts_an_older_smaller_one_but_not_an_equal_one():
    clock = Clock()
    manager = FetchManager(FetchSessionCache(1), clock)
    old = open_session(manager, ("a", 0, 0), ("a", 1, 0))
    for epoch in range(1, 4):  # kept in use, so never stale
        clock.ms += 50_000
        manager.new_context(12, old, epoch, False, {}, [], {})
    # Older than 2 minutes now, so evictable by anyone with more partitions.
    assert open_session(manager, ("b", 0, 0), ("b", 1, 0)) == INVALID_SESSION_ID
    new = open_session(manager, ("b", 0, 0), ("b", 1, 0), ("b", 2, 0))
    assert new != INVALID_SESSION_ID and manager.cache.get(old) is None
    assert manager.cache.total_partitions == 3


def test_no_slots_no_sessions():
    manager = FetchManager(FetchSessionCache(0), Clock())
    assert open_session(manager, ("a", 0, 0)) == INVALID_SESSION_ID


def test_session_ids_are_unique_and_positive():
    cache = FetchSessionCache(100, rng=random.Random(7))
    manager = FetchManager(cache, Clock())
    ids = {open_session(manager, ("t", i, 0)) for i in range(100)}
    assert len(ids) == 100 and min(ids) > 0 and len(cache) == 100 and cache.total_partitions == 100


def read_all(context, hw: dict[int, int]):
    return [(cp, PartitionFetchData(cp.partition, 0, hw[cp.partition], hw[cp.partition], 0))
            for cp in context.partitions()]


def decode(chunks, version: int = 12):
    return codec.response_class(1).decode(b"".join(bytes(c) for c in chunks), version=version)


def test_a_throttled_incremental_answer_leaves_the_session_as_it_was():
    manager = FetchManager(FetchSessionCache(10), Clock())
    sid = open_session(manager, ("t", 0, 5), ("t", 1, 5))
    ctx = manager.new_context(12, sid, 1, False, {}, [], {})
    response = SessionFetchResponse(ctx, read_all(ctx, {0: 5, 1: 9}), 12, [])
    assert response.size() > 0  # the quota's look changes nothing
    throttled = decode(encode_body(1, 12, response.without_data(), 300))
    assert (throttled.error_code, throttled.session_id, throttled.throttle_time_ms, throttled.responses) == \
        (0, sid, 300, [])
    # The client was not told of partition 1's new high watermark, so the next answer tells it.
    ctx = manager.new_context(12, sid, 2, False, {}, [], {})
    sent = decode(SessionFetchResponse(ctx, read_all(ctx, {0: 5, 1: 9}), 12, []).encode(0))
    assert [p.partition_index for t in sent.responses for p in t.partitions] == [1]
    ctx = manager.new_context(12, sid, 3, False, {}, [], {})
    assert decode(SessionFetchResponse(ctx, read_all(ctx, {0: 5, 1: 9}), 12, []).encode(0)).responses == []


def test_a_throttled_full_fetch_creates_no_session():
    manager = FetchManager(FetchSessionCache(10), Clock())
    ctx = manager.new_context(12, 0, INITIAL_EPOCH, False, request(("t", 0, 0)), [], {})
    response = SessionFetchResponse(ctx, read_all(ctx, {0: 3}), 12, [])
    size = response.size()
    throttled = decode(encode_body(1, 12, response.without_data(), 100))
    assert throttled.session_id == INVALID_SESSION_ID and len(manager.cache) == 0
    # Not throttled: the session is created as the response is encoded, sized as measured.
    chunks = response.encode(0)
    assert sum(len(bytes(c)) for c in chunks) == size
    assert decode(chunks).session_id > 0 and len(manager.cache) == 1
