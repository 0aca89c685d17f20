"""The one error body, `{"error": {"type", "message", …}}`: every error answer of the API and
every error the CLI prints (built from a GenAIError by `app.api.error_body`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class FieldProblem(BaseModel):
    """One reason a request failed validation (its input is left out: it may hold secrets)."""

    model_config = ConfigDict(frozen=True)
    loc: list[str | int] = Field(description="Where: body, query or path, then the field path.")
    msg: str
    type: str = Field(description="pydantic's error code, e.g. missing or string_too_long.")


class ErrorInfo(BaseModel):
    """What went wrong. Errors add their own details (pattern, missing, provider, retry_after…)."""

    model_config = ConfigDict(frozen=True, extra="allow")
    type: str = Field(description="Stable code to branch on, e.g. missing_variables.")
    message: str = Field(description="What happened and what to do about it, for a person.")
    request_id: str | None = Field(
        default=None, description="The X-Request-ID of the answer, to find its log line."
    )
    job_id: str | None = Field(
        default=None, description="The audit record of the failed job (GET /v1/jobs/{job_id})."
    )
    errors: list[FieldProblem] | None = Field(
        default=None, description="invalid_request only: every field that failed validation."
    )


class ErrorBody(BaseModel):
    """Every error answer, from the API and the CLI: `{"error": {"type", "message", ...}}`.

    Built by `app.api.error_body.error_body`; fields that do not apply are left out, not null.
    """

    model_config = ConfigDict(frozen=True)
    error: ErrorInfo
