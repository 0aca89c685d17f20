"""GenAIService, the completion pipeline: prepare → record → call → confirm → record → envelope.

Preparing the prompt is the PromptPreparer's work, reaching an answer (fallbacks, retries,
deadline) is `app.pipeline.upstream`'s and storing is the AuditTrail's; this module only orders
them, for a whole answer (`complete`) or a streamed one (`stream`), and counts the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Literal

import structlog

from app.audit.trail import AuditTrail, OpenJob
from app.cache import CachedAnswer, ResponseCache, cache_key
from app.concurrency.offload import off_loop
from app.errors import (
    GenAIError,
    InvalidRequest,
    MissingVariables,
    UnsupportedParameter,
    VariableContractViolation,
)
from app.observability.metric_labels import TEMPLATE
from app.observability.metrics import Metrics, request_facts
from app.observability.tracing import span
from app.pipeline.prepare import Prepared, PromptPreparer
from app.pipeline.upstream import (
    Answered,
    Deadline,
    OpenStream,
    StreamTimeouts,
    Upstream,
    UpstreamRun,
)
from app.prompts.repair import Answer
from app.providers import ProviderReply
from app.providers.base import CountsTokens, ReasoningDelta, TextDelta, ToolCallDelta
from app.routing.prices import PriceTable
from app.schemas import (
    CallAttempt,
    CompletionEnvelope,
    CompletionResponse,
    FieldProblem,
    RenderRequest,
    RenderResult,
)

log = structlog.get_logger(__name__)

CompletionSlot = Callable[[], AbstractAsyncContextManager[object]]
"""A global concurrency slot held for one whole completion (see `app.concurrency.limits`)."""


@contextlib.asynccontextmanager
async def _no_limit() -> AsyncIterator[None]:
    yield


async def _replayed(envelope: CompletionEnvelope) -> AsyncGenerator[StreamOutput, None]:
    """A cached answer as a stream: its reasoning, its whole text as one delta and each tool
    call whole, then the envelope."""
    response = envelope.response
    for index, block in enumerate(response.reasoning):
        yield ReasoningDelta(
            index, text=block.thinking or "", signature=block.signature or "", redacted=block.data
        )
    if response.text:
        yield StreamDelta(response.text)
    for index, call in enumerate(response.tool_calls):
        yield ToolCallDelta(index, call.arguments, call.id, call.name)
    yield envelope


def _cached(key: str | None) -> Literal["miss", "off"]:
    """What an answer that made a provider call says of the cache."""
    return "off" if key is None else "miss"


def _envelope(
    job: OpenJob,
    request_id: str | None,
    answered: Answered,
    *,
    attempts: Sequence[CallAttempt],
    cost: float | None,
    cache: Literal["hit", "miss", "off"],
) -> CompletionEnvelope:
    """The one envelope, for an answer from the provider and one from the cache alike."""
    prepared, answer = answered.prepared, answered.answer
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
            usage=answer.reply.usage,  # on a hit, the original call's: this request made none
            cost_usd=cost,
            tool_calls=list(answer.reply.tool_calls),
            reasoning=list(answer.reply.reasoning),
        ),
        model_choice=prepared.choice,
        provenance=prepared.provenance,
        parsed=answer.parsed,
        validation=answer.outcome,
        attempts=list(attempts),
        cache=cache,
    )


def _passed_on(event: TextDelta | ToolCallDelta | ReasoningDelta) -> StreamOutput:
    """A provider's delta as the service yields it (text keeps the service's own type)."""
    return StreamDelta(event.text) if isinstance(event, TextDelta) else event


def _elapsed_ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 2)


@dataclass(frozen=True, slots=True)
class StreamDelta:
    text: str


@dataclass(frozen=True, slots=True)
class StreamFailed:
    """The stream's last event when it fails: the error, naming the job."""

    error: GenAIError


class ClientStoppedReading(Exception):
    """Thrown into a stream whose client stopped reading: the job ends as cancelled, with
    this reason, and its slot is freed (GENAI_REQUEST__STREAM_SEND_TIMEOUT_SECONDS)."""

    reason = "client_stopped_reading"


StreamOutput = StreamDelta | ToolCallDelta | ReasoningDelta | CompletionEnvelope | StreamFailed
"""What `GenAIService.stream` yields: deltas (text, tool calls, reasoning), then the envelope or
the failure."""


class GenAIService:
    def __init__(
        self,
        *,
        preparer: PromptPreparer,
        upstream: Upstream,
        audit: AuditTrail,
        metrics: Metrics,
        deadline_seconds: float,
        stream_timeouts: StreamTimeouts,
        cache: ResponseCache,
        prices: PriceTable,
        cache_per_key: bool = True,
        completion_slot: CompletionSlot | None = None,
    ) -> None:
        self._preparer = preparer
        self._upstream = upstream
        self._audit = audit
        self._metrics = metrics
        self._deadline_seconds = deadline_seconds
        self._stream_timeouts = stream_timeouts
        self._slot: CompletionSlot = completion_slot or _no_limit
        self._cache = cache
        self._prices = prices
        self._cache_per_key = cache_per_key

    async def render(self, request: RenderRequest) -> RenderResult:
        """A dry run: everything `complete` would do except recording and calling."""
        return (await self._prepare(request)).as_render_result()

    async def count_tokens(self, request: RenderRequest) -> int:
        """The prompt's input tokens as the chosen model's provider counts them; only a provider
        that offers counting can (UnsupportedParameter otherwise). Nothing is answered, so
        nothing is recorded."""
        prepared = await self._prepare(request)
        provider = self._upstream.providers.get(prepared.choice.provider)
        if not isinstance(provider, CountsTokens):
            raise UnsupportedParameter(
                "model",
                f"{prepared.choice.provider} offers no token counting (Anthropic models do)",
            )
        call = self._upstream.provider_call(prepared, tuple(prepared.prompt.messages))
        async with self._slot():  # under the one retry policy, like every upstream call
            return await self._upstream.retry.run(lambda: provider.count_tokens(call))

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
        facts.pattern = prepared.source.provenance_name  # a template's: `template:…`
        facts.provider, facts.model = choice.provider, choice.name
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

    async def complete(
        self,
        request: RenderRequest,
        *,
        request_id: str | None = None,
        deadline_ms: float | None = None,
        caller_key: str | None = None,
    ) -> CompletionEnvelope:
        started = time.perf_counter()
        deadline = self._deadline(deadline_ms)
        async with contextlib.AsyncExitStack() as held:
            async with deadline.guard():  # a wait in the queue counts against the deadline
                await held.enter_async_context(self._slot())
            prepared = await self._prepare(request)
            key = await off_loop(lambda: self._cache_key(prepared, caller_key))
            if key is not None and (hit := await self._cache.get(key)) is not None:
                return await self._from_cache(prepared, hit, request_id, started)
            job = await self._audit.start(prepared, request=request, request_id=request_id)
            structlog.contextvars.bind_contextvars(job_id=job.id)
            run = self._upstream.run(prepared, deadline)
            upstream_started = time.perf_counter()
            try:
                answered = await run.complete()
                upstream_ms = _elapsed_ms(upstream_started)
                # With GENAI_AUDIT__MODE=with-call the pending record may still be on its way:
                # an answer whose record is not durable is never returned.
                await self._audit.confirm(job)
            except GenAIError as exc:
                raise await self._failed(job, exc, started, upstream_started, run) from (
                    exc.__cause__
                )
            except asyncio.CancelledError:  # the client went away; the record must say so
                self._cancelled(job, started, run)
                raise
            cost = await self._completed(job, run, answered, started, upstream_ms)
            envelope = _envelope(
                job, request_id, answered, attempts=run.attempts, cost=cost, cache=_cached(key)
            )
            await self._remember(key, envelope)
            return envelope

    async def stream(
        self,
        request: RenderRequest,
        *,
        request_id: str | None = None,
        deadline_ms: float | None = None,
        caller_key: str | None = None,
    ) -> AsyncGenerator[StreamOutput, None]:
        """Start a streamed completion; failures before the first text raise (an HTTP error),
        later ones end the stream with `StreamFailed`. Close the iterator to cancel it."""
        started = time.perf_counter()
        deadline = self._deadline(deadline_ms)
        slot = contextlib.AsyncExitStack()
        async with deadline.guard():
            await slot.enter_async_context(self._slot())
        try:
            prepared = await self._prepare(request)
            source = prepared.source
            if source.output_schema is not None and source.response_format is None:
                raise InvalidRequest(
                    [
                        FieldProblem(
                            loc=["body", "stream"],
                            msg=f"pattern {prepared.source.name!r} declares an output_schema: "
                            "its answer is validated (and repaired) before it is returned, so "
                            "it cannot be streamed; send the request without `stream`",
                            type="stream_with_output_schema",
                        )
                    ]
                )
            key = await off_loop(lambda: self._cache_key(prepared, caller_key))
            if key is not None and (hit := await self._cache.get(key)) is not None:
                envelope = await self._from_cache(prepared, hit, request_id, started)
                await slot.aclose()
                return _replayed(envelope)
            job = await self._audit.start(prepared, request=request, request_id=request_id)
            structlog.contextvars.bind_contextvars(job_id=job.id)
            run = self._upstream.run(prepared, deadline)
            upstream_started = time.perf_counter()
            try:
                opened = await run.open_stream(self._stream_timeouts)
                # Upstream time until the first event: the overhead header is sent before the rest.
                request_facts().upstream_seconds = _elapsed_ms(upstream_started) / 1000
            except GenAIError as exc:
                failed = await self._failed(job, exc, started, upstream_started, run, streamed=True)
                raise failed from exc.__cause__
            except asyncio.CancelledError:
                self._cancelled(job, started, run)
                raise
        except BaseException:
            await slot.aclose()
            raise
        return self._relay(job, request_id, run, opened, started, upstream_started, slot, key)

    async def _relay(
        self,
        job: OpenJob,
        request_id: str | None,
        run: UpstreamRun,
        opened: OpenStream,
        started: float,
        upstream_started: float,
        slot: contextlib.AsyncExitStack,
        key: str | None,
    ) -> AsyncGenerator[StreamOutput, None]:
        """The open stream's events to the caller, then the record and the envelope."""
        try:
            try:
                first = opened.first
                reply = first if isinstance(first, ProviderReply) else None
                if not isinstance(first, ProviderReply):
                    yield _passed_on(first)
                while reply is None:
                    # The deadline guards each wait, never a `yield`: the caller's sending
                    # happens between them, in the same task.
                    async with run.deadline.guard():
                        event = await anext(opened.events, None)
                    if event is None:  # the adapter ended without its reply: a bug there
                        raise RuntimeError("provider stream ended without a final reply")
                    if isinstance(event, ProviderReply):
                        reply = event
                    else:
                        yield _passed_on(event)
                upstream_ms = _elapsed_ms(upstream_started)
                await self._audit.confirm(job)
            except GenAIError as exc:
                failed = await self._failed(job, exc, started, upstream_started, run, streamed=True)
                yield StreamFailed(failed)
                return
            except (asyncio.CancelledError, GeneratorExit):
                self._cancelled(job, started, run)
                raise
            except ClientStoppedReading as gone:
                self._cancelled(job, started, run, reason=gone.reason)
                return
            # A requested format is checked, not repaired: the answer has reached the caller.
            answer = self._upstream.repair_loop(opened.prepared).check(reply)
            run.output_attempts += answer.attempts
            answered = Answered(opened.prepared, answer)
            cost = await self._completed(job, run, answered, started, upstream_ms, streamed=True)
            envelope = _envelope(
                job, request_id, answered, attempts=run.attempts, cost=cost, cache=_cached(key)
            )
            await self._remember(key, envelope)
            try:
                yield envelope
            except ClientStoppedReading:  # recorded already: only the last frames are lost
                return
        finally:
            await opened.close()
            await slot.aclose()

    async def _completed(
        self,
        job: OpenJob,
        run: UpstreamRun,
        answered: Answered,
        started: float,
        upstream_ms: float,
        *,
        streamed: bool = False,
    ) -> float | None:
        """Record the answer and count it; its cost by the price table (None: unpriced)."""
        reply, choice = answered.answer.reply, answered.prepared.choice
        cost = self._prices.cost_usd(choice.provider, choice.name, reply.usage)
        await self._audit.completed(
            job,
            reply,
            answered_by=answered.prepared,
            latency_ms=_elapsed_ms(started),
            upstream_ms=upstream_ms,
            calls=run.attempts,
            output_attempts=run.output_attempts,
            streamed=streamed,
            cost_usd=cost,
        )
        self._metrics.completions.labels(choice.provider, "completed").inc()
        self._metrics.record_usage(choice.provider, choice.name, reply.usage, cost)
        self._metrics.upstream_seconds.labels(choice.provider, choice.name).observe(
            upstream_ms / 1000
        )
        facts = request_facts()  # the model that answered (a fallback, perhaps)
        facts.provider, facts.model = choice.provider, choice.name
        facts.upstream_seconds = upstream_ms / 1000
        structlog.contextvars.bind_contextvars(
            upstream_ms=upstream_ms,
            input_tokens=reply.usage.input_tokens,
            output_tokens=reply.usage.output_tokens,
            cost_usd=cost,
        )
        return cost

    def _cancelled(
        self, job: OpenJob, started: float, run: UpstreamRun, *, reason: str | None = None
    ) -> None:
        self._audit.cancelled(
            job,
            latency_ms=_elapsed_ms(started),
            calls=run.attempts,
            output_attempts=run.output_attempts,
            reason=reason,
        )
        self._metrics.completions.labels(run.provider, "cancelled").inc()

    async def _failed(
        self,
        job: OpenJob,
        exc: GenAIError,
        started: float,
        upstream_started: float,
        run: UpstreamRun,
        *,
        streamed: bool = False,
    ) -> GenAIError:
        """Record the failure; the error to raise is a new one that names the job."""
        upstream_ms = _elapsed_ms(upstream_started)
        await self._audit.failed(
            job,
            exc,
            latency_ms=_elapsed_ms(started),
            upstream_ms=upstream_ms,
            calls=run.attempts,
            output_attempts=run.output_attempts,
            streamed=streamed,
        )
        self._metrics.completions.labels(run.provider, "failed").inc()
        request_facts().upstream_seconds = upstream_ms / 1000
        structlog.contextvars.bind_contextvars(upstream_ms=upstream_ms, error_type=exc.error_type)
        return exc.with_job(job.id)

    def _cache_key(self, prepared: Prepared, caller_key: str | None) -> str | None:
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
            partition=caller_key if self._cache_per_key else None,
        )

    async def _remember(self, key: str | None, envelope: CompletionEnvelope) -> None:
        """Keep an answer of the chosen model for the next identical request; a fallback's is
        not kept (the key names the chosen model, which may be back next time)."""
        if key is None or envelope.model_choice.source == "fallback":
            return
        response = envelope.response
        await self._cache.put(
            key,
            CachedAnswer(
                text=response.text,
                finish_reason=response.finish_reason,
                usage=response.usage,
                parsed=envelope.parsed,
                validation=envelope.validation,
                provider=response.provider,
                model=response.model,
                cost_usd=response.cost_usd,
                tool_calls=response.tool_calls,
                reasoning=response.reasoning,
            ),
        )

    async def _from_cache(
        self, prepared: Prepared, hit: CachedAnswer, request_id: str | None, started: float
    ) -> CompletionEnvelope:
        """A cache hit: no provider call, but an audit record (status `cached`) all the same."""
        job = await self._audit.start(prepared, request=prepared.request, request_id=request_id)
        structlog.contextvars.bind_contextvars(job_id=job.id, cache="hit")
        reply = ProviderReply(
            text=hit.text,
            finish_reason=hit.finish_reason,
            usage=hit.usage,
            tool_calls=tuple(hit.tool_calls),
            reasoning=tuple(hit.reasoning),
        )
        await self._audit.completed(
            job,
            reply,
            latency_ms=_elapsed_ms(started),
            upstream_ms=0.0,
            cost_usd=0.0,
            status="cached",
        )
        self._metrics.completions.labels(prepared.choice.provider, "cached").inc()
        # A fallback's answer is never cached, so the hit is the chosen model's own answer.
        answer = Answer(reply, hit.parsed, hit.validation)
        return _envelope(
            job, request_id, Answered(prepared, answer), attempts=[], cost=0.0, cache="hit"
        )
