"""GenAIService: resolve → compose → select model → assemble → record → call → envelope."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from dataclasses import dataclass
from typing import Any

import structlog

from app.audit.trail import AuditTrail, OpenJob
from app.catalog import PatternCatalog
from app.catalog.renderer import TemplateRenderer
from app.catalog.source import DATABASE_BASE_PATH, RenderedSource
from app.catalog.templates import FALLBACK_SHA256, render_fallback, render_template_version
from app.errors import GenAIError, MissingSnippets, StructuredOutputInvalid
from app.metrics import Metrics
from app.prompts.assembler import InstructionContext, PromptAssembler, TaskInstructions
from app.prompts.structured import repair_feedback, validate_output
from app.providers import ProviderCall, ProviderRegistry, ProviderReply
from app.providers.retry import RetryPolicy
from app.routing.capabilities import Capabilities, CapabilityCatalog
from app.routing.policy import ModelSelectionPolicy
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
    StructuredOutcome,
    TemplateRef,
    TemplateVersion,
    Usage,
)
from app.snippets import ComposedSnippets, SnippetLibrary
from app.store.templates import TemplateRepository
from app.tracking import build_provenance

log = structlog.get_logger(__name__)

_CHARS_PER_TOKEN = 4  # a deliberately rough estimate, used only against context limits


@dataclass(frozen=True, slots=True)
class _Prepared:
    source: RenderedSource
    snippets: ComposedSnippets
    prompt: RenderedPrompt
    choice: ModelChoice
    params: ModelParams
    provenance: Provenance
    native_schema: bool


def _elapsed_ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 2)


class GenAIService:
    def __init__(
        self,
        *,
        patterns: PatternCatalog,
        renderer: TemplateRenderer,
        templates: TemplateRepository,
        snippets: SnippetLibrary,
        policy: ModelSelectionPolicy,
        capabilities: CapabilityCatalog,
        assembler: PromptAssembler,
        providers: ProviderRegistry,
        retry: RetryPolicy,
        audit: AuditTrail,
        metrics: Metrics,
        default_params: ModelParams,
        structured_max_attempts: int,
    ) -> None:
        self.patterns = patterns
        self.renderer = renderer
        self.templates = templates
        self.snippets = snippets
        self.policy = policy
        self.capabilities = capabilities
        self.assembler = assembler
        self.providers = providers
        self.retry = retry
        self.audit = audit
        self.metrics = metrics
        self.default_params = default_params
        self.structured_max_attempts = structured_max_attempts

    # -- resolve ---------------------------------------------------------------------------

    async def _resolve(self, request: RenderRequest) -> RenderedSource:
        """Render the pattern file or database template the request names."""
        if request.pattern_key is not None:
            render = functools.partial(
                self.patterns.apply_template,
                request.pattern_key,
                request.variables,
                user_prompt=request.user_prompt,
            )
            rendered = await self.renderer.run(request.pattern_key, render)
            pattern, meta = rendered.pattern, rendered.pattern.meta
            examples, user = rendered.messages, request.user_prompt
            if meta.user_template:  # the pattern's last block is the user message
                examples, user = rendered.messages[:-1], rendered.messages[-1].content
            return RenderedSource(
                kind="pattern",
                name=pattern.name,
                base_path=pattern.base_path,
                content_hash=pattern.content_hash,
                system=rendered.system,
                variables=rendered.variables,
                user=user,
                examples=examples,
                output_schema=pattern.output_schema,
                requires=tuple(meta.requires),
                snippet_labels=tuple(meta.snippets),
                model_hint=meta.model_hint,
                params=meta.params,
            )
        assert request.template is not None  # RenderRequest guarantees exactly one source
        return await self._resolve_template(
            request.template, request.variables, request.user_prompt
        )

    async def _resolve_template(
        self, ref: TemplateRef, variables: dict[str, Any], user_prompt: str
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
                system=await self.renderer.run(
                    ref.name, functools.partial(render_fallback, ref.role, variables)
                ),
                variables=dict(variables),
                user=user_prompt,
                role=ref.role,
            )
        return RenderedSource(
            kind="template",
            name=version.name,
            base_path=DATABASE_BASE_PATH,
            content_hash=version.checksum,
            system=await self.renderer.run(
                version.name, functools.partial(render_template_version, version, variables)
            ),
            variables=dict(variables),
            user=user_prompt,
            template_id=version.id,
            role=version.role,
            version=version.version,
        )

    async def _compose(self, request: RenderRequest, source: RenderedSource) -> ComposedSnippets:
        missing = [label for label in source.snippet_labels if label not in request.snippets]
        if missing:
            raise MissingSnippets(source.name, missing)
        if not request.snippets:
            return ComposedSnippets(text="", ids=[])
        return await self.snippets.compose(request.snippets)

    # -- choose and assemble ---------------------------------------------------------------

    def _params_for(
        self, choice: ModelChoice, source: RenderedSource, request: RenderRequest
    ) -> ModelParams:
        """Request > pattern > configured defaults, minus what the provider refuses."""
        return (
            self.default_params.overlay(source.params)
            .overlay(request.params)
            .only(self.providers.supported_params(choice.provider))
        )

    def _shortfalls(self, source: RenderedSource, request: RenderRequest, prompt_chars: int) -> Any:
        def shortfalls(choice: ModelChoice) -> list[str]:
            caps = self.capabilities.for_model(choice.provider, choice.name)
            found = [
                f"no {need.replace('_', ' ')} support"
                for need in source.requires
                if not caps.supports(need)
            ]
            wanted = self._params_for(choice, source, request).max_tokens or 0
            if wanted > caps.output_tokens:
                found.append(f"max_tokens {wanted} exceeds its output limit {caps.output_tokens}")
            needed = prompt_chars // _CHARS_PER_TOKEN + wanted
            if needed > caps.context_tokens:
                found.append(f"~{needed} tokens exceed its context of {caps.context_tokens}")
            return found

        return shortfalls

    async def _prepare(self, request: RenderRequest) -> _Prepared:
        source = await self._resolve(request)
        snippets = await self._compose(request, source)
        system = "\n\n".join(part for part in (snippets.text, source.system) if part)
        task = TaskInstructions(
            task=source.name, system=system, examples=source.examples, user=source.user
        )
        prompt_chars = len(system) + len(source.user) + sum(len(m.content) for m in task.examples)
        first = self.policy.choose_model(request.model, source.model_hint)
        choice = self.policy.choose_capable(first, self._shortfalls(source, request, prompt_chars))
        structlog.contextvars.bind_contextvars(
            pattern=source.provenance_name, provider=choice.provider, model=choice.name
        )
        capabilities: Capabilities = self.capabilities.for_model(choice.provider, choice.name)
        native = source.output_schema is not None and capabilities.supports_structured_output
        context = InstructionContext(
            provider=choice.provider,
            task=source.name,
            capabilities=capabilities,
            output_schema=source.output_schema,
            native_structured_output=native,
        )
        prompt = self.assembler.assemble(task, context, request.instructions)
        provenance = build_provenance(
            pattern_name=source.provenance_name,
            pattern_base_path=source.base_path,
            pattern_content_hash=source.content_hash,
            variables=source.variables,
            user_prompt=request.user_prompt,
            provider=choice.provider,
            model=choice.name,
            snippet_ids=snippets.ids,
        )
        return _Prepared(
            source,
            snippets,
            prompt,
            choice,
            self._params_for(choice, source, request),
            provenance,
            native,
        )

    async def render(self, request: RenderRequest) -> RenderResult:
        """A dry run: everything `complete` would do except recording and calling."""
        prepared = await self._prepare(request)
        return RenderResult(
            prompt=prepared.prompt,
            params=prepared.params,
            model_choice=prepared.choice,
            provenance=prepared.provenance,
        )

    # -- call ------------------------------------------------------------------------------

    async def complete(
        self, request: RenderRequest, *, request_id: str | None = None
    ) -> CompletionEnvelope:
        started = time.perf_counter()
        prepared = await self._prepare(request)
        job = await self.audit.start(
            request=request,
            request_id=request_id,
            source=prepared.source,
            choice=prepared.choice,
            params=prepared.params,
            prompt=prepared.prompt,
            provenance=prepared.provenance,
            snippet_ids=prepared.snippets.ids,
        )
        structlog.contextvars.bind_contextvars(job_id=job.id)
        provider_name = prepared.choice.provider
        attempts: list[dict[str, Any]] = []
        upstream_started: float | None = None
        try:
            upstream_started = time.perf_counter()
            reply, parsed, outcome = await self._call(prepared, attempts)
        except GenAIError as exc:
            await self._finish_failed(job, exc, started, upstream_started, provider_name, attempts)
            raise
        except asyncio.CancelledError:  # the client went away; the record must say so
            self.audit.cancelled(job, latency_ms=_elapsed_ms(started), attempts=attempts)
            self.metrics.completions.labels(provider_name, "cancelled").inc()
            raise
        upstream_ms = _elapsed_ms(upstream_started)
        await self.audit.completed(
            job, reply, latency_ms=_elapsed_ms(started), upstream_ms=upstream_ms, attempts=attempts
        )
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
            parsed=parsed,
            validation=outcome,
        )

    async def _call(
        self, prepared: _Prepared, attempts: list[dict[str, Any]]
    ) -> tuple[ProviderReply, Any, StructuredOutcome | None]:
        """One provider call, or, with an output schema, a bounded validate-and-repair loop."""
        provider = self.providers.get(prepared.choice.provider)
        schema = prepared.source.output_schema
        messages = list(prepared.prompt.messages)
        usage = Usage(input_tokens=0, output_tokens=0, total_tokens=0)
        limit = self.structured_max_attempts if schema is not None else 1
        for attempt in range(1, limit + 1):
            call = ProviderCall(
                model=prepared.choice.name,
                system=prepared.prompt.system,
                messages=tuple(messages),
                params=prepared.params,
                output_schema=schema if prepared.native_schema else None,
            )
            reply = await self.retry.run(functools.partial(provider.complete, call))
            usage = usage.plus(reply.usage)
            if schema is None:
                return reply, None, None
            validation = validate_output(schema, reply.text, reply.payload)
            attempts.append(
                {
                    "attempt": attempt,
                    "valid": validation.valid,
                    "issues": validation.issues.model_dump(),
                    "response": reply.text,
                }
            )
            mode = "native" if prepared.native_schema else "instructions"
            if validation.valid:
                outcome = StructuredOutcome(valid=True, attempts=attempt, mode=mode)
                # What the caller pays for: usage summed over every attempt.
                return dataclasses.replace(reply, usage=usage), validation.parsed, outcome
            messages += [
                Message(role="assistant", content=reply.text),
                Message(role="user", content=repair_feedback(validation)),
            ]
        raise StructuredOutputInvalid(
            f"The model's answer did not match the output schema after {limit} attempts.",
            provider=prepared.choice.provider,
            attempts=limit,
            issues=validation.issues.model_dump(),
        )

    async def _finish_failed(
        self,
        job: OpenJob,
        exc: GenAIError,
        started: float,
        upstream_started: float | None,
        provider: str,
        attempts: list[dict[str, Any]],
    ) -> None:
        upstream_ms = _elapsed_ms(upstream_started) if upstream_started is not None else None
        await self.audit.failed(
            job, exc, latency_ms=_elapsed_ms(started), upstream_ms=upstream_ms, attempts=attempts
        )
        self.metrics.completions.labels(provider, "failed").inc()
        structlog.contextvars.bind_contextvars(upstream_ms=upstream_ms, error_type=exc.error_type)
        exc.job_id = job.id
