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
import functools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TypeVar

import structlog

from app.concurrency.limits import GLOBAL_LIMIT
from app.errors import (
    AnswerTooLarge,
    DeadlineExceeded,
    GenAIError,
    InvalidModel,
    Overloaded,
    ProviderError,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamTimeout,
)
from app.observability.metrics import Metrics
from app.observability.tracing import AttributeValue, Span, begin_span, span
from app.pipeline.prepare import Prepared, PromptPreparer
from app.prompts.repair import Answer, RepairLoop
from app.prompts.structured import Attempt
from app.providers import ProviderCall, ProviderRegistry, ProviderReply
from app.providers.base import (
    DEFAULT_MAX_ANSWER_BYTES,
    NativeOutput,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
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
class Deadline:
    """The monotonic instant a request's upstream work must be done by."""

    seconds: float
    expires_at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(seconds, time.monotonic() + seconds)

    def remaining(self) -> float:
        return self.expires_at - time.monotonic()

    def exceeded(self) -> DeadlineExceeded:
        ms = round(self.seconds * 1000)
        return DeadlineExceeded(
            f"The request's deadline of {ms} ms passed before an answer arrived (set by "
            "GENAI_UPSTREAM__DEADLINE_SECONDS or the x-genai-deadline-ms header).",
            deadline_ms=ms,
        )

    @contextlib.asynccontextmanager
    async def guard(self) -> AsyncIterator[None]:
        """Run the block until the deadline; past it, DeadlineExceeded."""
        try:
            async with asyncio.timeout_at(_loop_time(self.expires_at)):
                yield
        except TimeoutError:
            raise self.exceeded() from None


def _loop_time(monotonic_at: float) -> float:
    """A `time.monotonic()` instant on the running loop's clock (they may differ)."""
    return asyncio.get_running_loop().time() + (monotonic_at - time.monotonic())


def _event_size(event: StreamEvent) -> int:
    """The bytes a stream event adds to the answer (the final reply repeats them: none)."""
    if isinstance(event, TextDelta):
        return len(event.text.encode("utf-8", "surrogatepass"))
    if isinstance(event, ToolCallDelta):
        return len(event.arguments) + len(event.name or "") + len(event.id or "")
    if isinstance(event, ReasoningDelta):
        return len(event.text) + len(event.signature) + len(event.redacted or "")
    return 0


def _elapsed_ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 2)


def _chat_span(prepared: Prepared) -> tuple[str, dict[str, AttributeValue | None]]:
    """A provider call's span name and attributes (OpenTelemetry GenAI conventions).
    `gen_ai.system` is the deprecated name of `gen_ai.provider.name`, kept for older backends."""
    choice, params = prepared.choice, prepared.params
    return f"chat {choice.name}", {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": choice.provider,
        "gen_ai.system": choice.provider,
        "gen_ai.request.model": choice.name,
        "gen_ai.request.max_tokens": params.max_tokens,
        "gen_ai.request.temperature": params.temperature,
    }


def _trace_reply(traced: Span, prepared: Prepared, reply: ProviderReply) -> None:
    # The adapters report no model name of their own: the one called answered.
    traced.set("gen_ai.response.model", prepared.choice.name)
    traced.set("gen_ai.usage.input_tokens", reply.usage.input_tokens)
    traced.set("gen_ai.usage.output_tokens", reply.usage.output_tokens)
    traced.set("gen_ai.response.finish_reasons", [reply.finish_reason])


@dataclass(frozen=True, slots=True)
class Answered:
    """The model that answered (its prepared prompt) and what it answered."""

    prepared: Prepared
    answer: Answer


@dataclass(slots=True)
class StreamTimeouts:
    first_token_seconds: float
    idle_seconds: float


@dataclass(slots=True)
class OpenStream:
    """A stream whose first event has arrived from `prepared`'s model: no fallback after this."""

    prepared: Prepared
    first: StreamEvent
    events: AsyncIterator[StreamEvent]
    close: Callable[[], Awaitable[None]]


@dataclass(slots=True)
class UpstreamRun:
    """One request's upstream work; what it tried stays readable after a failure."""

    upstream: Upstream
    prepared: Prepared
    deadline: Deadline
    attempts: list[CallAttempt] = field(default_factory=list)
    output_attempts: tuple[Attempt, ...] = ()
    current: Prepared | None = None  # the model being (or last) tried

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
        failure: GenAIError | None = None
        async with self.deadline.guard():
            async for prepared in self.candidates():
                self._count_fallback(prepared)
                self.current = prepared
                loop = self.upstream.repair_loop(prepared)
                try:
                    answer = await loop.run(self._caller(prepared), prepared.prompt.messages)
                except GenAIError as exc:
                    self.output_attempts += loop.attempts
                    if not worth_another_model(exc):
                        raise
                    failure = exc
                    log.warning(
                        "upstream_fallback", model=prepared.choice.model, error_type=exc.error_type
                    )
                    continue
                self.output_attempts += loop.attempts
                return Answered(prepared, answer)
        assert failure is not None  # the chosen model is always a candidate
        raise failure

    async def open_stream(self, timeouts: StreamTimeouts) -> OpenStream:
        """Start a stream on the first model of the chain that sends its first event in time."""
        failure: GenAIError | None = None
        async with self.deadline.guard():
            async for prepared in self.candidates():
                self._count_fallback(prepared)
                self.current = prepared
                try:
                    # Until its first text a stream is retried like any call.
                    return await self.upstream.retry.run(
                        functools.partial(self._first_event, prepared, timeouts)
                    )
                except GenAIError as exc:
                    if not worth_another_model(exc):
                        raise
                    failure = exc
                    log.warning(
                        "upstream_fallback", model=prepared.choice.model, error_type=exc.error_type
                    )
        assert failure is not None
        raise failure

    def _count_fallback(self, candidate: Prepared) -> None:
        """A candidate after the first is a fallback taken from the model tried before it."""
        metrics = self.upstream.metrics
        if self.current is not None and metrics is not None:
            metrics.fallbacks.labels(self.current.choice.model, candidate.choice.model).inc()

    async def _first_event(self, prepared: Prepared, timeouts: StreamTimeouts) -> OpenStream:
        provider = self.upstream.providers.get(prepared.choice.provider)
        call = self.upstream.provider_call(prepared, tuple(prepared.prompt.messages))
        slot = self.upstream.slot(prepared.choice.provider)
        started = time.perf_counter()
        await slot.__aenter__()
        stream = provider.stream(call)
        span_name, span_attributes = _chat_span(prepared)
        traced = begin_span(span_name, kind="client", attributes=span_attributes)
        released = False

        async def close(error: BaseException | None = None) -> None:
            """Close the upstream response and give the slot back, once."""
            nonlocal released
            if released:
                return
            released = True
            try:
                with contextlib.suppress(Exception):
                    await stream.aclose()
            finally:
                traced.end()
                await slot.__aexit__(None, None, None)

        try:
            async with asyncio.timeout(timeouts.first_token_seconds):
                first = await anext(stream)
        except TimeoutError:
            traced.fail(UpstreamTimeout.error_type)
            await close()
            error = UpstreamTimeout(
                f"{prepared.choice.provider} sent no text within "
                f"{timeouts.first_token_seconds:g} s (GENAI_UPSTREAM__FIRST_TOKEN_SECONDS)",
                provider=prepared.choice.provider,
            )
            self._record(prepared, started, error)
            raise error from None
        except ProviderError as exc:
            traced.fail(exc.error_type)
            await close()
            self._record(prepared, started, exc)
            raise
        except BaseException:
            await close()
            self._record(prepared, started, None, cancelled=True)
            raise

        async def rest() -> AsyncGenerator[StreamEvent, None]:
            """The events after the first, each within the idle timeout and, together, under
            the answer cap; recorded at the end."""
            finished = isinstance(first, ProviderReply)
            received = _event_size(first)
            limit = self.upstream.max_answer_bytes
            try:
                while True:
                    try:
                        async with asyncio.timeout(timeouts.idle_seconds):
                            event = await anext(stream)
                    except StopAsyncIteration:
                        return
                    except TimeoutError:
                        raise UpstreamTimeout(
                            f"{prepared.choice.provider}'s stream was silent for "
                            f"{timeouts.idle_seconds:g} s (GENAI_UPSTREAM__IDLE_SECONDS)",
                            provider=prepared.choice.provider,
                        ) from None
                    received += _event_size(event)
                    if received > limit:
                        raise AnswerTooLarge(prepared.choice.provider, limit=limit)
                    if isinstance(event, ProviderReply):
                        # Recorded before it is handed on: the reader stops at the answer.
                        finished = True
                        self._record(prepared, started, None)
                        _trace_reply(traced, prepared, event)
                    yield event
                    if finished:
                        return
            except ProviderError as exc:
                traced.fail(exc.error_type)
                self._record(prepared, started, exc)
                raise
            except (asyncio.CancelledError, GeneratorExit):
                if not finished:
                    self._record(prepared, started, None, cancelled=True)
                raise
            finally:
                await close()

        if isinstance(first, ProviderReply):  # an answer without a single delta
            self._record(prepared, started, None)
            _trace_reply(traced, prepared, first)
            await close()

        events = rest()
        return OpenStream(prepared, first, events, events.aclose)

    def _caller(
        self, prepared: Prepared
    ) -> Callable[[tuple[Message, ...]], Awaitable[ProviderReply]]:
        """One provider call per conversation, under the retry policy; each try recorded."""
        provider = self.upstream.providers.get(prepared.choice.provider)

        async def attempt(messages: tuple[Message, ...]) -> ProviderReply:
            call = self.upstream.provider_call(prepared, messages)
            started = time.perf_counter()
            span_name, span_attributes = _chat_span(prepared)
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
                _trace_reply(traced, prepared, reply)
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
        outcome = "cancelled" if cancelled else ("failed" if error else "completed")
        self.attempts.append(
            CallAttempt(
                provider=prepared.choice.provider,
                model=prepared.choice.name,
                outcome=outcome,
                error_type=error.error_type if error else None,
                upstream_status=error.upstream_status if error else None,
                duration_ms=_elapsed_ms(started),
            )
        )


class Upstream:
    """The long-lived part: providers, the retry policy, limits; `run` starts one request's."""

    def __init__(
        self,
        *,
        preparer: PromptPreparer,
        providers: ProviderRegistry,
        retry: RetryPolicy,
        structured_max_attempts: int,
        slot: ProviderSlot | None = None,
        metrics: Metrics | None = None,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        self.preparer = preparer
        self.providers = providers
        self.retry = retry
        self.structured_max_attempts = structured_max_attempts
        self.slot: ProviderSlot = slot or _no_limit
        self.metrics = metrics  # counts the fallbacks taken
        self.max_answer_bytes = max_answer_bytes  # what one stream may send, all pieces together

    def run(self, prepared: Prepared, deadline: Deadline) -> UpstreamRun:
        return UpstreamRun(self, prepared, deadline)

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
        )
