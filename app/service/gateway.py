"""GenAIService, the completion pipeline: allow → prepare → reserve → record → call → confirm →
record → settle → envelope.

Preparing the prompt is the PromptPreparer's work, reaching an answer (fallbacks, retries,
deadline) is `app.pipeline.upstream`'s and storing is the AuditTrail's. The service starts a
completion once, for a whole answer (`complete`) and a streamed one (`stream`) alike; the
`Completion` it hands over carries it to its record (`app/service/completion.py`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from app.auth.principal import Principal
from app.cache import cache_key
from app.concurrency.offload import off_loop
from app.errors import (
    GenAIError,
    InvalidRequest,
    MissingVariables,
    UnsupportedParameter,
    VariableContractViolation,
)
from app.observability.facts import request_facts
from app.observability.metric_labels import TEMPLATE
from app.observability.tracing import span
from app.pipeline.calls import StreamTimeouts
from app.pipeline.deadline import Deadline
from app.pipeline.prepare import Prepared, PromptPreparer
from app.pipeline.upstream import Upstream
from app.providers.base import CountsTokens
from app.quotas.guard import NOTHING_RESERVED, QuotaGuard, check_model, check_pattern
from app.schemas import CompletionEnvelope, FieldProblem, RenderRequest, RenderResult
from app.service.completion import Completion, Outcomes
from app.service.outputs import StreamOutput, replayed

CompletionSlot = Callable[[], AbstractAsyncContextManager[object]]
"""A global concurrency slot held for one whole completion (see `app.concurrency.limits`)."""


@contextlib.asynccontextmanager
async def _no_limit() -> AsyncIterator[None]:
    yield


def _refuse_streaming_a_schema(prepared: Prepared) -> None:
    source = prepared.source
    if source.output_schema is None or source.response_format is not None:
        return
    raise InvalidRequest(
        [
            FieldProblem(
                loc=["body", "stream"],
                msg=f"pattern {source.name!r} declares an output_schema: its answer is "
                "validated (and repaired) before it is returned, so it cannot be streamed; "
                "send the request without `stream`",
                type="stream_with_output_schema",
            )
        ]
    )


@dataclass(frozen=True, slots=True)
class CompletionTimeouts:
    """How long a completion may take in all, and how long a stream may stay silent."""

    deadline_seconds: float
    stream: StreamTimeouts


class GenAIService:
    def __init__(
        self,
        *,
        preparer: PromptPreparer,
        upstream: Upstream,
        outcomes: Outcomes,
        timeouts: CompletionTimeouts,
        quotas: QuotaGuard,
        cache_per_key: bool = True,
        completion_slot: CompletionSlot | None = None,
    ) -> None:
        self._preparer = preparer
        self._upstream = upstream
        self._outcomes = outcomes
        self._quotas = quotas
        self._metrics = outcomes.metrics
        self._deadline_seconds = timeouts.deadline_seconds
        self._stream_timeouts = timeouts.stream
        self._slot: CompletionSlot = completion_slot or _no_limit
        self._cache_per_key = cache_per_key

    async def render(self, request: RenderRequest, caller: Principal | None = None) -> RenderResult:
        """A dry run: everything `complete` would do except reserving, recording and calling."""
        return (await self._allowed(request, caller)).as_render_result()

    async def count_tokens(self, request: RenderRequest, caller: Principal | None = None) -> int:
        """The prompt's input tokens as the chosen model's provider counts them; only a provider
        that offers counting can (UnsupportedParameter otherwise). Nothing is answered, so
        nothing is recorded, and no budget is charged (counting is free)."""
        prepared = await self._allowed(request, caller)
        provider = self._upstream.providers.get(prepared.choice.provider)
        if not isinstance(provider, CountsTokens):
            raise UnsupportedParameter(
                "model",
                f"{prepared.choice.provider} offers no token counting (Anthropic models do)",
            )
        call = self._upstream.provider_call(prepared, tuple(prepared.prompt.messages))
        async with self._slot():  # under the one retry policy, like every upstream call
            return await self._upstream.retry.run(lambda: provider.count_tokens(call))

    async def complete(
        self,
        request: RenderRequest,
        *,
        request_id: str | None = None,
        deadline_ms: float | None = None,
        caller: Principal | None = None,
    ) -> CompletionEnvelope:
        begun = await self._begin(request, request_id, deadline_ms, caller, streamed=False)
        if isinstance(begun, CompletionEnvelope):  # from the cache
            return begun
        return await begun.complete()

    async def stream(
        self,
        request: RenderRequest,
        *,
        request_id: str | None = None,
        deadline_ms: float | None = None,
        caller: Principal | None = None,
    ) -> AsyncGenerator[StreamOutput, None]:
        """Start a streamed completion; failures before the first text raise (an HTTP error),
        later ones end the stream with `StreamFailed`. Close the iterator to cancel it."""
        begun = await self._begin(request, request_id, deadline_ms, caller, streamed=True)
        if isinstance(begun, CompletionEnvelope):
            return replayed(begun)
        return await begun.stream(self._stream_timeouts)

    async def _begin(
        self,
        request: RenderRequest,
        request_id: str | None,
        deadline_ms: float | None,
        caller: Principal | None,
        *,
        streamed: bool,
    ) -> Completion | CompletionEnvelope:
        """The start both share: a slot (waiting for it counts against the deadline), the
        prepared prompt, the cache, the pending record. A cache hit is answered here."""
        started = time.perf_counter()
        deadline = self._deadline(deadline_ms)
        slot = contextlib.AsyncExitStack()
        async with deadline.guard():
            await slot.enter_async_context(self._slot())
        reservation = NOTHING_RESERVED
        try:
            prepared = await self._allowed(request, caller)
            if streamed:
                _refuse_streaming_a_schema(prepared)
            reservation = await self._quotas.admit(caller, prepared)
            key = await off_loop(lambda: self._cache_key(prepared, caller))
            if key is not None and (hit := await self._outcomes.cache.get(key)) is not None:
                reservation.release()  # a hit costs nothing
                async with slot:
                    return await self._outcomes.from_cache(
                        prepared, hit, request_id, started, caller
                    )
            job = await self._outcomes.audit.start(
                prepared, request=request, request_id=request_id, caller=caller
            )
        except BaseException:
            reservation.release()  # nothing was called
            await slot.aclose()
            raise
        allows = caller.may_use_model if caller is not None else None
        run = self._upstream.run(prepared, deadline, allows=allows)
        completion = Completion(
            self._outcomes, self._upstream, job, run, request_id, key, started, slot, reservation
        )
        request_facts().opened_job(job.id, cache=completion.cache_use)
        return completion

    async def _allowed(self, request: RenderRequest, caller: Principal | None) -> Prepared:
        """The prepared request, if the caller's allowlists let it use the pattern (checked
        before rendering) and the model the policy chose (403 otherwise)."""
        check_pattern(caller, request)
        prepared = await self._prepare(request)
        check_model(caller, prepared.choice.model)
        return prepared

    async def _prepare(self, request: RenderRequest) -> Prepared:
        """The render, in its own span; counts contract failures and the prompt's size."""
        with span("genai.render", attributes={"genai.pattern": request.pattern_key}) as rendering:
            try:
                prepared = await self._preparer.prepare(request)
            except GenAIError as exc:
                rendering.fail(exc.error_type)
                if isinstance(exc, MissingVariables | VariableContractViolation):
                    source = request.pattern_key or TEMPLATE  # a template's name is no label
                    self._metrics.contract_failures.labels(source, exc.error_type).inc()
                raise
            choice, prompt = prepared.choice, prepared.prompt
            rendering.set("genai.pattern", prepared.source.name)
            rendering.set("gen_ai.request.model", choice.name)
        facts = request_facts()
        facts.chose(  # a template's pattern is `template:…`
            pattern=prepared.source.provenance_name, provider=choice.provider, model=choice.name
        )
        chars = {"system": len(prompt.system)}
        for message in prompt.messages:
            chars[message.role] = chars.get(message.role, 0) + len(message.content)
        for role, count in chars.items():
            self._metrics.prompt_chars.labels(facts.pattern, role).observe(count)
        return prepared

    def _deadline(self, deadline_ms: float | None) -> Deadline:
        """The configured deadline, or the caller's when it is shorter (never longer)."""
        seconds = self._deadline_seconds
        if deadline_ms is not None:
            seconds = min(seconds, deadline_ms / 1000)
        return Deadline.after(seconds)

    def _cache_key(self, prepared: Prepared, caller: Principal | None) -> str | None:
        """The response-cache key when this request uses the cache: its own `cache` flag, else
        the pattern's front-matter. With GENAI_CACHE__SCOPE=key, the caller's own entries."""
        wanted = prepared.request.cache
        if not (prepared.source.cache if wanted is None else wanted):
            return None
        return cache_key(
            provenance=prepared.provenance,
            params=prepared.params,
            prompt=prepared.prompt,
            output_schema=prepared.source.output_schema if prepared.native_schema else None,
            partition=caller.key_id if caller and self._cache_per_key else None,
        )
