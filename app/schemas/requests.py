"""What a caller sends to complete or render: a pattern or template, its variables, the user
prompt, and the sampling parameters."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StrictBool, StrictFloat, field_validator, model_validator
from pydantic_core import to_json

from app.schemas.base import (
    INT32_MAX,
    INT32_MIN,
    JSON_INTEGER,
    MODEL,
    SLUG,
    SNIPPET_LABEL,
    InputModel,
    current_limits,
)
from app.schemas.conversation import Message

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

    @staticmethod
    def effective(
        defaults: ModelParams, pattern: ModelParams | None, request: ModelParams | None = None
    ) -> ModelParams:
        """The one statement of the precedence: the request's params over the pattern's
        front-matter over the configured defaults, field by field."""
        return defaults.overlay(pattern).overlay(request)

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
    label: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$",
        description="The label that picks the version (default `production`); ignored when "
        "`version` pins one.",
    )


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
    label: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$",
        description="A template's label (default `production`): `template.label` wins over "
        "this, this over the `x-genai-label` header. Ignored for patterns.",
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
