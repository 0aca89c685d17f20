"""AuditTrail: a pending record before every provider call, completed or failed after it.

`start` queues the pending record on the AuditWriter's group commit. With GENAI_AUDIT__MODE
`before-call` (the default) it returns once the record is durable, so nothing is called without
it; with `with-call` it returns at once and `confirm` waits for durability before the answer is
returned (StoreUnavailable otherwise). Outcomes queue behind their job's insert either way.

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
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import String

from app.audit.redaction import Redactor, clip
from app.concurrency.offload import off_loop
from app.errors import GenAIError, JobNotFound, StoreUnavailable
from app.observability.tracing import span
from app.pipeline.prepare import Prepared
from app.prompts.structured import Attempt
from app.providers import ProviderReply
from app.schemas import (
    CallAttempt,
    JobRecord,
    Message,
    RenderedPrompt,
    RenderRequest,
)
from app.schemas.conversation import is_data_image
from app.store.jobs import JobRepository
from app.store.records import JobOutcome, PendingJob
from app.store.secrets import ReplayVault
from app.store.tables import Job
from app.store.writer import AuditWriter
from app.tracking import sha256_hex

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


AuditMode = Literal["before-call", "with-call"]


@dataclass(frozen=True, slots=True)
class OpenJob:
    """A job whose pending record is stored (or, in with-call mode, on its way).

    Its redaction tokens and escapes travel with it; `durable` resolves once the pending record
    is committed (None: already known to be).
    """

    id: str
    prompt_tokens: dict[str, str]
    escaped_fields: tuple[str, ...] = ()
    durable: asyncio.Future[None] | None = None


def redact_prompt(
    redactor: Redactor, prompt: RenderedPrompt
) -> tuple[dict[str, Any], dict[str, str]]:
    """The prompt as stored, the token maps merged: every text redacted (message text, tool
    call arguments and results, reasoning), an inline image kept as the digest of its data, the
    tools and output format as they were offered (they are the caller's code, not its data)."""
    tokens: dict[str, str] = {}

    def text(value: str) -> str:
        result = redactor.redact(value)
        tokens.update(result.tokens)
        return result.text

    stored = prompt.model_dump(mode="json", include={"system", "tools", "response_format"})
    stored["system"] = text(prompt.system)
    stored["messages"] = [_stored_message(message, text) for message in prompt.messages]
    return stored, tokens


def _stored_message(message: Message, text: Callable[[str], str]) -> dict[str, Any]:
    stored = message.model_dump(mode="json")
    if isinstance(message.content, str):
        stored["content"] = text(message.content)
    else:
        stored["content"] = [
            {**part, "text": text(part["text"])}
            if part["type"] == "text"
            else {**part, "url": _stored_image(part["url"], text)}
            for part in stored["content"]
        ]
    for call in stored.get("tool_calls", ()):
        call["arguments"] = text(call["arguments"])
    for block in stored.get("reasoning", ()):
        if "thinking" in block:
            block["thinking"] = text(block["thinking"])
    return stored


def _stored_image(url: str, text: Callable[[str], str]) -> str:
    """An inline image as `data:<type>;base64,sha256:<digest of the data>`: it proves which
    image was sent without keeping it (an image may show a person); a URL is text."""
    if not is_data_image(url):
        return text(url)
    head, _, data = url.partition(";base64,")
    return f"{head};base64,{sha256_hex(data.encode('ascii', 'replace'))}"


def prompt_size(prompt: RenderedPrompt) -> int:
    """The characters redaction scans for this prompt (to decide whether to leave the loop)."""
    size = len(prompt.system)
    for message in prompt.messages:
        size += len(message.text) + sum(len(call.arguments) for call in message.tool_calls)
    return size


def _text_size(*texts: str | None, attempts: Sequence[Attempt] = ()) -> int:
    return sum(len(text or "") for text in texts) + sum(len(a.response) for a in attempts)


def _observe(future: asyncio.Future[None]) -> None:
    """Marks a failed insert's error as seen: the caller hears of it through `confirm`, or
    not at all if it went away (asyncio would otherwise log it as never retrieved)."""
    if not future.cancelled():
        future.exception()


class AuditTrail:
    def __init__(
        self,
        *,
        jobs: JobRepository,
        writer: AuditWriter,
        redactor: Redactor,
        vault: ReplayVault | None,
        mode: AuditMode = "before-call",
    ) -> None:
        self.jobs = jobs
        self.writer = writer
        self.redactor = redactor
        self.vault = vault  # None: replay inputs are not kept
        self.mode = mode

    async def start(
        self, prepared: Prepared, *, request: RenderRequest, request_id: str | None
    ) -> OpenJob:
        """Queue the pending record; in before-call mode, return only once it is durable.

        Raises StoreUnavailable (before-call) when it cannot be written: nothing is called.
        """
        started = time.perf_counter()
        job_id = uuid.uuid4().hex

        prompt = prepared.prompt

        def build() -> PendingJob:
            return self._pending_job(job_id, prepared, request, request_id)

        size = prompt_size(prompt) + len(request.user_prompt)
        # Redacting and queueing the pending record; waiting for it to be durable is `confirm`.
        attributes = {"genai.job_id": job_id, "genai.audit.mode": self.mode}
        with span("genai.audit.insert", attributes=attributes):
            pending = await off_loop(lambda: build().made_storable(), size)
            durable = self.writer.insert(pending)
        durable.add_done_callback(_observe)
        job = OpenJob(job_id, pending.redaction_map, pending.escaped_fields or (), durable)
        if self.mode == "before-call":
            try:
                await self.confirm(job)
            except asyncio.CancelledError:
                # The request went away while its record was being written: if the record lands,
                # it says so (the outcome waits behind the insert, and is dropped if it fails).
                self.cancelled(job, latency_ms=(time.perf_counter() - started) * 1000)
                raise
        return job

    async def confirm(self, job: OpenJob) -> None:
        """Wait until the job's pending record is durable; StoreUnavailable if it cannot be.

        A no-op once durable (always, after `start` in before-call mode). Shielded: a caller
        going away never cancels the group commit other requests wait on.
        """
        if job.durable is None or (job.durable.done() and job.durable.exception() is None):
            return
        try:
            with span("genai.audit.confirm", attributes={"genai.job_id": job.id}):
                await asyncio.shield(job.durable)
        except StoreUnavailable as exc:  # the cause stays attached for the operator's log line
            if self.mode == "before-call":
                message = (
                    "The audit store cannot be written, so the provider was not called; "
                    "check the database (see /readyz)."
                )
            else:
                message = (
                    "The audit store cannot be written, so the answer is withheld; "
                    "check the database (see /readyz)."
                )
            raise StoreUnavailable(message) from exc.__cause__

    async def check_ready(self) -> None:
        """Raises StoreUnavailable when audit records cannot be written (for /readyz)."""
        await self.jobs.ping()

    def _pending_job(
        self, job_id: str, prepared: Prepared, request: RenderRequest, request_id: str | None
    ) -> PendingJob:
        """The pending record, every caller-supplied text in it redacted; pure CPU work."""
        source, choice, provenance = prepared.source, prepared.choice, prepared.provenance
        prompt, params = prepared.prompt, prepared.params
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
                    "continuation": [turn.model_dump(mode="json") for turn in request.continuation],
                },
            )
        return PendingJob(
            id=job_id,
            request_id=stored_request_id,
            created_at=_now(),
            source_kind=source.kind,
            source_name=source_name,
            source_base_path=source.base_path,
            template_id=source.template_id,
            template_role=role,
            template_version=source.version,
            pattern_content_hash=provenance.pattern_content_hash,
            variables_hash=provenance.variables_hash,
            user_prompt_hash=provenance.user_prompt_hash,
            continuation_hash=provenance.continuation_hash,
            provider=choice.provider,
            model=model.text,
            params=stored_params,
            prompt_redacted=stored_prompt,
            redaction_map=tokens,
            snippet_ids=list(prepared.snippets.ids),
            replay_inputs=replay,
        )

    def _attempts(
        self, attempts: Sequence[Attempt]
    ) -> tuple[list[dict[str, Any]] | None, dict[str, str]]:
        """Structured-output attempts as stored: every string in them redacted (issues too)."""
        if not attempts:
            return None, {}
        stored, tokens = self.redactor.redact_data([attempt.as_record() for attempt in attempts])
        return stored, tokens

    def _tool_calls(
        self, reply: ProviderReply
    ) -> tuple[list[dict[str, Any]] | None, dict[str, str]]:
        """The answer's tool calls as stored: their arguments redacted like any text."""
        if not reply.tool_calls:
            return None, {}
        stored, tokens = [], {}
        for call in reply.tool_calls:
            arguments = self.redactor.redact(call.arguments)
            tokens.update(arguments.tokens)
            stored.append({**call.model_dump(mode="json"), "arguments": arguments.text})
        return stored, tokens

    def _submit(self, job: OpenJob, outcome: JobOutcome) -> None:
        self.writer.submit(outcome.made_storable(also_escaped=job.escaped_fields))

    async def _record(self, job: OpenJob, build: Callable[[], JobOutcome], size: int) -> None:
        """Builds the outcome (off the loop when large) and queues it, even if cancelled."""

        def storable() -> JobOutcome:
            return build().made_storable(also_escaped=job.escaped_fields)

        try:
            outcome = await off_loop(storable, size)
        except asyncio.CancelledError:
            # The request is being cancelled: its outcome is still recorded, inline.
            self.writer.submit(storable())
            raise
        self.writer.submit(outcome)

    def _calls(self, calls: Sequence[CallAttempt]) -> list[dict[str, Any]] | None:
        """Upstream calls as stored: provider and model names only, nothing the caller wrote
        except the model name, redacted like the pending record's."""
        if not calls:
            return None
        stored = []
        for call in calls:
            row = call.model_dump()
            row["model"] = self.redactor.redact_model_name(call.model).text
            stored.append(row)
        return stored

    def _answering_model(self, prepared: Prepared | None) -> tuple[dict[str, Any], dict[str, str]]:
        """When a fallback answered, the columns that name the model and the prompt it was sent
        are rewritten (the pending record named the first choice); otherwise nothing changes."""
        if prepared is None or prepared.choice.source != "fallback":
            return {}, {}
        model = clip(self.redactor.redact_model_name(prepared.choice.name), _column_size("model"))
        stored_prompt, tokens = redact_prompt(self.redactor, prepared.prompt)
        return (
            {
                "provider": prepared.choice.provider,
                "model": model.text,
                "prompt_redacted": stored_prompt,
            },
            {**tokens, **model.tokens},
        )

    async def completed(
        self,
        job: OpenJob,
        reply: ProviderReply,
        *,
        answered_by: Prepared | None = None,
        latency_ms: float,
        upstream_ms: float,
        calls: Sequence[CallAttempt] = (),
        output_attempts: Sequence[Attempt] = (),
        streamed: bool = False,
        cost_usd: float | None = None,
        status: Literal["completed", "cached"] = "completed",
    ) -> None:
        def build() -> JobOutcome:
            response = self.redactor.redact(reply.text)
            stored_calls, call_tokens = self._tool_calls(reply)
            stored_attempts, attempt_tokens = self._attempts(output_attempts)
            answering, answering_tokens = self._answering_model(answered_by)
            finish = None
            if reply.finish_reason is not None:
                finish = clip(self.redactor.redact(reply.finish_reason), 32).text
            usage = reply.usage
            return JobOutcome(
                id=job.id,
                status=status,
                completed_at=_now(),
                # error_type and error_message clear an `interrupted` mark set while the store
                # was down.
                finish_reason=finish,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cached_input_tokens=usage.cached_input_tokens,
                reasoning_tokens=usage.reasoning_tokens,
                cost_usd=cost_usd,
                streamed=streamed,
                latency_ms=latency_ms,
                upstream_latency_ms=upstream_ms,
                response_redacted=response.text,
                redaction_map={
                    **job.prompt_tokens,
                    **answering_tokens,
                    **attempt_tokens,
                    **call_tokens,
                    **response.tokens,
                },
                response_tool_calls=stored_calls,
                attempts=self._calls(calls),
                output_attempts=stored_attempts,
                **answering,
            )

        size = _text_size(reply.text, *(c.arguments for c in reply.tool_calls))
        await self._record(job, build, size + _text_size(attempts=output_attempts))

    async def failed(
        self,
        job: OpenJob,
        error: GenAIError,
        *,
        latency_ms: float,
        upstream_ms: float | None,
        calls: Sequence[CallAttempt] = (),
        output_attempts: Sequence[Attempt] = (),
        streamed: bool = False,
    ) -> None:
        def build() -> JobOutcome:
            message = self.redactor.redact(error.message)
            stored_attempts, attempt_tokens = self._attempts(output_attempts)
            return JobOutcome(
                id=job.id,
                status="failed",
                streamed=streamed,
                completed_at=_now(),
                error_type=error.error_type,
                error_message=message.text,
                latency_ms=latency_ms,
                upstream_latency_ms=upstream_ms,
                redaction_map={**job.prompt_tokens, **attempt_tokens, **message.tokens},
                attempts=self._calls(calls),
                output_attempts=stored_attempts,
            )

        await self._record(job, build, _text_size(error.message, attempts=output_attempts))

    def cancelled(
        self,
        job: OpenJob,
        *,
        latency_ms: float,
        calls: Sequence[CallAttempt] = (),
        output_attempts: Sequence[Attempt] = (),
        reason: str | None = None,
    ) -> None:
        """Called while the request task is being cancelled: it must not await. `reason` is
        the error type recorded (default: the client disconnected).

        Redaction here is inline, but bounded: only a prefix of each attempt is ever scanned.
        """
        stored_attempts, attempt_tokens = self._attempts(output_attempts)
        self._submit(
            job,
            JobOutcome(
                id=job.id,
                status="cancelled",
                completed_at=_now(),
                error_type=reason or "client_disconnected",
                latency_ms=latency_ms,
                redaction_map={**job.prompt_tokens, **attempt_tokens},
                attempts=self._calls(calls),
                output_attempts=stored_attempts,
            ),
        )

    async def get(self, job_id: str) -> JobRecord:
        await self.writer.catch_up()
        job = await self.jobs.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job.record()

    async def recent(
        self, *, limit: int, status: str | None = None, source_name: str | None = None
    ) -> list[JobRecord]:
        """The newest jobs, newest first (queued writes first, so none is missing)."""
        await self.writer.catch_up()
        jobs = await self.jobs.recent(limit=limit, status=status, source_name=source_name)
        return [job.record() for job in jobs]

    async def interrupt_stale(self, *, older_than_seconds: float) -> int:
        """Marks `interrupted` the pending records no live process can still complete.

        This process's own queued completions are written first, so none of them is overtaken.
        """
        await self.writer.flush()
        cutoff = _now() - dt.timedelta(seconds=older_than_seconds)
        return await self.jobs.interrupt_pending(created_before=cutoff, message=INTERRUPTED_MESSAGE)
