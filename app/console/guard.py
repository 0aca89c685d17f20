"""Who may see a console page and change anything from it: the dependencies every page route
takes, and the refusals they raise (drawn as pages by app/console/router.py)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Annotated, cast

from fastapi import Depends, Request
from starlette.datastructures import FormData
from starlette.responses import HTMLResponse

from app.auth.sessions import SESSION_COOKIE, ConsoleSessions, Session
from app.console.api import ConsoleApi
from app.console.web import Pages
from app.runtime import Runtime

CSRF_FIELD = "csrf"


class SignInRequired(Exception):
    """No live session: the browser is sent to the sign-in page, then back."""

    def __init__(self, back_to: str) -> None:
        self.back_to = back_to


@dataclass(frozen=True)
class Refused(Exception):
    """A console request refused outright: shown as a page with this status and message."""

    status: int
    title: str
    message: str


@dataclass(frozen=True, slots=True)
class Visit:
    """A signed-in page request: the session, the API as its key, and the pages."""

    request: Request
    session: Session
    api: ConsoleApi
    pages: Pages

    def render(self, template: str, *, status: int = 200, **context: object) -> HTMLResponse:
        return self.pages.render(
            template, path=self.request.url.path, session=self.session, status=status, **context
        )


def sessions_of(request: Request) -> ConsoleSessions:
    sessions = cast(Runtime, request.app.state.runtime).console
    if sessions is None:  # the router is only mounted when the console is on
        raise Refused(404, "No console", "The console is turned off (GENAI_CONSOLE__ENABLED).")
    return sessions


def pages_of(request: Request) -> Pages:
    return cast(Pages, request.app.state.console_pages)


async def signed_in(request: Request) -> Visit:
    token = request.cookies.get(SESSION_COOKIE)
    session = await sessions_of(request).resolve(token)
    if session is None or token is None:
        back_to = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise SignInRequired(back_to if request.method == "GET" else "/console")
    return Visit(request, session, ConsoleApi(request, token, session), pages_of(request))


async def admin(visit: Annotated[Visit, Depends(signed_in)]) -> Visit:
    if not visit.session.is_admin:
        raise Refused(
            403,
            "Admin only",
            f"This page needs an admin key; you are signed in with a "
            f"{visit.session.principal.scope.value!r} key.",
        )
    return visit


def same_token(expected: str, given: object) -> bool:
    return isinstance(given, str) and bool(expected) and secrets.compare_digest(expected, given)


async def checked_form(request: Request, visit: Annotated[Visit, Depends(signed_in)]) -> FormData:
    """The posted form, once its CSRF token is the session's: another site cannot post it."""
    form = await request.form()
    if not same_token(visit.session.csrf, form.get(CSRF_FIELD)):
        raise Refused(
            403,
            "Form expired",
            "This form's security token does not match your session. Reload the page and "
            "submit it again.",
        )
    return form


VisitDep = Annotated[Visit, Depends(signed_in)]
AdminVisitDep = Annotated[Visit, Depends(admin)]
FormDep = Annotated[FormData, Depends(checked_form)]
