"""GenAIService, the completion pipeline: prepare → record → call → confirm → record → envelope.

Preparing the prompt is the PromptPreparer's work, the repair loop is `app.prompts.repair`'s and
storing is the AuditTrail's; this module only orders them and counts the outcome.
"""

from __future__ import annotations

import asyncio
import functools
import time

import structlog

from app.audit.trail import AuditTrail, OpenJob
from app.errors import GenAIError
from app.metrics import Metrics
from app.pipeline.prepare import Prepared, PromptPreparer
from app.prompts.repair import Answer, ModelCall, RepairLoop
from app.providers import ProviderCall, ProviderRegistry, ProviderReply
from app.providers.retry import RetryPolicy
from app.schemas import (
    CompletionEnvelope,
    CompletionResponse,
    Message,
    RenderRequest,
    RenderResult,
)

log = structlog.get_logger(__name__)


def _elapsed_ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 2)


class GenAIService:
    def __init__(
        self,
        *,
        preparer: PromptPreparer,
        providers: ProviderRegistry,
        retry: RetryPolicy,
        audit: AuditTrail,
        metrics: Metrics,
        structured_max_attempts: int,
    ) -> None:
        self._preparer = preparer
        self._providers = providers
        self._retry = retry
        self._audit = audit
        self._metrics = metrics
        self._structured_max_attempts = structured_max_attempts

    async def render(self, request: RenderRequest) -> RenderResult:
        """A dry run: everything `complete` would do except recording and calling."""
        return (await self._preparer.prepare(request)).as_render_result()

    async def complete(
        self, request: RenderRequest, *, request_id: str | None = None
    ) -> CompletionEnvelope:
        started = time.perf_counter()
        prepared = await self._preparer.prepare(request)
        job = await self._audit.start(prepared, request=request, request_id=request_id)
        structlog.contextvars.bind_contextvars(job_id=job.id)
        provider = prepared.choice.provider
        loop = RepairLoop(
            schema=prepared.source.output_schema,
            native=prepared.native_schema,
            max_attempts=self._structured_max_attempts,
            provider=provider,
        )
        upstream_started = time.perf_counter()
        try:
            answer = await loop.run(self._caller(prepared), prepared.prompt.messages)
            upstream_ms = _elapsed_ms(upstream_started)
            # With GENAI_AUDIT_MODE=with-call the pending record may still be on its way: an
            # answer whose record is not durable is never returned.
            await self._audit.confirm(job)
        except GenAIError as exc:
            raise await self._failed(job, exc, started, upstream_started, loop) from exc.__cause__
        except asyncio.CancelledError:  # the client went away; the record must say so
            self._audit.cancelled(job, latency_ms=_elapsed_ms(started), attempts=loop.attempts)
            self._metrics.completions.labels(provider, "cancelled").inc()
            raise
        await self._audit.completed(
            job,
            answer.reply,
            latency_ms=_elapsed_ms(started),
            upstream_ms=upstream_ms,
            attempts=answer.attempts,
        )
        self._metrics.completions.labels(provider, "completed").inc()
        self._metrics.upstream_seconds.labels(provider).observe(upstream_ms / 1000)
        structlog.contextvars.bind_contextvars(
            upstream_ms=upstream_ms,
            input_tokens=answer.reply.usage.input_tokens,
            output_tokens=answer.reply.usage.output_tokens,
        )
        return self._envelope(job, request_id, prepared, answer)

    def _caller(self, prepared: Prepared) -> ModelCall:
        """One provider call per conversation, under the retry policy."""
        provider = self._providers.get(prepared.choice.provider)
        schema = prepared.source.output_schema if prepared.native_schema else None

        async def call(messages: tuple[Message, ...]) -> ProviderReply:
            request = ProviderCall(
                model=prepared.choice.name,
                system=prepared.prompt.system,
                messages=messages,
                params=prepared.params,
                output_schema=schema,
            )
            return await self._retry.run(functools.partial(provider.complete, request))

        return call

    async def _failed(
        self,
        job: OpenJob,
        exc: GenAIError,
        started: float,
        upstream_started: float,
        loop: RepairLoop,
    ) -> GenAIError:
        """Record the failure; the error to raise is a new one that names the job."""
        upstream_ms = _elapsed_ms(upstream_started)
        await self._audit.failed(
            job,
            exc,
            latency_ms=_elapsed_ms(started),
            upstream_ms=upstream_ms,
            attempts=loop.attempts,
        )
        self._metrics.completions.labels(loop.provider, "failed").inc()
        structlog.contextvars.bind_contextvars(upstream_ms=upstream_ms, error_type=exc.error_type)
        return exc.with_job(job.id)

    @staticmethod
    def _envelope(
        job: OpenJob, request_id: str | None, prepared: Prepared, answer: Answer
    ) -> CompletionEnvelope:
        return CompletionEnvelope(
            job_id=job.id,
            request_id=request_id,
            prompt=prepared.prompt,
            params=prepared.params,
            response=CompletionResponse(
                text=answer.reply.text,
                provider=prepared.choice.provider,
                model=prepared.choice.name,
                finish_reason=answer.reply.finish_reason,
                usage=answer.reply.usage,
            ),
            model_choice=prepared.choice,
            provenance=prepared.provenance,
            parsed=answer.parsed,
            validation=answer.outcome,
        )
