"""AlterClientQuotas / DescribeClientQuotas over a RawClient, and a producer that measures its rate."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Producer

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from tests.support.raw_client import RawClient

ALTER, DESCRIBE = ApiKey.ALTER_CLIENT_QUOTAS, ApiKey.DESCRIBE_CLIENT_QUOTAS

#: Seconds to wait for an answer: Kafka's admin request.timeout.ms. An alteration commits two
#: writes, each with an fsync, and on a loaded CI machine one took more than 10 s right after
#: the throughput test had produced more than a gigabyte (0.02-0.2 s here).
ADMIN_TIMEOUT = 30.0


def alter(bootstrap: str, entity: list[tuple[str, str | None]], ops: dict[str, float | None],
          validate_only: bool = False, version: int = 1) -> Any:
    """AlterClientQuotas for one entity; a None value removes the key. The entity's result."""
    A = codec.request_class(ALTER)
    req = A(entries=[A.EntryData(
        entity=[A.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        ops=[A.EntryData.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops.items()])],
        validate_only=validate_only)
    rc = RawClient(bootstrap, timeout=ADMIN_TIMEOUT)
    try:
        return rc.request(ALTER, version, req).entries[0]
    finally:
        rc.close()


def describe(bootstrap: str, components: list[tuple[str, int, str | None]], strict: bool = False,
             version: int = 1) -> Any:
    """DescribeClientQuotas with (entity type, match type, match) components; the response."""
    D = codec.request_class(DESCRIBE)
    req = D(components=[D.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components], strict=strict)
    rc = RawClient(bootstrap, timeout=ADMIN_TIMEOUT)
    try:
        return rc.request(DESCRIBE, version, req)
    finally:
        rc.close()


def as_dict(resp: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    """A DescribeClientQuotas response as {entity: {quota key: value}}."""
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in resp.entries or []}


MB = 1024 * 1024


class MeasuredProducer:
    """A confluent-kafka producer that sends as fast as it may and counts delivered bytes and
    throttle events; `config` adds to or overrides its settings (security, batch size)."""

    def __init__(self, bootstrap: str, client_id: str, topic: str, config: dict[str, Any] | None = None) -> None:
        self.throttles: list[int] = []
        self.delivered = 0
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                                  "queue.buffering.max.kbytes": 16384,
                                  "throttle_cb": lambda ev: self.throttles.append(int(ev.throttle_time * 1000)),
                                  **(config or {})})

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered += len(msg.value())

    def run(self, seconds: float, partitions: int = 0) -> float:
        """Produce for `seconds` (to partitions 0..partitions-1 in turn, if given: the same load
        on every partition); the delivered rate in MB/s."""
        value = b"q" * 10_000
        start = self.delivered
        t0 = time.monotonic()
        turn = 0
        while time.monotonic() - t0 < seconds:
            try:
                if partitions:
                    self.producer.produce(self.topic, value, partition=turn % partitions, on_delivery=self._on_delivery)
                    turn += 1
                else:
                    self.producer.produce(self.topic, value, on_delivery=self._on_delivery)
            except BufferError:
                self.producer.poll(0.005)
            self.producer.poll(0)
        return (self.delivered - start) / (time.monotonic() - t0) / MB

    def close(self) -> None:
        self.producer.purge()
        self.producer.flush(5)
        # The throttle callback holds this object: break the cycle, or the client lives on
        # (reconnecting to a stopped broker) until a garbage collection.
        del self.producer
