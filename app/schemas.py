"""Every data shape that crosses a boundary, defined once and imported everywhere else."""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    model_validator,
)
from pydantic_core import PydanticCustomError

# Template names and roles appear in URLs, so they are kept to a safe alphabet.
SLUG = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
# Job ids are uuid4().hex.
JOB_ID = r"^[0-9a-f]{32}$"
# The characters a model may be written with (`ollama/hf.co/org/model:Q4_K_M`); the policy checks
# the `provider/name` shape itself, so a misspelt model answers `invalid_model` with the providers.
MODEL = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,254}$"
# A snippet label heads its block in the prompt (`PERSONA:`): one UPPER_SNAKE word. The one rule
# for labels a request composes and labels a pattern's front-matter expects.
_SNIPPET_LABEL = re.compile(r"[A-Z][A-Z0-9_]*")


def is_snippet_label(label: str) -> bool:
    return _SNIPPET_LABEL.fullmatch(label) is not None


# The largest value a 32-bit INTEGER column (template versions and ids) holds.
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
# Deeper JSON would only exhaust recursion in hashing, rendering or storing; no real input needs it.
MAX_JSON_DEPTH = 64

# A lone surrogate cannot be encoded as UTF-8 (so it can never be stored, hashed or sent), and
# PostgreSQL text cannot hold NUL: both are refused at the boundary, in every string and key.
_UNSAFE_TEXT = re.compile("[\x00\ud800-\udfff]")


def _text_problem(text: str) -> str | None:
    found = _UNSAFE_TEXT.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "contains a NUL character (U+0000)"
    return f"contains an unpaired surrogate (U+{ord(found.group()):04X})"


def unsafe_input(value: Any) -> str | None:
    """Why `value` (parsed JSON) cannot be accepted, naming where; None when it is fine.

    One walk over every string, dict key and number at any depth, without recursion (so the
    input's depth cannot exhaust the stack). The offending text itself is never echoed.
    """
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            top = where.split("[", 1)[0].split(".", 1)[0]
            return f"{top or 'body'}: nested deeper than {MAX_JSON_DEPTH} levels"
        if isinstance(item, str):
            problem = _text_problem(item)
            if problem:
                return f"{where or 'value'}: {problem}"
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str):
                    problem = _text_problem(key)
                    if problem:
                        return f"{where or 'body'}: a key {problem}"
                stack.append((child, f"{where}.{key}" if where else str(key), depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{where}[{i}]", depth + 1) for i, child in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            return f"{where or 'value'}: must be a finite number"
    return None


def _json_integer(value: Any) -> Any:
    """JSON Schema's integer: 3 and 3.0 are integers, `true` and "3" are not (pydantic's lax
    int takes both, its strict int refuses 3.0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


# For an integer a caller sends: a JSON number without a fraction, never a boolean or a string.
# Constraints go before it (`Annotated[int, Field(ge=1), JSON_INTEGER]`), or the document
# would show pydantic's `ge` instead of JSON Schema's `minimum`.
JSON_INTEGER = BeforeValidator(_json_integer)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Input(_Frozen):
    """A shape callers send: every string in it, at any depth, passes `unsafe_input` first."""

    @model_validator(mode="before")
    @classmethod
    def _safe_text(cls, data: Any) -> Any:
        problem = unsafe_input(data) if isinstance(data, dict) else None
        if problem:
            raise ValueError(problem[:300])
        return data


class ModelParams(_Input):
    """Sampling parameters; unset fields fall through to the pattern, then to configuration."""

    # A JSON number only, never `true` read as 1 nor a numeric string (StrictFloat still takes
    # an integer); the document says number/integer and the service keeps to it.
    temperature: StrictFloat | None = Field(default=None, ge=0, le=2)
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000), JSON_INTEGER] | None = None
    top_p: StrictFloat | None = Field(default=None, gt=0, le=1)
    stop: list[Annotated[str, Field(max_length=1000)]] | None = Field(default=None, max_length=8)
    seed: Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX), JSON_INTEGER] | None = None

    def overlay(self, other: ModelParams | None) -> ModelParams:
        """These params with every field `other` sets taken from `other`."""
        if other is None:
            return self
        return self.model_copy(update=other.model_dump(exclude_none=True))

    def only(self, fields: frozenset[str]) -> ModelParams:
        """These params without the ones a provider does not accept."""
        return self.model_copy(
            update={name: None for name in type(self).model_fields if name not in fields}
        )


class TemplateRef(_Input):
    """A database template: its active variant, or one exact version."""

    name: str = Field(pattern=SLUG)
    role: str = Field(pattern=SLUG)
    version: Annotated[int, Field(ge=1, le=INT32_MAX), JSON_INTEGER] | None = None


class RenderRequest(_Input):
    """What a caller asks for: a pattern, its variables and the verbatim user prompt."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "pattern_key": "summarize",
                    "variables": {"max_words": 60, "audience": "executives"},
                    "user_prompt": "Quarterly revenue rose 12% while costs fell 3%...",
                    "model": "openai/gpt-4o-mini",
                    "params": {"temperature": 0.2},
                }
            ],
            # The `_one_source` rule, stated so a validator or fuzzer knows it. if/then/else, not
            # oneOf: client generators read a oneOf as a union and lose the request model.
            "if": {"properties": {"pattern_key": {"type": "string"}}, "required": ["pattern_key"]},
            "then": {"properties": {"template": {"type": "null"}}},
            "else": {"properties": {"template": {"type": "object"}}, "required": ["template"]},
        },
    )

    pattern_key: str | None = Field(
        default=None, min_length=1, max_length=200, description="Pattern name, e.g. `email/reply`."
    )
    template: TemplateRef | None = Field(
        default=None, description="A database template instead of a pattern file."
    )
    variables: dict[str, Any] = Field(default_factory=dict)
    user_prompt: str = Field(description="Sent verbatim as the last user message.")
    model: str | None = Field(
        default=None, pattern=MODEL, description="`provider/model`; overrides the policy."
    )
    params: ModelParams | None = None
    snippets: dict[str, str] = Field(
        default_factory=dict,
        description='Ordered label → snippet identifier, e.g. {"PERSONA": "nova"}.',
        json_schema_extra={"propertyNames": {"pattern": f"^{_SNIPPET_LABEL.pattern}$"}},
    )
    instructions: str | None = Field(
        default=None, max_length=20_000, description="Extra user instructions for this request."
    )
    stream: StrictBool = Field(
        default=False,
        description="Answer with Server-Sent Events: `delta` events, then one `envelope` event "
        "(or an `error` event).",
    )
    cache: StrictBool | None = Field(
        default=None,
        description="true: use the response cache; false: bypass it; unset: the pattern's "
        "`cache` front-matter decides.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> RenderRequest:
        if (self.pattern_key is None) == (self.template is None):
            raise ValueError("give exactly one of pattern_key or template")
        return self


class Message(_Frozen):
    role: Literal["system", "user", "assistant"]
    content: str


class RenderedPrompt(_Frozen):
    """Exactly what is sent upstream: the system text and the messages after it."""

    system: str
    messages: list[Message]
    system_folded: bool = Field(
        default=False,
        description="True when the model takes no system prompt and it was folded into the "
        "first user message.",
    )


class Usage(_Frozen):
    """Token counts as the provider reported them; None where it reported nothing."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cached_input_tokens: int | None = Field(
        default=None, description="Input tokens served from the provider's prompt cache."
    )
    reasoning_tokens: int | None = Field(
        default=None, description="Output tokens spent on hidden reasoning (part of output_tokens)."
    )

    def plus(self, other: Usage) -> Usage:
        """Usage over several calls; unknown (None) stays unknown."""

        def add(a: int | None, b: int | None) -> int | None:
            return None if a is None or b is None else a + b

        def add_optional(a: int | None, b: int | None) -> int | None:
            return None if a is None and b is None else (a or 0) + (b or 0)

        return Usage(
            input_tokens=add(self.input_tokens, other.input_tokens),
            output_tokens=add(self.output_tokens, other.output_tokens),
            total_tokens=add(self.total_tokens, other.total_tokens),
            cached_input_tokens=add_optional(self.cached_input_tokens, other.cached_input_tokens),
            reasoning_tokens=add_optional(self.reasoning_tokens, other.reasoning_tokens),
        )


FinishReason = Literal["stop", "length", "content_filter", "tool_calls", "other"]


class CompletionResponse(_Frozen):
    text: str
    provider: str
    model: str
    finish_reason: FinishReason
    usage: Usage
    cost_usd: float | None = Field(
        default=None,
        description="What the call cost by the price table (every attempt that was billed); "
        "None when the model has no price.",
    )


class CallAttempt(_Frozen):
    """One upstream call of a completion: retries and fallbacks each add one."""

    provider: str
    model: str
    outcome: Literal["completed", "failed", "cancelled"]
    error_type: str | None = Field(default=None, description="Why it failed, as `error.type`.")
    upstream_status: int | None = Field(default=None, description="The provider's HTTP status.")
    duration_ms: float


class Provenance(_Frozen):
    """Fingerprints that prove what went in; build it only with `app.tracking.build_provenance`."""

    schema_version: Literal["prov-1"] = "prov-1"
    pattern_name: str
    pattern_base_path: str
    pattern_content_hash: str
    variables_hash: str
    user_prompt_hash: str
    provider: str
    model: str
    snippet_ids: list[str] = Field(default_factory=list)


ModelSource = Literal[
    "request",  # the request's `model`
    "cli_task",  # `--model-for TASK=M`
    "cli",  # `--model`
    "env_task",  # GENAI_MODEL_<TASK>
    "env",  # GENAI_MODEL
    "config_task",  # the config file's entry for the task
    "hint",  # the pattern's model_hint
    "config_default",  # the config file's (or GENAI_DEFAULT_MODEL's) default model
    "capability_fallback",  # the chosen model lacked a capability the request needs
    "fallback",  # the chosen model failed; the next model of the fallback chain answered
]


class ModelChoice(_Frozen):
    """The model the ModelSelectionPolicy picked and why."""

    model: str = Field(description="`provider/model`")
    provider: str
    name: str
    source: ModelSource
    reason: str


class RenderResult(_Frozen):
    """A dry run: what would be sent, to which model, with which fingerprints."""

    prompt: RenderedPrompt
    params: ModelParams
    model_choice: ModelChoice
    provenance: Provenance


class CompletionEnvelope(_Frozen):
    """The prompt that was sent, the response, and the provenance that proves it."""

    job_id: str = Field(description="The audit record: GET /v1/jobs/{job_id}.")
    request_id: str | None = None
    prompt: RenderedPrompt
    params: ModelParams
    response: CompletionResponse
    model_choice: ModelChoice
    provenance: Provenance
    parsed: Any | None = Field(
        default=None, description="The validated JSON, with an output_schema."
    )
    validation: StructuredOutcome | None = None
    attempts: list[CallAttempt] = Field(
        default_factory=list,
        description="Every upstream call in order (retries and fallbacks); empty on a cache hit.",
    )
    cache: Literal["hit", "miss", "off"] = Field(
        default="off",
        description="hit: answered from the response cache without a provider call; miss: "
        "called and stored; off: the cache was not used for this request.",
    )


class PatternSummary(_Frozen):
    name: str
    description: str
    tags: list[str]
    model_hint: str | None
    content_hash: str | None = Field(
        description="SHA-256 of the pattern file's bytes (plus its output_schema file's when the "
        "schema lives in a sibling file); null when the file could not be loaded."
    )
    valid: bool = Field(
        default=True,
        description="false when the file fails to load (unreadable, bad front-matter, or a body "
        "known not to compile); `problems` says why. Such a pattern is listed, not dropped.",
    )
    problems: list[str] = Field(
        default_factory=list, description="Why the pattern cannot be used; empty when valid."
    )


class PatternDetail(PatternSummary):
    content_hash: str = Field(
        description="SHA-256 of the pattern file's bytes (plus its output_schema file's when the "
        "schema lives in a sibling file)."
    )
    base_path: str
    variables: dict[str, str | None] = Field(
        description="Declared variables and their descriptions."
    )
    required_variables: list[str]
    defaults: dict[str, Any]
    params: ModelParams
    fallbacks: list[str] = Field(
        default_factory=list, description="The pattern's own fallback chain (provider/model)."
    )
    cache: bool = Field(
        default=False, description="Identical repeats are answered from the response cache."
    )


class FieldProblem(BaseModel):
    """One reason a request failed validation (its input is left out: it may hold secrets)."""

    model_config = ConfigDict(frozen=True)
    loc: list[str | int] = Field(description="Where: body, query or path, then the field path.")
    msg: str
    type: str = Field(description="pydantic's error code, e.g. missing or string_too_long.")


class ErrorInfo(BaseModel):
    """What went wrong. Errors add their own details (pattern, missing, provider, retry_after…)."""

    model_config = ConfigDict(frozen=True, extra="allow")
    type: str = Field(description="Stable code to branch on, e.g. missing_variables.")
    message: str = Field(description="What happened and what to do about it, for a person.")
    request_id: str | None = Field(
        default=None, description="The X-Request-ID of the answer, to find its log line."
    )
    job_id: str | None = Field(
        default=None, description="The audit record of the failed job (GET /v1/jobs/{job_id})."
    )
    errors: list[FieldProblem] | None = Field(
        default=None, description="invalid_request only: every field that failed validation."
    )


class ErrorBody(BaseModel):
    """Every error answer, from the API and the CLI: `{"error": {"type", "message", ...}}`.

    Built by `app.error_body.error_body`; fields that do not apply are left out, not null.
    """

    model_config = ConfigDict(frozen=True)
    error: ErrorInfo


class TemplateCreate(_Input):
    """A new version of a database template; its text is immutable once stored."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "name": "support-reply",
                    "role": "writer",
                    "template": "Answer as {{ brand }} support, in {{ language }}.",
                    "variables": ["brand", "language"],
                    "activate": True,
                }
            ]
        },
    )

    name: str = Field(pattern=SLUG)
    role: str = Field(pattern=SLUG)
    template: str = Field(min_length=1, max_length=100_000)
    variables: list[str] = Field(default_factory=list, description="The exact, ordered contract.")
    blueprint_schema: dict[str, Any] | None = None
    blueprint_instructions: str | None = None
    activate: StrictBool = Field(
        default=False, description="Make this the active variant; the first version always is."
    )


class TemplateVersion(_Frozen):
    id: int
    name: str
    role: str
    version: int
    template: str
    variables: list[str]
    active: bool
    checksum: str
    blueprint_schema: dict[str, Any] | None
    blueprint_instructions: str | None
    created_at: dt.datetime
    updated_at: dt.datetime


def _unset(value: Any) -> bool:
    return value is None


class RecordedParams(_Frozen):
    """ModelParams as the audit record keeps them: its strings redacted (a `stop` may grow), so
    none of ModelParams' input bounds apply; a field an older version had is still shown.
    Only the parameters that were set are stored, and only those are shown."""

    model_config = ConfigDict(frozen=True, extra="allow")
    temperature: float | None = Field(default=None, exclude_if=_unset)
    max_tokens: int | None = Field(default=None, exclude_if=_unset)
    top_p: float | None = Field(default=None, exclude_if=_unset)
    stop: list[str] | None = Field(default=None, exclude_if=_unset)
    seed: int | None = Field(default=None, exclude_if=_unset)


class RecordedPrompt(_Frozen):
    """RenderedPrompt as the audit record keeps it: every text redacted. Empty in a record
    written before its prompt was known (a row migrated from an old schema)."""

    system: str = ""
    messages: list[Message] = Field(default_factory=list)


class StructuredAttempt(_Frozen):
    """One structured-output try as the audit record keeps it, its strings redacted."""

    attempt: int
    valid: bool
    issues: ValidationIssues
    response: str


class JobRecord(_Frozen):
    """A stored audit record; prompt and response are redacted, replay inputs never shown."""

    id: str
    request_id: str | None
    created_at: dt.datetime
    completed_at: dt.datetime | None
    status: Literal["pending", "completed", "cached", "failed", "cancelled", "interrupted"]
    error_type: str | None
    error_message: str | None
    source_kind: Literal["pattern", "template", "fallback"]
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
    params: RecordedParams
    finish_reason: str | None
    input_tokens: int | None
    output_tokens: int | None
    cached_input_tokens: int | None = None
    reasoning_tokens: int | None = None
    cost_usd: float | None = None
    streamed: bool = False
    latency_ms: float | None
    upstream_latency_ms: float | None
    prompt_redacted: RecordedPrompt
    response_redacted: str | None
    redaction_map: dict[str, str]
    snippet_ids: list[str]
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


class HashCheck(_Frozen):
    stored: str
    recomputed: str | None
    matches: bool


class ReplayResult(_Frozen):
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


class DriftFinding(_Frozen):
    source_kind: str
    source_name: str
    template_version: int | None
    recorded_sha256: str
    current_sha256: str | None
    jobs: int
    reason: str


class DriftReport(_Frozen):
    checked_sources: int
    drifted: list[DriftFinding]


class SnippetIn(_Input):
    """A reusable prompt fragment (persona, tone, audience, style, layout); it has no versions."""

    identifier: str = Field(pattern=SLUG)
    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    text: str = Field(min_length=1, max_length=50_000)
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    active: StrictBool = True


class Snippet(SnippetIn):
    source: Literal["database", "file"]


class InvalidValue(_Frozen):
    """A value in the model's output that breaks the output_schema."""

    field: str = Field(description="JSON path of the value, `$` for the whole output.")
    provided: Any = Field(description="The value as given (long values cut short).")
    problem: str
    requirement: str


class MissingValue(_Frozen):
    """A required field the model's output left out."""

    field: str = Field(description="JSON path of the absent field.")
    requirement: Literal["required"] = "required"


class ValidationIssues(_Frozen):
    invalid: list[InvalidValue] = Field(default_factory=list)
    missing: list[MissingValue] = Field(default_factory=list)
    unknown: list[str] = Field(default_factory=list, description="Fields the schema forbids.")


class StructuredOutcome(_Frozen):
    """How the response fared against the pattern's output_schema."""

    valid: bool
    attempts: int
    mode: Literal["native", "instructions"]
    issues: ValidationIssues | None = None


KeyScope = Literal["complete", "admin"]


class ApiKeyCreate(_Frozen):
    """A new API key: `complete` renders, completes and reads the catalog; `admin` does all."""

    scope: KeyScope
    name: str = Field(
        default="unnamed", pattern=r"^[A-Za-z0-9][A-Za-z0-9 _.@-]{0,99}$", description="A label."
    )


class ApiKeyInfo(_Frozen):
    """A stored key as anyone may see it: never the key itself, which is not kept."""

    id: str = Field(description="The public part of the key (`gsk_<id>_…`).")
    name: str
    scope: KeyScope
    created_at: dt.datetime
    last_used_at: dt.datetime | None
    revoked_at: dt.datetime | None


class ApiKeyCreated(ApiKeyInfo):
    key: str = Field(description="The key to send as `Authorization: Bearer …`; shown only once.")
