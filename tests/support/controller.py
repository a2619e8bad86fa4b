"""Helpers for controller tests: a channel that records what the controller sends and lets the
test answer, simulated broker registrations, and polling."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kaflet.controller.config import ControllerConfig
from kaflet.metadata import zkdata as zk
from kaflet.metadata.tree import MetadataTree
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey


@dataclass
class Sent:
    """One request the controller handed to the channel."""

    broker_id: int
    api_key: ApiKey
    request: Any
    callback: Callable[[Any], None] | None
    answered: bool = False

    def answer(self, response: Any) -> None:
        assert not self.answered
        self.answered = True
        if self.callback is not None:
            self.callback(response)


class RecordingChannel:
    """A ControllerChannel that records requests; the test answers them (or not)."""

    def __init__(self) -> None:
        self.brokers: dict[int, zk.BrokerInfo] = {}
        self.sent: list[Sent] = []
        self.closed = False
        self.membership: list[tuple[str, int]] = []

    def add_broker(self, broker: zk.BrokerInfo) -> None:
        assert not self.closed
        self.brokers[broker.id] = broker
        self.membership.append(("add", broker.id))

    def remove_broker(self, broker_id: int) -> None:
        self.brokers.pop(broker_id, None)
        self.membership.append(("remove", broker_id))
        # Queued requests of a removed broker are dropped, never answered.
        for s in self.sent:
            if s.broker_id == broker_id:
                s.answered = True

    def send(self, broker_id: int, api_key: ApiKey, request: Any,
             callback: Callable[[Any], None] | None = None) -> None:
        assert not self.closed, "the controller sent on a closed channel"
        assert broker_id in self.brokers, f"request to broker {broker_id}, which the channel does not know"
        self.sent.append(Sent(broker_id, api_key, request, callback))

    async def close(self) -> None:
        self.closed = True

    # ------------------------------------------------------------------ test side

    def requests(self, api_key: ApiKey | None = None, broker: int | None = None) -> list[Sent]:
        return [s for s in self.sent if (api_key is None or s.api_key == api_key)
                and (broker is None or s.broker_id == broker)]

    def pending(self, api_key: ApiKey | None = None, broker: int | None = None) -> list[Sent]:
        return [s for s in self.requests(api_key, broker) if not s.answered]

    def clear(self) -> None:
        self.sent.clear()

    def answer_all(self, fail: Callable[[Sent, str, int], int] | None = None) -> int:
        """Answer every pending request with success (``fail(sent, topic, partition)`` may return
        an error code for a partition). Returns how many were answered."""
        n = 0
        for s in self.pending():
            s.answer(success_response(s, fail))
            n += 1
        return n


def success_response(s: Sent, fail: Callable[[Sent, str, int], int] | None = None) -> Any:
    """The response a healthy broker would give to ``s``."""
    def code(topic: str, p: int) -> int:
        return fail(s, topic, p) if fail is not None else 0

    R = codec.response_class(s.api_key)
    if s.api_key == ApiKey.LEADER_AND_ISR:
        T = R.LeaderAndIsrTopicError
        return R(error_code=0, topics=[
            T(topic_id=t.topic_id, partition_errors=[
                T.LeaderAndIsrPartitionError(partition_index=p.partition_index,
                                             error_code=code(t.topic_name, p.partition_index))
                for p in t.partition_states])
            for t in s.request.topic_states])
    if s.api_key == ApiKey.STOP_REPLICA:
        E = R.StopReplicaPartitionError
        return R(error_code=0, partition_errors=[
            E(topic_name=t.topic_name, partition_index=p.partition_index,
              error_code=code(t.topic_name, p.partition_index))
            for t in s.request.topic_states for p in t.partition_states])
    return R(error_code=0)


def broker_info(broker_id: int, rack: str | None = None) -> zk.BrokerInfo:
    return zk.BrokerInfo(
        id=broker_id,
        endpoints=(zk.EndPoint("PLAINTEXT", "127.0.0.1", 19090 + broker_id, "PLAINTEXT"),
                   zk.EndPoint("SECURE", "127.0.0.1", 19190 + broker_id, "SASL_SSL")),
        rack=rack,
        timestamp_ms=int(time.time() * 1000),
    )


async def register_broker(tree: MetadataTree, broker_id: int, rack: str | None = None) -> int:
    """Create /brokers/ids/<id> as the broker would; returns its epoch (czxid)."""
    await tree.create(zk.broker_path(broker_id), zk.broker_json(broker_info(broker_id, rack)),
                      ephemeral=True, make_parents=True)
    stat = await tree.exists(zk.broker_path(broker_id))
    assert stat is not None
    return stat.czxid


async def until(cond: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> None:
    """Poll ``cond`` (a function, possibly async) until true."""
    deadline = time.monotonic() + timeout
    while True:
        r = cond()
        if asyncio.iscoroutine(r):
            r = await r
        if r:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def controller_config(**kw: Any) -> ControllerConfig:
    """A controller config for tests: no auto rebalance, no candidate wait unless asked."""
    cfg = ControllerConfig(auto_leader_rebalance_enable=False, candidate_wait_seconds=0.0)
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


def partition_states(request: Any) -> dict[tuple[str, int], Any]:
    """LeaderAndIsr/UpdateMetadata partition states by (topic, partition)."""
    return {(t.topic_name, p.partition_index): p for t in request.topic_states for p in t.partition_states}
