"""StreamCall: every way out of a streamed provider call gives its slot back exactly once and
leaves exactly one CallAttempt."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import pytest

from app.errors import AnswerTooLarge, UpstreamTimeout
from app.pipeline.calls import StreamTimeouts
from app.pipeline.prepare import Prepared
from app.pipeline.stream_call import StreamCall
from app.providers import ProviderReply
from app.providers.base import StreamEvent, TextDelta
from app.schemas import CallAttempt, Usage

PREPARED = cast(
    Prepared,
    SimpleNamespace(
        choice=SimpleNamespace(provider="openai", name="gpt-4o-mini"),
        params=SimpleNamespace(max_tokens=None, temperature=None),
    ),
)
REPLY = ProviderReply(text="hi", finish_reason="stop", usage=Usage())
TIMEOUTS = StreamTimeouts(first_token_seconds=0.2, idle_seconds=0.2)


class Slot:
    def __init__(self) -> None:
        self.entered = self.exited = 0

    @contextlib.asynccontextmanager
    async def __call__(self) -> AsyncIterator[None]:
        self.entered += 1
        try:
            yield
        finally:
            self.exited += 1


def stream_of(*events: StreamEvent | float) -> AsyncGenerator[StreamEvent, None]:
    """The events in order; a number is a pause of that many seconds."""

    async def events_() -> AsyncGenerator[StreamEvent, None]:
        for event in events:
            if isinstance(event, float):
                await asyncio.sleep(event)
            else:
                yield event

    return events_()


def call(slot: Slot, attempts: list[CallAttempt], *events: Any, limit: int = 1000) -> StreamCall:
    return StreamCall(
        PREPARED,
        TIMEOUTS,
        send=lambda: stream_of(*events),
        slot=slot(),
        max_answer_bytes=limit,
        attempts=attempts,
    )


async def test_a_whole_stream_is_recorded_once_and_its_slot_given_back_once() -> None:
    slot, attempts = Slot(), list[CallAttempt]()
    stream_call = call(slot, attempts, TextDelta("h"), TextDelta("i"), REPLY)
    opened = await stream_call.open()
    assert opened.first == TextDelta("h")
    assert [event async for event in opened.events] == [TextDelta("i"), REPLY]
    await opened.close()
    await stream_call.close()  # idempotent
    assert (slot.entered, slot.exited) == (1, 1)
    assert [a.outcome for a in attempts] == ["completed"]


async def test_no_first_event_in_time_is_a_timeout_recorded_once() -> None:
    slot, attempts = Slot(), list[CallAttempt]()
    with pytest.raises(UpstreamTimeout):
        await call(slot, attempts, 1.0, REPLY).open()
    assert (slot.entered, slot.exited) == (1, 1)
    assert [(a.outcome, a.error_type) for a in attempts] == [("failed", "upstream_timeout")]


async def test_a_reader_that_stops_early_cancels_the_call_once() -> None:
    slot, attempts = Slot(), list[CallAttempt]()
    opened = await call(slot, attempts, TextDelta("a"), TextDelta("b"), REPLY).open()
    await opened.close()  # the caller went away after the first event
    await opened.close()
    assert (slot.entered, slot.exited) == (1, 1)
    assert [a.outcome for a in attempts] == ["cancelled"]


async def test_an_answer_over_the_cap_ends_the_call() -> None:
    slot, attempts = Slot(), list[CallAttempt]()
    opened = await call(slot, attempts, TextDelta("a"), TextDelta("b" * 64), REPLY, limit=32).open()
    with pytest.raises(AnswerTooLarge):
        async for _ in opened.events:
            pass
    assert (slot.entered, slot.exited) == (1, 1)
    assert [(a.outcome, a.error_type) for a in attempts] == [("failed", "answer_too_large")]


async def test_an_answer_without_deltas_is_done_at_its_first_event() -> None:
    slot, attempts = Slot(), list[CallAttempt]()
    opened = await call(slot, attempts, REPLY).open()
    assert opened.first == REPLY
    assert (slot.entered, slot.exited) == (1, 1)
    assert [event async for event in opened.events] == []
    assert [a.outcome for a in attempts] == ["completed"]
