"""Writing a transaction's COMMIT/ABORT markers: WriteTxnMarkers to each partition's leader
(Kafka's TransactionMarkerChannelManager).

Kafka sends markers over the network to every leader, this broker included, so does this: one
connection per leader over the inter-broker listener, with the broker's inter-broker security
(the receiving handler checks ClusterAction). A partition is done when its leader answers NONE;
a partition whose topic no longer exists is dropped, as Kafka drops it; retriable errors and
lost connections are retried after a backoff for as long as the coordinator still owns the
transaction. INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED stop the round: a newer
producer epoch or coordinator has taken over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kaflet.coordinator.transaction.coordinator import MarkerJob
from kaflet.coordinator.transaction.schemas import TopicPartition
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.broker_connection import BrokerConnection, BrokerConnectionError
from kaflet.protocol.errors import ErrorCode
from kaflet.util.outage_log import OutageLogs

log = logging.getLogger("kaflet.coordinator.transaction")

E = ErrorCode
#: v1 is what Kafka 2.8-3.x coordinators send (flexible); Kafka 2.8+ brokers accept it.
WRITE_TXN_MARKERS_VERSION = 1
_STOP = frozenset({E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED})
#: Errors Kafka's completion handler treats as bugs (it throws); retrying cannot help.
_FATAL = frozenset({E.CORRUPT_MESSAGE, E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE, E.INVALID_REQUIRED_ACKS})

#: The leader of a partition: a broker id, -1 while it has none, None when the partition is gone.
LeaderLookup = Callable[[str, int], int | None]
#: Connects to a broker by id (its inter-broker endpoint; the broker's InterBrokerConnector);
#: raises BrokerConnectionError.
Connect = Callable[[int], Awaitable[BrokerConnection]]
#: (this broker's id, writes a job's markers to those of its partitions this broker leads,
#: in-process: an error code per partition)
LocalDelivery = tuple[int, Callable[[MarkerJob, list[TopicPartition]], Awaitable[dict[TopicPartition, ErrorCode]]]]


def build_request(job: MarkerJob, partitions: list[TopicPartition]) -> Any:
    """The WriteTxnMarkers request of `job` for `partitions` (one marker, topics grouped)."""
    R: Any = codec.request_class(ApiKey.WRITE_TXN_MARKERS)
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        by_topic.setdefault(topic, []).append(index)
    marker = R.WritableTxnMarker(
        producer_id=job.producer_id, producer_epoch=job.producer_epoch, transaction_result=job.commit,
        topics=[R.WritableTxnMarker.WritableTxnMarkerTopic(name=t, partition_indexes=ix) for t, ix in by_topic.items()],
        coordinator_epoch=job.coordinator_epoch)
    return R(markers=[marker])


class TxnMarkerSender:
    """Sends marker rounds; keeps one connection per leader for all transactions."""

    def __init__(self, leader_of: LeaderLookup, connect: Connect, backoff_s: float = 0.1,
                 local: LocalDelivery | None = None) -> None:
        self._leader_of = leader_of
        self._connect = connect
        # Markers for partitions this broker leads go in-process: no connection to itself, so
        # a lone broker whose listeners all need credentials it does not have still writes them.
        self._local = local
        self._backoff_s = backoff_s
        self._clients: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}
        # Per leader, shared by all transactions: one warning per outage of a broker.
        self._outages = OutageLogs(log, lambda b: f"sending transaction markers to broker {b}")

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    async def _client(self, broker_id: int) -> BrokerConnection:
        lock = self._connecting.setdefault(broker_id, asyncio.Lock())
        async with lock:
            client = self._clients.get(broker_id)
            if client is None or client.closed:
                client = await self._connect(broker_id)
                self._clients[broker_id] = client
            return client

    async def send(self, job: MarkerJob, current: Callable[[], bool]) -> bool:
        """Write `job`'s markers; True when every partition has them (or is gone)."""
        pending = set(job.partitions)
        attempt = 0
        while pending:
            if not current():
                return False
            if attempt:
                await asyncio.sleep(min(self._backoff_s * attempt, 1.0))
                if not current():
                    return False
            attempt += 1
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(pending):
                leader = self._leader_of(*tp)
                if leader is None:
                    log.info("%s-%d of transaction %s no longer exists; its marker is dropped", tp[0], tp[1],
                             job.transactional_id)
                    pending.discard(tp)
                elif leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            if len(by_leader) == 1:
                # One leader (always so on a lone broker): awaited directly, not through gather's
                # tasks, so markers written in-process complete within this step of the event
                # loop. Every extra step is a chance for the client's next AddPartitionsToTxn
                # to be read first and get CONCURRENT_TRANSACTIONS, which librdkafka retries
                # only after 20 ms.
                ((broker_id, tps),) = by_leader.items()
                results = [await self._send_to(broker_id, job, tps)]
            else:
                results = await asyncio.gather(*(self._send_to(b, job, tps) for b, tps in by_leader.items()))
            for outcome in results:
                for tp, code in outcome.items():
                    if code == E.NONE:
                        pending.discard(tp)
                    elif code in _STOP:
                        log.info("markers of %s stopped by %s from %s-%d", job.transactional_id, code.name, *tp)
                        return False
                    elif code in _FATAL:
                        log.error("writing the marker of %s to %s-%d failed with %s", job.transactional_id, *tp,
                                  code.name)
                        return False
        return True

    async def _send_to(self, broker_id: int, job: MarkerJob,
                       partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        try:
            if self._local is not None and broker_id == self._local[0]:
                return await self._local[1](job, partitions)
            client = await self._client(broker_id)
            resp = await client.send(ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION,
                                     build_request(job, partitions))
        except BrokerConnectionError as exc:
            self._clients.pop(broker_id, None)
            self._outages[broker_id].failed(f"markers of {job.transactional_id}: {exc}", "retrying")
            return {}
        self._outages[broker_id].succeeded()
        out: dict[TopicPartition, ErrorCode] = {}
        for marker in resp.markers:
            if marker.producer_id != job.producer_id:
                continue
            for topic in marker.topics:
                for p in topic.partitions:
                    try:
                        out[(topic.name, p.partition_index)] = ErrorCode(p.error_code)
                    except ValueError:
                        out[(topic.name, p.partition_index)] = E.UNKNOWN_SERVER_ERROR
        return out
