"""GenAIService: the pipeline resolve → render → select model → call → envelope."""

from __future__ import annotations

import time
from dataclasses import dataclass

import structlog

from app.catalog import PatternsAdapter, RenderedPattern
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
)
from app.tracking import build_provenance

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class _Prepared:
    rendered: RenderedPattern
    prompt: RenderedPrompt
    choice: ModelChoice
    params: ModelParams


class GenAIService:
    def __init__(
        self,
        *,
        patterns: PatternsAdapter,
        policy: ModelSelectionPolicy,
        providers: ProviderRegistry,
        retry: RetryPolicy,
        default_params: ModelParams,
    ) -> None:
        self.patterns = patterns
        self.policy = policy
        self.providers = providers
        self.retry = retry
        self.default_params = default_params

    def _prepare(self, request: RenderRequest) -> _Prepared:
        rendered = self.patterns.apply_template(request.pattern_key, request.variables)
        meta = rendered.pattern.meta
        choice = self.policy.choose_model(request.model, meta.model_hint)
        structlog.contextvars.bind_contextvars(
            pattern=request.pattern_key, provider=choice.provider, model=choice.name
        )
        # V1 semantics: the rendered pattern is the system text, the user prompt goes verbatim.
        prompt = RenderedPrompt(
            system=rendered.system,
            messages=[Message(role="user", content=request.user_prompt)],
        )
        # Request params > pattern params > configured defaults.
        params = self.default_params.overlay(meta.params).overlay(request.params)
        return _Prepared(rendered, prompt, choice, params)

    def _provenance(self, request: RenderRequest, prepared: _Prepared) -> Provenance:
        pattern = prepared.rendered.pattern
        return build_provenance(
            pattern_name=pattern.name,
            pattern_base_path=pattern.base_path,
            pattern_content_hash=pattern.content_hash,
            variables=prepared.rendered.variables,
            user_prompt=request.user_prompt,
            provider=prepared.choice.provider,
            model=prepared.choice.name,
        )

    async def render(self, request: RenderRequest) -> RenderResult:
        """A dry run: everything `complete` would do except the provider call."""
        prepared = self._prepare(request)
        return RenderResult(
            prompt=prepared.prompt,
            params=prepared.params,
            model_choice=prepared.choice,
            provenance=self._provenance(request, prepared),
        )

    async def complete(
        self, request: RenderRequest, *, request_id: str | None = None
    ) -> CompletionEnvelope:
        prepared = self._prepare(request)
        provider = self.providers.get(prepared.choice.provider)
        # The envelope reports the params actually sent, not the ones the provider would refuse.
        params = prepared.params.only(provider.supported_params)
        call = ProviderCall(
            model=prepared.choice.name,
            system=prepared.prompt.system,
            messages=tuple(prepared.prompt.messages),
            params=params,
        )
        started = time.perf_counter()
        try:
            reply = await self.retry.run(lambda: provider.complete(call))
        finally:
            upstream_ms = round((time.perf_counter() - started) * 1000, 2)
            structlog.contextvars.bind_contextvars(upstream_ms=upstream_ms)
        if reply.usage.input_tokens is not None:
            structlog.contextvars.bind_contextvars(
                input_tokens=reply.usage.input_tokens, output_tokens=reply.usage.output_tokens
            )
        return CompletionEnvelope(
            request_id=request_id,
            prompt=prepared.prompt,
            params=params,
            response=CompletionResponse(
                text=reply.text,
                provider=prepared.choice.provider,
                model=prepared.choice.name,
                finish_reason=reply.finish_reason,
                usage=reply.usage,
            ),
            model_choice=prepared.choice,
            provenance=self._provenance(request, prepared),
        )
