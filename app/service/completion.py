"""Completion: one request's run after its shared start, and where its outcome goes.

`GenAIService` starts a completion once for `complete` and `stream` alike (slot, preparation,
cache, pending record); from there the `Completion` carries the bookkeeping (its times, slot,
job and upstream run) to whichever end it reaches: recorded and counted as completed, failed or
cancelled, and answered with the one envelope.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from app.audit.trail import AuditTrail, CallRun, OpenJob
from app.auth.principal import Principal
from app.cache import CachedAnswer, ResponseCache
from app.errors import GenAIError
from app.observability.facts import request_facts
from app.observability.metrics import Metrics
from app.pipeline.calls import OpenStream, StreamTimeouts, elapsed_ms
from app.pipeline.prepare import Prepared
from app.pipeline.upstream import Answered, Upstream, UpstreamRun
from app.prompts.repair import Answer
from app.providers import ProviderReply
from app.quotas.guard import NOTHING_RESERVED, Reservation
from app.routing.prices import PriceTable
from app.schemas import CallAttempt, CompletionEnvelope, CompletionResponse
from app.service.outputs import ClientStoppedReading, StreamFailed, StreamOutput, passed_on
from app.tracking.signing import Signer

CacheUse = Literal["hit", "miss", "off"]


def envelope_of(
    job: OpenJob,
    request_id: str | None,
    answered: Answered,
    *,
    attempts: Sequence[CallAttempt],
    cost: float | None,
    cache: CacheUse,
    cache_saved: float | None = None,
) -> CompletionEnvelope:
    """The one envelope, for an answer from the provider and one from the cache alike."""
    prepared, reply = answered.prepared, answered.answer.reply
    return CompletionEnvelope(
        job_id=job.id,
        request_id=request_id,
        prompt=prepared.prompt,
        params=prepared.params,
        response=CompletionResponse(
            text=reply.text,
            provider=prepared.choice.provider,
            model=prepared.choice.name,
            finish_reason=reply.finish_reason,
            usage=reply.usage,  # on a hit, the original call's: this request made none
            cost_usd=cost,
            cache_saved_usd=cache_saved,
            tool_calls=list(reply.tool_calls),
            reasoning=list(reply.reasoning),
        ),
        model_choice=prepared.choice,
        provenance=prepared.provenance,
        parsed=answered.answer.parsed,
        validation=answered.answer.outcome,
        attempts=list(attempts),
        cache=cache,
    )


@dataclass(frozen=True, slots=True)
class Outcomes:
    """Where a completion's outcome goes: the audit trail, the metrics, the cache; and what an
    answer costs."""

    audit: AuditTrail
    metrics: Metrics
    cache: ResponseCache
    prices: PriceTable
    signer: Signer | None = None  # None: GENAI_SIGNING__ENABLED=false

    def signed(self, envelope: CompletionEnvelope) -> CompletionEnvelope:
        """Every envelope leaves signed while signing is on (inline: tens of µs)."""
        return envelope if self.signer is None else self.signer.signed(envelope)

    async def from_cache(
        self,
        prepared: Prepared,
        hit: CachedAnswer,
        request_id: str | None,
        started: float,
        caller: Principal | None = None,
    ) -> CompletionEnvelope:
        """A cache hit: no provider call, but an audit record (status `cached`) all the same."""
        job = await self.audit.start(
            prepared, request=prepared.request, request_id=request_id, caller=caller
        )
        request_facts().opened_job(job.id, cache="hit")
        reply = ProviderReply(
            text=hit.text,
            finish_reason=hit.finish_reason,
            usage=hit.usage,
            tool_calls=tuple(hit.tool_calls),
            reasoning=tuple(hit.reasoning),
        )
        run = CallRun(latency_ms=elapsed_ms(started), upstream_ms=0.0)
        await self.audit.completed(job, reply, run, cost_usd=0.0, status="cached")
        self.metrics.completions.labels(prepared.choice.provider, "cached").inc()
        # A fallback's answer is never cached, so the hit is the chosen model's own answer.
        answered = Answered(prepared, Answer(reply, hit.parsed, hit.validation))
        # Signed now: a new signed_at, the job id this hit is served under.
        return self.signed(
            envelope_of(job, request_id, answered, attempts=[], cost=0.0, cache="hit")
        )

    async def remember(self, key: str | None, envelope: CompletionEnvelope) -> None:
        """Keep an answer of the chosen model for the next identical request; a fallback's is
        not kept (the key names the chosen model, which may be back next time)."""
        if key is None or envelope.model_choice.source == "fallback":
            return
        response = envelope.response
        await self.cache.put(
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


@dataclass(slots=True)
class Completion:
    """A completion whose pending record is written and whose upstream run is about to start.

    It holds the request's slot (`slot`) until it ends; `complete` and `stream` end it.
    """

    outcomes: Outcomes
    upstream: Upstream
    job: OpenJob
    run: UpstreamRun
    request_id: str | None
    key: str | None  # the response-cache key; None: the cache is not used
    started: float  # when the request reached the service
    slot: contextlib.AsyncExitStack
    reservation: Reservation = field(
        default_factory=lambda: NOTHING_RESERVED
    )  # against the caller's budgets and rate limits
    upstream_started: float = field(default_factory=time.perf_counter)

    @property
    def cache_use(self) -> CacheUse:
        return "off" if self.key is None else "miss"

    async def complete(self) -> CompletionEnvelope:
        """The whole answer, recorded; the slot is released whatever happens."""
        async with self.slot:
            try:
                answered = await self.run.complete()
                upstream_ms = elapsed_ms(self.upstream_started)
                # With GENAI_AUDIT__MODE=with-call the pending record may still be on its way:
                # an answer whose record is not durable is never returned.
                await self.outcomes.audit.confirm(self.job)
            except GenAIError as exc:
                raise await self.failed(exc) from exc.__cause__
            except asyncio.CancelledError:  # the client went away; the record must say so
                self.cancelled()
                raise
            return await self.completed(answered, upstream_ms)

    async def stream(self, timeouts: StreamTimeouts) -> AsyncGenerator[StreamOutput, None]:
        """Open the stream (failures before its first event raise: an HTTP error), then relay
        it; closing the relay cancels it."""
        try:
            opened = await self.run.open_stream(timeouts)
            # Upstream time until the first event: the overhead header is sent before the rest.
            request_facts().reached_upstream(elapsed_ms(self.upstream_started))
        except GenAIError as exc:
            failed = await self.failed(exc, streamed=True)
            await self.slot.aclose()
            raise failed from exc.__cause__
        except asyncio.CancelledError:
            self.cancelled()
            await self.slot.aclose()
            raise
        except BaseException:
            await self.slot.aclose()
            raise
        return self._relay(opened)

    async def _relay(self, opened: OpenStream) -> AsyncGenerator[StreamOutput, None]:
        """The open stream's events to the caller, then the record and the envelope."""
        try:
            try:
                first = opened.first
                reply = first if isinstance(first, ProviderReply) else None
                if not isinstance(first, ProviderReply):
                    yield passed_on(first)
                while reply is None:
                    # The deadline guards each wait, never a `yield`: the caller's sending
                    # happens between them, in the same task.
                    async with self.run.deadline.guard():
                        event = await anext(opened.events, None)
                    if event is None:  # the adapter ended without its reply: a bug there
                        raise RuntimeError("provider stream ended without a final reply")
                    if isinstance(event, ProviderReply):
                        reply = event
                    else:
                        yield passed_on(event)
                upstream_ms = elapsed_ms(self.upstream_started)
                await self.outcomes.audit.confirm(self.job)
            except GenAIError as exc:
                yield StreamFailed(await self.failed(exc, streamed=True))
                return
            except (asyncio.CancelledError, GeneratorExit):
                self.cancelled()
                raise
            except ClientStoppedReading as gone:
                self.cancelled(reason=gone.reason)
                return
            # A requested format is checked, not repaired: the answer has reached the caller.
            answer = self.upstream.repair_loop(opened.prepared).check(reply)
            self.run.output_attempts += answer.attempts
            answered = Answered(opened.prepared, answer)
            envelope = await self.completed(answered, upstream_ms, streamed=True)
            try:
                yield envelope
            except ClientStoppedReading:  # recorded already: only the last frames are lost
                return
        finally:
            await opened.close()
            await self.slot.aclose()

    async def completed(
        self, answered: Answered, upstream_ms: float, *, streamed: bool = False
    ) -> CompletionEnvelope:
        """Record the answer, count it and remember it; its envelope."""
        reply, choice = answered.answer.reply, answered.prepared.choice
        outcomes = self.outcomes
        priced = outcomes.prices.cost(choice.provider, choice.name, reply.usage)
        cost, saved = (priced.usd, priced.saved_usd) if priced is not None else (None, None)
        await outcomes.audit.completed(
            self.job,
            reply,
            self._call_run(upstream_ms, streamed=streamed),
            answered_by=answered.prepared,
            cost_usd=cost,
            cache_saved_usd=saved,
        )
        metrics = outcomes.metrics
        metrics.completions.labels(choice.provider, "completed").inc()
        metrics.record_usage(choice.provider, choice.name, reply.usage, cost, saved_usd=saved)
        metrics.upstream_seconds.labels(choice.provider, choice.name).observe(upstream_ms / 1000)
        request_facts().answered(  # the model that answered (a fallback, perhaps)
            provider=choice.provider,
            model=choice.name,
            upstream_ms=upstream_ms,
            usage=reply.usage,
            cost=cost,
        )
        self.reservation.settle(reply.usage, cost)
        envelope = envelope_of(
            self.job,
            self.request_id,
            answered,
            attempts=self.run.attempts,
            cost=cost,
            cache_saved=saved,
            cache=self.cache_use,
        )
        await outcomes.remember(self.key, envelope)
        return outcomes.signed(envelope)

    def _call_run(self, upstream_ms: float | None, *, streamed: bool = False) -> CallRun:
        """What the upstream run did so far, for the audit record."""
        return CallRun(
            latency_ms=elapsed_ms(self.started),
            upstream_ms=upstream_ms,
            calls=self.run.attempts,
            output_attempts=self.run.output_attempts,
            streamed=streamed,
        )

    def cancelled(self, *, reason: str | None = None) -> None:
        self.outcomes.audit.cancelled(self.job, self._call_run(None), reason=reason)
        self.outcomes.metrics.completions.labels(self.run.provider, "cancelled").inc()

    async def failed(self, exc: GenAIError, *, streamed: bool = False) -> GenAIError:
        """Record the failure; the error to raise is a new one that names the job."""
        self.reservation.release()
        upstream_ms = elapsed_ms(self.upstream_started)
        await self.outcomes.audit.failed(
            self.job, exc, self._call_run(upstream_ms, streamed=streamed)
        )
        self.outcomes.metrics.completions.labels(self.run.provider, "failed").inc()
        request_facts().failed(exc.error_type, upstream_ms=upstream_ms)
        return exc.with_job(self.job.id)
