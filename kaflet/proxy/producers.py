"""Idempotent producers whose cluster moved under them (proxy mode).

An idempotent producer's id and epoch are given by one cluster, and its sequence numbers count
per partition on that cluster. When the manager moves the cluster, the producer's next batches
reach another cluster that never gave that id: Kafka brokers accept an unknown producer at any
sequence (KIP-360), so the batches would land, but under an id the new cluster may have given to
one of its own producers (every kaflet and Kafka cluster hands out ids from 0), whose sequences
and epoch they would then disturb, and duplicates would no longer be caught.

So the gateway answers such a batch itself with UNKNOWN_PRODUCER_ID, the error a broker gives
when it has lost a producer's state, and passes nothing on. Both reference clients recover from
it without failing a send: librdkafka (when the batch is the first one not yet acknowledged,
which is the case at a move since the old cluster answers everything sent before it) waits for
its in-flight requests, asks the new cluster for a new producer id and sends the batch again;
the Java client bumps the epoch of its id and sends the batch again from sequence 0. A
(producer id, epoch) pair is stale when it was last used, or given out, on another Kafka
cluster (told apart by the cluster id Metadata names) than the one its gateway cluster id
leads to now: a change of addresses that still leads to the same cluster (another broker of it,
or the same one after an outage) changes nothing.
"""

from __future__ import annotations

import struct

from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.primitives import DecodeError, Reader
from kaflet.protocol.produce import PartitionProduceResult, ProduceRequest, encode_produce_response

#: Where a v2 batch header holds its magic and its producer id and epoch, and the header's size.
_MAGIC_AT, _PID_AT, _HEADER = 16, 43, 61
_PAIR = struct.Struct(">qh")

Pair = tuple[int, int]


def produce_head(version: int, body: bytes | memoryview) -> tuple[int, Pair | None]:
    """(acks, (producer id, epoch) of the first record batch) of a Produce request body, read
    without decoding the rest: one producer writes a whole request. The pair is None for a
    producer without an id (not idempotent), no records, or records older than magic 2."""
    reader = Reader(body)
    flexible = version >= 9
    if flexible:
        reader.compact_nullable_string()
    elif version >= 3:
        reader.nullable_string()
    acks = reader.int16()
    reader.int32()  # timeout
    if not (reader.compact_array_len(2) if flexible else reader.array_len(6)):
        return acks, None
    name = reader.uvarint() - 1 if flexible else reader.int16()
    if name < 0:
        raise DecodeError("null where a topic name is required")
    reader.raw(name)
    if not (reader.compact_array_len(6) if flexible else reader.array_len(8)):
        return acks, None
    reader.int32()  # partition index
    size = reader.uvarint() - 1 if flexible else reader.int32()
    if size < _HEADER:
        return acks, None
    records = reader.raw(_HEADER)
    if records[_MAGIC_AT] != 2:
        return acks, None
    pid, epoch = _PAIR.unpack_from(records, _PID_AT)
    return acks, ((pid, epoch) if pid >= 0 else None)


def unknown_producer_answer(request: ProduceRequest, version: int) -> bytes:
    """The Produce answer a broker gives a producer whose state it lost: UNKNOWN_PRODUCER_ID for
    every partition, with a log start offset (the Java client retries without bumping its
    epoch while the broker does not say one)."""
    message = "the cluster was moved; the producer id belongs to where it was"
    results = [(t.name, [PartitionProduceResult(p.index, ErrorCode.UNKNOWN_PRODUCER_ID, log_start_offset=0,
                                                error_message=message) for p in t.partitions])
               for t in request.topics]
    return encode_produce_response(results, 0, version)


class ProducerPlacements:
    """The Kafka cluster (its cluster id, as Metadata names it) on which each (producer id,
    epoch) of a gateway cluster id was last used or given out. Bounded: past ``limit`` pairs the
    oldest entries are forgotten (a forgotten pair is passed on after a move, as without this)."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._seen: dict[tuple[int, int, int], str] = {}

    def stale(self, cluster_id: int, where: str, pair: Pair) -> bool:
        """Whether ``pair`` was used on another Kafka cluster than ``where``, the one the gateway's
        ``cluster_id`` is now; otherwise it is noted as used there."""
        key = (cluster_id, *pair)
        seen = self._seen.get(key)
        if seen == where:
            return False
        if seen is not None:
            return True
        self._note(key, where)
        return False

    def issued(self, cluster_id: int, where: str, pair: Pair) -> None:
        """Kafka cluster ``where`` gave ``pair`` out (an InitProducerId answer)."""
        key = (cluster_id, *pair)
        self._seen.pop(key, None)
        self._note(key, where)

    def _note(self, key: tuple[int, int, int], where: str) -> None:
        if len(self._seen) >= self.limit:
            for old in list(self._seen)[: self.limit // 10 or 1]:
                del self._seen[old]
        self._seen[key] = where
