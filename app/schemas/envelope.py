"""What a completion answers: the prompt that was sent, the response, the model choice and why,
the provenance that proves it, every upstream attempt, and how structured output fared."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from app.schemas.base import FrozenModel, is_empty, is_unset
from app.schemas.conversation import Message, ReasoningBlock, ResponseFormat, ToolCall, ToolSet
from app.schemas.requests import ModelParams


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
        default=None, exclude_if=is_unset, description="The tools offered and how they may be used."
    )
    response_format: ResponseFormat | None = Field(
        default=None,
        exclude_if=is_unset,
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
    cache_write_tokens: int | None = Field(
        default=None,
        description="Input tokens written to the provider's prompt cache (part of input_tokens).",
    )
    cache_write_1h_tokens: int | None = Field(
        default=None,
        description="Of cache_write_tokens, those written for one hour (Anthropic bills them "
        "higher than 5-minute writes).",
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
            cache_write_tokens=add_optional(self.cache_write_tokens, other.cache_write_tokens),
            cache_write_1h_tokens=add_optional(
                self.cache_write_1h_tokens, other.cache_write_1h_tokens
            ),
        )


FinishReason = Literal["stop", "length", "content_filter", "tool_calls", "other"]


class CompletionResponse(FrozenModel):
    text: str
    provider: str
    model: str
    finish_reason: FinishReason
    usage: Usage
    tool_calls: list[ToolCall] = Field(
        default_factory=list, exclude_if=is_empty, description="The calls the model asked for."
    )
    reasoning: list[ReasoningBlock] = Field(
        default_factory=list,
        exclude_if=is_empty,
        description="Provider-opaque reasoning to send back with the next turn (Anthropic).",
    )
    cost_usd: float | None = Field(
        default=None,
        description="What the call cost by the price table (every attempt that was billed); "
        "None when the model has no price.",
    )
    cache_saved_usd: float | None = Field(
        default=None,
        description="What the provider's prompt cache saved: the cost with every prompt token "
        "at the input rate minus `cost_usd` (negative when cache writes outweighed the reads); "
        "None when the provider reported nothing about its cache or the model has no price.",
    )


class CallAttempt(FrozenModel):
    """One upstream call of a completion: retries and fallbacks each add one."""

    provider: str
    model: str
    outcome: Literal["completed", "failed", "cancelled"]
    error_type: str | None = Field(default=None, description="Why it failed, as `error.type`.")
    upstream_status: int | None = Field(default=None, description="The provider's HTTP status.")
    duration_ms: float


class SnippetUse(FrozenModel):
    """One snippet a job used, pinned: what replay rebuilds and drift detection compares."""

    identifier: str
    version: int | None = Field(description="The database version; null for a file snippet.")
    source: Literal["database", "file"]
    sha256: str = Field(description="`sha256:<hex>` of the snippet text used.")


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
    snippet_versions: list[SnippetUse] = Field(
        default_factory=list,
        description="The snippets used, in prompt order: version (database) and text hash.",
    )
    continuation_hash: str | None = Field(
        default=None,
        exclude_if=is_unset,
        description="prov-2: SHA-256 of the canonical JSON of the turns after the user prompt.",
    )
    template_label: str | None = Field(
        default=None,
        exclude_if=is_unset,
        description="The template label that chose the version in `pattern_name` (a canary's "
        "answering version included); absent for patterns and pinned versions.",
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


class Signature(FrozenModel):
    """An Ed25519 signature over the envelope's claims (docs/provenance-and-audit.md,
    "Verifying an envelope"): anyone with the public key can prove who answered what."""

    alg: Literal["Ed25519"] = "Ed25519"
    kid: str = Field(description="The signing key: first 16 hex of SHA-256 of its public key.")
    signed_at: str = Field(description="When it was signed (RFC 3339, UTC).")
    model: str = Field(description="`provider/model` that answered.")
    response_sha256: str = Field(
        description="`sha256:<hex>` of the canonical JSON of {text, tool_calls, parsed}."
    )
    value: str = Field(description="The signature: base64url, no padding.")


# What a door's answer carries beside `provenance` and `job_id`: both doors, one declaration.
DoorSignature = Annotated[
    Signature | None,
    Field(
        exclude_if=is_unset,
        description="The envelope's signature (docs/provenance-and-audit.md); absent only "
        "when signing is off.",
    ),
]
DoorParsed = Annotated[
    Any | None,
    Field(
        exclude_if=is_unset,
        description="The validated JSON with an output schema: part of the signed response.",
    ),
]


class SigningKey(FrozenModel):
    """A public key that verifies envelopes; `current` signs new ones."""

    kid: str
    alg: Literal["Ed25519"] = "Ed25519"
    public_key: str = Field(description="The raw 32-byte public key, base64url, no padding.")
    current: bool


class SigningKeys(FrozenModel):
    keys: list[SigningKey]


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
    signature: Signature | None = Field(
        default=None,
        exclude_if=is_unset,
        description="The signature over the provenance, response, job id, model and time; "
        "absent only with GENAI_SIGNING__ENABLED=false.",
    )
