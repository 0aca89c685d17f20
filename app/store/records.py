"""The typed values that cross the storage seam: what is written to `jobs`, and what is read back.

The audit trail builds a `PendingJob` before the provider call and a `JobOutcome` after it; the
store turns them into rows (`as_row`) and never hands an ORM object back up: reads return a
`StoredJob` (the API's `JobRecord` plus the sealed replay inputs) or a `SourceUse`.

The JSON documents in a row are typed with the shapes the API reads them back as (one home
each): upstream calls are `CallAttempt`s, tool calls `ToolCall`s, structured-output tries
`StructuredAttempt`s, parameters a `StoredParams`. `as_row` dumps them to exactly the JSON that
was stored before they were typed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, Field

from app.schemas import (
    CallAttempt,
    JobRecord,
    OutcomeStatus,
    SourceKind,
    StoredParams,
    StructuredAttempt,
    ToolCall,
)
from app.store.storable import storable


@dataclass(frozen=True, slots=True)
class _Models:
    """A JSON column that holds a list of `kind` models: how it is written and read back.

    Read back unvalidated unless `nested` (models inside models): the values were valid when
    built, and an escaped text (a NUL stored as `\\u0000`) may no longer match an input pattern.
    """

    kind: type[BaseModel]
    mode: Literal["python", "json"] = "python"  # as the column was dumped before it was typed
    nested: bool = False

    def dump(self, values: Sequence[BaseModel]) -> list[Any]:
        return [value.model_dump(mode=self.mode) for value in values]

    def load(self, values: list[Any]) -> tuple[Any, ...]:
        if self.nested:
            return tuple(self.kind.model_validate(value) for value in values)
        return tuple(self.kind.model_construct(**value) for value in values)


class _Row:
    """A frozen dataclass that is one row's worth of columns."""

    __slots__ = ()
    escaped_fields: tuple[str, ...] | None
    _TYPED: ClassVar[Mapping[str, _Models]] = {}  # the JSON columns that hold typed values

    def as_row(self) -> dict[str, Any]:
        """Column name → value; no deep copy (the values are never mutated afterwards)."""
        row = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}  # type: ignore[arg-type]
        for name, models in self._TYPED.items():  # none on the pending record's hot path
            if row[name] is not None:
                row[name] = models.dump(row[name])
        row["escaped_fields"] = list(self.escaped_fields) if self.escaped_fields else None
        return row

    @classmethod
    def _loaded(cls, name: str, value: Any) -> Any:
        """A column's value as the field holds it (typed JSON columns read back)."""
        models = cls._TYPED.get(name)
        return value if models is None or value is None else models.load(value)

    def made_storable(self, *, also_escaped: Iterable[str] = ()) -> Self:
        """A copy every backend accepts (NUL and lone surrogates escaped), listing what was.

        Typed values are scanned as they are: only one that needs escaping is dumped (and read
        back), so a clean record is never dumped twice.
        """
        values = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}  # type: ignore[arg-type]
        del values["escaped_fields"]
        stored, escaped = storable(values)
        for name in escaped:  # a typed value escaped comes back as JSON: typed again
            stored[name] = self._loaded(name, stored[name])
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
    params: StoredParams
    prompt_redacted: dict[str, Any]
    redaction_map: dict[str, str]
    snippet_ids: list[str]
    continuation_hash: str | None = None  # prov-2 only
    snippet_versions: list[dict[str, Any]] | None = None  # [{identifier, version, source, sha256}]
    replay_inputs: bytes | None = None
    key_id: str | None = None  # who asked (None with auth disabled)
    team: str | None = None
    template_label: str | None = None  # the label that picked the template version
    status: Literal["pending"] = "pending"
    escaped_fields: tuple[str, ...] | None = None


_FALLBACK_ONLY = ("provider", "model", "prompt_redacted")
_OUTCOME_TYPED: Mapping[str, _Models] = {
    "response_tool_calls": _Models(ToolCall, mode="json"),
    "attempts": _Models(CallAttempt),
    "output_attempts": _Models(StructuredAttempt, nested=True),
}


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
    cache_write_tokens: int | None = None
    cache_write_1h_tokens: int | None = None
    cost_usd: float | None = None
    cache_saved_usd: float | None = None
    streamed: bool = False
    latency_ms: float | None = None
    upstream_latency_ms: float | None = None
    response_redacted: str | None = None
    response_tool_calls: tuple[ToolCall, ...] | None = None  # arguments redacted
    attempts: tuple[CallAttempt, ...] | None = None  # every upstream call
    output_attempts: tuple[StructuredAttempt, ...] | None = None  # structured-output tries
    escaped_fields: tuple[str, ...] | None = None
    # Set only when a fallback model answered: the columns naming the model, and its prompt.
    provider: str | None = None
    model: str | None = None
    prompt_redacted: dict[str, Any] | None = None

    _TYPED: ClassVar[Mapping[str, _Models]] = _OUTCOME_TYPED

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
        values = {name: cls._loaded(name, value) for name, value in row.items() if name in names}
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
        return SourceUse(**{name: getattr(self, name) for name in SOURCE_COLUMNS})


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


SOURCE_COLUMNS = tuple(f.name for f in dataclasses.fields(SourceUse) if f.name != "jobs")
"""The columns that name a job's source, in `SourceUse` order (its one home)."""
