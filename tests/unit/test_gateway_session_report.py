"""The session report's body, client version guess and retry of refused reports."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kaflet.gateway.model import ManagementServiceError
from kaflet.gateway.session_report import PATH, SessionReport, guess_client_version
from kaflet.protocol.api_keys import ApiKey


class Service:
    def __init__(self) -> None:
        self.fail = False
        self.posts: list[tuple[str, Any, Any]] = []

    async def post(self, path: str, body: Mapping[str, Any], query: Mapping[str, Any] | None = None) -> Any:
        if self.fail:
            raise ManagementServiceError("down")
        self.posts.append((path, body, query))
        return None

    async def get(self, path: str, query: Mapping[str, Any] | None = None) -> Any:
        return None


def test_versions() -> None:
    assert guess_client_version(ApiKey.PRODUCE, 7) == "2.1"
    assert guess_client_version(ApiKey.PRODUCE, 9) == "2.8"
    assert guess_client_version(ApiKey.FETCH, 11) == "2.3"
    assert guess_client_version(ApiKey.FETCH, 99) == "unknown"


def test_body_and_retry() -> None:
    report = SessionReport(7, lambda: 3, 1000)
    report.note(ApiKey.PRODUCE, 9, "7.app", "10.0.0.1", "p1", ["a", "b"])
    report.note(ApiKey.PRODUCE, 9, "7.app", "10.0.0.1", "p1", ["a"])
    report.note(ApiKey.FETCH, 12, "other", "10.0.0.2", None, ["a"])
    service = Service()
    service.fail = True
    assert not asyncio.run(report.send(service))
    report.note(ApiKey.PRODUCE, 7, "app", "10.0.0.3", "p2", ["a"])
    service.fail = False
    assert asyncio.run(report.send(service))
    [(path, body, query)] = service.posts
    assert path == PATH and query == {"clusterId": 7, "brokerId": 3}
    assert body == {"produce": {"a": ["app#10.0.0.1#2.8#p1", "app#10.0.0.3#2.1#p2"], "b": ["app#10.0.0.1#2.8#p1"]},
                    "fetch": {"a": ["other#10.0.0.2#2.7#unknown"]}}
    assert report.take() == {"produce": {}, "fetch": {}}
