"""The gateway process's discovery settings: strict parsing of the manager's strings, versioned
pulls, the cache file, the outage lines, and the command's settings."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaflet.gateway.model import ManagementServiceError
from kaflet.proxy.config import GatewayConfig, GatewayConfigError
from kaflet.proxy.discovery import (
    SP_LIMIT_PATH,
    UPDATE_PATH,
    DiscoveryParseError,
    DiscoveryState,
    DiscoverySync,
    parse_cluster_map,
    parse_sp_limits,
    read_cache,
    write_cache,
)
from kaflet.proxy.router import DISCOVERY_APIS, LOCAL_APIS, ApiRanges


def test_cluster_map_bad_rows_are_reported_and_left_out() -> None:
    clusters, bad = parse_cluster_map(json.dumps({
        "7": ["h1:9093", "h2:9093"], "x": ["h:1"], "8": ["h3"], "9": [], "10": ["[::1]:9094"], "11": ["h:70000"]}))
    assert clusters == {7: (("h1", 9093), ("h2", 9093)), 10: (("::1", 9094),)}
    assert set(bad) == {"x", "8", "9", "11"}
    assert bad["8"] == "cluster 8: 'h3' is not host:port"
    with pytest.raises(DiscoveryParseError):
        parse_cluster_map("[1, 2]")


def test_sp_limits() -> None:
    assert parse_sp_limits("app_01#10,192.168.0.1#20, ,bad,x#y") == (
        {"app_01": 10, "192.168.0.1": 20}, ["sp-limit entry 'bad' is not <appId or IP>#<rate>",
                                          "sp-limit entry 'x#y' is not <appId or IP>#<rate>"])


class Manager:
    """The discovery API's answers as kaflet manager gives them (after the envelope), by version."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[int, Any]] = {}
        self.down = False
        self.asked: list[tuple[str, int]] = []

    async def post(self, path: str, body: Mapping[str, Any], query: Mapping[str, Any] | None = None) -> Any:
        raise AssertionError("discovery pulls are GETs")

    async def get(self, path: str, query: Mapping[str, Any] | None = None) -> Any:
        if self.down:
            raise ManagementServiceError(f"GET {path}: Cannot connect")
        known = int((query or {})["versionNumber"])
        self.asked.append((path, known))
        if path not in self.rows:
            return None
        version, data = self.rows[path]
        return {"version": str(version), "data": data} if version > known else None


def test_versioned_pulls_keep_the_last_good_rows_and_write_the_cache(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    manager = Manager()
    manager.rows[UPDATE_PATH] = (3, json.dumps({"7": ["a:1"], "8": ["b:2"]}))
    manager.rows["/api/v1/discovery/appId-rate"] = (1, "100")
    manager.rows[SP_LIMIT_PATH] = (2, "app_x#5")
    changes: list[tuple[DiscoveryState, DiscoveryState]] = []
    cache = tmp_path / "cache.json"
    sync = DiscoverySync(manager, 1.0, cache_path=cache, on_change=lambda a, b: changes.append((a, b)))

    asyncio.run(sync.sync_once())
    assert sync.state.clusters == {7: (("a", 1),), 8: (("b", 2),)}
    assert (sync.state.app_rate, sync.state.sp_limits) == (100, {"app_x": 5})
    assert read_cache(cache) == sync.state
    assert len(changes) == 1

    # Nothing newer: the pull asks with the versions held and nothing changes.
    manager.asked.clear()
    asyncio.run(sync.sync_once())
    assert (UPDATE_PATH, 3) in manager.asked and (SP_LIMIT_PATH, 2) in manager.asked
    assert len(changes) == 1

    # A bad row: one line, the cluster keeps its last good addresses; a removed one goes.
    manager.rows[UPDATE_PATH] = (4, json.dumps({"7": ["a:1:2"], "9": ["c:3"]}))
    with caplog.at_level(logging.WARNING, "kaflet.proxy.discovery"):
        asyncio.run(sync.sync_once())
    assert sync.state.clusters == {7: (("a", 1),), 9: (("c", 3),)}
    assert [r.getMessage() for r in caplog.records] == [
        "discovery/update version 4: cluster 7: 'a:1:2' is not host:port; the row is left out (a known cluster "
        "keeps its last good addresses)"]
    assert read_cache(cache).clusters == sync.state.clusters


def test_an_outage_is_one_warning_and_one_recovery_line(caplog: pytest.LogCaptureFixture) -> None:
    manager = Manager()
    manager.rows[UPDATE_PATH] = (1, json.dumps({"7": ["a:1"]}))
    sync = DiscoverySync(manager, 0.01)

    async def run() -> None:
        await sync.sync_once()
        manager.down = True
        sync.start()
        await asyncio.sleep(0.2)
        manager.down = False
        await asyncio.sleep(0.1)
        await sync.stop()

    with caplog.at_level(logging.INFO, "kaflet.proxy.discovery"):
        asyncio.run(run())
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert len([x for x in lines if "management service failed:" in x]) == 1
    assert len([x for x in lines if "recovered after" in x]) == 1
    assert sync.state.clusters == {7: (("a", 1),)}


def test_cache_file_round_trip_and_refusals(tmp_path: Path) -> None:
    state = DiscoveryState({7: (("a", 1), ("::1", 2))}, 10, 20, None, {"x": 1}, {UPDATE_PATH: 5})
    path = tmp_path / "c.json"
    write_cache(path, state)
    assert read_cache(path) == state
    assert not (tmp_path / "c.json.tmp").exists()
    path.write_text('{"format": 1, "clusters": {"x": ["a:1"]}}')
    with pytest.raises(DiscoveryParseError, match="cluster id 'x' is not a number"):
        read_cache(path)
    with pytest.raises(DiscoveryParseError, match="cannot read"):
        read_cache(tmp_path / "missing.json")


def test_settings_are_checked() -> None:
    config = GatewayConfig.from_properties({"gateway.manager.url": "http://m:8080/gateway/",
                                            "gateway.listen": "127.0.0.1:0"})
    assert (config.manager_url, config.listen_host, config.listen_port) == ("http://m:8080/gateway", "127.0.0.1", 0)
    for props, message in [
        ({}, "gateway.manager.url"),
        ({"gateway.manager.url": "http://m", "gateway.mode": "proxy", "gateway.listen": ":0"},
         "proxy.broker.port.base must be set"),
        ({"gateway.manager.url": "http://m", "gateway.mode": "proxy", "proxy.broker.port.base": "65500"},
         "leaves no room"),
        ({"gateway.manager.url": "http://m", "gateway.advertised.host": "gw"}, "is for proxy mode"),
        ({"gateway.manager.url": "http://m", "gateway.listen": "9092"}, "is not host:port"),
        ({"gateway.manager.url": "http://m", "gateway.sync.interval.ms": "soon"}, "gateway.sync.interval.ms"),
        ({"gateway.manager.url": "http://m", "gateway.sync.intervall.ms": "1"}, "unknown setting"),
    ]:
        with pytest.raises(GatewayConfigError, match=message):
            GatewayConfig.from_properties(props)


def test_advertised_versions_are_what_every_reachable_cluster_serves() -> None:
    ranges = ApiRanges()
    assert dict((k, (lo, hi)) for k, lo, hi in ranges.advertised()) == {**DISCOVERY_APIS, **LOCAL_APIS}
    ranges.update([])  # no cluster answered: unchanged, and the gateway asks again later
    assert not ranges.from_clusters
    ranges.update([{0: (0, 9), 3: (0, 12), 18: (0, 3), 22: (0, 4), 60: (0, 0)},
                   {0: (3, 8), 3: (1, 9), 18: (0, 2), 10: (0, 4)}])
    advertised = {k: (lo, hi) for k, lo, hi in ranges.advertised()}
    assert ranges.from_clusters
    # Produce as both serve it; Metadata narrowed; InitProducerId and DescribeCluster lacking in
    # one cluster are left out; ApiVersions and SASL are the gateway's own.
    assert advertised == {0: (3, 8), 3: (1, 9), **LOCAL_APIS}
    assert ranges.serves(3, 9) and not ranges.serves(3, 10) and not ranges.serves(22, 0)


def test_rates_throttle_per_application_and_address_with_special_limits() -> None:
    from kaflet.proxy.degradation import Degradation

    state = DiscoveryState(app_rate=1000, ip_rate=1000, sp_limits={"slow": 2, "10.0.0.9": 3})
    degradation = Degradation(lambda: state, burst_ms=1000, max_throttle_ms=5000)
    assert all(degradation.throttle_ms("fast", "10.0.0.1") == 0 for _ in range(50))
    slow = [degradation.throttle_ms("slow", "10.0.0.1") for _ in range(10)]
    assert slow[0] == 0 and 0 < slow[-1] <= 5000
    by_address = [degradation.throttle_ms(None, "10.0.0.9") for _ in range(10)]
    assert by_address[0] == 0 and by_address[-1] > 0
    # No rates from the manager: nothing is throttled.
    assert Degradation(DiscoveryState, burst_ms=1000, max_throttle_ms=5000).throttle_ms("a", "b") == 0


def test_max_request_num_bounds_the_requests_handled_at_once() -> None:
    from kaflet.proxy.degradation import Degradation

    state = DiscoveryState(max_request_num=2)
    degradation = Degradation(lambda: state, burst_ms=1000, max_throttle_ms=5000)
    at_once = 0
    most = 0

    async def request() -> None:
        nonlocal at_once, most
        async with degradation.slot():
            at_once += 1
            most = max(most, at_once)
            await asyncio.sleep(0.01)
            at_once -= 1

    async def run() -> None:
        await asyncio.gather(*(request() for _ in range(10)))

    asyncio.run(run())
    assert most == 2


def test_retriable_answers_while_a_cluster_is_unreachable_encode_at_every_version() -> None:
    from kaflet.protocol import codec
    from kaflet.protocol.api_keys import ApiKey
    from kaflet.protocol.errors import ErrorCode
    from kaflet.proxy.router import unavailable_answer, with_throttle

    Metadata = codec.request_class(ApiKey.METADATA)
    for v in range(DISCOVERY_APIS[ApiKey.METADATA][1] + 1):
        topic = Metadata.MetadataRequestTopic(name="orders", topic_id=None) if v >= 10 else \
            Metadata.MetadataRequestTopic(name="orders")
        req = Metadata(topics=[topic], allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                       include_topic_authorized_operations=False)
        body = unavailable_answer(ApiKey.METADATA, v, bytes(req.encode(version=v)), "cluster 7 is not reachable")
        resp = codec.decode_response(ApiKey.METADATA, v, memoryview(body))
        assert resp.brokers == [] and [(t.name, t.error_code) for t in resp.topics] == [
            ("orders", ErrorCode.LEADER_NOT_AVAILABLE)]
    Find = codec.request_class(ApiKey.FIND_COORDINATOR)
    for v in range(DISCOVERY_APIS[ApiKey.FIND_COORDINATOR][1] + 1):
        req = Find(key="g", key_type=0, coordinator_keys=["g"])
        body = unavailable_answer(ApiKey.FIND_COORDINATOR, v, bytes(req.encode(version=v)), "down")
        resp = codec.decode_response(ApiKey.FIND_COORDINATOR, v, memoryview(body))
        codes = [c.error_code for c in resp.coordinators] if v >= 4 else [resp.error_code]
        assert codes == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
    Describe = codec.request_class(ApiKey.DESCRIBE_CLUSTER)
    for v in range(DISCOVERY_APIS[ApiKey.DESCRIBE_CLUSTER][1] + 1):
        req = Describe(include_cluster_authorized_operations=False, endpoint_type=1)
        body = unavailable_answer(ApiKey.DESCRIBE_CLUSTER, v, bytes(req.encode(version=v)), "down")
        resp = codec.decode_response(ApiKey.DESCRIBE_CLUSTER, v, memoryview(body))
        assert resp.error_code == ErrorCode.BROKER_NOT_AVAILABLE and resp.error_message == "down"
        throttled = codec.decode_response(ApiKey.DESCRIBE_CLUSTER, v, memoryview(with_throttle(body, 250)))
        assert throttled.throttle_time_ms == 250


@settings(max_examples=200, deadline=None)
@given(rate=st.integers(1, 5000), burst_ms=st.integers(1, 5000), seconds=st.integers(1, 60),
       rtt_ms=st.floats(0, 50))
def test_a_client_that_waits_out_its_throttles_is_held_to_the_rate(rate: int, burst_ms: int, seconds: int,
                                                                   rtt_ms: float) -> None:
    """Requests sent as soon as the last throttle allows: the burst, then the rate, never more."""
    from kaflet.proxy.degradation import RequestBucket

    bucket = RequestBucket(0.0)
    now, sent = 0.0, 0
    while now < seconds * 1000:
        throttle = bucket.take(rate, burst_ms, now)
        sent += 1
        now += throttle + rtt_ms
    burst = max(rate * burst_ms / 1000, 1)
    # Never more than the burst plus the rate over the time (plus the request that crossed the end).
    assert sent <= burst + rate * now / 1000 + 1
    # And, with no round trip, no less than the rate (each request waits its share, rounded up to a ms).
    if rtt_ms == 0:
        assert sent >= 0.99 * min(rate, 1000) * seconds


def test_a_bucket_refills_to_its_burst_and_follows_a_new_rate_at_once() -> None:
    from kaflet.proxy.degradation import RequestBucket

    bucket = RequestBucket(0.0)
    assert [bucket.take(10, 1000, 0.0) for _ in range(11)] == [0] * 10 + [100]
    # An hour idle fills it to 10, not more.
    assert [bucket.take(10, 1000, 3_600_000.0) for _ in range(11)] == [0] * 10 + [100]
    # The rate raised to 1,000/s: two requests owed now cost 2 ms, not 200.
    assert bucket.take(1000, 1000, 3_600_000.0) == 2
