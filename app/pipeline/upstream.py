"""Upstream: how one completion reaches an answer, and the record of every call it made.

The chosen model is tried first, under the one retry policy. When it fails for a reason another
model may not share (a timeout, a connection failure, 408/409/429/5xx after the retries) the next
model of the fallback chain is tried, possibly at another provider; anything the caller or the
operator must fix (400, 401, 404, 422, an invalid structured answer) is final. A stream falls back
only until its first text has arrived: after that the caller has seen bytes of one model's answer.

Everything runs inside the request's deadline (`Deadline`); every upstream call, retries
included, becomes one `CallAttempt`, kept whatever the outcome so the audit record has them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TypeVar

import structlog

from app.concurrency.limits import GLOBAL_LIMIT
from app.errors import (
    GenAIError,
    InvalidModel,
    Overloaded,
    ProviderError,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamTimeout,
)
from app.observability.metrics import Metrics
from app.observability.tracing import span
from app.pipeline.calls import (
    OpenStream,
    StreamTimeouts,
    call_attempt,
    chat_span,
    trace_reply,
)
from app.pipeline.deadline import Deadline
from app.pipeline.prepare import Prepared, PromptPreparer
from app.pipeline.stream_call import StreamCall
from app.prompts.repair import Answer, RepairLoop
from app.prompts.structured import Attempt
from app.providers import ProviderCall, ProviderRegistry, ProviderReply
from app.providers.base import (
    DEFAULT_MAX_ANSWER_BYTES,
    NativeOutput,
)
from app.providers.retry import RetryPolicy
from app.schemas import CallAttempt, Message, ResponseFormat

T = TypeVar("T")
log = structlog.get_logger(__name__)

ProviderSlot = Callable[[str], AbstractAsyncContextManager[object]]
"""A per-provider concurrency slot held for one upstream call (see `app.concurrency.limits`)."""


@contextlib.asynccontextmanager
async def _no_limit(_provider: str) -> AsyncIterator[None]:
    yield


def worth_another_model(exc: GenAIError) -> bool:
    """Failures another model may not share: the ones the retry policy retries, timeouts (not
    retried on the same model: the caller already waited a whole one), and a provider whose
    own concurrency limit is full."""
    if isinstance(exc, Overloaded):
        return exc.limit != GLOBAL_LIMIT
    return isinstance(exc, UpstreamTimeout | UpstreamError | UpstreamRateLimited)


@dataclass(frozen=True, slots=True)
class Answered:
    """The model that answered (its prepared prompt) and what it answered."""

    prepared: Prepared
    answer: Answer


@dataclass(slots=True)
class UpstreamRun:
    """One request's upstream work; what it tried stays readable after a failure."""

    upstream: Upstream
    prepared: Prepared
    deadline: Deadline
    attempts: list[CallAttempt] = field(default_factory=list)
    output_attempts: tuple[Attempt, ...] = ()
    current: Prepared | None = None  # the model being (or last) tried
    allows: Callable[[str], bool] | None = None  # the caller's model allowlist, for fallbacks

    @property
    def provider(self) -> str:
        return (self.current or self.prepared).choice.provider

    async def candidates(self) -> AsyncIterator[Prepared]:
        """The chosen model, then each fallback that can serve the request: its provider is
        configured and it has the capabilities (assembled only once it is reached)."""
        first = self.prepared
        yield first
        configured = self.upstream.providers.status()
        for model in self.upstream.preparer.fallback_chain(first):
            if not configured.get(model.partition("/")[0], False):
                continue
            if self.allows is not None and not self.allows(model):
                continue  # a link the calling key may not use
            reason = f"{first.choice.model} failed; {model} is next in its fallback chain"
            try:
                prepared = await self.upstream.preparer.retarget(first, model, reason)
            except InvalidModel:  # a pattern's own chain is checked by `patterns validate`
                log.warning("fallback_model_invalid", model=model)
                continue
            if prepared is not None:
                yield prepared

    async def complete(self) -> Answered:
        """The first model of the chain that answers; the last failure if none does."""

        async def answer(prepared: Prepared) -> Answered:
            loop = self.upstream.repair_loop(prepared)
            try:
                answer = await loop.run(self._caller(prepared), prepared.prompt.messages)
            except GenAIError:
                self.output_attempts += loop.attempts
                raise
            self.output_attempts += loop.attempts
            return Answered(prepared, answer)

        return await self._first_that_answers(answer)

    async def open_stream(self, timeouts: StreamTimeouts) -> OpenStream:
        """Start a stream on the first model of the chain that sends its first event in time."""

        async def first_event(prepared: Prepared) -> OpenStream:
            # Until its first text a stream is retried like any call.
            provider = self.upstream.providers.get(prepared.choice.provider)
            call = self.upstream.provider_call(prepared, tuple(prepared.prompt.messages))
            return await self.upstream.retry.run(
                lambda: StreamCall(
                    prepared,
                    timeouts,
                    send=lambda: provider.stream(call),
                    slot=self.upstream.slot(prepared.choice.provider),
                    max_answer_bytes=self.upstream.max_answer_bytes,
                    attempts=self.attempts,
                ).open()
            )

        return await self._first_that_answers(first_event)

    async def _first_that_answers(self, attempt: Callable[[Prepared], Awaitable[T]]) -> T:
        """`attempt` on each candidate in turn, within the deadline, until one succeeds; a
        failure another model may not share moves on, any other is final."""
        failure: GenAIError | None = None
        async with self.deadline.guard():
            async for prepared in self.candidates():
                self._count_fallback(prepared)
                self.current = prepared
                try:
                    return await attempt(prepared)
                except GenAIError as exc:
                    if not worth_another_model(exc):
                        raise
                    failure = exc
                    log.warning(
                        "upstream_fallback", model=prepared.choice.model, error_type=exc.error_type
                    )
        assert failure is not None  # the chosen model is always a candidate
        raise failure

    def _count_fallback(self, candidate: Prepared) -> None:
        """A candidate after the first is a fallback taken from the model tried before it."""
        metrics = self.upstream.metrics
        if self.current is not None and metrics is not None:
            metrics.fallbacks.labels(self.current.choice.model, candidate.choice.model).inc()

    def _caller(
        self, prepared: Prepared
    ) -> Callable[[tuple[Message, ...]], Awaitable[ProviderReply]]:
        """One provider call per conversation, under the retry policy; each try recorded."""
        provider = self.upstream.providers.get(prepared.choice.provider)

        async def attempt(messages: tuple[Message, ...]) -> ProviderReply:
            call = self.upstream.provider_call(prepared, messages)
            started = time.perf_counter()
            span_name, span_attributes = chat_span(prepared)
            with span(span_name, kind="client", attributes=span_attributes) as traced:
                try:
                    async with self.upstream.slot(prepared.choice.provider):
                        reply = await provider.complete(call)
                except ProviderError as exc:
                    traced.fail(exc.error_type)
                    self._record(prepared, started, exc)
                    raise
                except asyncio.CancelledError:
                    self._record(prepared, started, None, cancelled=True)
                    raise
                self._record(prepared, started, None)
                trace_reply(traced, prepared, reply)
            return reply

        async def call(messages: tuple[Message, ...]) -> ProviderReply:
            return await self.upstream.retry.run(lambda: attempt(messages))

        return call

    def _record(
        self,
        prepared: Prepared,
        started: float,
        error: ProviderError | None,
        *,
        cancelled: bool = False,
    ) -> None:
        self.attempts.append(call_attempt(prepared, started, error, cancelled=cancelled))


@dataclass(frozen=True, slots=True)
class UpstreamTuning:
    """The upstream's knobs from GENAI_UPSTREAM__* and GENAI_STRUCTURED_MAX_ATTEMPTS."""

    structured_max_attempts: int
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES  # what one stream may send, all pieces


class Upstream:
    """The long-lived part: providers, the retry policy, limits; `run` starts one request's."""

    def __init__(
        self,
        *,
        preparer: PromptPreparer,
        providers: ProviderRegistry,
        retry: RetryPolicy,
        tuning: UpstreamTuning,
        slot: ProviderSlot | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.preparer = preparer
        self.providers = providers
        self.retry = retry
        self.structured_max_attempts = tuning.structured_max_attempts
        self.slot: ProviderSlot = slot or _no_limit
        self.metrics = metrics  # counts the fallbacks taken
        self.max_answer_bytes = tuning.max_answer_bytes  # one stream's pieces, all together

    def run(
        self,
        prepared: Prepared,
        deadline: Deadline,
        *,
        allows: Callable[[str], bool] | None = None,
    ) -> UpstreamRun:
        """One request's upstream work; `allows` says which fallback models it may use."""
        return UpstreamRun(self, prepared, deadline, allows=allows)

    def repair_loop(self, prepared: Prepared) -> RepairLoop:
        tools = prepared.prompt.tools
        return RepairLoop(
            schema=prepared.source.output_schema,
            native=prepared.native_schema,
            max_attempts=self.structured_max_attempts,
            provider=prepared.choice.provider,
            must_call=tools.choice if tools is not None and prepared.choice_by_repair else None,
        )

    @staticmethod
    def provider_call(prepared: Prepared, messages: tuple[Message, ...]) -> ProviderCall:
        source, output = prepared.source, None
        if prepared.native_schema and source.output_schema is not None:
            wanted = source.response_format or ResponseFormat(
                type="json_schema", json_schema=source.output_schema
            )
            output = NativeOutput(wanted, prepared.output_via)
        return ProviderCall(
            model=prepared.choice.name,
            system=prepared.prompt.system,
            messages=messages,
            params=prepared.params,
            tools=prepared.prompt.tools,
            output=output,
            cache_system=source.prompt_cache,
        )
