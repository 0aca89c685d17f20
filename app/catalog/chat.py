"""The built-in pass-through source `builtin:chat`: a conversation sent as the caller wrote it.

An OpenAI-style call (`POST /v1/chat/completions` with `model: provider/model`) names no pattern,
yet it must go through the same pipeline as every completion (audit record, provenance, cache,
fallbacks, limits, cost). So the conversation travels as an ordinary request for this source:

    variables = {"system": "<the system text>", "messages": [<earlier turns>]}
    user_prompt = <the last user message>

Its system text becomes the system prompt, the earlier turns the messages before the user prompt.
Provenance proves what was sent: `variables_hash` covers the system text and every earlier turn,
`user_prompt_hash` the last message, and the content hash names this definition (version 1).
A record replays like any other, since the resolver rebuilds the same source from the same inputs.
The name holds a `:` like the `template:` and `fallback:` provenance names, so it reads as built in;
it is answered before the pattern catalog is searched, so no pattern file can shadow it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from app.catalog.source import RenderedSource
from app.errors import InvalidRequest
from app.schemas import FieldProblem, Message
from app.tracking import sha256_hex

CHAT_SOURCE = "builtin:chat"
CHAT_BASE_PATH = "builtin"
# Describes how the inputs become the prompt; a change to that mapping is a new version (and hash).
_DEFINITION = (
    "builtin:chat v1: system prompt = variables.system; messages = variables.messages "
    "(user/assistant turns, in order), then the user prompt verbatim"
)
CHAT_SHA256 = sha256_hex(_DEFINITION.encode("utf-8"))


class _Turn(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    role: Literal["user", "assistant"]
    content: str


class _Conversation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    system: str = ""
    messages: list[_Turn] = []


def chat_source(variables: Mapping[str, Any], user_prompt: str) -> RenderedSource:
    """The pass-through source for a conversation; its variables are checked here, once, since
    `POST /v1/completions` may name `builtin:chat` directly."""
    try:
        conversation = _Conversation.model_validate(dict(variables))
    except ValidationError as exc:
        raise InvalidRequest(
            [
                FieldProblem(
                    loc=["body", "variables", *err["loc"]],
                    msg=f"{err['msg']} ({CHAT_SOURCE} takes `system`: a string and "
                    "`messages`: a list of {role: user|assistant, content: string})",
                    type=err["type"],
                )
                for err in exc.errors(include_input=False)
            ]
        ) from None
    turns = tuple(Message(role=turn.role, content=turn.content) for turn in conversation.messages)
    return RenderedSource(
        kind="pattern",
        name=CHAT_SOURCE,
        base_path=CHAT_BASE_PATH,
        content_hash=CHAT_SHA256,
        system=conversation.system,
        variables=conversation.model_dump(),
        user=user_prompt,
        examples=turns,
    )
