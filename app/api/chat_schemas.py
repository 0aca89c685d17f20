"""The OpenAI Chat Completions wire format, as far as the gateway speaks it.

Requests: every field an OpenAI SDK may send is named here, so an unknown one (a typo, or a
feature the gateway lacks) is refused with 422 naming it, never ignored or a 500. Fields that
only label a request (`user`, `metadata`, `store`, `service_tier`, `parallel_tool_calls`) are
accepted and ignored; fields that would change the answer are accepted only at their neutral
value (`n: 1`, `tools: []`, `response_format: {"type": "text"}`…), see `UNSUPPORTED`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat

from app.schemas import INT32_MAX, INT32_MIN, JSON_INTEGER, Provenance

# A field that changes the answer → the values that leave it unchanged (as if it were not sent),
# and what to do instead. Compared with ==, so `0` also matches `0.0` and `False`.
UNSUPPORTED: dict[str, tuple[tuple[Any, ...], str]] = {
    "n": ((None, 1), "one choice per request: send n=1 or leave it out"),
    "logprobs": ((None, False), "log probabilities are not returned"),
    "top_logprobs": ((None, 0), "log probabilities are not returned"),
    "frequency_penalty": ((None, 0), "penalties are not forwarded: leave them out"),
    "presence_penalty": ((None, 0), "penalties are not forwarded: leave them out"),
    "logit_bias": ((None, {}), "logit bias is not forwarded: leave it out"),
    "tools": ((None, []), "tool calling is not supported"),
    "tool_choice": ((None, "none", "auto"), "tool calling is not supported"),
    "functions": ((None, []), "function calling is not supported"),
    "function_call": ((None, "none", "auto"), "function calling is not supported"),
    "response_format": (
        (None, {"type": "text"}),
        "structured output comes from a pattern with an output schema: use model `pattern/<name>`",
    ),
    "modalities": ((None, ["text"]), "only text is supported"),
    "audio": ((None,), "only text is supported"),
    "prediction": ((None,), "predicted outputs are not supported"),
    "reasoning_effort": ((None,), "reasoning effort is not forwarded: leave it out"),
    "web_search_options": ((None,), "web search is not supported"),
}


def unsupported_message(name: str) -> str:
    """Why an UNSUPPORTED field was refused, and the values it is accepted with."""
    neutral, why = UNSUPPORTED[name]
    accepted = ", ".join(
        "null" if value is None else orjson.dumps(value).decode() for value in neutral
    )
    return f"{why}; accepted only as {accepted} (or left out)"


def _exactly(value: Any) -> dict[str, Any]:
    """A JSON Schema that accepts only `value`, written with types SDK generators understand
    (openapi-python-client drops a model whose enum holds an object or an array)."""
    if value is None:
        return {"type": "null"}
    if isinstance(value, bool):
        return {"type": "boolean", "const": value}
    if isinstance(value, int):
        return {"type": "integer", "const": value}
    if isinstance(value, str):
        return {"type": "string", "const": value}
    if isinstance(value, list):  # the neutral lists hold at most one distinct item
        assert len({repr(item) for item in value}) <= 1
        return {
            "type": "array",
            # An empty list still needs an item schema for generators; none can occur.
            "items": _exactly(value[0]) if value else {"type": "string"},
            "minItems": len(value),
            "maxItems": len(value),
        }
    assert isinstance(value, dict)
    return {
        "type": "object",
        "properties": {key: _exactly(item) for key, item in value.items()},
        "required": list(value),
        "additionalProperties": False,
    }


def _neutral_only(name: str) -> Any:
    """An OpenAI field the gateway cannot honour, documented with its accepted values (so the
    document never calls a value valid that the route refuses)."""
    return Field(
        default=None,
        description=unsupported_message(name).capitalize() + ".",
        json_schema_extra={"anyOf": [_exactly(value) for value in UNSUPPORTED[name][0]]},
    )


_ONLY_NULL: dict[str, Any] = {"type": "null"}


# `provider/model` or `pattern/<name>`: something on both sides of the first `/`, and short
# enough for RenderRequest's `model` (255) and `pattern_key` (200) once split.
CHAT_MODEL = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,49}/[A-Za-z0-9._:/-]{1,200}$"


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextPart(_Wire):
    type: Literal["text"]
    text: str


class ChatMessage(_Wire):
    """One message; `developer` counts as `system`. Tool messages and tool calls are refused."""

    # `tool` and `function` are parsed so their refusal can say why, but not documented.
    role: Literal["system", "developer", "user", "assistant", "tool", "function"] = Field(
        json_schema_extra={"enum": ["system", "developer", "user", "assistant"]}
    )
    content: str | list[TextPart] | None = Field(
        default=None, description="Text, or a list of text parts (joined by newlines)."
    )
    name: str | None = Field(default=None, description="Accepted and ignored.")
    refusal: str | None = Field(default=None, description="Accepted and ignored.")
    tool_calls: Any = Field(
        default=None, description="Not supported: absent or null.", json_schema_extra=_ONLY_NULL
    )
    function_call: Any = Field(
        default=None, description="Not supported: absent or null.", json_schema_extra=_ONLY_NULL
    )
    tool_call_id: Any = Field(
        default=None, description="Not supported: absent or null.", json_schema_extra=_ONLY_NULL
    )
    audio: Any = Field(
        default=None, description="Not supported: absent or null.", json_schema_extra=_ONLY_NULL
    )

    @property
    def text(self) -> str:
        if isinstance(self.content, list):
            return "\n".join(part.text for part in self.content)
        return self.content or ""


class StreamOptions(_Wire):
    include_usage: StrictBool = False
    include_obfuscation: StrictBool | None = Field(default=None, description="Ignored.")


class ChatCompletionRequest(_Wire):
    """`POST /v1/chat/completions`; `variables` and `cache` are the gateway's own (the SDK's
    `extra_body`)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            # `variables` belong to a pattern: with a `provider/model` they must be empty.
            "if": {"properties": {"model": {"pattern": "^pattern/"}}},
            "else": {"properties": {"variables": {"maxProperties": 0}}},
            "examples": [
                {
                    "model": "openai/gpt-4o-mini",
                    "messages": [
                        {"role": "system", "content": "Answer in one sentence."},
                        {"role": "user", "content": "What is provenance?"},
                    ],
                },
                {
                    "model": "pattern/summarize",
                    "messages": [{"role": "user", "content": "Quarterly revenue rose 12%..."}],
                    "variables": {"max_words": 60, "audience": "executives"},
                },
            ],
        },
    )

    model: str = Field(
        pattern=CHAT_MODEL,
        description="`provider/model` sends the conversation as is; `pattern/<name>` renders "
        "that pattern with `variables` and the last user message as its user prompt.",
    )
    messages: list[ChatMessage] = Field(min_length=1, max_length=10_000)
    variables: dict[str, Any] = Field(
        default_factory=dict, description="A pattern's variables (only with `pattern/<name>`)."
    )
    cache: StrictBool | None = Field(
        default=None,
        description="true: use the response cache; false: bypass it; unset: the pattern decides "
        "(a direct call is not cached).",
    )
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    # Strict: a JSON boolean is not a number here (`"max_tokens": true` is refused, not 1). The
    # bounds are ModelParams' (app/schemas.py), so the document states what the pipeline takes.
    temperature: StrictFloat | None = Field(default=None, ge=0, le=2)
    top_p: StrictFloat | None = Field(default=None, gt=0, le=1)
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000), JSON_INTEGER] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1, le=1_000_000), JSON_INTEGER] | None = Field(
        default=None, description="Wins over `max_tokens` when both are sent."
    )
    stop: (
        Annotated[str, Field(max_length=1000)]
        | Annotated[list[Annotated[str, Field(max_length=1000)]], Field(max_length=8)]
        | None
    ) = None
    seed: Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX), JSON_INTEGER] | None = None
    # Labels only: accepted and ignored.
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: StrictBool | None = None
    service_tier: str | None = None
    parallel_tool_calls: StrictBool | None = None
    # Accepted only at their neutral value (see UNSUPPORTED).
    n: Any = _neutral_only("n")
    logprobs: Any = _neutral_only("logprobs")
    top_logprobs: Any = _neutral_only("top_logprobs")
    frequency_penalty: Any = _neutral_only("frequency_penalty")
    presence_penalty: Any = _neutral_only("presence_penalty")
    logit_bias: Any = _neutral_only("logit_bias")
    tools: Any = _neutral_only("tools")
    tool_choice: Any = _neutral_only("tool_choice")
    functions: Any = _neutral_only("functions")
    function_call: Any = _neutral_only("function_call")
    response_format: Any = _neutral_only("response_format")
    modalities: Any = _neutral_only("modalities")
    audio: Any = _neutral_only("audio")
    prediction: Any = _neutral_only("prediction")
    reasoning_effort: Any = _neutral_only("reasoning_effort")
    web_search_options: Any = _neutral_only("web_search_options")


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str
    refusal: None = None


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop", "length", "content_filter", "tool_calls"]
    logprobs: None = None


class PromptTokensDetails(BaseModel):
    cached_tokens: int | None = None


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int | None = None


class ChatUsage(BaseModel):
    """Token counts; 0 where the provider reported none (the OpenAI shape has no null)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None


class ChatCompletion(BaseModel):
    """OpenAI's `chat.completion`, plus the gateway's `provenance` and `job_id`."""

    id: str = Field(description="`chatcmpl-` + the request id.")
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str = Field(description="The `model` as requested; what answered is in provenance.")
    choices: list[Choice]
    usage: ChatUsage
    system_fingerprint: None = None
    provenance: Provenance
    job_id: str = Field(description="The audit record: GET /v1/jobs/{job_id}.")


class ChunkDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: ChunkDelta
    finish_reason: Literal["stop", "length", "content_filter", "tool_calls"] | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    """One `data:` event of a streamed answer; the one with `finish_reason` carries
    `provenance` and `job_id`."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: ChatUsage | None = None
    provenance: Provenance | None = None
    job_id: str | None = None


class ModelEntry(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(description="0: a configured model has no creation time here.")
    owned_by: str = Field(description="The provider, or `gateway` for a pattern.")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelEntry]
