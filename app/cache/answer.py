"""CachedAnswer: what a cache hit gives back, and its byte form (orjson) for storage."""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.schemas import FinishReason, ReasoningBlock, StructuredOutcome, ToolCall, Usage


class UnreadableEntry(Exception):
    """Stored bytes that are not a CachedAnswer of this version: treated as a miss."""


class CachedAnswer(BaseModel):
    """One upstream answer, kept so an identical request needs no provider call.

    `provider` and `model` are the ones that answered (a fallback may have); `usage` and
    `cost_usd` are what the original call took, not what the hit costs (nothing). `stored_at`
    is when it was stored: an answer older than the TTL is never served (see `outlived`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    finish_reason: FinishReason
    usage: Usage
    parsed: Any | None = None
    validation: StructuredOutcome | None = None
    provider: str
    model: str
    cost_usd: float | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    reasoning: list[ReasoningBlock] = Field(default_factory=list)
    stored_at: dt.datetime = Field(default_factory=lambda: dt.datetime.now(dt.UTC))


def outlived(answer: CachedAnswer, ttl_seconds: float, now: dt.datetime) -> bool:
    """Stored longer ago than the TTL. Redis drops an entry when its TTL ends, so one still
    there was kept on purpose (PERSIST by anyone who can write to Redis) or stored under a
    longer TTL than is configured now: either way it must not answer."""
    return now - answer.stored_at > dt.timedelta(seconds=ttl_seconds)


def encode_answer(answer: CachedAnswer) -> bytes:
    """The answer as JSON bytes; TypeError (orjson's JSONEncodeError) when `parsed` holds a value
    JSON cannot carry losslessly, such as an integer beyond 64 bits."""
    return orjson.dumps(answer.model_dump(mode="json"))


def decode_answer(raw: bytes) -> CachedAnswer:
    try:
        return CachedAnswer.model_validate(orjson.loads(raw))
    except (orjson.JSONDecodeError, ValidationError) as exc:
        raise UnreadableEntry(type(exc).__name__) from None
