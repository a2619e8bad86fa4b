"""Quota resolution, the windowed rate, throttle times and their encoding in responses, with a fake clock."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.api_versions import ApiVersionsResponse
from kaflet.protocol.fetch import FetchResponse, PartitionFetchData
from kaflet.protocol.produce import PartitionProduceResult, ProduceResponse
from kaflet.protocol.response import encode_body
from kaflet.quota import enforcement
from kaflet.quota.enforcement import _Timed
from kaflet.quota.entity import CLIENT_ID, USER, QuotaEntity, QuotaType, entity_from_path, resolve
from kaflet.quota.manager import KafkaQuotaManager, QuotaSettings
from kaflet.quota.rate import WindowedRate, throttle_time_ms

MB = 1024 * 1024


def E(user: str | None | bool = False, client: str | None | bool = False) -> QuotaEntity:
    """An entity; False leaves a type out, None is the default."""
    parts = {}
    if user is not False:
        parts[USER] = user
    if client is not False:
        parts[CLIENT_ID] = client
    return QuotaEntity.of(parts)  # type: ignore[arg-type]


# -- precedence ---------------------------------------------------------------------------------

def test_precedence_follows_kafka_order() -> None:
    levels = [
        (E("alice", "app"), 1.0), (E("alice", None), 2.0), (E("alice"), 3.0), (E(None, "app"), 4.0),
        (E(None, None), 5.0), (E(None), 6.0), (E(client="app"), 7.0), (E(client=None), 8.0),
    ]
    quotas = dict(levels)
    # Remove the most specific level one at a time: the next one in Kafka's order takes over.
    for entity, value in levels:
        found = resolve(quotas, "alice", "app")
        assert found is not None and found[1] == value, entity
        del quotas[entity]
    assert resolve(quotas, "alice", "app") is None


def test_rate_keys_share_user_quotas_and_split_default_client_quotas() -> None:
    assert resolve({E("alice"): 1.0}, "alice", "app") == (("alice", ""), 1.0)
    assert resolve({E(None): 1.0}, "bob", "app") == (("bob", ""), 1.0)
    assert resolve({E(client=None): 1.0}, "bob", "app") == (("", "app"), 1.0)
    assert resolve({E(None, None): 1.0}, "bob", "app") == (("bob", "app"), 1.0)
    # A user quota for someone else, or a client quota for another id, does not apply.
    assert resolve({E("alice"): 1.0, E(client="other"): 2.0}, "bob", "app") is None


def test_each_quota_type_resolves_on_its_own() -> None:
    m = KafkaQuotaManager()
    m.update_quotas(E("alice"), {"producer_byte_rate": 100.0})
    m.update_quotas(E(client="app"), {"consumer_byte_rate": 200.0})
    assert m.quota(QuotaType.PRODUCE, "alice", "app") == 100.0
    assert m.quota(QuotaType.FETCH, "alice", "app") == 200.0
    assert m.quota(QuotaType.REQUEST, "alice", "app") is None
    m.update_quotas(E("alice"), {})
    assert m.quota(QuotaType.PRODUCE, "alice", "app") is None
    assert not m.active(QuotaType.PRODUCE) and m.active(QuotaType.FETCH)


def test_entities_from_config_paths() -> None:
    assert entity_from_path("users", "alice") == E("alice")
    assert entity_from_path("users", "%3Cdefault%3E/clients/<default>") == E("<default>", None)
    assert entity_from_path("users", "<default>/clients/my%20app") == E(None, "my app")
    assert entity_from_path("clients", "<default>") == E(client=None)
    assert entity_from_path("clients", "a/b") is None
    assert E("al*ce", "x y").config_path() == ("users", "al%2Ace/clients/x%20y")
    assert E(client=None).config_path() == ("clients", "<default>")


# -- windowed rate and throttle time -----------------------------------------------------------

def test_rate_counts_at_least_samples_minus_one_windows() -> None:
    r = WindowedRate(11, 1000, 0)
    r.record(10 * MB, 0)
    assert r.window_size_ms(500) == 10500  # 0.5 s elapsed + 10 assumed full windows
    assert r.rate(500) == pytest.approx(10 * MB / 10.5)


def test_old_samples_expire_after_all_windows() -> None:
    r = WindowedRate(11, 1000, 0)
    r.record(5 * MB, 0)
    r.record(1 * MB, 5000)
    assert r.total(10999) == 6 * MB
    assert r.total(11000) == 1 * MB  # the first sample is 11 windows old


def test_throttle_time_brings_the_rate_back_to_the_quota() -> None:
    r = WindowedRate(11, 1000, 0)
    r.record(20 * MB, 0)
    t = throttle_time_ms(r, 1 * MB, 0)
    assert t == 10000  # 2 MB/s over 10 s against 1 MB/s: 100 % over, so one measured window
    assert throttle_time_ms(r, 100 * MB, 0) == 0


def test_greedy_client_is_held_to_its_quota() -> None:
    """A client that sends 100 KB whenever it may, for 60 s of fake time, averages its quota."""
    now = 0.0
    m = KafkaQuotaManager(QuotaSettings(max_throttle_ms=100000), clock=lambda: now)
    m.update_quotas(E(client="p"), {"producer_byte_rate": float(MB)})
    sent = 0
    while now < 60000:
        sent += 100 * 1024
        throttle = m.record(QuotaType.PRODUCE, "ANONYMOUS", "p", 100 * 1024, now)
        now += 5 + throttle  # 5 ms per request, then muted for the throttle time
    assert sent / 60 / MB == pytest.approx(1.0, rel=0.2)


def test_throttle_bounds() -> None:
    m = KafkaQuotaManager(QuotaSettings(max_throttle_ms=2000))
    m.update_quotas(E(client="c"), {"producer_byte_rate": 1.0, "request_percentage": 1.0})
    assert m.record(QuotaType.PRODUCE, "u", "c", 10 * MB, 0) == 2000  # max.throttle.time.ms
    m2 = KafkaQuotaManager(QuotaSettings(max_throttle_ms=100000))
    m2.update_quotas(E(client="c"), {"request_percentage": 1.0})
    # 5 s of handler time against 1 %: bounded by one quota window, as Kafka does.
    assert m2.record(QuotaType.REQUEST, "u", "c", 500.0, 0) == 1000
    assert m2.record(QuotaType.REQUEST, "u", "other", 500.0, 0) == 0  # no quota: unlimited


def test_unrecord_takes_back_a_throttled_fetch() -> None:
    m = KafkaQuotaManager()
    m.update_quotas(E(client=None), {"consumer_byte_rate": float(MB)})
    assert m.record(QuotaType.FETCH, "u", "c", 20 * MB, 0) > 0
    m.unrecord(QuotaType.FETCH, "u", "c", 20 * MB, 0)
    assert m.measured_rate(QuotaType.FETCH, "u", "c", 0) == 0


# -- throttle_time_ms, encoded with the response --------------------------------------------------
# kafka-python's decoders (from Kafka's message JSON) are the reference for where the field sits.

@pytest.mark.parametrize("version", range(3, 11))
def test_produce_response_carries_the_throttle(version: int) -> None:
    results = [("t", [PartitionProduceResult(0, base_offset=5, log_start_offset=0)])]
    body = encode_body(ApiKey.PRODUCE, version, ProduceResponse(results, version), 1234)
    decoded = codec.response_class(ApiKey.PRODUCE).decode(bytes(body), version=version)
    assert decoded.throttle_time_ms == 1234
    assert decoded.responses[0].partition_responses[0].base_offset == 5


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_response_carries_the_throttle(version: int) -> None:
    part = PartitionFetchData(0, high_watermark=9, records=[b"x" * 70])
    response = FetchResponse([("t", [part])], version)
    size = response.size()
    body = b"".join(encode_body(ApiKey.FETCH, version, response, 0))
    assert len(body) == size  # what the fetch quota is charged is what is sent
    R = codec.response_class(ApiKey.FETCH)
    assert R.decode(body, version=version).responses[0].partitions[0].high_watermark == 9
    throttled = b"".join(encode_body(ApiKey.FETCH, version, response.without_data(), 4321))
    decoded = R.decode(throttled, version=version)
    assert decoded.throttle_time_ms == 4321 and decoded.responses == []


@pytest.mark.parametrize("version", range(0, 4))
def test_api_versions_response_carries_the_throttle_from_v1(version: int) -> None:
    body = encode_body(ApiKey.API_VERSIONS, version, ApiVersionsResponse(0, ((0, 3, 10), (18, 0, 3)), version), 55)
    decoded = codec.response_class(ApiKey.API_VERSIONS).decode(bytes(body), version=version)
    assert decoded.throttle_time_ms == (55 if version >= 1 else 0)
    assert [k.api_key for k in decoded.api_keys] == [0, 18]


def test_generic_responses_carry_the_throttle_where_the_version_has_the_field() -> None:
    R = codec.response_class(ApiKey.METADATA)
    assert encode_body(ApiKey.METADATA, 0, R(brokers=[], topics=[]), 777) == b"\0\0\0\0" * 2  # no field before v3
    assert R.decode(encode_body(ApiKey.METADATA, 3, R(brokers=[], topics=[]), 777), version=3).throttle_time_ms == 777
    L = codec.response_class(ApiKey.LIST_GROUPS)
    assert L.decode(encode_body(ApiKey.LIST_GROUPS, 4, L(error_code=0, groups=[]), 777),
                    version=4).throttle_time_ms == 777
    S = codec.response_class(ApiKey.SASL_HANDSHAKE)  # no such field in any version
    assert S.decode(encode_body(ApiKey.SASL_HANDSHAKE, 1, S(error_code=0, mechanisms=["PLAIN"]), 777),
                    version=1).mechanisms == ["PLAIN"]


# -- handler time -----------------------------------------------------------------------------------

def test_handler_time_leaves_out_awaits(monkeypatch: pytest.MonkeyPatch) -> None:
    # A clock moved by hand, so the figures are exact on any machine: each of the handler's two
    # steps takes 0.05 s, and 0.3 s pass elsewhere while it waits.
    now = [0.0]
    monkeypatch.setattr(enforcement, "time", SimpleNamespace(perf_counter=lambda: now[0], monotonic=time.monotonic))

    async def handler() -> str:
        now[0] += 0.05  # work on the loop
        await asyncio.sleep(0)  # waiting (a long-polling fetch, say)
        now[0] += 0.05
        return "done"

    async def elsewhere() -> None:
        now[0] += 0.3  # another task runs while the handler waits

    async def main() -> tuple[str, float]:
        other = asyncio.ensure_future(elsewhere())
        timed = _Timed(handler())
        result = await timed
        await other
        return result, timed.busy_s

    result, busy = asyncio.run(main())
    assert result == "done"
    assert now[0] == pytest.approx(0.4)  # the wait did happen during the handler
    assert busy == pytest.approx(0.1)


def test_handler_time_passes_exceptions_and_cancellation() -> None:
    async def failing() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    async def slow() -> None:
        await asyncio.sleep(10)

    async def main() -> None:
        with pytest.raises(ValueError):
            await _Timed(failing())
        task = asyncio.ensure_future(_wrap(slow()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def _wrap(coro: object) -> None:
        await _Timed(coro)

    asyncio.run(main())


def test_the_within_quota_shortcut_never_hides_a_throttle() -> None:
    """`WindowedRate.surely_within` answers without the samples' ages; whenever it says yes, the
    full computation finds no throttle either, for random record sequences (with takebacks)
    against quotas around the rate, Kafka's rate and SimpleRate alike."""
    import random

    rng = random.Random(7)
    shortcuts = 0
    for trial in range(300):
        simple = trial % 2 == 1
        rate = WindowedRate(rng.randint(1, 5), rng.choice([100, 1000]), 0.0, simple=simple)
        now = 0.0
        for _ in range(rng.randint(1, 60)):
            now += rng.choice([0.0, 1.0, 50.0, 400.0, 3000.0])
            rate.record(rng.choice([1.0, 1.0, 5.0, -1.0]), now)
            quota = rng.choice([0.5, 2.0, 10.0, 100.0])
            if rate.surely_within(quota):
                shortcuts += 1
                size = rate.window_size_ms(now)
                assert rate.total(now) / (size / 1000.0) <= quota + 1e-9
    assert shortcuts > 100
