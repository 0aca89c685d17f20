"""RequestFacts: the one record of what happened in one HTTP request.

The request middleware opens it; each pipeline step writes its part with one call (`chose`,
`opened_job`, `reached_upstream`, `answered`, `failed`). Everything that reports on the request
is rendered from it: every log line written while it runs (`add_request_facts`), the canonical
`request` line, the metric labels and the `x-genai-overhead-ms` header. So after a fallback they
all name the model that answered, never the one that failed. Preparation (also used by replay)
writes nothing here: the service records what preparation chose.

A mutable object in a context variable: a streamed body, sent from a task with a copy of the
context, still reaches the same record.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from contextvars import ContextVar
from dataclasses import dataclass, fields
from typing import Any

from app.schemas import Usage


@dataclass(slots=True)
class RequestFacts:
    request_id: str | None = None
    key_id: str | None = None
    pattern: str = ""  # the source: a pattern name or `template:<name>`
    provider: str = ""  # the model chosen, then the one that answered
    model: str = ""
    job_id: str | None = None
    cache: str | None = None  # hit, miss or off, once the cache was consulted
    upstream_ms: float | None = None  # until the answer (streamed: until the first event)
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    error_type: str | None = None

    @property
    def upstream_seconds(self) -> float:
        return (self.upstream_ms or 0.0) / 1000

    def chose(self, *, pattern: str, provider: str, model: str) -> None:
        """The source rendered and the model chosen for it."""
        self.pattern, self.provider, self.model = pattern, provider, model

    def opened_job(self, job_id: str, *, cache: str) -> None:
        self.job_id, self.cache = job_id, cache

    def reached_upstream(self, upstream_ms: float) -> None:
        """A stream's first event arrived (the overhead header is sent before the rest)."""
        self.upstream_ms = upstream_ms

    def answered(
        self, *, provider: str, model: str, upstream_ms: float, usage: Usage, cost: float | None
    ) -> None:
        """The model that answered (a fallback, perhaps) and what the answer cost."""
        self.provider, self.model, self.upstream_ms = provider, model, upstream_ms
        self.input_tokens, self.output_tokens = usage.input_tokens, usage.output_tokens
        self.cost_usd = cost

    def failed(self, error_type: str, *, upstream_ms: float | None = None) -> None:
        self.error_type = error_type
        if upstream_ms is not None:
            self.upstream_ms = upstream_ms

    def log_fields(self) -> dict[str, Any]:
        """The fields known so far (unset ones are left out of the line)."""
        found = {}
        for name in _FIELDS:
            value = getattr(self, name)
            if value is not None and value != "":
                found[name] = value
        return found


_FIELDS = tuple(field.name for field in fields(RequestFacts))
_current: ContextVar[RequestFacts | None] = ContextVar("genai_request_facts", default=None)


def open_request_facts(request_id: str) -> RequestFacts:
    """A fresh record for the request starting in this context (the middleware's call)."""
    facts = RequestFacts(request_id=request_id)
    _current.set(facts)
    return facts


def request_facts() -> RequestFacts:
    """The current request's record; a throwaway one outside a request (CLI, tests, replay)."""
    return _current.get() or RequestFacts()


def add_request_facts(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: every line written during a request carries its facts (a field the
    line sets itself wins)."""
    facts = _current.get()
    if facts is not None:
        for name, value in facts.log_fields().items():
            event.setdefault(name, value)
    return event
