"""StreamCall: one streamed provider call, from opening it to its last event.

It holds the provider's concurrency slot and the call's span from `open` until `close`, which
is idempotent: every way out (a timeout before the first event, the reader stopping, the answer
cap, the end) closes the stream and gives the slot back exactly once. The call is recorded as one
`CallAttempt` at whichever end it reaches.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager

from app.errors import AnswerTooLarge, ProviderError, UpstreamTimeout
from app.observability.tracing import Span, begin_span
from app.pipeline.calls import OpenStream, StreamTimeouts, call_attempt, chat_span, trace_reply
from app.pipeline.prepare import Prepared
from app.providers import ProviderReply
from app.providers.base import ReasoningDelta, StreamEvent, TextDelta, ToolCallDelta
from app.schemas import CallAttempt


def _event_size(event: StreamEvent) -> int:
    """The bytes a stream event adds to the answer (the final reply repeats them: none)."""
    if isinstance(event, TextDelta):
        return len(event.text.encode("utf-8", "surrogatepass"))
    if isinstance(event, ToolCallDelta):
        return len(event.arguments) + len(event.name or "") + len(event.id or "")
    if isinstance(event, ReasoningDelta):
        return len(event.text) + len(event.signature) + len(event.redacted or "")
    return 0


class StreamCall:
    def __init__(
        self,
        prepared: Prepared,
        timeouts: StreamTimeouts,
        *,
        send: Callable[[], AsyncGenerator[StreamEvent, None]],
        slot: AbstractAsyncContextManager[object],
        max_answer_bytes: int,
        attempts: list[CallAttempt],
    ) -> None:
        self._prepared = prepared
        self._timeouts = timeouts
        self._send = send  # starts the provider's stream
        self._slot = slot
        self._limit = max_answer_bytes
        self._attempts = attempts  # the run's record, appended to once
        self._stream: AsyncGenerator[StreamEvent, None] | None = None
        self._span: Span | None = None
        self._started = time.perf_counter()
        self._closed = False
        self._recorded = False
        self._events: AsyncGenerator[StreamEvent, None] | None = None

    @property
    def _provider(self) -> str:
        return self._prepared.choice.provider

    def _record(self, error: ProviderError | None, *, cancelled: bool = False) -> None:
        if self._recorded:  # the first end reached is the call's outcome
            return
        self._recorded = True
        attempt = call_attempt(self._prepared, self._started, error, cancelled=cancelled)
        self._attempts.append(attempt)

    async def open(self) -> OpenStream:
        """Take the slot, start the stream, wait for its first event (within the first-token
        timeout); a failure here is recorded and closes everything."""
        await self._slot.__aenter__()
        name, attributes = chat_span(self._prepared)
        self._span = span = begin_span(name, kind="client", attributes=attributes)
        try:
            self._stream = stream = self._send()
            async with asyncio.timeout(self._timeouts.first_token_seconds):
                first = await anext(stream)
        except TimeoutError:
            span.fail(UpstreamTimeout.error_type)
            await self.close()
            error = UpstreamTimeout(
                f"{self._provider} sent no text within {self._timeouts.first_token_seconds:g} s "
                "(GENAI_UPSTREAM__FIRST_TOKEN_SECONDS)",
                provider=self._provider,
            )
            self._record(error)
            raise error from None
        except ProviderError as exc:
            span.fail(exc.error_type)
            await self.close()
            self._record(exc)
            raise
        except BaseException:
            await self.close()
            self._record(None, cancelled=True)
            raise
        if isinstance(first, ProviderReply):  # an answer without a single delta
            self._answered(first)
            await self.close()
        self._events = self._rest(stream, first)
        return OpenStream(self._prepared, first, self._events, self.stop)

    async def stop(self) -> None:
        """The reader is done with the stream, whether or not it read it all. Closing an async
        generator that was never started runs none of its code, so the ends are made sure of
        here: an unfinished call is recorded as cancelled, and the call is closed."""
        if self._events is not None:
            await self._events.aclose()
        self._record(None, cancelled=True)
        await self.close()

    def _answered(self, reply: ProviderReply) -> None:
        self._record(None)
        if self._span is not None:
            trace_reply(self._span, self._prepared, reply)

    async def _rest(
        self, stream: AsyncGenerator[StreamEvent, None], first: StreamEvent
    ) -> AsyncGenerator[StreamEvent, None]:
        """The events after the first, each within the idle timeout and, together, under the
        answer cap; recorded at the end."""
        finished = isinstance(first, ProviderReply)
        received = _event_size(first)
        try:
            while not finished:
                try:
                    async with asyncio.timeout(self._timeouts.idle_seconds):
                        event = await anext(stream)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    raise UpstreamTimeout(
                        f"{self._provider}'s stream was silent for "
                        f"{self._timeouts.idle_seconds:g} s (GENAI_UPSTREAM__IDLE_SECONDS)",
                        provider=self._provider,
                    ) from None
                received += _event_size(event)
                if received > self._limit:
                    raise AnswerTooLarge(self._provider, limit=self._limit)
                if isinstance(event, ProviderReply):
                    finished = True  # recorded before it is handed on: the reader stops there
                    self._answered(event)
                yield event
        except ProviderError as exc:
            if self._span is not None:
                self._span.fail(exc.error_type)
            self._record(exc)
            raise
        except (asyncio.CancelledError, GeneratorExit):
            if not finished:
                self._record(None, cancelled=True)
            raise
        finally:
            await self.close()

    async def close(self) -> None:
        """Close the upstream response and give the slot back, once."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._stream is not None:
                with contextlib.suppress(Exception):
                    await self._stream.aclose()
        finally:
            if self._span is not None:
                self._span.end()
            await self._slot.__aexit__(None, None, None)
