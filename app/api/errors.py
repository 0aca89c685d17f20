"""The one place where errors become HTTP: `{"error": {"type", "message", ...details}}`."""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from app.errors import GenAIError, UpstreamRateLimited
from app.schemas import ErrorBody

_HTTP_TYPES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


def error_response(
    request: Request, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> JSONResponse:
    request_id = request.scope.get("state", {}).get("request_id")
    if request_id:
        body = {**body, "request_id": request_id}
    return JSONResponse({"error": body}, status_code=status, headers=headers)


async def _genai_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, GenAIError)
    headers = None
    if isinstance(exc, UpstreamRateLimited) and exc.retry_after is not None:
        headers = {"Retry-After": str(math.ceil(exc.retry_after))}
    body = {"type": exc.error_type, "message": exc.message, **exc.details()}
    if exc.job_id is not None:
        body["job_id"] = exc.job_id
    return error_response(request, exc.status_code, body, headers)


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


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    body = {"type": _HTTP_TYPES.get(exc.status_code, "http_error"), "message": str(exc.detail)}
    return error_response(request, exc.status_code, body, dict(exc.headers or {}) or None)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(GenAIError, _genai_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI documentation of the error body for the listed statuses."""
    return {status: {"model": ErrorBody, "description": "Error"} for status in statuses}
