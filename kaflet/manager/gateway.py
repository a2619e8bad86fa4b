"""The gateway contract the brokers call, under ``/gateway/api/v1/`` (Logi-KafkaManager 2.x).

Every answer is HTTP 200 with ``{"code", "message", "data", "tips"}``; ``code`` 0 is success,
-1 an invalid request. ``data`` is a JSON-encoded string (``{"rows": [...]}`` for the
incremental pulls), as the published manager sends it. ``discovery/address`` alone answers the
bare value. Callers must present the shared token (``Authorization: Bearer``, HTTP Basic with the
token as password, so ``gateway.url = http://gw:<token>@host:8080/gateway`` works, or
``X-Gateway-Token``) or connect from an allowed network.

Discovery versions are raised by deletions too (`GatewayConfigVersion`), which Logi-KafkaManager
does not do: after a deletion the type's pull answers the remaining rows, and a single setting
that was deleted answers ``{"version": "N", "data": null}``. Pulls of ``discovery/update`` are
recorded for the console's list of gateway processes (kaflet/manager/gateway_instances.py).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import json
import logging
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from kaflet.manager import changelog
from kaflet.manager.db import now_ms
from kaflet.manager.gateway_instances import (
    INSTANCE_HEADER,
    INTERVAL_HEADER,
    Pull,
    instance_id,
    sync_interval,
)
from kaflet.manager.models import (
    GatewayConfig,
    GatewayConfigType,
    GatewayConfigVersion,
    KafkaAcl,
    KafkaUser,
    TopicConnection,
    TopicReport,
)
from kaflet.manager.state import ManagerState
from kaflet.manager.topic_connections import rows_from_heartbeat

log = logging.getLogger("kaflet.manager.gateway")

PREFIX = "/gateway/api/v1"
INVALID = "invalid request"
#: The report's client types, as the brokers name them.
CLIENT_TYPES = ("produce", "fetch")
_BATCH = 50


def envelope(data: Any = None, code: int = 0, message: str = "success", status: int = 200) -> JSONResponse:
    return JSONResponse({"code": code, "message": message, "data": data, "tips": None}, status_code=status)


def rows_data(rows: list[dict[str, Any]]) -> str:
    return json.dumps({"rows": rows}, separators=(",", ":"))


def _state(request: Request) -> ManagerState:
    state: ManagerState = request.app.state.manager
    return state


def _authorized(request: Request, state: ManagerState) -> bool:
    token = state.config.gateway.token
    if token:
        given = request.headers.get("x-gateway-token")
        auth = request.headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer":
            given = value.strip()
        elif scheme.lower() == "basic":
            try:
                given = base64.b64decode(value.strip(), validate=True).decode().partition(":")[2]
            except (binascii.Error, UnicodeDecodeError):
                given = None
        if given and hmac.compare_digest(given.encode(), token.encode()):
            return True
    host = request.client.host if request.client else ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in net for net in state.config.gateway.allowed_networks)


def _int(value: Any) -> int | None:
    """A JSON integer or a decimal string (Jackson reads both), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise ValueError("body is not JSON") from None


def _window(body: Any, need_cluster: bool) -> tuple[int, int, int | None] | None:
    """(start, end, clusterId) of a pull; end 0 means now (resolved under the change-log lock).
    None when invalid."""
    if not isinstance(body, dict):
        return None
    start, end, cluster = _int(body.get("start")), _int(body.get("end")), _int(body.get("clusterId"))
    if start is None or end is None or start < 0 or end < 0 or (need_cluster and cluster is None):
        return None
    return start, end, cluster


class GatewayDenied(Exception):
    """The caller has neither the token nor an allowed address."""


async def require_gateway_access(request: Request) -> None:
    if not _authorized(request, _state(request)):
        host = request.client.host if request.client else "?"
        log.warning("gateway call from %s refused: no valid token and not an allowed address", host)
        raise GatewayDenied()


def denied_response() -> JSONResponse:
    return envelope(None, -1, "gateway access denied: present the token or call from an allowed address", 403)


router = APIRouter(prefix=PREFIX, dependencies=[Depends(require_gateway_access)])


async def _pull_window(request: Request, need_cluster: bool) -> tuple[int, int, int | None] | None:
    """The (start, end, clusterId) of an incremental pull's body; None when it is not valid."""
    try:
        return _window(await _json_body(request), need_cluster)
    except ValueError:
        return None


@router.post("/security/users")
async def users(request: Request) -> Response:
    window = await _pull_window(request, need_cluster=False)
    if window is None:
        return envelope(None, -1, INVALID)
    try:
        return envelope(await run_in_threadpool(_user_rows, _state(request), window[0], window[1]))
    except ValueError as exc:  # a password stored under another encryption_key: no partial answer
        log.error("security/users: %s", exc)
        return envelope(None, -1, "fail: stored application passwords cannot be decrypted")


def _user_rows(state: ManagerState, start: int, end: int) -> str:
    with state.db.session() as s:
        end = changelog.settle_pull(s, end)
        found = list(s.scalars(select(KafkaUser).where(KafkaUser.create_time >= start, KafkaUser.create_time <= end)
                               .order_by(KafkaUser.create_time)))
    return rows_data([{"username": u.app_id, "password": state.box.decrypt(u.password_enc),
                       "operation": u.operation, "timestamp": u.create_time, "userType": u.user_type} for u in found])


@router.post("/security/acls")
async def acls(request: Request) -> Response:
    window = await _pull_window(request, need_cluster=True)
    if window is None:
        return envelope(None, -1, INVALID)
    return envelope(await run_in_threadpool(_acl_rows, _state(request), *window))


def _acl_rows(state: ManagerState, start: int, end: int, cluster: int | None) -> str:
    with state.db.session() as s:
        end = changelog.settle_pull(s, end)
        found = list(s.scalars(select(KafkaAcl).where(KafkaAcl.cluster_id == cluster, KafkaAcl.create_time >= start,
                                                      KafkaAcl.create_time <= end).order_by(KafkaAcl.create_time)))
    return rows_data([{"topicName": a.topic_name, "username": a.app_id, "access": a.access,
                       "operation": a.operation, "timestamp": a.create_time} for a in found])


def _connection_rows(body: Any, cluster: int, broker: int, at: int) -> list[dict[str, Any]]:
    """The table rows of one report (topic_connections.rows_from_heartbeat parses it), cut to the
    columns' lengths so no report can make the database refuse the batch."""
    return [{"app_id": r.app_id[:64], "cluster_id": cluster, "topic_name": r.topic_name[:249], "type": r.type[:16],
             "ip": r.ip[:64], "client_version": r.client_version[:32],
             "client_id": r.client_id[:255] if r.client_id else None, "broker_id": broker, "create_time": at}
            for r in rows_from_heartbeat(body, cluster, at)]


def _replace_connections(s: Session, rows: list[dict[str, Any]]) -> None:
    """REPLACE INTO on the unique key: a known connection gets a new ``create_time`` (last seen)."""
    dialect = s.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    for i in range(0, len(rows), _BATCH):
        stmt = insert(TopicConnection).values(rows[i:i + _BATCH])
        stmt = stmt.on_conflict_do_update(
            index_elements=["app_id", "cluster_id", "topic_name", "type", "ip", "client_version"],
            set_={"create_time": stmt.excluded.create_time, "client_id": stmt.excluded.client_id,
                  "broker_id": stmt.excluded.broker_id})
        s.execute(stmt)


@router.post("/heartbeat/survive-user")
async def survive_user(request: Request) -> Response:
    state = _state(request)
    cluster, broker = _int(request.query_params.get("clusterId")), _int(request.query_params.get("brokerId"))
    if cluster is None or broker is None:
        return envelope(None, -1, INVALID)
    try:
        rows = _connection_rows(await _json_body(request), cluster, broker, now_ms())
    except ValueError as exc:
        log.info("connection report of broker %s of cluster %s not taken: %s", broker, cluster, exc)
        return envelope(None, -1, "fail")
    if rows:
        await run_in_threadpool(_store_connections, state, rows)
        # The console shows these clients' host names: resolve them before anyone looks.
        state.host_names.prefetch(r["ip"] for r in rows)
    return envelope(None)


def _store_connections(state: ManagerState, rows: list[dict[str, Any]]) -> None:
    with state.db.session() as s:
        _replace_connections(s, rows)


@router.get("/report/jmx/topics")
async def jmx_topics(request: Request) -> Response:
    state = _state(request)
    cluster = _int(request.query_params.get("clusterId"))
    if cluster is None:
        return envelope(None, -1, INVALID)
    return envelope(await run_in_threadpool(_report_topics, state, cluster))


def _report_topics(state: ManagerState, cluster: int) -> str:
    now = now_ms()
    with state.db.session() as s:
        return ",".join(s.scalars(select(TopicReport.topic_name).where(
            TopicReport.cluster_id == cluster, TopicReport.start_time <= now, TopicReport.end_time >= now)
            .order_by(TopicReport.topic_name)))


# -- service discovery ------------------------------------------------------------------------------


def _configs(s: Session, kind: GatewayConfigType) -> list[GatewayConfig]:
    return list(s.scalars(select(GatewayConfig).where(GatewayConfig.type == kind.value).order_by(GatewayConfig.name)))


def _cluster_map(rows: list[GatewayConfig]) -> str:
    return json.dumps({r.name: [a.strip() for a in r.value.split(",") if a.strip()] for r in rows},
                      separators=(",", ":"))


@router.get("/discovery/address")
def discovery_address(request: Request) -> Response:
    state = _state(request)
    cluster = _int(request.query_params.get("clusterId"))
    if cluster is None:
        return envelope(None, -1, INVALID)
    with state.db.session() as s:
        value = s.scalar(select(GatewayConfig.value).where(
            GatewayConfig.type == GatewayConfigType.SD_CLUSTER_ID.value, GatewayConfig.name == str(cluster)))
    return PlainTextResponse(value or "")


@router.get("/discovery/init")
def discovery_init(request: Request) -> Response:
    with _state(request).db.session() as s:
        rows = _configs(s, GatewayConfigType.SD_CLUSTER_ID)
    return envelope(_cluster_map(rows) if rows else None)


def _newer(request: Request, kind: GatewayConfigType) -> tuple[int, list[GatewayConfig]] | None | Response:
    """(version, rows) of ``kind`` when its version is newer than the caller's versionNumber;
    None when not. The version is the type's (raised by deletions too), else its newest row's
    (a type no process has changed since the rows were seeded)."""
    known = _int(request.query_params.get("versionNumber"))
    if known is None:
        return envelope(None, -1, INVALID)
    held = select(GatewayConfigVersion.version).where(GatewayConfigVersion.type == kind.value).scalar_subquery()
    newest = select(func.max(GatewayConfig.version)).where(GatewayConfig.type == kind.value).scalar_subquery()
    with _state(request).db.session() as s:
        # One round trip: a gateway asks this of every type every interval.
        version = max(s.execute(select(func.coalesce(held, -1), func.coalesce(newest, -1))).one())
        if version < 0 or version <= known:
            return None
        return version, _configs(s, kind)


def _versioned(version: int, data: str | None) -> JSONResponse:
    return envelope(json.dumps({"version": str(version), "data": data}, separators=(",", ":")))


@router.get("/discovery/update")
def discovery_update(request: Request) -> Response:
    newer = _newer(request, GatewayConfigType.SD_CLUSTER_ID)
    if isinstance(newer, Response):
        return newer
    known = _int(request.query_params.get("versionNumber"))
    _record_pull(request, newer[0] if newer is not None else known if known is not None else -1)
    if newer is None:
        return envelope(None)
    return _versioned(newer[0], _cluster_map(newer[1]))


def _record_pull(request: Request, version: int) -> None:
    """Note the caller as a gateway holding ``version`` of the cluster addresses (the console's
    list of gateway processes); a failed write costs the gateway nothing but a log line."""
    state = _state(request)
    pull = Pull(address=request.client.host if request.client else "", version=version, at_ms=now_ms(),
                instance_id=instance_id(request.headers.get(INSTANCE_HEADER)),
                sync_interval_ms=sync_interval(request.headers.get(INTERVAL_HEADER)))
    try:
        state.pulls.record(state.db, pull)
    except SQLAlchemyError as exc:
        log.warning("the pull of gateway %s %s was not recorded: %s", pull.address, pull.instance_id,
                    str(exc).splitlines()[0])


def _single(kind: GatewayConfigType) -> Any:
    def endpoint(request: Request) -> Response:
        newer = _newer(request, kind)
        if newer is None or isinstance(newer, Response):
            return newer or envelope(None)
        # A deleted setting is a newer version without a value: the gateway drops its limit.
        row = next((r for r in newer[1] if r.name == kind.value), None)
        return _versioned(newer[0], row.value if row is not None else None)
    return endpoint


router.add_api_route("/discovery/max-request-num", _single(GatewayConfigType.SD_QUEUE_SIZE), methods=["GET"])
router.add_api_route("/discovery/appId-rate", _single(GatewayConfigType.SD_APP_RATE), methods=["GET"])
router.add_api_route("/discovery/ip-rate", _single(GatewayConfigType.SD_IP_RATE), methods=["GET"])


@router.get("/discovery/sp-limit")
def discovery_sp_limit(request: Request) -> Response:
    newer = _newer(request, GatewayConfigType.SD_SP_RATE)
    if newer is None or isinstance(newer, Response):
        return newer or envelope(None)
    return _versioned(newer[0], ",".join(f"{r.name}#{r.value}" for r in newer[1]))
