"""Examples for the OpenAPI document's response schemas, built through the models themselves so
an example can never drift from the shape it illustrates. One request (the RenderRequest
example: summarize for executives) runs through all of them; its variables and user-prompt
hashes are the ones the service computes for it (tests/test_openapi.py renders it to check)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel

from app.audit.events import encode_cursor  # the admin event log (issue 20)
from app.errors import GenAIError, MissingVariables
from app.schemas import (
    AdminEvent,
    AdminEventPage,
    CallAttempt,
    CompletionEnvelope,
    CompletionResponse,
    ErrorBody,
    ErrorInfo,
    JobPage,
    JobRecord,
    JobSummary,
    Message,
    ModelChoice,
    ModelParams,
    RenderedPrompt,
    RenderResult,
    Usage,
)
from app.store.keyset import encode_cursor as page_cursor  # the job list (issue 21)
from app.tracking import RenderedFrom, build_provenance
from app.tracking.signing import Signer  # signed envelopes (issue 20)

_JOB_ID = "3f2b8c1e9a7d4b6c8e0f1a2b3c4d5e6f"
_REQUEST_ID = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
_USER_PROMPT = "Quarterly revenue rose 12% while costs fell 3%..."
# The effective variables: the request's, over the pattern's defaults.
_VARIABLES = {"max_words": 60, "audience": "executives", "format": "bullets"}
_AT = dt.datetime(2026, 1, 15, 9, 30, 0, tzinfo=dt.UTC)

_PROMPT = RenderedPrompt(
    system="You are a careful summarizer. Summarize the text in the user's message.\n\n"
    "Rules:\n- Use at most 60 words.\n- Write for executives.",
    messages=[Message(role="user", content=_USER_PROMPT)],
)
_PARAMS = ModelParams(temperature=0.2, max_tokens=1024)
_CHOICE = ModelChoice(
    model="openai/gpt-4o-mini",
    provider="openai",
    name="gpt-4o-mini",
    source="request",
    reason="the request names the model",
)
_PROVENANCE = build_provenance(
    RenderedFrom(
        name="summarize",
        base_path="patterns",
        content_hash="sha256:" + "5d41402abc4b2a76b9719d911017c592" * 2,
        variables=_VARIABLES,
    ),
    user_prompt=_USER_PROMPT,
    provider="openai",
    model="gpt-4o-mini",
)
_USAGE = Usage(input_tokens=142, output_tokens=48, total_tokens=190)
_ANSWER = "- Revenue up 12%.\n- Costs down 3%.\n- Margin widened."


def _error(exc: GenAIError, *, job_id: str | None = None) -> ErrorBody:
    fields: dict[str, Any] = {"type": exc.error_type, "message": exc.message, **exc.details()}
    if job_id is not None:
        fields["job_id"] = job_id
    return ErrorBody(error=ErrorInfo.model_validate({**fields, "request_id": _REQUEST_ID}))


def _envelope() -> CompletionEnvelope:
    return _DOCS_SIGNER.signed(_unsigned_envelope(), now=_AT)


# Signed envelopes (issue 20): the documentation key (seed bytes 00..1f, as in
# docs/provenance-and-audit.md), so the example's signature really verifies.
_DOCS_SIGNER = Signer(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))


def _unsigned_envelope() -> CompletionEnvelope:
    return CompletionEnvelope(
        job_id=_JOB_ID,
        request_id=_REQUEST_ID,
        prompt=_PROMPT,
        params=_PARAMS,
        response=CompletionResponse(
            text=_ANSWER,
            provider="openai",
            model="gpt-4o-mini",
            finish_reason="stop",
            usage=_USAGE,
            cost_usd=0.0000501,
        ),
        model_choice=_CHOICE,
        provenance=_PROVENANCE,
        attempts=[
            CallAttempt(
                provider="openai", model="gpt-4o-mini", outcome="completed", duration_ms=812.4
            )
        ],
        cache="miss",
    )


def _record(attempts: list[CallAttempt]) -> JobRecord:
    """The stored record of the envelope's request, with the same attempts."""
    return JobRecord(
        id=_JOB_ID,
        request_id=_REQUEST_ID,
        created_at=_AT,
        completed_at=_AT + dt.timedelta(milliseconds=840),
        status="completed",
        error_type=None,
        error_message=None,
        source_kind="pattern",
        source_name="summarize",
        source_base_path="patterns",
        template_id=None,
        template_role=None,
        template_version=None,
        pattern_content_hash=_PROVENANCE.pattern_content_hash,
        variables_hash=_PROVENANCE.variables_hash,
        user_prompt_hash=_PROVENANCE.user_prompt_hash,
        provider="openai",
        model="gpt-4o-mini",
        params=_PARAMS.model_dump(exclude_none=True),
        finish_reason="stop",
        input_tokens=_USAGE.input_tokens,
        output_tokens=_USAGE.output_tokens,
        cost_usd=0.0000501,
        latency_ms=840.2,
        upstream_latency_ms=812.4,
        # Nothing personal in this prompt, so redaction left it as it was.
        prompt_redacted=_PROMPT.model_dump(exclude={"system_folded"}),
        response_redacted=_ANSWER,
        redaction_map={},
        snippet_ids=[],
        attempts=attempts,
        replay_available=True,
    )


def _admin_events() -> AdminEventPage:
    moved = AdminEvent(
        id="5d0c8e0f3a2b4c6d8e9f0a1b2c3d4e5f",
        at=_AT,
        actor="key",
        actor_key_id="k4Fz9Qm2Lx7Pw1Rt",
        action="label.moved",
        target="template:support/system@production",
        detail={"version": 4, "split": None, "message": "ship v4"},
        remote_addr="10.0.4.17",
        user_agent="curl/8.5.0",
        request_id=_REQUEST_ID,
    )
    return AdminEventPage(events=[moved], next_cursor=encode_cursor(moved))


def _jobs(record: JobRecord) -> JobPage:
    """The job list's line for the same record: its summary fields, read off the record."""
    line = JobSummary.model_validate(record.model_dump(include=set(JobSummary.model_fields)))
    return JobPage(jobs=[line], next_cursor=page_cursor(line.created_at, line.id))


def _examples() -> dict[type[BaseModel], BaseModel]:
    envelope = _envelope()
    render = RenderResult(
        prompt=_PROMPT, params=_PARAMS, model_choice=_CHOICE, provenance=_PROVENANCE
    )
    missing = MissingVariables("email/reply", ["recipient"])
    record = _record(envelope.attempts)
    return {
        CompletionEnvelope: envelope,
        RenderResult: render,
        JobRecord: record,
        JobPage: _jobs(record),
        ErrorBody: _error(missing),
        AdminEventPage: _admin_events(),
    }


def add_examples(schemas: dict[str, Any]) -> None:
    """Set `examples` on each illustrated component of the document's schemas."""
    for model, example in _examples().items():
        component = schemas.get(model.__name__)
        if component is not None:
            # Error bodies leave out what does not apply, as the service sends them.
            unset = isinstance(example, ErrorBody)
            component["examples"] = [example.model_dump(mode="json", exclude_unset=unset)]
