"""Every data shape that crosses a boundary, defined once and imported everywhere else."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelParams(_Frozen):
    """Sampling parameters; unset fields fall through to the pattern, then to configuration."""

    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    top_p: float | None = Field(default=None, gt=0, le=1)
    stop: list[str] | None = Field(default=None, max_length=8)
    seed: int | None = None

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


class RenderRequest(_Frozen):
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
            ]
        },
    )

    pattern_key: str = Field(
        min_length=1, max_length=200, description="Pattern name, e.g. `email/reply`."
    )
    variables: dict[str, Any] = Field(default_factory=dict)
    user_prompt: str = Field(description="Sent verbatim as the single user message.")
    model: str | None = Field(default=None, description="`provider/model`; overrides the policy.")
    params: ModelParams | None = None


class Message(_Frozen):
    role: Literal["system", "user", "assistant"]
    content: str


class RenderedPrompt(_Frozen):
    """Exactly what is sent upstream: the system text and the messages after it."""

    system: str
    messages: list[Message]


class Usage(_Frozen):
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None


FinishReason = Literal["stop", "length", "content_filter", "tool_calls", "other"]


class CompletionResponse(_Frozen):
    text: str
    provider: str
    model: str
    finish_reason: FinishReason
    usage: Usage


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


class ModelChoice(_Frozen):
    """The model the ModelSelectionPolicy picked and why."""

    model: str = Field(description="`provider/model`")
    provider: str
    name: str
    source: Literal["explicit", "hint", "default"]
    reason: str


class RenderResult(_Frozen):
    """A dry run: what would be sent, to which model, with which fingerprints."""

    prompt: RenderedPrompt
    params: ModelParams
    model_choice: ModelChoice
    provenance: Provenance


class CompletionEnvelope(_Frozen):
    """The prompt that was sent, the response, and the provenance that proves it."""

    request_id: str | None = None
    prompt: RenderedPrompt
    params: ModelParams
    response: CompletionResponse
    model_choice: ModelChoice
    provenance: Provenance


class PatternSummary(_Frozen):
    name: str
    description: str
    tags: list[str]
    model_hint: str | None
    content_hash: str


class PatternDetail(PatternSummary):
    base_path: str
    variables: dict[str, str | None] = Field(
        description="Declared variables and their descriptions."
    )
    required_variables: list[str]
    defaults: dict[str, Any]
    params: ModelParams


class ErrorInfo(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    message: str


class ErrorBody(BaseModel):
    """Every error answer: `{"error": {"type", "message", ...details}}`."""

    error: ErrorInfo
