"""The console: server-rendered pages and plain HTML forms (no JavaScript needed)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import func, select

from kaflet.manager import services as svc
from kaflet.manager.db import now_ms
from kaflet.manager.gateway_instances import STALE_INTERVALS, list_instances
from kaflet.manager.models import (
    Account,
    App,
    AuditRecord,
    Cluster,
    GatewayConfig,
    GatewayConfigType,
    PermissionRequest,
    Quota,
    RequestStatus,
    Role,
    TopicReport,
)
from kaflet.manager.state import ManagerState
from kaflet.manager.web import LoginFailed, LoginThrottled, check_csrf, current_account, log_in, render

router = APIRouter(dependencies=[Depends(check_csrf)])
AUDIT_PAGE = 100


def state_of(request: Request) -> ManagerState:
    state: ManagerState = request.app.state.manager
    return state


def logged_in(request: Request, account: Annotated[Account, Depends(current_account)]) -> Account:
    request.state.account = account
    return account


Me = Annotated[Account, Depends(logged_in)]


def see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def no_store(response: Response) -> Response:
    """Pages showing a secret must not be cached anywhere."""
    response.headers["Cache-Control"] = "no-store"
    return response


def optional_float(text: str | None, what: str) -> float | None:
    text = (text or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise svc.InvalidInput(f"{what} must be a number of bytes per second") from None


def names(text: str) -> list[str]:
    return [n.strip() for n in text.replace(";", ",").split(",") if n.strip()]


# -- login ------------------------------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> Response:
    return render(request, "login.html")


@router.post("/login")
async def login(request: Request, username: Annotated[str, Form(max_length=64)],
                password: Annotated[str, Form(max_length=1024)]) -> Response:
    try:
        await log_in(request, username, password)
    except (LoginThrottled, LoginFailed) as exc:
        response = render(request, "login.html", http_status=exc.status, error=str(exc), username=username)
        if isinstance(exc, LoginThrottled):
            response.headers["Retry-After"] = str(exc.retry_after)
        return response
    return see_other("/")


@router.post("/logout")
def logout(request: Request) -> Response:
    request.session.clear()
    return see_other("/login")


# -- home -------------------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
def home(request: Request, me: Me) -> Response:
    with state_of(request).db.session() as s:
        apps = svc.visible_apps(s, me)
        pending = s.scalar(select(func.count()).select_from(PermissionRequest).where(
            PermissionRequest.status == RequestStatus.PENDING.value)) or 0
        clusters = s.scalar(select(func.count()).select_from(Cluster)) or 0
    return render(request, "home.html", apps=apps, pending=pending, clusters=clusters)


# -- applications -----------------------------------------------------------------------------------


@router.get("/apps", response_class=HTMLResponse)
def apps_page(request: Request, me: Me) -> Response:
    with state_of(request).db.session() as s:
        apps = svc.visible_apps(s, me)
    return render(request, "apps.html", apps=apps)


@router.post("/apps")
def create_app(request: Request, me: Me, app_id: Annotated[str, Form(max_length=64)],
               description: Annotated[str, Form(max_length=1024)] = "",
               owners: Annotated[str, Form(max_length=1024)] = "") -> Response:
    state = state_of(request)
    with state.db.session() as s:
        app, password = svc.create_app(s, me, state.box, app_id, description, names(owners))
    return no_store(render(request, "secret.html", http_status=201, app_id=app.app_id, password=password,
                           what="created"))


@router.get("/apps/{app_id}", response_class=HTMLResponse)
def app_page(request: Request, me: Me, app_id: str) -> Response:
    with state_of(request).db.session() as s:
        app = svc.get_managed_app(s, me, app_id)
        context: dict[str, Any] = {
            "app": app,
            "authorities": svc.authorities(s, app_id),
            "requests": list(s.scalars(select(PermissionRequest).where(PermissionRequest.app_id == app_id)
                                       .order_by(PermissionRequest.id.desc()))),
            "quotas": list(s.scalars(select(Quota).where(Quota.app_id == app_id).order_by(Quota.topic_name))),
            "connections": svc.live_connections(s, app_id),
            "clusters": list(s.scalars(select(Cluster).order_by(Cluster.id))),
        }
    context["names"] = state_of(request).host_names.lookup(c.ip for c in context["connections"])
    return render(request, "app.html", **context)


@router.post("/apps/{app_id}/edit")
def edit_app(request: Request, me: Me, app_id: str, description: Annotated[str, Form(max_length=1024)] = "",
             owners: Annotated[str, Form(max_length=1024)] = "") -> Response:
    with state_of(request).db.session() as s:
        svc.update_app(s, me, app_id, description, names(owners))
    return see_other(f"/apps/{app_id}")


@router.post("/apps/{app_id}/reset-password")
def reset_password(request: Request, me: Me, app_id: str) -> Response:
    state = state_of(request)
    with state.db.session() as s:
        password = svc.reset_app_password(s, me, state.box, app_id)
    return no_store(render(request, "secret.html", app_id=app_id, password=password, what="given a new password"))


@router.post("/apps/{app_id}/super-user")
def set_super_user(request: Request, me: Me, app_id: str, super_user: Annotated[str, Form(max_length=8)]) -> Response:
    if super_user not in ("yes", "no"):
        raise svc.InvalidInput("super_user is yes or no")
    with state_of(request).db.session() as s:
        svc.set_super_user(s, me, app_id, super_user == "yes")
    return see_other(f"/apps/{app_id}")


@router.post("/apps/{app_id}/delete")
def delete_app(request: Request, me: Me, app_id: str) -> Response:
    state = state_of(request)
    with state.db.session() as s:
        svc.delete_app(s, me, state.quota_writer, state.box, app_id)
    return see_other("/apps")


@router.post("/apps/{app_id}/requests")
def request_permission(request: Request, me: Me, app_id: str, cluster_id: Annotated[int, Form()],
                       topic: Annotated[str, Form(max_length=249)], access: Annotated[int, Form()],
                       reason: Annotated[str, Form(max_length=1024)] = "") -> Response:
    with state_of(request).db.session() as s:
        svc.request_permission(s, me, app_id, cluster_id, topic, access, reason)
    return see_other(f"/apps/{app_id}")


@router.post("/apps/{app_id}/revoke")
def revoke(request: Request, me: Me, app_id: str, cluster_id: Annotated[int, Form()],
           topic: Annotated[str, Form(max_length=249)], access: Annotated[int, Form()],
           reason: Annotated[str, Form(max_length=1024)] = "") -> Response:
    with state_of(request).db.session() as s:
        svc.revoke(s, me, app_id, cluster_id, topic, access, reason)
    return see_other(f"/apps/{app_id}")


@router.post("/apps/{app_id}/quota")
def set_quota(request: Request, me: Me, app_id: str, cluster_id: Annotated[int, Form()],
              topic: Annotated[str, Form(max_length=249)],
              producer_byte_rate: Annotated[str, Form(max_length=32)] = "",
              consumer_byte_rate: Annotated[str, Form(max_length=32)] = "") -> Response:
    state = state_of(request)
    with state.db.session() as s:
        svc.set_quota(s, me, state.quota_writer, state.box, app_id, cluster_id, topic,
                      optional_float(producer_byte_rate, "the produce rate"),
                      optional_float(consumer_byte_rate, "the consume rate"))
    return see_other(f"/apps/{app_id}")


# -- permission requests ----------------------------------------------------------------------------


@router.get("/requests", response_class=HTMLResponse)
def requests_page(request: Request, me: Me, status: str = "pending") -> Response:
    with state_of(request).db.session() as s:
        query = select(PermissionRequest).order_by(PermissionRequest.id.desc()).limit(500)
        if status in {r.value for r in RequestStatus}:
            query = query.where(PermissionRequest.status == status)
        if not svc.has_role(me, Role.OPERATOR):
            query = query.join(App, App.app_id == PermissionRequest.app_id).join(App.owners).where(Account.id == me.id)
        found = list(s.scalars(query))
    return render(request, "requests.html", requests=found, status=status,
                  statuses=[r.value for r in RequestStatus], operator=svc.has_role(me, Role.OPERATOR))


@router.post("/requests/{request_id}/approve")
def approve(request: Request, me: Me, request_id: int, reason: Annotated[str, Form(max_length=1024)] = "") -> Response:
    with state_of(request).db.session() as s:
        svc.approve_request(s, me, request_id, reason)
    return see_other("/requests")


@router.post("/requests/{request_id}/reject")
def reject(request: Request, me: Me, request_id: int, reason: Annotated[str, Form(max_length=1024)] = "") -> Response:
    with state_of(request).db.session() as s:
        svc.reject_request(s, me, request_id, reason)
    return see_other("/requests")


@router.post("/requests/{request_id}/cancel")
def cancel(request: Request, me: Me, request_id: int) -> Response:
    with state_of(request).db.session() as s:
        svc.cancel_request(s, me, request_id)
    return see_other("/requests")


# -- clusters ---------------------------------------------------------------------------------------


@router.get("/clusters", response_class=HTMLResponse)
def clusters_page(request: Request, me: Me) -> Response:
    with state_of(request).db.session() as s:
        clusters = list(s.scalars(select(Cluster).order_by(Cluster.id)))
        reports = list(s.scalars(select(TopicReport).order_by(TopicReport.cluster_id, TopicReport.topic_name)))
    return render(request, "clusters.html", clusters=clusters, reports=reports, now=now_ms(),
                  admin=svc.has_role(me, Role.ADMIN), operator=svc.has_role(me, Role.OPERATOR))


@router.post("/topic-reports")
def set_topic_report(request: Request, me: Me, cluster_id: Annotated[int, Form()],
                     topic: Annotated[str, Form(max_length=249)],
                     hours: Annotated[float, Form(gt=0, le=24 * 366)]) -> Response:
    now = now_ms()
    with state_of(request).db.session() as s:
        svc.set_topic_report(s, me, cluster_id, topic, now, now + int(hours * 3600 * 1000))
    return see_other("/clusters")


@router.post("/topic-reports/{report_id}/delete")
def delete_topic_report(request: Request, me: Me, report_id: int) -> Response:
    with state_of(request).db.session() as s:
        svc.delete_topic_report(s, me, report_id)
    return see_other("/clusters")


@router.post("/clusters")
def register_cluster(request: Request, me: Me, name: Annotated[str, Form(max_length=128)],
                     bootstrap_servers: Annotated[str, Form(max_length=1024)],
                     cluster_id: Annotated[str, Form(max_length=10)] = "",
                     zookeeper_connect: Annotated[str, Form(max_length=1024)] = "",
                     security_protocol: Annotated[str, Form(max_length=32)] = "PLAINTEXT",
                     sasl_mechanism: Annotated[str, Form(max_length=32)] = "",
                     sasl_username: Annotated[str, Form(max_length=255)] = "",
                     sasl_password: Annotated[str, Form(max_length=1024)] = "") -> Response:
    state = state_of(request)
    cid = cluster_id.strip()
    if cid and not cid.isdigit():
        raise svc.InvalidInput("a cluster id is a whole number")
    with state.db.session() as s:
        cluster = svc.register_cluster(s, me, state.box, name=name, bootstrap_servers=bootstrap_servers,
                                       cluster_id=int(cid) if cid else None, zookeeper_connect=zookeeper_connect,
                                       security_protocol=security_protocol, sasl_mechanism=sasl_mechanism,
                                       sasl_username=sasl_username, sasl_password=sasl_password)
        state.observers.observe(cluster.id, svc.cluster_access(cluster, state.box))
    return see_other("/clusters")


@router.post("/clusters/{cluster_id}/delete")
def delete_cluster(request: Request, me: Me, cluster_id: int) -> Response:
    state = state_of(request)
    with state.db.session() as s:
        svc.delete_cluster(s, me, cluster_id)
    state.observers.forget(cluster_id)
    return see_other("/clusters")


# -- audit log, accounts, gateway settings ----------------------------------------------------------


@router.get("/audit", response_class=HTMLResponse)
def audit_page(request: Request, me: Me, before: int | None = None) -> Response:
    svc.require_role(me, Role.OPERATOR)
    with state_of(request).db.session() as s:
        query = select(AuditRecord).order_by(AuditRecord.id.desc()).limit(AUDIT_PAGE)
        if before is not None:
            query = query.where(AuditRecord.id < before)
        records = list(s.scalars(query))
    older = records[-1].id if len(records) == AUDIT_PAGE else None
    return render(request, "audit.html", records=records, older=older)


@router.get("/accounts", response_class=HTMLResponse)
def accounts_page(request: Request, me: Me) -> Response:
    svc.require_role(me, Role.ADMIN)
    with state_of(request).db.session() as s:
        accounts = list(s.scalars(select(Account).order_by(Account.username)))
    return render(request, "accounts.html", accounts=accounts, roles=[r.value for r in Role])


@router.post("/accounts")
def create_account(request: Request, me: Me, username: Annotated[str, Form(max_length=64)],
                   password: Annotated[str, Form(max_length=1024)], role: Annotated[str, Form(max_length=16)]) -> Response:
    with state_of(request).db.session() as s:
        svc.create_account(s, me, username, password, role)
    return see_other("/accounts")


@router.post("/accounts/{username}")
def update_account(request: Request, me: Me, username: str, role: Annotated[str, Form(max_length=16)] = "",
                   active: Annotated[str, Form(max_length=5)] = "",
                   password: Annotated[str, Form(max_length=1024)] = "") -> Response:
    if active not in ("", "true", "false"):
        raise svc.InvalidInput("active is true or false")
    with state_of(request).db.session() as s:
        svc.update_account(s, me, username, role=role or None, active=None if not active else active == "true",
                           password=password or None)
    return see_other("/accounts" if svc.has_role(me, Role.ADMIN) else "/")


@router.post("/account/password")
def change_password(request: Request, me: Me, current_password: Annotated[str, Form(max_length=1024)],
                    new_password: Annotated[str, Form(max_length=1024)]) -> Response:
    with state_of(request).db.session() as s:
        svc.change_own_password(s, me, current_password, new_password)
    request.session.clear()  # the marker changed: log in again with the new password
    return see_other("/login")


@router.get("/gateway-configs", response_class=HTMLResponse)
def gateway_configs_page(request: Request, me: Me) -> Response:
    svc.require_role(me, Role.ADMIN)
    with state_of(request).db.session() as s:
        rows = list(s.scalars(select(GatewayConfig).order_by(GatewayConfig.type, GatewayConfig.name)))
    return render(request, "gateway_configs.html", rows=rows, types=[t.value for t in GatewayConfigType])


@router.get("/gateway-instances", response_class=HTMLResponse)
def gateway_instances_page(request: Request, me: Me) -> Response:
    svc.require_role(me, Role.OPERATOR)
    now = now_ms()
    with state_of(request).db.session() as s:
        instances = list_instances(s, now)
    return render(request, "gateway_instances.html", instances=instances, now=now,
                  stale_intervals=STALE_INTERVALS)


@router.post("/gateway-instances/{row_id}/forget")
def forget_gateway_instance(request: Request, me: Me, row_id: int) -> Response:
    with state_of(request).db.session() as s:
        svc.forget_gateway_instance(s, me, row_id)
    return see_other("/gateway-instances")


@router.post("/gateway-configs")
def set_gateway_config(request: Request, me: Me, type: Annotated[str, Form(max_length=32)],
                       name: Annotated[str, Form(max_length=255)] = "",
                       value: Annotated[str, Form(max_length=4096)] = "",
                       description: Annotated[str, Form(max_length=1024)] = "") -> Response:
    with state_of(request).db.session() as s:
        svc.set_gateway_config(s, me, type, name, value, description)
    return see_other("/gateway-configs")


@router.post("/gateway-configs/{config_id}/delete")
def delete_gateway_config(request: Request, me: Me, config_id: int) -> Response:
    with state_of(request).db.session() as s:
        svc.delete_gateway_config(s, me, config_id)
    return see_other("/gateway-configs")


