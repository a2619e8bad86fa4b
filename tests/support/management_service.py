"""A scripted Logi-KafkaManager gateway API on 127.0.0.1 for tests: real HTTP (aiohttp) on a
thread of its own, so synchronous client libraries and asyncio tests can both use it.

It serves the broker-facing endpoints of the management-service contract under ``/gateway``:
``POST /api/v1/security/users|acls``, ``POST /api/v1/partition/topicPartitions`` (rows whose
``timestamp`` lies in [start, end], both ends inclusive as the published manager queries, end 0
meaning now), ``GET /api/v1/report/jmx/topics`` and ``POST /api/v1/heartbeat/survive-user``.
``data`` is a JSON *string* as the published manager sends it (``data_as_string=False``: an
object, as Logi-Kafka's own test mock does). Every request is recorded.

Faults: :meth:`down` closes the port (connection refused) until :meth:`up`; ``mode = "slow"``
answers after ``slow_s``; ``mode`` ``"not-json"``, ``"code"`` (code -1), ``"no-rows"``,
``"wrong-types"`` and ``"http-500"`` answer garbage of that kind.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

USERS = "/api/v1/security/users"
ACLS = "/api/v1/security/acls"
PARTITIONS = "/api/v1/partition/topicPartitions"
JMX_TOPICS = "/api/v1/report/jmx/topics"
HEARTBEAT = "/api/v1/heartbeat/survive-user"
PREFIX = "/gateway"

MODES = ("ok", "slow", "not-json", "code", "no-rows", "wrong-types", "http-500")


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Request:
    """One request the service received."""

    method: str
    path: str  # without the /gateway prefix
    query: dict[str, str]
    body: Any  # decoded JSON, or the raw text when it was not JSON
    at_ms: int


@dataclass
class ScriptedManagementService:
    """The service's state; change it from the test at any time (a lock guards it)."""

    users: list[dict[str, Any]] = field(default_factory=list)
    acls: list[dict[str, Any]] = field(default_factory=list)
    partitions: list[dict[str, Any]] = field(default_factory=list)
    jmx_topics: str = ""
    data_as_string: bool = True
    #: False: /partition/topicPartitions answers 404, as every published manager does.
    offer_partitions: bool = True
    mode: str = "ok"
    slow_s: float = 5.0
    requests: list[Request] = field(default_factory=list)
    port: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _loop: asyncio.AbstractEventLoop | None = None
    _runner: web.AppRunner | None = None
    _site: web.TCPSite | None = None

    # -- the script -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The broker's ``gateway.url``."""
        return f"http://127.0.0.1:{self.port}{PREFIX}"

    def add_user(self, name: str, password: str, *, super_user: bool = False, operation: int = 0,
                 timestamp: int | None = None) -> dict[str, Any]:
        """Append a kafka_user row (as the manager does when an app is created or deleted)."""
        row = {"username": name, "password": password, "userType": 1 if super_user else 0,
               "operation": operation, "timestamp": now_ms() if timestamp is None else timestamp}
        with self._lock:
            self.users.append(row)
        return row

    def add_acl(self, topic: str, user: str, access: int, *, operation: int = 0,
                timestamp: int | None = None) -> dict[str, Any]:
        """Append a kafka_acl row: a grant (operation 0) carries the merged access, a revoke
        (operation 2) only the bits removed."""
        row = {"topicName": topic, "username": user, "access": access, "operation": operation,
               "timestamp": now_ms() if timestamp is None else timestamp}
        with self._lock:
            self.acls.append(row)
        return row

    def add_partitions(self, topic: str, disabled: str, *, operation: int = 0,
                       timestamp: int | None = None) -> dict[str, Any]:
        """Append a disabled-partitions row (``disabled`` as "1,2")."""
        row = {"topicName": topic, "disablePartitions": disabled, "operation": operation,
               "timestamp": now_ms() if timestamp is None else timestamp}
        with self._lock:
            self.partitions.append(row)
        return row

    def set_mode(self, mode: str) -> None:
        """Answer normally (``ok``), slowly, or with one kind of garbage."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        self.mode = mode

    def recorded(self, path: str | None = None) -> list[Request]:
        """The requests received so far (to ``path`` only, when given)."""
        with self._lock:
            return [r for r in self.requests if path is None or r.path == path]

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Start serving on a free port (kept across down/up)."""
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application()
            app.router.add_route("*", PREFIX + "/{tail:.*}", self._handle)
            self._runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(self._runner.setup())
            loop.run_until_complete(self._bind())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="scripted-management-service", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the scripted management service did not start")

    async def _bind(self) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()
        if not self.port:
            self.port = self._runner.addresses[0][1]

    def _run(self, coro: Any) -> None:
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def down(self) -> None:
        """Close the port: calls are refused until :meth:`up`."""
        async def stop_site() -> None:
            if self._site is not None:
                await self._site.stop()
                self._site = None
            # Kept-alive connections would still be answered: a service that is down answers none.
            server = self._runner.server if self._runner is not None else None
            for handler in list(server.connections if server is not None else ()):
                handler.force_close()
        self._run(stop_site())

    def up(self) -> None:
        """Listen again on the same port."""
        async def start_site() -> None:
            if self._site is None:
                await self._bind()
        self._run(start_site())

    def stop(self) -> None:
        """Stop serving and end the thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None

    # -- serving ----------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path[len(PREFIX):]
        text = await request.text()
        try:
            body: Any = json.loads(text) if text else None
        except ValueError:
            body = text
        with self._lock:
            self.requests.append(Request(request.method, path, dict(request.query), body, now_ms()))
            mode = self.mode
        if mode == "slow":
            await asyncio.sleep(self.slow_s)
        elif mode == "http-500":
            return web.Response(status=500, text="Internal Server Error")
        elif mode == "not-json":
            return web.Response(status=200, text="<html>502 Bad Gateway</html>", content_type="text/html")
        elif mode == "code":
            return self._envelope(None, code=-1, message="invalid request")
        if path == PARTITIONS and not self.offer_partitions:
            return web.Response(status=404, text="Not Found")
        if path in (USERS, ACLS, PARTITIONS) and request.method == "POST":
            if mode == "no-rows":
                return self._envelope({"total": 0})
            if not isinstance(body, dict) or not isinstance(body.get("start"), int) \
                    or not isinstance(body.get("end"), int) or body["start"] < 0 or body["end"] < 0:
                return self._envelope(None, code=-1, message="invalid request")
            start, end = body["start"], body["end"] or now_ms()
            table = {USERS: self.users, ACLS: self.acls, PARTITIONS: self.partitions}[path]
            with self._lock:
                rows = [dict(r) for r in table if start <= r["timestamp"] <= end]
            if mode == "wrong-types":
                rows = [{**r, "timestamp": "yesterday", "operation": [0]} for r in rows] or \
                    [{"username": 7, "timestamp": "yesterday", "operation": [0]}]
            return self._envelope({"rows": rows})
        if path == JMX_TOPICS and request.method == "GET":
            return self._envelope(self.jmx_topics, raw_string=True)
        if path == HEARTBEAT and request.method == "POST":
            return web.json_response({"code": 0, "message": "success", "data": None, "tips": None})
        return web.Response(status=404, text="Not Found")

    def _envelope(self, data: Any, *, code: int = 0, message: str = "success",
                  raw_string: bool = False) -> web.Response:
        if data is not None and self.data_as_string and not raw_string:
            data = json.dumps(data)
        return web.json_response({"code": code, "message": message, "data": data, "tips": None})


@contextmanager
def scripted_management_service(**kwargs: Any) -> Iterator[ScriptedManagementService]:
    """A started :class:`ScriptedManagementService`, stopped on exit."""
    service = ScriptedManagementService(**kwargs)
    service.start()
    try:
        yield service
    finally:
        service.stop()
