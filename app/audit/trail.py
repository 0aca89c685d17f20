"""AuditTrail: a pending record before every provider call, completed or failed after it."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from app.catalog.source import RenderedSource
from app.errors import GenAIError, JobNotFound, StoreUnavailable
from app.prompts.redaction import Redactor
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


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True, slots=True)
class OpenJob:
    """A job whose pending record is stored; its prompt's redaction tokens travel with it."""

    id: str
    prompt_tokens: dict[str, str]


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
        stored_prompt, tokens = redact_prompt(self.redactor, prompt)
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
                },
            )
        job = dict(
            id=job_id,
            request_id=request_id,
            created_at=_now(),
            status="pending",
            source_kind=source.kind,
            source_name=source.name,
            source_base_path=source.base_path,
            template_id=source.template_id,
            template_role=source.role,
            template_version=source.version,
            template_sha256=source.content_hash,
            pattern_content_hash=provenance.pattern_content_hash,
            variables_hash=provenance.variables_hash,
            user_prompt_hash=provenance.user_prompt_hash,
            provider=choice.provider,
            model=choice.name,
            params=params.model_dump(exclude_none=True),
            prompt_redacted=stored_prompt,
            redaction_map=tokens,
            snippet_ids=list(snippet_ids),
            replay_inputs=replay,
            attempts=None,
        )
        try:
            await self.jobs.insert(job)
        except (SQLAlchemyError, OSError):
            raise StoreUnavailable(
                "The audit store cannot be written, so the provider was not called; "
                "check the database (see /readyz)."
            ) from None
        return OpenJob(job_id, tokens)

    def _attempts(
        self, attempts: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]] | None, dict[str, str]]:
        """Structured-output attempts as stored: each response redacted."""
        if not attempts:
            return None, {}
        stored, tokens = [], {}
        for attempt in attempts:
            redacted = self.redactor.redact(attempt.get("response") or "")
            tokens.update(redacted.tokens)
            stored.append({**attempt, "response": redacted.text})
        return stored, tokens

    def completed(
        self,
        job: OpenJob,
        reply: ProviderReply,
        *,
        latency_ms: float,
        upstream_ms: float,
        attempts: list[dict[str, Any]] | None = None,
    ) -> None:
        response = self.redactor.redact(reply.text)
        stored_attempts, attempt_tokens = self._attempts(attempts or [])
        self.writer.submit(
            job.id,
            {
                "status": "completed",
                "completed_at": _now(),
                "finish_reason": reply.finish_reason,
                "input_tokens": reply.usage.input_tokens,
                "output_tokens": reply.usage.output_tokens,
                "latency_ms": latency_ms,
                "upstream_latency_ms": upstream_ms,
                "response_redacted": response.text,
                "redaction_map": {**job.prompt_tokens, **attempt_tokens, **response.tokens},
                "attempts": stored_attempts,
            },
        )

    def failed(
        self,
        job: OpenJob,
        error: GenAIError,
        *,
        latency_ms: float,
        upstream_ms: float | None,
        attempts: list[dict[str, Any]] | None = None,
    ) -> None:
        message = self.redactor.redact(error.message)
        stored_attempts, attempt_tokens = self._attempts(attempts or [])
        self.writer.submit(
            job.id,
            {
                "status": "failed",
                "completed_at": _now(),
                "error_type": error.error_type,
                "error_message": message.text,
                "latency_ms": latency_ms,
                "upstream_latency_ms": upstream_ms,
                "redaction_map": {**job.prompt_tokens, **attempt_tokens, **message.tokens},
                "attempts": stored_attempts,
            },
        )

    def cancelled(
        self, job: OpenJob, *, latency_ms: float, attempts: list[dict[str, Any]] | None = None
    ) -> None:
        """Called while the request task is being cancelled: it must not await."""
        stored_attempts, attempt_tokens = self._attempts(attempts or [])
        self.writer.submit(
            job.id,
            {
                "status": "cancelled",
                "completed_at": _now(),
                "error_type": "client_disconnected",
                "latency_ms": latency_ms,
                "redaction_map": {**job.prompt_tokens, **attempt_tokens},
                "attempts": stored_attempts,
            },
        )

    async def get(self, job_id: str) -> JobRecord:
        await self.writer.flush()  # read-your-writes for completions still queued
        job = await self.jobs.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        fields = {name: getattr(job, name) for name in JobRecord.model_fields if hasattr(job, name)}
        return JobRecord.model_validate(
            {**fields, "replay_available": job.replay_inputs is not None}
        )
