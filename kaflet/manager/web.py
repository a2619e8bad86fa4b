"""The HTTP service: the console (server-rendered pages with plain forms), the JSON API and the
gateway contract, on one FastAPI application.

Security: a signed session cookie (HttpOnly, SameSite=Strict, Secure when ``cookie_secure``)
holds the account id and a CSRF token; every unsafe request must carry that token (form field
``csrf_token`` or header ``X-CSRF-Token``); JSON API calls must also be ``application/json``.
Logins are rate-limited per user name and per client address (counted in each process). Bodies
over ``max_body_bytes`` are refused with 413 before they are read. The gateway contract uses its
own token / address check instead (brokers hold no session).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.sessions import SessionMiddleware

from kaflet.manager import gateway
from kaflet.manager.config import ManagerConfig
from kaflet.manager.db import Database
from kaflet.manager.models import Account
from kaflet.manager.quotas import AdminQuotaWriter, QuotaWriter
from kaflet.manager.sampling import ObserverPool
from kaflet.manager.security import LoginLimiter, SecretBox, csrf_matches, new_csrf_token, verify_password
from kaflet.manager.services import ACCESS_NAMES, ServiceError, account_by_name
from kaflet.manager.state import ManagerState

log = logging.getLogger("kaflet.manager.web")

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))


def size_text(value: int | None) -> str:
    """Bytes for people (``1.5 MiB``); ``?`` when unknown."""
    if value is None:
        return "?"
    for limit, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if value >= limit:
            return f"{value / limit:.1f} {unit}"
    return f"{value} B"


def _when(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _rate(value: float | None) -> str:
    return "unlimited" if value is None else f"{value:,.0f}"


templates.env.filters["when"] = _when
templates.env.filters["rate"] = _rate
templates.env.filters["size"] = size_text
templates.env.globals["access_names"] = ACCESS_NAMES
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
API_LOGIN = "/api/v1/login"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class NotLoggedIn(Exception):
    """The request needs a logged-in account."""


class CsrfFailed(Exception):
    """An unsafe request without the session's CSRF token."""


class UnsupportedMediaType(ServiceError):
    """A JSON API call whose body is not JSON."""

    status = 415


class BodyLimit:
    """Refuses request bodies larger than ``limit`` bytes with 413, by Content-Length up front or
    by counting a streamed body; nothing past the limit reaches the application."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.limit
                except ValueError:
                    too_big = True
                if too_big:
                    await _plain(send, 413, f"request body larger than {self.limit} bytes")
                    return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge()
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await _plain(send, 413, f"request body larger than {self.limit} bytes")


class _TooLarge(Exception):
    pass


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class SecurityHeaders:
    """No framing, no sniffing, scripts and styles only from this origin."""

    HEADERS = [(b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"),
               (b"referrer-policy", b"same-origin"),
               (b"content-security-policy", b"default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")]

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + self.HEADERS
            await send(message)
        await self.app(scope, receive, with_headers if scope["type"] == "http" else send)


def wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def csrf_token(request: Request) -> str:
    """The session's CSRF token (created with the session)."""
    token = request.session.get("csrf")
    if not token:
        token = request.session["csrf"] = new_csrf_token()
    return str(token)


async def check_csrf(request: Request) -> None:
    """Dependency of every console and API route: unsafe methods need the session's token."""
    if request.method in SAFE_METHODS:
        return
    given = request.headers.get("x-csrf-token")
    if wants_json(request):
        has_body = request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers
        if request.url.path == API_LOGIN and not has_body:
            raise UnsupportedMediaType("log in with a JSON body")
        if has_body and request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            raise UnsupportedMediaType("JSON API bodies must be application/json")
        if request.url.path == API_LOGIN:
            return  # no session yet; a cross-site page cannot send application/json without CORS
    elif given is None:
        try:
            form = await request.form()
        except Exception:  # a body that is not a form carries no token
            raise CsrfFailed("the form could not be read") from None
        value = form.get("csrf_token")
        given = value if isinstance(value, str) else None
    if not csrf_matches(request.session.get("csrf"), given):
        raise CsrfFailed("missing or wrong CSRF token; reload the page and try again")


def current_account(request: Request) -> Account:
    """Dependency: the logged-in, active account."""
    state: ManagerState = request.app.state.manager
    account_id = request.session.get("account_id")
    if not isinstance(account_id, int):
        raise NotLoggedIn()
    with state.db.session() as s:
        account = s.get(Account, account_id)
        if account is None or not account.active or request.session.get("pw") != session_marker(account):
            request.session.clear()
            raise NotLoggedIn()
        s.expunge(account)
    return account


def session_marker(account: Account) -> str:
    """Changes when the account's password does: a password change ends its other sessions."""
    return hashlib.sha256(account.password_hash.encode()).hexdigest()[:16]


class LoginThrottled(ServiceError):
    """Too many failed logins for this user name or address; ``retry_after`` in seconds."""

    status = 429

    def __init__(self, retry_after: float) -> None:
        self.retry_after = int(retry_after) + 1
        super().__init__(f"Too many failed logins. Try again in {self.retry_after} seconds.")


class LoginFailed(ServiceError):
    status = 401

    def __init__(self) -> None:
        super().__init__("Wrong user name or password.")


async def log_in(request: Request, username: str, password: str) -> Account:
    """Check the credentials (rate-limited per user name and client address) and give the
    request a fresh session (new CSRF token, nothing kept from before)."""
    state: ManagerState = request.app.state.manager
    client = request.client.host if request.client else "?"
    keys = (f"user:{username}", f"ip:{client}")
    wait = state.login_limiter.retry_after(*keys)
    if wait > 0:
        raise LoginThrottled(wait)

    def check() -> Account | None:
        with state.db.session() as s:
            account = account_by_name(s, username)
            ok = verify_password(account.password_hash if account else None, password)
            if account is None or not ok or not account.active:
                return None
            s.expunge(account)
            return account

    account = await run_in_threadpool(check)  # argon2 takes tens of milliseconds: not on the loop
    if account is None:
        state.login_limiter.failed(*keys)
        raise LoginFailed()
    state.login_limiter.succeeded(keys[0])
    request.session.clear()
    request.session.update({"account_id": account.id, "pw": session_marker(account), "csrf": new_csrf_token()})
    return account


def render(request: Request, name: str, http_status: int = 200, **context: Any) -> HTMLResponse:
    context.setdefault("account", getattr(request.state, "account", None))
    context["csrf_token"] = csrf_token(request)
    return templates.TemplateResponse(request, name, context, status_code=http_status)


def create_app(config: ManagerConfig, db: Database | None = None, quota_writer: QuotaWriter | None = None) -> FastAPI:
    """The service for ``config`` (the schema must be migrated already: see db.migrate)."""
    from kaflet.manager import api, cluster_api, cluster_console, console

    state = ManagerState(
        config=config, db=db or Database(config.database_url), box=SecretBox(config.encryption_key),
        quota_writer=quota_writer or AdminQuotaWriter(),
        login_limiter=LoginLimiter(config.login_max_failures, config.login_window_s),
        observers=ObserverPool(interval_s=config.cluster_sample_interval_s))

    async def follow_clusters() -> None:
        # Clusters registered or forgotten through another manager process on the database.
        while True:
            await asyncio.sleep(config.cluster_sample_interval_s)
            try:
                await run_in_threadpool(cluster_console.observe_all, state)
            except Exception as exc:  # the database away for a moment: try again next interval
                log.warning("reading the registered clusters failed: %s", exc)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Every registered cluster is sampled in the background from the start, so its pages
        # have a snapshot to show by the time anyone opens them.
        await run_in_threadpool(cluster_console.observe_all, state)
        follower = asyncio.create_task(follow_clusters())
        try:
            yield
        finally:
            follower.cancel()
            # Not the default wait: a round blocked on an unreachable cluster (up to its request
            # timeout) ends on its own daemon thread rather than holding up the shutdown.
            await run_in_threadpool(state.observers.close, 0.2)
            state.host_names.close()

    app = FastAPI(title="kaflet manager", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.manager = state
    app.add_middleware(SessionMiddleware, secret_key=config.secret_key, session_cookie="kaflet_manager",
                       max_age=config.session_max_age_s, same_site="strict", https_only=config.cookie_secure)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    app.include_router(gateway.router)
    app.include_router(api.router)
    app.include_router(cluster_api.router)
    app.include_router(console.router)
    app.include_router(cluster_console.router)

    @app.exception_handler(gateway.GatewayDenied)
    async def _gateway_denied(request: Request, exc: gateway.GatewayDenied) -> Response:
        return gateway.denied_response()

    @app.exception_handler(NotLoggedIn)
    async def _not_logged_in(request: Request, exc: NotLoggedIn) -> Response:
        if wants_json(request):
            return JSONResponse({"error": "log in first"}, status_code=401)
        return RedirectResponse("/login", status_code=303)

    @app.exception_handler(CsrfFailed)
    async def _csrf(request: Request, exc: CsrfFailed) -> Response:
        return error_response(request, 403, str(exc))

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> Response:
        response = error_response(request, exc.status, str(exc))
        if isinstance(exc, LoginThrottled):
            response.headers["Retry-After"] = str(exc.retry_after)
        return response

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        return error_response(request, exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body')}: {e.get('msg')}"
                             for e in exc.errors()[:5])
        return error_response(request, 422, f"invalid input: {problems}")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error serving %s %s", request.method, request.url.path)
        return error_response(request, 500, "internal error; see the manager's log")

    return app


def error_response(request: Request, status: int, message: str) -> Response:
    if wants_json(request) or request.url.path.startswith(gateway.PREFIX):
        return JSONResponse({"error": message}, status_code=status)
    return render(request, "error.html", http_status=status, message=message, status_code=status)
