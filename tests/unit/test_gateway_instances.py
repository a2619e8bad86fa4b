"""The manager's record of the gateway processes that pull discovery settings: the staleness
rule, the identity headers, and how often a gateway's row is written."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kaflet.manager import gateway_instances as gi
from kaflet.proxy import discovery
from kaflet.proxy.discovery import LIMIT_PATHS, DiscoverySync


def test_a_gateway_is_stale_after_three_of_its_intervals() -> None:
    now = 1_000_000
    assert not gi.is_stale(now - 29_000, 10_000, now)
    assert not gi.is_stale(now - 30_000, 10_000, now)
    assert gi.is_stale(now - 30_001, 10_000, now)
    # A gateway that does not say how often it pulls is taken to pull every 30 s.
    assert not gi.is_stale(now - 89_000, None, now)
    assert gi.is_stale(now - 91_000, None, now)
    # Its row is written at most every WRITE_EVERY_MS, so a fast gateway is given that long.
    fast = gi.STALE_INTERVALS * gi.WRITE_EVERY_MS
    assert not gi.is_stale(now - fast, 100, now)
    assert gi.is_stale(now - fast - 1, 100, now)


def test_identity_headers_are_cut_to_what_can_be_stored() -> None:
    assert gi.instance_id(None) == "" and gi.instance_id("") == ""
    assert gi.instance_id("gw-1:9092") == "gw-1:9092"
    assert gi.instance_id("a\x00b\nc" + "x" * 300) == "abc" + "x" * 125
    assert gi.sync_interval("1000") == 1000
    for bad in (None, "", "-5", "0", "1e3", "abc", "999999999999"):
        assert gi.sync_interval(bad) is None, bad


def test_a_gateway_row_is_written_at_most_every_few_seconds_unless_its_version_changes() -> None:
    recorder = gi.PullRecorder()

    def pull(at: int, version: int = 3, instance: str = "gw:1", interval: int | None = 500) -> gi.Pull:
        return gi.Pull("10.0.0.1", instance, interval, version, at)

    assert recorder.due(pull(0))
    assert not recorder.due(pull(500))
    assert not recorder.due(pull(gi.WRITE_EVERY_MS - 1))
    assert recorder.due(pull(gi.WRITE_EVERY_MS))
    assert recorder.due(pull(gi.WRITE_EVERY_MS + 1, version=4))  # a new version is shown at once
    assert recorder.due(pull(gi.WRITE_EVERY_MS + 2, version=4, interval=1000))
    assert recorder.due(pull(gi.WRITE_EVERY_MS + 3, instance="gw:2"))  # another gateway on that address


def test_the_gateway_sends_the_headers_the_manager_reads() -> None:
    assert (discovery.INSTANCE_HEADER, discovery.INTERVAL_HEADER) == (gi.INSTANCE_HEADER, gi.INTERVAL_HEADER)


class DeletingManager:
    """Answers the rate pulls as kaflet manager does after the setting's row was deleted."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[int, str | None]] = {LIMIT_PATHS["ip_rate"]: (1, "5")}

    async def post(self, path: str, body: Mapping[str, Any], query: Mapping[str, Any] | None = None) -> Any:
        raise AssertionError("discovery pulls are GETs")

    async def get(self, path: str, query: Mapping[str, Any] | None = None) -> Any:
        version, data = self.rows.get(path, (-1, None))
        return {"version": str(version), "data": data} if version > int((query or {})["versionNumber"]) else None


def test_a_deleted_limit_is_dropped_by_the_gateway() -> None:
    manager = DeletingManager()
    sync = DiscoverySync(manager, 1.0)
    asyncio.run(sync.sync_once())
    assert sync.state.ip_rate == 5
    manager.rows[LIMIT_PATHS["ip_rate"]] = (2, None)
    asyncio.run(sync.sync_once())
    assert sync.state.ip_rate is None and sync.state.version(LIMIT_PATHS["ip_rate"]) == 2
    assert sync.state.to_json()["ip_rate"] is None
