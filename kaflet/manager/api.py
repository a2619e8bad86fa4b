"""The JSON API (``/api/v1``): the console's actions for scripts. Same session login and
roles; unsafe calls need ``Content-Type: application/json`` and the ``X-CSRF-Token`` header
that /api/v1/login returns. Bodies are validated strictly (unknown fields are refused)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select

from kaflet.manager import services as svc
from kaflet.manager.db import now_ms
from kaflet.manager.gateway_instances import list_instances
from kaflet.manager.models import Account, App, AuditRecord, PermissionRequest, Quota
from kaflet.manager.state import ManagerState
from kaflet.manager.web import check_csrf, current_account, log_in

router = APIRouter(prefix="/api/v1", dependencies=[Depends(check_csrf)])
Me = Annotated[Account, Depends(current_account)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_max_length=1024)


class Login(Strict):
    username: str = Field(max_length=64)
    password: str


class NewApp(Strict):
    app_id: str = Field(max_length=64)
    description: str = ""
    owners: list[str] = Field(default_factory=list, max_length=100)


class NewRequest(Strict):
    cluster_id: int
    topic: str = Field(max_length=249)
    access: int
    reason: str = ""


class Decision(Strict):
    reason: str = ""


class Revoke(Strict):
    cluster_id: int
    topic: str = Field(max_length=249)
    access: int
    reason: str = ""


class SuperUser(Strict):
    super_user: bool


class QuotaBody(Strict):
    cluster_id: int
    topic: str = Field(max_length=249)
    producer_byte_rate: float | None = None
    consumer_byte_rate: float | None = None


def _state(request: Request) -> ManagerState:
    state: ManagerState = request.app.state.manager
    return state


def app_json(app: App) -> dict[str, Any]:
    return {"app_id": app.app_id, "description": app.description, "owners": [o.username for o in app.owners],
            "super_user": app.super_user,
            "created_by": app.created_by, "created_ms": app.created_ms}


def request_json(r: PermissionRequest) -> dict[str, Any]:
    return {"id": r.id, "app_id": r.app_id, "cluster_id": r.cluster_id, "topic": r.topic_name, "access": r.access,
            "reason": r.reason, "status": r.status, "requested_by": r.requested_by, "decided_by": r.decided_by,
            "decision_reason": r.decision_reason}


@router.post("/login")
async def login(request: Request, body: Login) -> Any:
    account = await log_in(request, body.username, body.password)
    return {"username": account.username, "role": account.role, "csrf_token": request.session["csrf"]}


@router.get("/apps")
def list_apps(request: Request, me: Me) -> Any:
    with _state(request).db.session() as s:
        return [app_json(a) for a in svc.visible_apps(s, me)]


@router.post("/apps", status_code=201)
def create_app(request: Request, me: Me, body: NewApp) -> Any:
    state = _state(request)
    with state.db.session() as s:
        app, password = svc.create_app(s, me, state.box, body.app_id, body.description, body.owners)
        # The only time the password is shown.
        return {**app_json(app), "password": password}


@router.get("/apps/{app_id}")
def get_app(request: Request, me: Me, app_id: str) -> Any:
    with _state(request).db.session() as s:
        app = svc.get_managed_app(s, me, app_id)
        return {**app_json(app),
                "permissions": [{"cluster_id": a.cluster_id, "topic": a.topic_name, "access": a.access}
                                for a in svc.authorities(s, app_id)],
                "quotas": [{"cluster_id": q.cluster_id, "topic": q.topic_name,
                            "producer_byte_rate": q.producer_byte_rate, "consumer_byte_rate": q.consumer_byte_rate}
                           for q in s.scalars(select(Quota).where(Quota.app_id == app_id))]}


@router.post("/apps/{app_id}/reset-password")
def reset_password(request: Request, me: Me, app_id: str) -> Any:
    state = _state(request)
    with state.db.session() as s:
        return {"app_id": app_id, "password": svc.reset_app_password(s, me, state.box, app_id)}


@router.put("/apps/{app_id}/super-user")
def set_super_user(request: Request, me: Me, app_id: str, body: SuperUser) -> Any:
    with _state(request).db.session() as s:
        return app_json(svc.set_super_user(s, me, app_id, body.super_user))


@router.delete("/apps/{app_id}", status_code=204)
def delete_app(request: Request, me: Me, app_id: str) -> None:
    state = _state(request)
    with state.db.session() as s:
        svc.delete_app(s, me, state.quota_writer, state.box, app_id)


@router.post("/apps/{app_id}/requests", status_code=201)
def request_permission(request: Request, me: Me, app_id: str, body: NewRequest) -> Any:
    with _state(request).db.session() as s:
        return request_json(svc.request_permission(s, me, app_id, body.cluster_id, body.topic, body.access,
                                                   body.reason))


@router.get("/requests")
def list_requests(request: Request, me: Me, status: str | None = None) -> Any:
    svc.require_role(me, svc.Role.OPERATOR)
    with _state(request).db.session() as s:
        query = select(PermissionRequest).order_by(PermissionRequest.id)
        if status:
            query = query.where(PermissionRequest.status == status)
        return [request_json(r) for r in s.scalars(query)]


@router.post("/requests/{request_id}/approve")
def approve(request: Request, me: Me, request_id: int, body: Decision) -> Any:
    with _state(request).db.session() as s:
        authority = svc.approve_request(s, me, request_id, body.reason)
        return {"app_id": authority.app_id, "cluster_id": authority.cluster_id, "topic": authority.topic_name,
                "access": authority.access}


@router.post("/requests/{request_id}/reject")
def reject(request: Request, me: Me, request_id: int, body: Decision) -> Any:
    with _state(request).db.session() as s:
        return request_json(svc.reject_request(s, me, request_id, body.reason))


@router.post("/apps/{app_id}/revoke")
def revoke(request: Request, me: Me, app_id: str, body: Revoke) -> Any:
    with _state(request).db.session() as s:
        return {"access": svc.revoke(s, me, app_id, body.cluster_id, body.topic, body.access, body.reason)}


@router.put("/apps/{app_id}/quotas")
def set_quota(request: Request, me: Me, app_id: str, body: QuotaBody) -> Any:
    state = _state(request)
    with state.db.session() as s:
        quota = svc.set_quota(s, me, state.quota_writer, state.box, app_id, body.cluster_id, body.topic,
                              body.producer_byte_rate, body.consumer_byte_rate)
        return {"producer_byte_rate": quota.producer_byte_rate if quota else None,
                "consumer_byte_rate": quota.consumer_byte_rate if quota else None}


@router.get("/audit")
def audit(request: Request, me: Me, limit: int = 100) -> Any:
    svc.require_role(me, svc.Role.OPERATOR)
    with _state(request).db.session() as s:
        records = s.scalars(select(AuditRecord).order_by(AuditRecord.id.desc()).limit(max(1, min(limit, 1000))))
        return [{"at_ms": r.at_ms, "actor": r.actor, "action": r.action, "target": r.target, "detail": r.detail}
                for r in records]


@router.get("/gateway-instances")
def gateway_instances(request: Request, me: Me) -> Any:
    """The gateway processes that pulled the discovery settings, most recent first."""
    svc.require_role(me, svc.Role.OPERATOR)
    with _state(request).db.session() as s:
        return [view.to_json() for view in list_instances(s, now_ms())]
