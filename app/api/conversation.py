"""A conversation from either chat door (OpenAI's or Anthropic's), as the service's request.

Both doors read their wire format into the gateway's conversation (`app/dialects/`) and hand it
here, so how a conversation becomes a `RenderRequest` is decided once:

- it is split at its last user message: the turns before it, the user prompt (that message's
  text, when it is plain text), and the continuation after it (tool calls, tool results, a
  prefill); a last user message with images or cache markers opens the continuation instead;
- `pattern/<name>` renders that pattern: the pattern owns the system prompt, examples, tools and
  output format, so the turns before the user prompt are not sent and the request may not bring
  tools or a format of its own; the continuation follows the pattern's prompt (an agent loop);
- any other model goes through the built-in `builtin:chat` source (version 2): the turns before
  the user prompt, the tools and the format are its variables, so `variables_hash` proves them.

The checks no schema can state (every tool result answers an earlier call, call ids are unique,
arguments are JSON objects, each turn's fields fit its role) are `conversation_problems`, in the
schemas, since the preparer applies them to every request too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from app.catalog.chat import CHAT_SOURCE, chat_variables
from app.errors import InvalidConversation, InvalidRequest, UnsupportedParameter
from app.schemas import (
    FieldProblem,
    Message,
    ModelParams,
    RenderRequest,
    ResponseFormat,
    ToolSet,
)

PATTERN_PREFIX = "pattern/"
# Fields a door accepted without effect, and params the chosen provider has no control for.
IGNORED_HEADER = "x-genai-ignored-params"
DROPPED_HEADER = "x-genai-dropped-params"


@dataclass(frozen=True, slots=True)
class DoorRequest:
    """What a door read from its wire format, in the gateway's terms."""

    model: str
    messages: Sequence[Message]
    params: ModelParams | None = None
    tools: ToolSet | None = None
    response_format: ResponseFormat | None = None
    variables: dict[str, Any] = field(default_factory=dict)
    stream: bool = False
    cache: bool | None = None


@dataclass(frozen=True, slots=True)
class Split:
    before: list[Message]
    user_prompt: str
    after: list[Message]


def split(messages: Sequence[Message]) -> Split:
    """The turns before the last user message, its text, and the turns after it."""
    last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
    if last is None:
        return Split([], "", list(messages))
    if messages[last].plain and messages[last].text:
        return Split(list(messages[:last]), messages[last].text, list(messages[last + 1 :]))
    return Split(list(messages[:last]), "", list(messages[last:]))


def to_render_request(door: DoorRequest) -> RenderRequest:
    parts = split(door.messages)
    common: dict[str, Any] = {
        "params": door.params,
        "stream": door.stream,
        "cache": door.cache,
        "continuation": parts.after,
    }
    if door.model.startswith(PATTERN_PREFIX):
        for name, given in (("tools", door.tools), ("response_format", door.response_format)):
            if given is not None:
                raise UnsupportedParameter(
                    name,
                    f"a pattern brings its own {name.replace('_', ' ')} (front-matter); send "
                    "the request to a `provider/model` to offer your own",
                )
        if not parts.user_prompt:
            raise InvalidConversation(
                "A pattern needs a user message of plain text as its user prompt; the "
                "conversation has none (images go to a `provider/model`).",
                param="messages",
            )
        # The pattern owns the system prompt and the turns before the user prompt.
        after = [turn for turn in parts.after if turn.role != "system"]
        return _validated(
            {
                **common,
                "continuation": after,
                "pattern_key": door.model.removeprefix(PATTERN_PREFIX),
                "variables": door.variables,
                "user_prompt": parts.user_prompt,
            }
        )
    if door.variables:
        raise UnsupportedParameter(
            "variables", "variables belong to a pattern: use model `pattern/<name>`"
        )
    variables = chat_variables(parts.before, tools=door.tools, response_format=door.response_format)
    return _validated(
        {
            **common,
            "pattern_key": CHAT_SOURCE,
            "model": door.model,
            "variables": variables,
            "user_prompt": parts.user_prompt,
        }
    )


def _validated(values: dict[str, Any]) -> RenderRequest:
    """The request, checked; a failure names the door's field, never a 500."""
    try:
        return RenderRequest.model_validate(values)
    except ValidationError as exc:
        raise InvalidRequest(
            [
                FieldProblem(loc=["body", *err["loc"]], msg=err["msg"], type=err["type"])
                for err in exc.errors(include_input=False)
            ]
        ) from None


def dropped_params(asked: ModelParams | None, sent: ModelParams) -> list[str]:
    """Params the caller set that were not sent: the provider has no such control (its
    descriptor's `ignored_params`); any other would have been refused."""
    if asked is None:
        return []
    return [
        name
        for name in type(asked).model_fields
        if getattr(asked, name) is not None and getattr(sent, name) is None
    ]
