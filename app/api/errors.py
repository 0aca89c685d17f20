"""The one place where errors become HTTP: every refusal is one of ours, answered with its body."""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from app.api.error_body import error_body, error_json
from app.api.error_dialects import anthropic_error, dialect_for, openai_error
from app.errors import (
    GenAIError,
    InvalidRequest,
    MethodNotAllowed,
    PayloadTooLarge,
    RequestProblem,
    RouteNotFound,
    StoreUnavailable,
)
from app.observability.facts import request_facts
from app.schemas import ErrorBody, FieldProblem
from app.store.db import describe_storage_error

log = structlog.get_logger(__name__)


def genai_error_response(
    request: Request, exc: GenAIError, *, status: int | None = None
) -> JSONResponse:
    """The answer for one of our errors (also used by middleware that answers on its own), in
    the dialect of the door it came through (`app.api.error_dialects`)."""
    request_id = request.scope.get("state", {}).get("request_id")
    facts = request_facts()
    facts.error_type = facts.error_type or exc.error_type  # a job's failure was noted first
    body = error_json(error_body(exc, request_id=request_id))
    code = status or exc.status_code
    dialect = dialect_for(request.url.path)
    headers = exc.headers()
    if dialect == "openai":
        code, body = openai_error(exc, body, code)
    if dialect == "anthropic":
        code, body = anthropic_error(exc, body, code)
        if request_id:  # where the anthropic SDK looks for it (APIStatusError.request_id)
            headers["request-id"] = request_id
    return JSONResponse(body, status_code=code, headers=headers or None)


async def _genai_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, GenAIError)
    if isinstance(exc, StoreUnavailable) and exc.__cause__ is not None:
        # The caller sees a generic 503; the operator's log line says what the store did.
        log.warning("store_unavailable", cause=describe_storage_error(exc.__cause__))
    return genai_error_response(request, exc)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    # Inputs are left out on purpose: they may hold personal data or secrets.
    problems = [
        FieldProblem(loc=list(err.get("loc", ())), msg=err.get("msg", ""), type=err.get("type", ""))
        for err in exc.errors()
    ]
    return genai_error_response(request, InvalidRequest(problems))


_HTTP_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _allowed_methods(request: Request) -> str | None:
    """Every method the path answers. Starlette's own `Allow` names only the methods of the
    first route that matched the path, and FastAPI makes one route per operation; so each
    method is asked of the router instead (only on a 405, so the few probes cost nothing)."""
    allowed = [
        method
        for method in _HTTP_METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL
            for route in request.app.router.routes
        )
    ]
    return ", ".join(allowed) or None


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own refusals (unknown path, wrong method, unreadable or oversized body)."""
    assert isinstance(exc, HTTPException)
    message = str(exc.detail)
    error: GenAIError
    if exc.status_code == 404:
        error = RouteNotFound(message)
    elif exc.status_code == 405:
        allow = _allowed_methods(request) or (exc.headers or {}).get("Allow")
        error = MethodNotAllowed(message, allow=allow)
    elif exc.status_code == 413:
        error = PayloadTooLarge(message)
    else:  # an unreadable body is refused by app/api/body.py; keep the status, in our shape
        error = RequestProblem(message)
    return genai_error_response(request, error, status=exc.status_code)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(GenAIError, _genai_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI documentation of the error body for the listed statuses."""
    return {status: {"model": ErrorBody, "description": "Error"} for status in statuses}
