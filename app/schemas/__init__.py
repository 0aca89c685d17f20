"""Every data shape that crosses a boundary, defined once and imported everywhere else."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    field_validator,
    model_validator,
)
from pydantic_core import to_json

from app.schemas.base import (
    INT32_MAX,
    INT32_MIN,
    JOB_ID,
    JSON_INTEGER,
    MAX_JSON_DEPTH,
    MODEL,
    SLUG,
    SNIPPET_LABEL,
    FrozenModel,
    InputModel,
    current_limits,
    is_snippet_label,
    unsafe_input,
)
from app.schemas.conversation import (
    CacheControl,
    ImagePart,
    Message,
    Part,
    ReasoningBlock,
    ResponseFormat,
    Role,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
    ToolSet,
)

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "JOB_ID",
    "JSON_INTEGER",
    "MAX_JSON_DEPTH",
    "MODEL",
    "SLUG",
    "CacheControl",
    "FrozenModel",
    "ImagePart",
    "InputModel",
    "Message",
    "Part",
    "ReasoningBlock",
    "ResponseFormat",
    "Role",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "ToolSet",
    "is_snippet_label",
    "unsafe_input",
]


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


class ModelParams(InputModel):
    """Sampling parameters; unset fields fall through to the pattern, then to configuration."""

    # A JSON number only, never `true` read as 1 nor a numeric string (StrictFloat still takes
    # an integer); the document says number/integer and the service keeps to it.
    temperature: StrictFloat | None = Field(default=None, ge=0, le=2)
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000), JSON_INTEGER] | None = None
    top_p: StrictFloat | None = Field(default=None, gt=0, le=1)
    stop: list[Annotated[str, Field(max_length=1000)]] | None = Field(default=None, max_length=8)
    seed: Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX), JSON_INTEGER] | None = None
    presence_penalty: StrictFloat | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: StrictFloat | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, Annotated[int, Field(ge=-100, le=100), JSON_INTEGER]] | None = Field(
        default=None,
        max_length=1024,
        description="Token id → bias (OpenAI's tokenizer; refused by other providers).",
    )
    reasoning_effort: ReasoningEffort | None = Field(
        default=None,
        description="OpenAI's reasoning_effort; Anthropic's output_config.effort; Ollama's think.",
    )
    verbosity: Literal["low", "medium", "high"] | None = None
    thinking: Literal["enabled", "adaptive", "disabled"] | None = Field(
        default=None,
        description="Anthropic's thinking mode (enabled: with `thinking_budget` tokens); "
        "Ollama's think on or off.",
    )
    thinking_budget: Annotated[int, Field(ge=1, le=1_000_000), JSON_INTEGER] | None = None

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


class TemplateRef(InputModel):
    """A database template: its active variant, or one exact version."""

    name: str = Field(pattern=SLUG)
    role: str = Field(pattern=SLUG)
    version: Annotated[int, Field(ge=1, le=INT32_MAX), JSON_INTEGER] | None = None


class RenderRequest(InputModel):
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
    continuation: list[Message] = Field(
        default_factory=list,
        max_length=10_000,
        description="Turns sent after the user prompt, in order: the assistant's tool calls, "
        "the tool results, a prefill. Proven by `provenance.continuation_hash` (prov-2).",
    )
    model: str | None = Field(
        default=None, pattern=MODEL, description="`provider/model`; overrides the policy."
    )
    params: ModelParams | None = None
    snippets: dict[str, str] = Field(
        default_factory=dict,
        description='Ordered label → snippet identifier, e.g. {"PERSONA": "nova"}.',
        json_schema_extra={"propertyNames": {"pattern": f"^{SNIPPET_LABEL.pattern}$"}},
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

    @model_validator(mode="before")
    @classmethod
    def _few_variables(cls, data: Any) -> Any:
        """Counted before anything walks them (runs before SafeInput's check)."""
        variables = data.get("variables") if isinstance(data, dict) else None
        limit = current_limits().max_variables
        if isinstance(variables, dict) and len(variables) > limit:
            raise ValueError(
                f"variables: {len(variables)} names, more than {limit} "
                "(GENAI_REQUEST__MAX_VARIABLES)"
            )
        return data

    @field_validator("variables")
    @classmethod
    def _small_variables(cls, variables: dict[str, Any]) -> dict[str, Any]:
        limit = current_limits().max_variables_bytes
        if variables and len(to_json(variables)) > limit:
            raise ValueError(
                f"the variables' JSON is larger than {limit} bytes "
                "(GENAI_REQUEST__MAX_VARIABLES_BYTES)"
            )
        return variables

    @model_validator(mode="after")
    def _one_source(self) -> RenderRequest:
        if (self.pattern_key is None) == (self.template is None):
            raise ValueError("give exactly one of pattern_key or template")
        return self


def _unset(value: Any) -> bool:
    return value is None


def _is_empty(value: Any) -> bool:
    return not value


class RenderedPrompt(FrozenModel):
    """Exactly what is sent upstream: the system text, the messages after it, and the tools and
    output format offered with them (left out when there are none)."""

    system: str
    messages: list[Message]
    system_folded: bool = Field(
        default=False,
        description="True when the model takes no system prompt and it was folded into the "
        "first user message.",
    )
    tools: ToolSet | None = Field(
        default=None, exclude_if=_unset, description="The tools offered and how they may be used."
    )
    response_format: ResponseFormat | None = Field(
        default=None,
        exclude_if=_unset,
        description="The JSON output the request asked for (OpenAI's `response_format`).",
    )


class Usage(FrozenModel):
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


class CompletionResponse(FrozenModel):
    text: str
    provider: str
    model: str
    finish_reason: FinishReason
    usage: Usage
    tool_calls: list[ToolCall] = Field(
        default_factory=list, exclude_if=_is_empty, description="The calls the model asked for."
    )
    reasoning: list[ReasoningBlock] = Field(
        default_factory=list,
        exclude_if=_is_empty,
        description="Provider-opaque reasoning to send back with the next turn (Anthropic).",
    )
    cost_usd: float | None = Field(
        default=None,
        description="What the call cost by the price table (every attempt that was billed); "
        "None when the model has no price.",
    )


class CallAttempt(FrozenModel):
    """One upstream call of a completion: retries and fallbacks each add one."""

    provider: str
    model: str
    outcome: Literal["completed", "failed", "cancelled"]
    error_type: str | None = Field(default=None, description="Why it failed, as `error.type`.")
    upstream_status: int | None = Field(default=None, description="The provider's HTTP status.")
    duration_ms: float


class Provenance(FrozenModel):
    """Fingerprints that prove what went in; build it only with `app.tracking.build_provenance`."""

    schema_version: Literal["prov-1", "prov-2"] = Field(
        default="prov-1",
        description="prov-2 adds `continuation_hash`; a request without a continuation is prov-1.",
    )
    pattern_name: str
    pattern_base_path: str
    pattern_content_hash: str
    variables_hash: str
    user_prompt_hash: str
    provider: str
    model: str
    snippet_ids: list[str] = Field(default_factory=list)
    continuation_hash: str | None = Field(
        default=None,
        exclude_if=_unset,
        description="prov-2: SHA-256 of the canonical JSON of the turns after the user prompt.",
    )


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


class ModelChoice(FrozenModel):
    """The model the ModelSelectionPolicy picked and why."""

    model: str = Field(description="`provider/model`")
    provider: str
    name: str
    source: ModelSource
    reason: str


class RenderResult(FrozenModel):
    """A dry run: what would be sent, to which model, with which fingerprints."""

    prompt: RenderedPrompt
    params: ModelParams
    model_choice: ModelChoice
    provenance: Provenance


class CompletionEnvelope(FrozenModel):
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


class PatternSummary(FrozenModel):
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

    Built by `app.api.error_body.error_body`; fields that do not apply are left out, not null.
    """

    model_config = ConfigDict(frozen=True)
    error: ErrorInfo


class TemplateCreate(InputModel):
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


class TemplateVersion(FrozenModel):
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


class RecordedParams(FrozenModel):
    """ModelParams as the audit record keeps them: its strings redacted (a `stop` may grow), so
    none of ModelParams' input bounds apply; a field an older version had is still shown.
    Only the parameters that were set are stored, and only those are shown."""

    model_config = ConfigDict(frozen=True, extra="allow")
    temperature: float | None = Field(default=None, exclude_if=_unset)
    max_tokens: int | None = Field(default=None, exclude_if=_unset)
    top_p: float | None = Field(default=None, exclude_if=_unset)
    stop: list[str] | None = Field(default=None, exclude_if=_unset)
    seed: int | None = Field(default=None, exclude_if=_unset)
    presence_penalty: float | None = Field(default=None, exclude_if=_unset)
    frequency_penalty: float | None = Field(default=None, exclude_if=_unset)
    logit_bias: dict[str, int] | None = Field(default=None, exclude_if=_unset)
    reasoning_effort: str | None = Field(default=None, exclude_if=_unset)
    verbosity: str | None = Field(default=None, exclude_if=_unset)
    thinking: str | None = Field(default=None, exclude_if=_unset)
    thinking_budget: int | None = Field(default=None, exclude_if=_unset)


class RecordedPrompt(FrozenModel):
    """RenderedPrompt as the audit record keeps it: every text redacted. Empty in a record
    written before its prompt was known (a row migrated from an old schema)."""

    system: str = ""
    messages: list[Message] = Field(default_factory=list)
    tools: ToolSet | None = Field(default=None, exclude_if=_unset)
    response_format: ResponseFormat | None = Field(default=None, exclude_if=_unset)


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
    cost_usd: float | None = None
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


class DriftReport(FrozenModel):
    checked_sources: int
    drifted: list[DriftFinding]


class SnippetIn(InputModel):
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


class InvalidValue(FrozenModel):
    """A value in the model's output that breaks the output_schema."""

    field: str = Field(description="JSON path of the value, `$` for the whole output.")
    provided: Any = Field(description="The value as given (long values cut short).")
    problem: str
    requirement: str


class MissingValue(FrozenModel):
    """A required field the model's output left out."""

    field: str = Field(description="JSON path of the absent field.")
    requirement: Literal["required"] = "required"


class ValidationIssues(FrozenModel):
    invalid: list[InvalidValue] = Field(default_factory=list)
    missing: list[MissingValue] = Field(default_factory=list)
    unknown: list[str] = Field(default_factory=list, description="Fields the schema forbids.")


class StructuredOutcome(FrozenModel):
    """How the response fared against the pattern's output_schema."""

    valid: bool
    attempts: int
    mode: Literal["native", "instructions"]
    issues: ValidationIssues | None = None


KeyScope = Literal["complete", "admin"]


class ApiKeyCreate(FrozenModel):
    """A new API key: `complete` renders, completes and reads the catalog; `admin` does all."""

    scope: KeyScope
    name: str = Field(
        default="unnamed", pattern=r"^[A-Za-z0-9][A-Za-z0-9 _.@-]{0,99}$", description="A label."
    )


class ApiKeyInfo(FrozenModel):
    """A stored key as anyone may see it: never the key itself, which is not kept."""

    id: str = Field(description="The public part of the key (`gsk_<id>_…`).")
    name: str
    scope: KeyScope
    created_at: dt.datetime
    last_used_at: dt.datetime | None
    revoked_at: dt.datetime | None


class ApiKeyCreated(ApiKeyInfo):
    key: str = Field(description="The key to send as `Authorization: Bearer …`; shown only once.")
