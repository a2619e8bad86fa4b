"""The session report against a real HTTP endpoint: a confluent-kafka producer and consumer show
up under their topic as ``user#ip#clientVersion#clientId``, POSTed to
/api/v1/heartbeat/survive-user?clusterId=&brokerId= every session.report.ms; a report the
service refuses is kept and sent with the next one.

The endpoint is a small aiohttp server on the broker's loop; the broker's ManagementService
here is a minimal aiohttp poster (the gateway's client, kaflet/gateway/client.py, is g1's).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

import aiohttp
from aiohttp import web
from confluent_kafka import Consumer, Producer

from kaflet.embedded_broker import embedded_broker
from kaflet.gateway.model import ManagementServiceError
from kaflet.gateway.session_report import _FETCH_VERSIONS, _PRODUCE_VERSIONS
from tests.support.topics import create_topic


class Poster:
    """POSTs JSON to base + path and checks the envelope's code."""

    def __init__(self, base: str) -> None:
        self.base = base

    async def post(self, path: str, body: Mapping[str, Any], query: Mapping[str, Any] | None = None) -> Any:
        try:
            async with aiohttp.ClientSession() as http, http.post(
                    self.base + path, json=body, params={k: str(v) for k, v in (query or {}).items()},
                    timeout=aiohttp.ClientTimeout(total=5)) as resp:
                answer = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ManagementServiceError(f"{path}: {exc}") from None
        if not isinstance(answer, dict) or answer.get("code") != 0:
            raise ManagementServiceError(f"{path}: {answer!r}")
        return answer.get("data")

    async def get(self, path: str, query: Mapping[str, Any] | None = None) -> Any:
        raise ManagementServiceError("not used by the session report")


def test_session_report_posts_connections_per_topic(tmp_path: Any) -> None:
    received: list[tuple[dict[str, str], dict[str, Any]]] = []
    refuse = {"next": True}

    async def heartbeat(request: web.Request) -> web.Response:
        body = json.loads(await request.text())
        if refuse["next"]:
            refuse["next"] = False  # the first report fails: it must come again with the next
            return web.json_response({"code": -1, "message": "fail", "data": None, "tips": None})
        received.append((dict(request.query), body))
        return web.json_response({"code": 0, "message": "success", "data": None, "tips": None})

    config = {"log.dirs": str(tmp_path / "data"), "gateway.url": "http://127.0.0.1:9/gateway",
              "cluster.id": "7", "session.report.ms": "300"}
    with embedded_broker(config) as (broker, loop):
        async def serve() -> tuple[web.AppRunner, int]:
            app = web.Application()
            app.router.add_post("/gateway/api/v1/heartbeat/survive-user", heartbeat)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

        runner, port = asyncio.run_coroutine_threadsafe(serve(), loop).result(10)
        try:
            loop.call_soon_threadsafe(broker.start_session_report, Poster(f"http://127.0.0.1:{port}/gateway"))
            topic = f"rep-{uuid.uuid4().hex[:6]}"
            create_topic(broker.bootstrap, topic)
            producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "prod-1"})
            producer.produce(topic, b"hello")
            assert producer.flush(10) == 0
            consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "cons-1",
                                 "group.id": "g-rep", "auto.offset.reset": "earliest"})
            consumer.subscribe([topic])
            deadline = time.monotonic() + 20
            msg = None
            while msg is None and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
            consumer.close()
            assert msg is not None and not msg.error()

            def merged(kind: str) -> set[str]:
                return {c for _, body in received for c in body.get(kind, {}).get(topic, [])}

            while time.monotonic() < deadline and not (merged("produce") and merged("fetch")):
                time.sleep(0.1)
        finally:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        brokers = {q["brokerId"] for q, _ in received}
        clusters = {q["clusterId"] for q, _ in received}
    assert clusters == {"7"} and brokers == {str(broker.broker_id)}
    produced, fetched = merged("produce"), merged("fetch")
    print(f"\nreported: produce {sorted(produced)}, fetch {sorted(fetched)}")
    [p] = produced
    user, ip, version, client_id = p.split("#")
    assert (user, ip, client_id) == ("ANONYMOUS", "127.0.0.1", "prod-1")
    assert version in _PRODUCE_VERSIONS.values()
    [f] = fetched
    user, ip, version, client_id = f.split("#")
    assert (user, ip, client_id) == ("ANONYMOUS", "127.0.0.1", "cons-1")
    assert version in _FETCH_VERSIONS.values()
