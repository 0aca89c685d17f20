"""The one place where errors become HTTP: `{"error": {"type", "message", ...details}}`."""

from __future__ import annotations

import sys
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from app.errors import GenAIError, StoreUnavailable
from app.schemas import ErrorBody
from app.store.db import describe_storage_error

_HTTP_TYPES = {
    400: "bad_request",  # a body that cannot be parsed at all (invalid UTF-8, absurd nesting)
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
}
log = structlog.get_logger(__name__)


def error_response(
    request: Request, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> JSONResponse:
    request_id = request.scope.get("state", {}).get("request_id")
    if request_id:
        body = {**body, "request_id": request_id}
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def genai_error_response(request: Request, exc: GenAIError) -> JSONResponse:
    """The answer for one of our errors (also used by middleware that answers on its own)."""
    body = {"type": exc.error_type, "message": exc.message, **exc.details()}
    if exc.job_id is not None:
        body["job_id"] = exc.job_id
    return error_response(request, exc.status_code, body, exc.headers() or None)


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
        {"loc": list(err.get("loc", ())), "msg": err.get("msg", ""), "type": err.get("type", "")}
        for err in exc.errors()
    ]
    summary = "; ".join(f"{'.'.join(map(str, p['loc']))}: {p['msg']}" for p in problems[:5])
    body = {
        "type": "invalid_request",
        "message": f"The request is invalid: {summary}",
        "errors": problems,
    }
    return error_response(request, 422, body)


def _unreadable_body(cause: BaseException | None) -> str | None:
    """Why FastAPI could not parse a body (its 400 keeps the parser's exception as the cause)."""
    if isinstance(cause, UnicodeDecodeError):
        return "The request body is not valid UTF-8."
    if isinstance(cause, RecursionError):
        return "The JSON body is nested too deeply to read."
    if isinstance(cause, ValueError):  # int(): more digits than the interpreter converts
        return f"The JSON body has a number longer than {sys.get_int_max_str_digits()} digits."
    return None


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    message = str(exc.detail)
    if exc.status_code == 400:
        message = _unreadable_body(exc.__cause__) or message
    body = {"type": _HTTP_TYPES.get(exc.status_code, "http_error"), "message": message}
    return error_response(request, exc.status_code, body, dict(exc.headers or {}) or None)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(GenAIError, _genai_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI documentation of the error body for the listed statuses."""
    return {status: {"model": ErrorBody, "description": "Error"} for status in statuses}
