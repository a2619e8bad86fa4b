"""Every handler's response carries the throttle time the quotas give it, at every version.

A broker on the test's own loop gets a QuotaManager that throttles every request by the same
time; each API the broker advertises is then called at each of its versions, over a socket,
with the request message's defaults, and its response decoded with kafka-python (whose
decoders come from Kafka's message JSON). A version whose response has throttle_time_ms must
carry the throttle; the others must still decode. So a new handler that encodes the response
itself, or a hand-written encoder that drops the field, fails here.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.records import Record, build_batch
from kaflet.quota.entity import QuotaEntity, QuotaType
from kaflet.quota.manager import QuotaManager
from kaflet.server.broker import Broker
from kaflet.server.config import BrokerConfig
from kaflet.server.handlers import HANDLER_MODULES
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic

#: Small, so that muting the connection after each request keeps the test quick.
THROTTLE_MS = 7

#: Request fields whose defaults would get no response or a long wait.
REQUEST_FIELDS: dict[int, dict[str, Any]] = {
    ApiKey.PRODUCE: {"acks": 1},  # acks=0 is answered with nothing
    ApiKey.FETCH: {"max_wait_ms": 0, "replica_id": -1},
}


class EveryRequestThrottled(QuotaManager):
    """Every client is over every quota: each request earns THROTTLE_MS."""

    def __init__(self) -> None:
        self.recorded: list[QuotaType] = []

    def active(self, quota_type: QuotaType) -> bool:
        return True

    def record(self, quota_type: QuotaType, user: str, client_id: str, value: float, now_ms: float) -> int:
        self.recorded.append(quota_type)
        return THROTTLE_MS

    def unrecord(self, quota_type: QuotaType, user: str, client_id: str, value: float, now_ms: float) -> None:
        pass

    def quota(self, quota_type: QuotaType, user: str, client_id: str) -> float | None:
        return 1.0

    def update_quotas(self, entity: QuotaEntity, quotas: Mapping[str, float]) -> None:
        pass


@pytest.fixture
async def throttling_broker() -> AsyncIterator[Broker]:
    data_dir = tempfile.mkdtemp(prefix="kaflet-throttle-")
    broker = Broker(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": data_dir}))
    # Before start(): the handlers are given the broker's quota manager once, at the end of it.
    broker.quota_manager = EveryRequestThrottled()
    try:
        await broker.start()
        yield broker
    finally:
        await broker.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def call_every_version(bootstrap: str, api_key: int, versions: range) -> list[tuple[int, Any]]:
    """(version, decoded response) for each version, on one connection."""
    Req = codec.request_class(api_key)
    rc = RawClient(bootstrap)
    try:
        return [(v, rc.request(api_key, v, Req(**REQUEST_FIELDS.get(api_key, {})))) for v in versions]
    finally:
        rc.close()


async def test_every_response_with_the_field_carries_the_throttle(throttling_broker: Broker) -> None:
    bootstrap = throttling_broker.bootstrap
    checked: dict[int, list[int]] = {}
    for module in HANDLER_MODULES:
        key = module.API_KEY
        field = codec.response_class(key).fields.get("throttle_time_ms")
        answers = await asyncio.to_thread(call_every_version, bootstrap, key,
                                          range(module.MIN_VERSION, module.MAX_VERSION + 1))
        for version, response in answers:
            if field is not None and field.for_version_q(version):
                assert response.throttle_time_ms == THROTTLE_MS, f"{ApiKey(key).name} v{version}"
                checked.setdefault(key, []).append(version)
    # The hot paths' own encoders are among them, from the first version with the field.
    assert checked[ApiKey.PRODUCE][0] == 1 and checked[ApiKey.FETCH][0] == 1
    assert checked[ApiKey.API_VERSIONS] == [1, 2, 3] and checked[ApiKey.METADATA][0] == 3
    assert ApiKey.SASL_HANDSHAKE not in checked  # no such field: answered as it is
    assert len(checked) >= 30


async def test_a_throttled_fetch_is_answered_without_data(throttling_broker: Broker) -> None:
    bootstrap = throttling_broker.bootstrap
    await asyncio.to_thread(create_topic, bootstrap, "throttled")
    P = codec.request_class(ApiKey.PRODUCE)
    batch = build_batch([Record(0, 0, None, b"v")], base_timestamp=1000)
    F = codec.request_class(ApiKey.FETCH)

    def produce_then_fetch() -> tuple[Any, Any]:
        rc = RawClient(bootstrap)
        try:
            produced = rc.request(ApiKey.PRODUCE, 9, P(acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
                name="throttled", partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=batch)])]))
            fetched = rc.request(ApiKey.FETCH, 12, F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                                                     topics=[F.FetchTopic(topic="throttled", partitions=[
                                                         F.FetchTopic.FetchPartition(partition=0, fetch_offset=0,
                                                                                     partition_max_bytes=1 << 20)])]))
            return produced, fetched
        finally:
            rc.close()

    produced, fetched = await asyncio.to_thread(produce_then_fetch)
    assert produced.responses[0].partition_responses[0].error_code == 0
    assert produced.throttle_time_ms == THROTTLE_MS
    assert fetched.throttle_time_ms == THROTTLE_MS and fetched.error_code == 0
    assert fetched.responses == []  # the data stays on the broker while the consumer is throttled
    manager = throttling_broker.quota_manager
    assert isinstance(manager, EveryRequestThrottled) and QuotaType.FETCH in manager.recorded
