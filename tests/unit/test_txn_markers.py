"""The marker sender: WriteTxnMarkers per leader, retries, dropped and fenced partitions. The
brokers are recorded stand-ins answering with real codec responses."""

from __future__ import annotations

from typing import Any

from kaflet.coordinator.transaction.coordinator import MarkerJob
from kaflet.coordinator.transaction.markers import WRITE_TXN_MARKERS_VERSION, TxnMarkerSender, build_request
from kaflet.network.client import BrokerClient, BrokerConnectionError
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode as E

R: Any = codec.response_class(ApiKey.WRITE_TXN_MARKERS)
JOB = MarkerJob("t", 42, 3, True, 7, frozenset({("a", 0), ("a", 1), ("b", 0), ("gone", 0)}))


def _response(pid: int, errors: dict[tuple[str, int], E]) -> Any:
    topics: dict[str, list[Any]] = {}
    for (t, p), code in errors.items():
        topics.setdefault(t, []).append(R.WritableTxnMarkerResult.WritableTxnMarkerTopicResult
                                        .WritableTxnMarkerPartitionResult(partition_index=p, error_code=code))
    return R(markers=[R.WritableTxnMarkerResult(producer_id=pid, topics=[
        R.WritableTxnMarkerResult.WritableTxnMarkerTopicResult(name=t, partitions=ps) for t, ps in topics.items()])])


class Broker:
    """Answers each request with the next scripted error per partition (NONE when out)."""

    def __init__(self, script: dict[tuple[str, int], list[E]] | None = None, fail_connects: int = 0) -> None:
        self.script = script or {}
        self.requests: list[Any] = []
        self.fail_connects = fail_connects
        self.closed = False

    async def send(self, api_key: int, version: int, request: Any) -> Any:
        assert (api_key, version) == (ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION)
        # What goes on the wire decodes as Kafka's request.
        decoded = codec.decode_request(api_key, version, memoryview(bytes(request.encode(version=version))))
        self.requests.append(decoded)
        (marker,) = decoded.markers
        out = {}
        for t in marker.topics:
            for p in t.partition_indexes:
                queue = self.script.get((t.name, p), [])
                out[(t.name, p)] = queue.pop(0) if queue else E.NONE
        return _response(marker.producer_id, out)


def _sender(brokers: dict[int, Broker], leaders: dict[tuple[str, int], int | None]) -> TxnMarkerSender:
    async def connect(broker_id: int) -> BrokerClient:
        b = brokers[broker_id]
        if b.fail_connects:
            b.fail_connects -= 1
            raise BrokerConnectionError("refused")
        return b  # type: ignore[return-value]

    return TxnMarkerSender(lambda t, p: leaders.get((t, p)), connect, backoff_s=0.001)


async def test_one_request_per_leader_and_gone_partitions_dropped() -> None:
    b1, b2 = Broker(), Broker()
    leaders: dict[tuple[str, int], int | None] = {("a", 0): 1, ("a", 1): 2, ("b", 0): 1, ("gone", 0): None}
    assert await _sender({1: b1, 2: b2}, leaders).send(JOB, lambda: True)
    (req,) = b1.requests
    (m,) = req.markers
    assert (m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch) == (42, 3, True, 7)
    assert [(t.name, t.partition_indexes) for t in m.topics] == [("a", [0]), ("b", [0])]
    assert [(t.name, t.partition_indexes) for t in b2.requests[0].markers[0].topics] == [("a", [1])]


async def test_retriable_errors_and_connection_failures_are_retried() -> None:
    b1 = Broker({("a", 0): [E.NOT_LEADER_OR_FOLLOWER, E.NOT_ENOUGH_REPLICAS]}, fail_connects=2)
    leaders: dict[tuple[str, int], int | None] = {("a", 0): 1, ("a", 1): 1, ("b", 0): -1}
    sender = _sender({1: b1}, leaders)
    job = MarkerJob("t", 42, 3, False, 7, frozenset({("a", 0), ("a", 1), ("b", 0)}))
    done: list[bool] = []
    rounds = 0

    def current() -> bool:
        nonlocal rounds
        rounds += 1
        if rounds == 8:
            leaders[("b", 0)] = 1  # the partition without a leader gets one
        return True

    done.append(await sender.send(job, current))
    assert done == [True]
    sent = [(t.name, p) for r in b1.requests for t in r.markers[0].topics for p in t.partition_indexes]
    assert sent.count(("a", 0)) == 3 and sent.count(("a", 1)) == 1 and sent.count(("b", 0)) == 1


async def test_fenced_stops_and_resignation_stops() -> None:
    b1 = Broker({("a", 0): [E.TRANSACTION_COORDINATOR_FENCED]})
    leaders: dict[tuple[str, int], int | None] = {("a", 0): 1}
    job = MarkerJob("t", 42, 3, True, 7, frozenset({("a", 0)}))
    assert not await _sender({1: b1}, leaders).send(job, lambda: True)
    b2 = Broker({("a", 0): [E.NOT_LEADER_OR_FOLLOWER] * 100})
    calls = 0

    def current() -> bool:
        nonlocal calls
        calls += 1
        return calls < 5

    assert not await _sender({1: b2}, leaders).send(job, current)
    assert len(b2.requests) < 5


def test_request_groups_topics() -> None:
    req = build_request(JOB, [("b", 0), ("a", 1), ("a", 0)])
    assert [(t.name, t.partition_indexes) for t in req.markers[0].topics] == [("a", [0, 1]), ("b", [0])]
