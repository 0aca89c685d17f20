"""The typed values that cross the storage seam: what is written to `jobs`, and what is read back.

The audit trail builds a `PendingJob` before the provider call and a `JobOutcome` after it; the
store turns them into rows (`as_row`) and never hands an ORM object back up: reads return a
`StoredJob` (the API's `JobRecord` plus the sealed replay inputs) or a `SourceUse`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Self

from pydantic import Field

from app.schemas import JobRecord, OutcomeStatus, SourceKind
from app.store.storable import storable


class _Row:
    """A frozen dataclass that is one row's worth of columns."""

    __slots__ = ()
    escaped_fields: tuple[str, ...] | None

    def as_row(self) -> dict[str, Any]:
        """Column name → value; no deep copy (the values are never mutated afterwards)."""
        row = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}  # type: ignore[arg-type]
        row["escaped_fields"] = list(self.escaped_fields) if self.escaped_fields else None
        return row

    def made_storable(self, *, also_escaped: Iterable[str] = ()) -> Self:
        """A copy every backend accepts (NUL and lone surrogates escaped), listing what was."""
        values = self.as_row()
        del values["escaped_fields"]
        stored, escaped = storable(values)
        merged = tuple(sorted({*also_escaped, *escaped}))
        return dataclasses.replace(self, **stored, escaped_fields=merged or None)  # type: ignore[type-var]


@dataclass(frozen=True, slots=True)
class PendingJob(_Row):
    """The record written before the provider is called; every caller-supplied text redacted."""

    id: str
    request_id: str | None
    created_at: dt.datetime
    source_kind: SourceKind
    source_name: str
    source_base_path: str
    template_id: int | None
    template_role: str | None
    template_version: int | None
    pattern_content_hash: str
    variables_hash: str
    user_prompt_hash: str
    provider: str
    model: str
    params: dict[str, Any]
    prompt_redacted: dict[str, Any]
    redaction_map: dict[str, str]
    snippet_ids: list[str]
    continuation_hash: str | None = None  # prov-2 only
    replay_inputs: bytes | None = None
    status: Literal["pending"] = "pending"
    escaped_fields: tuple[str, ...] | None = None


_FALLBACK_ONLY = ("provider", "model", "prompt_redacted")


@dataclass(frozen=True, slots=True)
class JobOutcome(_Row):
    """How a job ended: every outcome column, so all outcomes of a batch share one statement."""

    id: str
    status: OutcomeStatus
    completed_at: dt.datetime
    redaction_map: dict[str, str]
    error_type: str | None = None
    error_message: str | None = None
    finish_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None
    reasoning_tokens: int | None = None
    cost_usd: float | None = None
    streamed: bool = False
    latency_ms: float | None = None
    upstream_latency_ms: float | None = None
    response_redacted: str | None = None
    response_tool_calls: list[dict[str, Any]] | None = None  # arguments redacted
    attempts: list[dict[str, Any]] | None = None  # every upstream call
    output_attempts: list[dict[str, Any]] | None = None  # structured-output tries
    escaped_fields: tuple[str, ...] | None = None
    # Set only when a fallback model answered: the columns naming the model, and its prompt.
    provider: str | None = None
    model: str | None = None
    prompt_redacted: dict[str, Any] | None = None

    def as_row(self) -> dict[str, Any]:
        """Like every row, but the fallback-only columns are left out when unset, so a bulk
        update never blanks the pending record's model (rows are grouped by their keys)."""
        row = _Row.as_row(self)
        for name in _FALLBACK_ONLY:
            if row[name] is None:
                del row[name]
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> JobOutcome:
        """Back from a spooled row (missing optional columns read as None)."""
        names = {field.name for field in dataclasses.fields(cls)}
        values = {name: value for name, value in row.items() if name in names}
        if values.get("escaped_fields") is not None:
            values["escaped_fields"] = tuple(values["escaped_fields"])
        return cls(**values)


class StoredJob(JobRecord):
    """A job as read back: the public record plus the sealed replay inputs (never serialised)."""

    replay_inputs: bytes | None = Field(default=None, exclude=True)

    def record(self) -> JobRecord:
        """The API's view: no replay inputs, only whether they exist."""
        return JobRecord.model_validate(self.model_dump())

    def source(self) -> SourceUse:
        return SourceUse(
            source_kind=self.source_kind,
            source_name=self.source_name,
            source_base_path=self.source_base_path,
            template_id=self.template_id,
            template_version=self.template_version,
            pattern_content_hash=self.pattern_content_hash,
        )


@dataclass(frozen=True, slots=True)
class SourceUse:
    """One distinct source (pattern file, template version, fallback) seen in recent jobs.

    Field names match `StoredJob`'s, so drift checks read either the same way.
    """

    source_kind: SourceKind
    source_name: str
    source_base_path: str
    template_id: int | None
    template_version: int | None
    pattern_content_hash: str
    jobs: int = 1
