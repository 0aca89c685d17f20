"""The one `{"error": …}` body: the API answers with it and the CLI prints it, so neither drifts."""

from __future__ import annotations

from typing import Any

from app.errors import GenAIError
from app.schemas import ErrorBody, ErrorInfo


def error_body(exc: GenAIError, *, request_id: str | None = None) -> ErrorBody:
    """`{"error": {type, message, ...details, job_id?, request_id?}}` for one of our errors."""
    fields: dict[str, Any] = {"type": exc.error_type, "message": exc.message, **exc.details()}
    if exc.job_id is not None:
        fields["job_id"] = exc.job_id
    if request_id is not None:
        fields["request_id"] = request_id
    return ErrorBody(error=ErrorInfo.model_validate(fields))


def error_json(body: ErrorBody) -> dict[str, Any]:
    """The body as JSON-ready data; fields that do not apply are left out rather than null."""
    return body.model_dump(mode="json", exclude_unset=True)
