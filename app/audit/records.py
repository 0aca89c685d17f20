"""What the audit trail stores, apart from when: pure builders of the pending record and outcomes.

`RecordBuilder` turns a prepared request, an answer or an error into the typed rows the store
writes (`PendingJob`, `JobOutcome`), every caller-supplied text redacted first: the prompt, the
response, error messages, structured-output attempts (every string in them), `params` (stop
strings), `request_id` and `model` (see `Redactor.redact_model_name` for why release dates stay
clear). It touches no database and never awaits, so it is unit-tested on its own; `AuditTrail`
decides when each record is built and written.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel
from sqlalchemy import String

from app.audit.redaction import Redactor, clip
from app.auth.principal import Principal
from app.errors import GenAIError
from app.pipeline.prepare import Prepared
from app.prompts.structured import Attempt
from app.providers import ProviderReply
from app.schemas import (
    CallAttempt,
    Message,
    RenderedPrompt,
    RenderRequest,
    StoredParams,
    StructuredAttempt,
    ToolCall,
)
from app.schemas.conversation import is_data_image
from app.store.records import JobOutcome, PendingJob
from app.store.secrets import ReplayVault
from app.store.tables import Job
from app.tracking import sha256_hex

_M = TypeVar("_M", bound=BaseModel)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _column_size(name: str) -> int:
    """A text column's declared length: redacted values must fit it on PostgreSQL."""
    column_type = Job.__table__.c[name].type
    assert isinstance(column_type, String) and column_type.length
    return column_type.length


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


@dataclass(frozen=True, slots=True)
class CallRun:
    """What a request's upstream run did, however it ended: one value instead of five arguments.

    A cancelled record keeps only the latency, the calls and the tries (nothing else is known).
    """

    latency_ms: float
    upstream_ms: float | None = None
    calls: Sequence[CallAttempt] = ()
    output_attempts: Sequence[Attempt] = ()
    streamed: bool = False


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


def text_size(*texts: str | None, attempts: Sequence[Attempt] = ()) -> int:
    """The characters redaction scans for an outcome (to decide whether to leave the loop)."""
    return sum(len(text or "") for text in texts) + sum(len(a.response) for a in attempts)


def answer_size(reply: ProviderReply, run: CallRun) -> int:
    """The characters redaction scans for a completed record."""
    arguments = (call.arguments for call in reply.tool_calls)
    return text_size(reply.text, *arguments, attempts=run.output_attempts)


def _replaced(model: _M, name: str, value: str) -> _M:
    """The model with one text replaced by its redacted form; itself (no copy) if unchanged."""
    if getattr(model, name) == value:
        return model
    return model.model_copy(update={name: value})


class RecordBuilder:
    """Builds every row the audit trail writes; pure CPU work (redaction), no I/O, no await."""

    def __init__(self, redactor: Redactor, vault: ReplayVault | None) -> None:
        self.redactor = redactor
        self.vault = vault  # None: replay inputs are not kept

    def pending(
        self,
        job_id: str,
        prepared: Prepared,
        request: RenderRequest,
        request_id: str | None,
        caller: Principal | None = None,
    ) -> PendingJob:
        """The pending record, every caller-supplied text in it redacted."""
        source, choice, provenance = prepared.source, prepared.choice, prepared.provenance
        stored_prompt, tokens = redact_prompt(self.redactor, prepared.prompt)
        stored_params: StoredParams
        stored_params, param_tokens = self.redactor.redact_data(
            prepared.params.model_dump(exclude_none=True)
        )
        model = clip(self.redactor.redact_model_name(choice.name), _column_size("model"))
        tokens.update(param_tokens | model.tokens)
        stored_request_id = self._short("request_id", request_id, tokens)  # tokens keep order
        source_name, role = source.name, source.role
        if source.kind == "fallback":
            # Pattern and template names were found in the catalog; a fallback's are free text.
            source_name = self._short("source_name", source.name, tokens) or ""
            role = self._short("template_role", source.role, tokens)
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
            template_label=source.label,
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
            snippet_versions=[use.model_dump(mode="json") for use in prepared.snippets.used],
            replay_inputs=self._sealed_inputs(job_id, prepared, request),
            key_id=caller.key_id if caller else None,
            team=caller.team if caller else None,
        )

    def _short(self, column: str, value: str | None, tokens: dict[str, str]) -> str | None:
        """A short caller-supplied value, redacted and clipped to its column."""
        if value is None:
            return None
        result = clip(self.redactor.redact(value), _column_size(column))
        tokens.update(result.tokens)
        return result.text

    def _sealed_inputs(
        self, job_id: str, prepared: Prepared, request: RenderRequest
    ) -> bytes | None:
        """Everything needed to rebuild the prompt exactly; sealed, as it may hold personal data."""
        if self.vault is None:
            return None
        return self.vault.seal(
            job_id,
            {
                "variables": prepared.source.variables,
                "user_prompt": request.user_prompt,
                "instructions": request.instructions,
                "snippets": request.snippets,
                "model": prepared.choice.model,  # the stored name may be redacted
                "continuation": [turn.model_dump(mode="json") for turn in request.continuation],
            },
        )

    def completed(
        self,
        job: OpenJob,
        reply: ProviderReply,
        run: CallRun,
        *,
        answered_by: Prepared | None = None,
        cost_usd: float | None = None,
        cache_saved_usd: float | None = None,
        status: Literal["completed", "cached"] = "completed",
    ) -> JobOutcome:
        """The record of an answer (from the provider, or the cache: `cached`)."""
        response = self.redactor.redact(reply.text)
        stored_calls, call_tokens = self._tool_calls(reply)
        stored_attempts, attempt_tokens = self._attempts(run.output_attempts)
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
            cache_write_tokens=usage.cache_write_tokens,
            cache_write_1h_tokens=usage.cache_write_1h_tokens,
            cost_usd=cost_usd,
            cache_saved_usd=cache_saved_usd,
            streamed=run.streamed,
            latency_ms=run.latency_ms,
            upstream_latency_ms=run.upstream_ms,
            response_redacted=response.text,
            redaction_map={
                **job.prompt_tokens,
                **answering_tokens,
                **attempt_tokens,
                **call_tokens,
                **response.tokens,
            },
            response_tool_calls=stored_calls,
            attempts=self._calls(run.calls),
            output_attempts=stored_attempts,
            **answering,
        )

    def failed(self, job: OpenJob, error: GenAIError, run: CallRun) -> JobOutcome:
        """The record of an error: its type, and its message redacted."""
        message = self.redactor.redact(error.message)
        stored_attempts, attempt_tokens = self._attempts(run.output_attempts)
        return JobOutcome(
            id=job.id,
            status="failed",
            streamed=run.streamed,
            completed_at=_now(),
            error_type=error.error_type,
            error_message=message.text,
            latency_ms=run.latency_ms,
            upstream_latency_ms=run.upstream_ms,
            redaction_map={**job.prompt_tokens, **attempt_tokens, **message.tokens},
            attempts=self._calls(run.calls),
            output_attempts=stored_attempts,
        )

    def cancelled(self, job: OpenJob, run: CallRun, *, reason: str | None = None) -> JobOutcome:
        """The record of a request that went away; `reason` is the error type (default: the
        client disconnected). Only a prefix of each attempt is ever scanned, so it is bounded."""
        stored_attempts, attempt_tokens = self._attempts(run.output_attempts)
        return JobOutcome(
            id=job.id,
            status="cancelled",
            completed_at=_now(),
            error_type=reason or "client_disconnected",
            latency_ms=run.latency_ms,
            redaction_map={**job.prompt_tokens, **attempt_tokens},
            attempts=self._calls(run.calls),
            output_attempts=stored_attempts,
        )

    def _attempts(
        self, attempts: Sequence[Attempt]
    ) -> tuple[tuple[StructuredAttempt, ...] | None, dict[str, str]]:
        """Structured-output attempts as stored: every string in them redacted (issues too)."""
        if not attempts:
            return None, {}
        stored, tokens = self.redactor.redact_data([attempt.as_record() for attempt in attempts])
        return tuple(StructuredAttempt.model_validate(value) for value in stored), tokens

    def _tool_calls(
        self, reply: ProviderReply
    ) -> tuple[tuple[ToolCall, ...] | None, dict[str, str]]:
        """The answer's tool calls as stored: their arguments redacted like any text."""
        if not reply.tool_calls:
            return None, {}
        stored, tokens = [], {}
        for call in reply.tool_calls:
            arguments = self.redactor.redact(call.arguments)
            tokens.update(arguments.tokens)
            stored.append(_replaced(call, "arguments", arguments.text))
        return tuple(stored), tokens

    def _calls(self, calls: Sequence[CallAttempt]) -> tuple[CallAttempt, ...] | None:
        """Upstream calls as stored: provider and model names only, nothing the caller wrote
        except the model name, redacted like the pending record's."""
        if not calls:
            return None
        redact = self.redactor.redact_model_name
        return tuple(_replaced(call, "model", redact(call.model).text) for call in calls)

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
