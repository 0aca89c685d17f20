"""GenAIService: the pipeline resolve → render → select model → record → call → envelope."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import structlog

from app.audit.trail import AuditTrail, OpenJob
from app.catalog import PatternsAdapter
from app.catalog.source import DATABASE_BASE_PATH, RenderedSource
from app.catalog.templates import FALLBACK_SHA256, render_fallback, render_template_version
from app.errors import GenAIError
from app.metrics import Metrics
from app.providers import ProviderCall, ProviderRegistry
from app.routing.policy import ModelSelectionPolicy
from app.routing.retry import RetryPolicy
from app.schemas import (
    CompletionEnvelope,
    CompletionResponse,
    Message,
    ModelChoice,
    ModelParams,
    Provenance,
    RenderedPrompt,
    RenderRequest,
    RenderResult,
    TemplateRef,
    TemplateVersion,
)
from app.store.templates import TemplateRepository
from app.tracking import build_provenance

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class _Prepared:
    source: RenderedSource
    prompt: RenderedPrompt
    choice: ModelChoice
    params: ModelParams
    provenance: Provenance


def _elapsed_ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 2)


class GenAIService:
    def __init__(
        self,
        *,
        patterns: PatternsAdapter,
        templates: TemplateRepository,
        policy: ModelSelectionPolicy,
        providers: ProviderRegistry,
        retry: RetryPolicy,
        audit: AuditTrail,
        metrics: Metrics,
        default_params: ModelParams,
    ) -> None:
        self.patterns = patterns
        self.templates = templates
        self.policy = policy
        self.providers = providers
        self.retry = retry
        self.audit = audit
        self.metrics = metrics
        self.default_params = default_params

    async def _resolve(self, request: RenderRequest) -> RenderedSource:
        """Render the pattern file or database template the request names."""
        if request.pattern_key is not None:
            rendered = self.patterns.apply_template(request.pattern_key, request.variables)
            pattern = rendered.pattern
            return RenderedSource(
                kind="pattern",
                name=pattern.name,
                base_path=pattern.base_path,
                content_hash=pattern.content_hash,
                system=rendered.system,
                variables=rendered.variables,
                model_hint=pattern.meta.model_hint,
                params=pattern.meta.params,
            )
        assert request.template is not None  # RenderRequest guarantees exactly one source
        return await self._resolve_template(request.template, request.variables)

    async def _resolve_template(
        self, ref: TemplateRef, variables: dict[str, object]
    ) -> RenderedSource:
        version: TemplateVersion | None
        if ref.version is not None:
            version = await self.templates.get(ref.name, ref.role, ref.version)
        else:
            version = await self.templates.get_active(ref.name, ref.role)
        if version is None:
            self.metrics.template_fallbacks.labels(ref.role).inc()
            log.info("template_fallback", template=ref.name, role=ref.role)
            return RenderedSource(
                kind="fallback",
                name=ref.name,
                base_path=DATABASE_BASE_PATH,
                content_hash=FALLBACK_SHA256,
                system=render_fallback(ref.role, variables),
                variables=dict(variables),
                role=ref.role,
            )
        return RenderedSource(
            kind="template",
            name=version.name,
            base_path=DATABASE_BASE_PATH,
            content_hash=version.checksum,
            system=render_template_version(version, variables),
            variables=dict(variables),
            template_id=version.id,
            role=version.role,
            version=version.version,
        )

    async def _prepare(self, request: RenderRequest) -> _Prepared:
        source = await self._resolve(request)
        choice = self.policy.choose_model(request.model, source.model_hint)
        structlog.contextvars.bind_contextvars(
            pattern=source.provenance_name, provider=choice.provider, model=choice.name
        )
        # V1 semantics: the rendered source is the system text, the user prompt goes verbatim.
        prompt = RenderedPrompt(
            system=source.system, messages=[Message(role="user", content=request.user_prompt)]
        )
        # Request params > pattern params > configured defaults, minus what the provider refuses.
        params = (
            self.default_params.overlay(source.params)
            .overlay(request.params)
            .only(self.providers.supported_params(choice.provider))
        )
        provenance = build_provenance(
            pattern_name=source.provenance_name,
            pattern_base_path=source.base_path,
            pattern_content_hash=source.content_hash,
            variables=source.variables,
            user_prompt=request.user_prompt,
            provider=choice.provider,
            model=choice.name,
        )
        return _Prepared(source, prompt, choice, params, provenance)

    async def render(self, request: RenderRequest) -> RenderResult:
        """A dry run: everything `complete` would do except recording and calling."""
        prepared = await self._prepare(request)
        return RenderResult(
            prompt=prepared.prompt,
            params=prepared.params,
            model_choice=prepared.choice,
            provenance=prepared.provenance,
        )

    async def complete(
        self, request: RenderRequest, *, request_id: str | None = None
    ) -> CompletionEnvelope:
        started = time.perf_counter()
        prepared = await self._prepare(request)
        job = await self.audit.start(
            request_id=request_id,
            source=prepared.source,
            choice=prepared.choice,
            params=prepared.params,
            prompt=prepared.prompt,
            provenance=prepared.provenance,
            user_prompt=request.user_prompt,
        )
        structlog.contextvars.bind_contextvars(job_id=job.id)
        provider_name = prepared.choice.provider
        upstream_started: float | None = None
        try:
            provider = self.providers.get(provider_name)
            call = ProviderCall(
                model=prepared.choice.name,
                system=prepared.prompt.system,
                messages=tuple(prepared.prompt.messages),
                params=prepared.params,
            )
            upstream_started = time.perf_counter()
            reply = await self.retry.run(lambda: provider.complete(call))
        except GenAIError as exc:
            self._finish_failed(job, exc, started, upstream_started, provider_name)
            raise
        except asyncio.CancelledError:  # the client went away; the record must say so
            self.audit.cancelled(job, latency_ms=_elapsed_ms(started))
            self.metrics.completions.labels(provider_name, "cancelled").inc()
            raise
        upstream_ms = _elapsed_ms(upstream_started)
        self.audit.completed(job, reply, latency_ms=_elapsed_ms(started), upstream_ms=upstream_ms)
        self.metrics.completions.labels(provider_name, "completed").inc()
        self.metrics.upstream_seconds.labels(provider_name).observe(upstream_ms / 1000)
        structlog.contextvars.bind_contextvars(
            upstream_ms=upstream_ms,
            input_tokens=reply.usage.input_tokens,
            output_tokens=reply.usage.output_tokens,
        )
        return CompletionEnvelope(
            job_id=job.id,
            request_id=request_id,
            prompt=prepared.prompt,
            params=prepared.params,
            response=CompletionResponse(
                text=reply.text,
                provider=provider_name,
                model=prepared.choice.name,
                finish_reason=reply.finish_reason,
                usage=reply.usage,
            ),
            model_choice=prepared.choice,
            provenance=prepared.provenance,
        )

    def _finish_failed(
        self,
        job: OpenJob,
        exc: GenAIError,
        started: float,
        upstream_started: float | None,
        provider: str,
    ) -> None:
        upstream_ms = _elapsed_ms(upstream_started) if upstream_started is not None else None
        self.audit.failed(job, exc, latency_ms=_elapsed_ms(started), upstream_ms=upstream_ms)
        self.metrics.completions.labels(provider, "failed").inc()
        structlog.contextvars.bind_contextvars(upstream_ms=upstream_ms, error_type=exc.error_type)
        exc.job_id = job.id
