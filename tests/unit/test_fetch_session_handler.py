"""The follower's side of fetch sessions (Kafka's FetchSessionHandler), alone and against the
broker's own session code (kaflet.server.fetch_session) through the real request codec."""

from __future__ import annotations

from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.fetch import (
    ENCODE_REQUEST_VERSION,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchPartition,
    PartitionFetchData,
    decode_fetch_request,
    encode_fetch_request,
)
from kaflet.replication.fetch_session_handler import INITIAL, FetchMetadata, FetchSessionHandler
from kaflet.server.fetch_session import (
    CachedPartition,
    FetchManager,
    FetchSessionCache,
    IncrementalFetchContext,
)

T = "orders"


def fp(partition: int, offset: int, epoch: int = 0) -> FetchPartition:
    return (partition, epoch, offset, -1, 0, 1 << 20)


def test_full_then_incremental_sends_only_what_changed() -> None:
    h = FetchSessionHandler()
    ready = {(T, 0): fp(0, 10), (T, 1): fp(1, 20), (T, 2): fp(2, 30)}
    first = h.build(ready)
    assert first.metadata == INITIAL and first.to_send == ready and first.to_forget == []
    assert h.handle_response(ErrorCode.NONE, 77, [(T, 0), (T, 1), (T, 2)])
    assert h.next_metadata == FetchMetadata(77, 1)

    # Partition 1 moved on, partition 2 is not ready any more (backing off), 3 is new.
    second = h.build({(T, 0): fp(0, 10), (T, 1): fp(1, 25), (T, 3): fp(3, 0)})
    assert second.metadata == FetchMetadata(77, 1)
    assert second.to_send == {(T, 1): fp(1, 25), (T, 3): fp(3, 0)}
    assert second.to_forget == [(T, 2)]
    assert list(h.session_partitions) == [(T, 0), (T, 1), (T, 3)]
    # An incremental answer carries only the partitions with news.
    assert h.handle_response(ErrorCode.NONE, 77, [(T, 3)])
    assert h.next_metadata == FetchMetadata(77, 2)
    # Nothing changed: an empty incremental request.
    third = h.build({(T, 0): fp(0, 10), (T, 1): fp(1, 25), (T, 3): fp(3, 0)})
    assert third.to_send == {} and third.to_forget == [] and third.metadata.epoch == 2
    assert h.handle_response(ErrorCode.NONE, 77, [])
    # The same partitions, one moved on: only it is sent, nothing forgotten, the order kept.
    fourth = h.build({(T, 0): fp(0, 11), (T, 1): fp(1, 25), (T, 3): fp(3, 0)})
    assert fourth.to_send == {(T, 0): fp(0, 11)} and fourth.to_forget == []
    assert h.session_partitions == {(T, 0): fp(0, 11), (T, 1): fp(1, 25), (T, 3): fp(3, 0)}
    assert list(h.session_partitions) == [(T, 0), (T, 1), (T, 3)]


def test_sessionless_leader_gets_full_fetches() -> None:
    h = FetchSessionHandler()
    h.build({(T, 0): fp(0, 1)})
    assert h.handle_response(ErrorCode.NONE, INVALID_SESSION_ID, [(T, 0)])
    assert h.next_metadata == INITIAL
    assert h.build({(T, 0): fp(0, 2)}).to_send == {(T, 0): fp(0, 2)}


def test_errors_and_bad_answers_start_a_new_session() -> None:
    h = FetchSessionHandler()
    h.build({(T, 0): fp(0, 1)})
    assert h.handle_response(ErrorCode.NONE, 5, [(T, 0)])
    h.build({(T, 0): fp(0, 2)})
    # The leader forgot the session: start from nothing.
    assert not h.handle_response(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
    assert h.next_metadata == INITIAL
    h.build({(T, 0): fp(0, 2)})
    assert h.handle_response(ErrorCode.NONE, 6, [(T, 0)])
    h.build({(T, 0): fp(0, 3)})
    # Out of step: close this session and open another with the next full fetch.
    assert not h.handle_response(ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
    assert h.next_metadata == FetchMetadata(6, INITIAL_EPOCH)
    full = h.build({(T, 0): fp(0, 3), (T, 1): fp(1, 0)})
    assert full.metadata.is_full and set(full.to_send) == {(T, 0), (T, 1)}
    # A full answer that leaves a partition out is not used.
    assert not h.handle_response(ErrorCode.NONE, 8, [(T, 0)])
    assert h.next_metadata == INITIAL
    h.build({(T, 0): fp(0, 3)})
    assert h.handle_response(ErrorCode.NONE, 9, [(T, 0)])
    h.build({(T, 0): fp(0, 4)})
    # An incremental answer naming a partition outside the session is not used either.
    assert not h.handle_response(ErrorCode.NONE, 9, [(T, 7)])
    assert h.next_metadata == FetchMetadata(9, INITIAL_EPOCH)
    # A lost connection: the leader's state is unknown, so replace the session.
    h.build({(T, 0): fp(0, 4)})
    h.handle_error()
    assert h.next_metadata == FetchMetadata(9, INITIAL_EPOCH)


def test_throttled_full_fetch_is_retried() -> None:
    h = FetchSessionHandler()
    h.build({(T, 0): fp(0, 1)})
    assert not h.handle_response(ErrorCode.NONE, 0, [], throttle_time_ms=100)
    assert h.next_metadata == INITIAL


def _leader_round(manager: FetchManager, h: FetchSessionHandler, ready: dict[tuple[str, int], FetchPartition],
                  leader_end: dict[int, int]) -> list[int]:
    """One fetch through the request codec into the broker's session code; the leader has
    records up to ``leader_end`` in each partition. Returns the partitions answered."""
    data = h.build(ready)
    body = encode_fetch_request(2, 500, 1, 1 << 20, 0, data.metadata.session_id, data.metadata.epoch,
                                [(T, list(data.to_send.values()))] if data.to_send else [],
                                [(T, [p for _, p in data.to_forget])] if data.to_forget else [])
    req = decode_fetch_request(memoryview(body), ENCODE_REQUEST_VERSION)
    fetch_data = {(t.name, p[0]): CachedPartition(t.name, t.name, p) for t in req.topics for p in t.partitions}
    forget = [(f.name, p) for f in req.forgotten_topics for p in f.partitions]
    ctx = manager.new_context(ENCODE_REQUEST_VERSION, req.session_id, req.session_epoch, True, fetch_data, forget,
                              {})
    answers = []
    for cp in ctx.partitions():
        end = leader_end[cp.partition]
        records = [b"x" * (end - cp.fetch_offset)] if end > cp.fetch_offset else []
        answers.append((cp, PartitionFetchData(cp.partition, 0, end, end, 0, records)))
    error, session_id, sent = ctx.respond(answers)
    answered = [cp.partition for cp, _ in sent]
    assert h.handle_response(error, session_id, [(T, p) for p in answered])
    return answered


def test_against_the_brokers_sessions() -> None:
    manager = FetchManager(FetchSessionCache(10), lambda: 1_000_000.0)
    h = FetchSessionHandler()
    offsets = {p: 0 for p in range(100)}
    ends = dict.fromkeys(range(100), 0)

    def ready() -> dict[tuple[str, int], FetchPartition]:
        return {(T, p): fp(p, o) for p, o in offsets.items()}

    # The full fetch opens a privileged session and is answered for every partition.
    assert _leader_round(manager, h, ready(), ends) == list(range(100))
    assert h.next_metadata.session_id != INVALID_SESSION_ID and len(manager.cache) == 1
    # Two partitions get records: only they come back.
    ends[3] = ends[42] = 5
    assert sorted(_leader_round(manager, h, ready(), ends)) == [3, 42]
    # The follower appended them: only their new positions go out, and nothing is new.
    offsets[3] = offsets[42] = 5
    assert sorted(h.build(ready()).to_send) == [(T, 3), (T, 42)]
    h.next_metadata = h.next_metadata.next_close_existing()  # that request was not sent: start over
    assert len(_leader_round(manager, h, ready(), ends)) == 100
    assert _leader_round(manager, h, ready(), ends) == []
    session = manager.cache.get(h.next_metadata.session_id)
    assert session is not None and session.partitions[(T, 3)].fetch_offset == 5
    ends[7] = 1
    assert _leader_round(manager, h, ready(), ends) == [7]
    # A partition leaves the fetcher: the leader's session forgets it too.
    del offsets[99]
    assert _leader_round(manager, h, ready(), ends) == [7]
    session = manager.cache.get(h.next_metadata.session_id)
    assert session is not None and (T, 99) not in session.partitions and len(session.partitions) == 99
    assert isinstance(manager.new_context(ENCODE_REQUEST_VERSION, h.next_metadata.session_id,
                                          h.next_metadata.epoch, True, {}, [], {}), IncrementalFetchContext)
