"""The audit trail as callers read it: a job's record (its texts redacted), a replay's proof,
and the drift report."""

from __future__ import annotations

import datetime as dt
from typing import Literal, TypedDict

from pydantic import ConfigDict, Field

from app.schemas.base import FrozenModel, is_unset
from app.schemas.conversation import Message, ResponseFormat, ToolCall, ToolSet
from app.schemas.envelope import CallAttempt, RenderedPrompt, SnippetUse, ValidationIssues

# The one home of each record vocabulary: the catalog, the store, the CLI and the API import these.
SourceKind = Literal["pattern", "template", "fallback"]  # where a completion's prompt came from
OutcomeStatus = Literal["completed", "cached", "failed", "cancelled"]  # how a completion ended
# A record's whole life: written `pending`, then an outcome, or `interrupted` after a crash.
JobStatus = Literal["pending", OutcomeStatus, "interrupted"]


class RecordedParams(FrozenModel):
    """ModelParams as the audit record keeps them: its strings redacted (a `stop` may grow), so
    none of ModelParams' input bounds apply; a field an older version had is still shown.
    Only the parameters that were set are stored, and only those are shown."""

    model_config = ConfigDict(frozen=True, extra="allow")
    temperature: float | None = Field(default=None, exclude_if=is_unset)
    max_tokens: int | None = Field(default=None, exclude_if=is_unset)
    top_p: float | None = Field(default=None, exclude_if=is_unset)
    stop: list[str] | None = Field(default=None, exclude_if=is_unset)
    seed: int | None = Field(default=None, exclude_if=is_unset)
    presence_penalty: float | None = Field(default=None, exclude_if=is_unset)
    frequency_penalty: float | None = Field(default=None, exclude_if=is_unset)
    logit_bias: dict[str, int] | None = Field(default=None, exclude_if=is_unset)
    reasoning_effort: str | None = Field(default=None, exclude_if=is_unset)
    verbosity: str | None = Field(default=None, exclude_if=is_unset)
    thinking: str | None = Field(default=None, exclude_if=is_unset)
    thinking_budget: int | None = Field(default=None, exclude_if=is_unset)


class StoredParams(TypedDict, total=False):
    """ModelParams as the pending record writes them: only those set, strings redacted. A typed
    JSON document rather than a model, as it is built on every request (no validation, no copy);
    `RecordedParams` reads it back, and a test keeps the two in step."""

    temperature: float
    max_tokens: int
    top_p: float
    stop: list[str]
    seed: int
    presence_penalty: float
    frequency_penalty: float
    logit_bias: dict[str, int]
    reasoning_effort: str
    verbosity: str
    thinking: str
    thinking_budget: int


class RecordedPrompt(FrozenModel):
    """RenderedPrompt as the audit record keeps it: every text redacted. Empty in a record
    written before its prompt was known (a row migrated from an old schema)."""

    system: str = ""
    messages: list[Message] = Field(default_factory=list)
    tools: ToolSet | None = Field(default=None, exclude_if=is_unset)
    response_format: ResponseFormat | None = Field(default=None, exclude_if=is_unset)


class StructuredAttempt(FrozenModel):
    """One structured-output try as the audit record keeps it, its strings redacted."""

    attempt: int
    valid: bool
    issues: ValidationIssues
    response: str


class JobRecord(FrozenModel):
    """A stored audit record; prompt and response are redacted, replay inputs never shown."""

    id: str
    request_id: str | None
    created_at: dt.datetime
    completed_at: dt.datetime | None
    status: JobStatus
    error_type: str | None
    error_message: str | None
    source_kind: SourceKind
    source_name: str
    source_base_path: str
    template_id: int | None
    template_role: str | None
    template_version: int | None
    pattern_content_hash: str
    variables_hash: str
    user_prompt_hash: str
    continuation_hash: str | None = Field(
        default=None, description="prov-2: the hash of the turns after the user prompt."
    )
    provider: str
    model: str
    params: RecordedParams
    finish_reason: str | None
    input_tokens: int | None
    output_tokens: int | None
    cached_input_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_write_tokens: int | None = None
    cache_write_1h_tokens: int | None = None
    cost_usd: float | None = None
    cache_saved_usd: float | None = Field(
        default=None, description="What the provider's prompt cache saved on this call."
    )
    key_id: str | None = Field(default=None, description="The calling key's public id.")
    team: str | None = Field(default=None, description="The calling key's team.")
    chain_seq: int | None = Field(
        default=None,
        description="Its entry in the tamper-evident audit chain; null until the chainer links "
        "it (about a second after it finished).",
    )
    template_label: str | None = Field(
        default=None,
        description="The template label that chose `template_version` (a canary's version "
        "included); null for a pinned version or a pattern.",
    )
    streamed: bool = False
    latency_ms: float | None
    upstream_latency_ms: float | None
    prompt_redacted: RecordedPrompt
    response_redacted: str | None
    response_tool_calls: list[ToolCall] | None = Field(
        default=None, description="The tool calls the model answered with, arguments redacted."
    )
    redaction_map: dict[str, str]
    snippet_ids: list[str]
    snippet_versions: list[SnippetUse] | None = Field(
        default=None,
        description="The snippets used: version (null for a file) and text hash; null before "
        "snippets had versions.",
    )
    attempts: list[CallAttempt] | None = Field(
        default=None, description="Every upstream call in order (retries and fallbacks)."
    )
    output_attempts: list[StructuredAttempt] | None = Field(
        default=None, description="Structured-output attempts: outcome, issues, redacted answer."
    )
    escaped_fields: list[str] | None = Field(
        default=None,
        description="Fields whose NUL or lone-surrogate characters are stored as the text \\uXXXX.",
    )
    replay_available: bool


class HashCheck(FrozenModel):
    stored: str
    recomputed: str | None
    matches: bool


class ReplayResult(FrozenModel):
    """The rebuilt historical prompt and whether every fingerprint still matches."""

    job_id: str
    reproduced: bool
    hashes: dict[str, HashCheck]
    differing: list[str]
    prompt: RenderedPrompt | None = Field(
        description="The rebuilt prompt, redacted as stored unless `revealed`."
    )
    revealed: bool = Field(
        default=False, description="True only when `reveal=true` returned the raw prompt."
    )


class DriftFinding(FrozenModel):
    source_kind: str
    source_name: str
    template_version: int | None
    recorded_sha256: str
    current_sha256: str | None
    jobs: int
    reason: str
    recorded_version: int | None = Field(
        default=None, exclude_if=is_unset, description="A snippet: the version the job used."
    )
    current_version: int | None = Field(
        default=None, exclude_if=is_unset, description="A snippet: the version live now."
    )


class DriftReport(FrozenModel):
    checked_sources: int
    drifted: list[DriftFinding]


class JobSummary(FrozenModel):
    """One line of the job list: who called what, how it ended, what it cost; never the texts."""

    id: str
    created_at: dt.datetime
    status: JobStatus
    source_kind: SourceKind
    source_name: str = Field(description="The pattern or template the prompt came from.")
    template_version: int | None
    template_label: str | None
    provider: str
    model: str
    key_id: str | None
    team: str | None
    streamed: bool
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    latency_ms: float | None
    error_type: str | None


class JobPage(FrozenModel):
    """Newest first; pass `next_cursor` back as `cursor` for the next page (null: no more)."""

    jobs: list[JobSummary]
    next_cursor: str | None = None
