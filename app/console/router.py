"""The console's front door: sign-in, sign-out, the home page, its static files, the refusal
pages, and every page module mounted under /console."""

from __future__ import annotations

import secrets
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Form, Request
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse, RedirectResponse, Response

from app.audit.events import Actor
from app.auth.sessions import SESSION_COOKIE, Session
from app.console.api import ApiError
from app.console.guard import (
    CSRF_FIELD,
    FormDep,
    Refused,
    SignInRequired,
    VisitDep,
    pages_of,
    same_token,
    sessions_of,
)
from app.console.pages import PAGE_ROUTERS
from app.console.web import PREFIX, STATIC, ConsoleHeaders, Pages
from app.errors import GenAIError
from app.runtime import Runtime

_MAX_KEY_CHARS = 500  # far longer than any key; what is cut off makes a longer one invalid
LOGIN_COOKIE = "genai_console_login"  # the sign-in form's own CSRF token (double submit)
router = APIRouter(prefix=PREFIX, include_in_schema=False)


def _back_to(raw: str | None) -> str:
    """Where to go after sign-in: a console path only, never another site (`//evil`)."""
    if raw and raw.startswith(PREFIX) and not raw.startswith("//") and "\\" not in raw:
        return raw
    return PREFIX


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def _actor(request: Request, session: Session) -> Actor:
    principal = session.principal
    return Actor(
        kind="key" if principal.key_id is not None else "anonymous",
        key_id=principal.key_id,
        team=principal.team,
        remote_addr=request.client.host if request.client is not None else None,
        user_agent=request.headers.get("user-agent"),
        request_id=request.headers.get("x-request-id"),
    )


def _sign_in_page(
    request: Request, *, next_path: str, error: str | None = None, status: int = 200
) -> Response:
    token = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(32)
    response = pages_of(request).render(
        "login.html",
        path=request.url.path,
        session=None,
        status=status,
        csrf=token,
        next_path=next_path,
        error=error,
    )
    response.set_cookie(
        LOGIN_COOKIE,
        token,
        max_age=3600,
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )
    return response


@router.get("/login")
async def sign_in_form(request: Request, next: str | None = None) -> Response:
    return _sign_in_page(request, next_path=_back_to(next))


@router.post("/login")
async def sign_in(
    request: Request,
    key: Annotated[str, Form()] = "",  # any length: a wrong one is told so on the page
    csrf: Annotated[str, Form(alias=CSRF_FIELD, max_length=100)] = "",
    next: Annotated[str, Form(max_length=2000)] = PREFIX,
) -> Response:
    if not same_token(request.cookies.get(LOGIN_COOKIE, ""), csrf):
        return _sign_in_page(
            request,
            next_path=_back_to(next),
            error="The sign-in form expired; please enter your key again.",
            status=403,
        )
    try:
        token, session = await sessions_of(request).sign_in(key[:_MAX_KEY_CHARS])
    except GenAIError as exc:
        return _sign_in_page(
            request, next_path=_back_to(next), error=exc.message, status=exc.status_code
        )
    runtime: Runtime = request.app.state.runtime
    await runtime.admin_events.record(_actor(request, session), "console.signed_in")
    response = RedirectResponse(_back_to(next), status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=int((session.expires_at - runtime.authenticator.clock()).total_seconds()),
        path="/",  # the page's scripts call /v1 with it (and their CSRF header)
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )
    response.delete_cookie(LOGIN_COOKIE, path=PREFIX)
    return response


@router.post("/logout")
async def sign_out(request: Request, visit: VisitDep, _: FormDep) -> Response:
    await sessions_of(request).sign_out(request.cookies.get(SESSION_COOKIE))
    runtime: Runtime = request.app.state.runtime
    await runtime.admin_events.record(_actor(request, visit.session), "console.signed_out")
    response = RedirectResponse(f"{PREFIX}/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@router.get("")
async def home(visit: VisitDep) -> HTMLResponse:
    return visit.render("home.html")


def _refusal_page(request: Request, status: int, title: str, message: str) -> Response:
    return pages_of(request).render(
        "refused.html",
        path=request.url.path,
        session=None,
        status=status,
        title=title,
        message=message,
    )


async def _sign_in_first(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SignInRequired)
    return RedirectResponse(f"{PREFIX}/login?next={quote(exc.back_to)}", status_code=303)


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Refused)
    return _refusal_page(request, exc.status, exc.title, exc.message)


async def _api_refused(request: Request, exc: Exception) -> Response:
    """A page's API call failed: its status and message, as the API gave them."""
    assert isinstance(exc, ApiError)
    return _refusal_page(request, exc.status, exc.type.replace("_", " ").capitalize(), exc.message)


def install_console(app: FastAPI) -> None:
    """Mount the console: pages, static files, refusal pages and security headers."""
    app.state.console_pages = Pages()
    app.include_router(router)
    for page_router in PAGE_ROUTERS:
        app.include_router(page_router, prefix=PREFIX, include_in_schema=False)
    app.mount(f"{PREFIX}/static", StaticFiles(directory=STATIC), name="console-static")
    app.add_exception_handler(SignInRequired, _sign_in_first)
    app.add_exception_handler(Refused, _refused)
    app.add_exception_handler(ApiError, _api_refused)
    app.add_middleware(ConsoleHeaders)
