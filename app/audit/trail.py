"""AuditTrail: a pending record before every provider call, completed or failed after it.

Everything stored is redacted first: the prompt, the response, error messages, structured-output
attempts (every string in them), `params` (stop strings), `request_id` and `model` (see
`Redactor.redact_model_name` for why release dates stay clear). Then every row, the pending
insert and each completion alike, passes `storable`, which escapes what a backend refuses.

A record left `pending` by a crash is marked `interrupted` by `interrupt_stale`, but only once it
is older than the longest a request can live (`Settings.stale_pending_after_seconds`): no live
process, this one or another sharing the database, can still complete it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import String

from app.audit.redaction import Redactor, clip
from app.catalog.source import RenderedSource
from app.errors import GenAIError, JobNotFound, StoreUnavailable
from app.providers import ProviderReply
from app.schemas import (
    JobRecord,
    ModelChoice,
    ModelParams,
    Provenance,
    RenderedPrompt,
    RenderRequest,
)
from app.store.jobs import AuditWriter, JobRepository
from app.store.secrets import ReplayVault
from app.store.storable import storable
from app.store.tables import Job

T = TypeVar("T")

OFFLOAD_CHARS = 20_000
"""Redacting more text than this runs in a worker thread, so it never stalls the event loop."""
INTERRUPTED_MESSAGE = (
    "The process handling this job stopped before recording its outcome; the job is older than "
    "the longest a request can live, so no running process can still complete it."
)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _column_size(name: str) -> int:
    """A text column's declared length: redacted values must fit it on PostgreSQL."""
    column_type = Job.__table__.c[name].type
    assert isinstance(column_type, String) and column_type.length
    return column_type.length


@dataclass(frozen=True, slots=True)
class OpenJob:
    """A job whose pending record is stored; its redaction tokens and escapes travel with it."""

    id: str
    prompt_tokens: dict[str, str]
    escaped_fields: tuple[str, ...] = ()


def redact_prompt(
    redactor: Redactor, prompt: RenderedPrompt
) -> tuple[dict[str, Any], dict[str, str]]:
    """The prompt as stored: every text field redacted, the token maps merged."""
    system = redactor.redact(prompt.system)
    tokens = dict(system.tokens)
    messages = []
    for message in prompt.messages:
        redacted = redactor.redact(message.content)
        tokens.update(redacted.tokens)
        messages.append({"role": message.role, "content": redacted.text})
    return {"system": system.text, "messages": messages}, tokens


def _text_size(*texts: str | None, attempts: Sequence[dict[str, Any]] = ()) -> int:
    responses = (attempt.get("response") for attempt in attempts)
    return sum(len(text or "") for text in texts) + sum(
        len(text) for text in responses if isinstance(text, str)
    )


async def _off_loop(build: Callable[[], T], size: int) -> T:
    """Small work inline (a thread hop costs more); large work in a worker thread."""
    if size <= OFFLOAD_CHARS:
        return build()
    return await asyncio.to_thread(build)


class AuditTrail:
    def __init__(
        self,
        *,
        jobs: JobRepository,
        writer: AuditWriter,
        redactor: Redactor,
        vault: ReplayVault | None,
    ) -> None:
        self.jobs = jobs
        self.writer = writer
        self.redactor = redactor
        self.vault = vault  # None: replay inputs are not kept

    async def start(
        self,
        *,
        request: RenderRequest,
        request_id: str | None,
        source: RenderedSource,
        choice: ModelChoice,
        params: ModelParams,
        prompt: RenderedPrompt,
        provenance: Provenance,
        snippet_ids: list[str],
    ) -> OpenJob:
        """Write the pending record and return its id; if that fails, nothing is called."""
        job_id = uuid.uuid4().hex

        def build() -> tuple[dict[str, Any], dict[str, str]]:
            return self._pending_row(
                job_id, request, request_id, source, choice, params, prompt, provenance
            )

        size = _text_size(
            prompt.system, request.user_prompt, *(message.content for message in prompt.messages)
        )
        job, tokens = await _off_loop(build, size)
        job["snippet_ids"] = list(snippet_ids)
        row, escaped = storable(job)
        row["escaped_fields"] = escaped or None
        try:
            await self.jobs.insert(row)
        except StoreUnavailable as exc:  # the cause stays attached for the operator's log line
            raise StoreUnavailable(
                "The audit store cannot be written, so the provider was not called; "
                "check the database (see /readyz)."
            ) from exc.__cause__
        return OpenJob(job_id, tokens, tuple(escaped))

    def _pending_row(
        self,
        job_id: str,
        request: RenderRequest,
        request_id: str | None,
        source: RenderedSource,
        choice: ModelChoice,
        params: ModelParams,
        prompt: RenderedPrompt,
        provenance: Provenance,
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """The pending record, every caller-supplied text in it redacted; pure CPU work."""
        stored_prompt, tokens = redact_prompt(self.redactor, prompt)
        stored_params, param_tokens = self.redactor.redact_data(
            params.model_dump(exclude_none=True)
        )
        model = clip(self.redactor.redact_model_name(choice.name), _column_size("model"))
        tokens.update(param_tokens | model.tokens)

        def redacted(column: str, value: str | None) -> str | None:
            """A short caller-supplied value, redacted and clipped to its column."""
            if value is None:
                return None
            result = clip(self.redactor.redact(value), _column_size(column))
            tokens.update(result.tokens)
            return result.text

        stored_request_id = redacted("request_id", request_id)
        source_name, role = source.name, source.role
        if source.kind == "fallback":
            # Pattern and template names were found in the catalog; a fallback's are free text.
            source_name = redacted("source_name", source.name) or ""
            role = redacted("template_role", source.role)
        replay = None
        if self.vault is not None:
            # Everything needed to rebuild the prompt exactly; sealed, as it may hold personal data.
            replay = self.vault.seal(
                job_id,
                {
                    "variables": source.variables,
                    "user_prompt": request.user_prompt,
                    "instructions": request.instructions,
                    "snippets": request.snippets,
                    "model": choice.model,  # the stored name may be redacted
                },
            )
        job = dict(
            id=job_id,
            request_id=stored_request_id,
            created_at=_now(),
            status="pending",
            source_kind=source.kind,
            source_name=source_name,
            source_base_path=source.base_path,
            template_id=source.template_id,
            template_role=role,
            template_version=source.version,
            template_sha256=source.content_hash,
            pattern_content_hash=provenance.pattern_content_hash,
            variables_hash=provenance.variables_hash,
            user_prompt_hash=provenance.user_prompt_hash,
            provider=choice.provider,
            model=model.text,
            params=stored_params,
            prompt_redacted=stored_prompt,
            redaction_map=tokens,
            replay_inputs=replay,
            attempts=None,
        )
        return job, tokens

    def _attempts(
        self, attempts: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]] | None, dict[str, str]]:
        """Structured-output attempts as stored: every string in them redacted (issues too)."""
        if not attempts:
            return None, {}
        stored, tokens = self.redactor.redact_data(attempts)
        return stored, tokens

    def _submit(self, job: OpenJob, change: dict[str, Any]) -> None:
        row, escaped = storable(change)
        row["escaped_fields"] = sorted({*job.escaped_fields, *escaped}) or None
        self.writer.submit(job.id, row)

    async def _record(self, job: OpenJob, build: Callable[[], dict[str, Any]], size: int) -> None:
        """Builds the change (off the loop when large) and queues it, even if cancelled."""
        try:
            change = await _off_loop(build, size)
        except asyncio.CancelledError:
            # The request is being cancelled: its outcome is still recorded, inline.
            self._submit(job, build())
            raise
        self._submit(job, change)

    async def completed(
        self,
        job: OpenJob,
        reply: ProviderReply,
        *,
        latency_ms: float,
        upstream_ms: float,
        attempts: list[dict[str, Any]] | None = None,
    ) -> None:
        def build() -> dict[str, Any]:
            response = self.redactor.redact(reply.text)
            stored_attempts, attempt_tokens = self._attempts(attempts or [])
            finish = None
            if reply.finish_reason is not None:
                finish = clip(self.redactor.redact(reply.finish_reason), 32).text
            return {
                "status": "completed",
                "completed_at": _now(),
                "error_type": None,  # over an `interrupted` mark set while the store was down
                "error_message": None,
                "finish_reason": finish,
                "input_tokens": reply.usage.input_tokens,
                "output_tokens": reply.usage.output_tokens,
                "latency_ms": latency_ms,
                "upstream_latency_ms": upstream_ms,
                "response_redacted": response.text,
                "redaction_map": {**job.prompt_tokens, **attempt_tokens, **response.tokens},
                "attempts": stored_attempts,
            }

        await self._record(job, build, _text_size(reply.text, attempts=attempts or []))

    async def failed(
        self,
        job: OpenJob,
        error: GenAIError,
        *,
        latency_ms: float,
        upstream_ms: float | None,
        attempts: list[dict[str, Any]] | None = None,
    ) -> None:
        def build() -> dict[str, Any]:
            message = self.redactor.redact(error.message)
            stored_attempts, attempt_tokens = self._attempts(attempts or [])
            return {
                "status": "failed",
                "completed_at": _now(),
                "error_type": error.error_type,
                "error_message": message.text,
                "latency_ms": latency_ms,
                "upstream_latency_ms": upstream_ms,
                "redaction_map": {**job.prompt_tokens, **attempt_tokens, **message.tokens},
                "attempts": stored_attempts,
            }

        await self._record(job, build, _text_size(error.message, attempts=attempts or []))

    def cancelled(
        self, job: OpenJob, *, latency_ms: float, attempts: list[dict[str, Any]] | None = None
    ) -> None:
        """Called while the request task is being cancelled: it must not await.

        Redaction here is inline, but bounded: only a prefix of each attempt is ever scanned.
        """
        stored_attempts, attempt_tokens = self._attempts(attempts or [])
        self._submit(
            job,
            {
                "status": "cancelled",
                "completed_at": _now(),
                "error_type": "client_disconnected",
                "error_message": None,
                "latency_ms": latency_ms,
                "redaction_map": {**job.prompt_tokens, **attempt_tokens},
                "attempts": stored_attempts,
            },
        )

    async def get(self, job_id: str) -> JobRecord:
        await self.writer.catch_up()
        job = await self.jobs.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        fields = {name: getattr(job, name) for name in JobRecord.model_fields if hasattr(job, name)}
        return JobRecord.model_validate(
            {**fields, "replay_available": job.replay_inputs is not None}
        )

    async def interrupt_stale(self, *, older_than_seconds: float) -> int:
        """Marks `interrupted` the pending records no live process can still complete.

        This process's own queued completions are written first, so none of them is overtaken.
        """
        await self.writer.flush()
        cutoff = _now() - dt.timedelta(seconds=older_than_seconds)
        return await self.jobs.interrupt_pending(created_before=cutoff, message=INTERRUPTED_MESSAGE)
