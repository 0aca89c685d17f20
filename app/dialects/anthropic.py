"""Anthropic Messages ⇄ the gateway's conversation (`app/schemas/conversation.py`).

The shapes differ more than OpenAI's: leading system turns become the top-level `system` (blocks
when a cache marker or several parts must survive), tool results are `tool_result` blocks at the
head of the next user message, tool calls are `tool_use` blocks whose `input` is an object (the
gateway keeps OpenAI's JSON text, written compactly when it comes from here), reasoning is
`thinking` / `redacted_thinking` blocks, and images are `url` or `base64` sources. What has no
counterpart is dropped on the way out (an image's `detail`) and refused on the way in (documents,
server tools), never silently turned into something else.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.schemas import (
    CacheControl,
    ImagePart,
    Message,
    Part,
    ReasoningBlock,
    ResponseFormat,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
    ToolSet,
)
from app.schemas.conversation import arguments_text, is_data_image

Wire = dict[str, Any]


def _marked(block: Wire, cache_control: CacheControl | None) -> Wire:
    if cache_control is not None:
        block["cache_control"] = cache_control.model_dump(mode="json")
    return block


# --- gateway → Anthropic ---------------------------------------------------------------------


def part_to_wire(part: Part) -> Wire:
    if isinstance(part, TextPart):
        return _marked({"type": "text", "text": part.text}, part.cache_control)
    if is_data_image(part.url):
        media_type, _, data = part.url.removeprefix("data:").partition(";base64,")
        source: Wire = {"type": "base64", "media_type": media_type, "data": data}
    else:
        source = {"type": "url", "url": part.url}
    return _marked({"type": "image", "source": source}, part.cache_control)


def _blocks(content: str | Sequence[Part]) -> list[Wire]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [part_to_wire(part) for part in content]


def _content(content: str | Sequence[Part]) -> str | list[Wire]:
    return content if isinstance(content, str) else _blocks(content)


def _tool_result(message: Message) -> Wire:
    block: Wire = {"type": "tool_result", "tool_use_id": message.tool_call_id}
    block["content"] = _content(message.content)
    if message.is_error is not None:
        block["is_error"] = message.is_error
    return _marked(block, message.cache_control)


def _assistant(message: Message) -> str | list[Wire]:
    if not (message.tool_calls or message.reasoning):
        return _content(message.content)
    blocks = [block.model_dump(mode="json") for block in message.reasoning]
    blocks += _blocks(message.content)
    blocks += [
        _marked(
            {"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments)},
            c.cache_control,
        )
        for c in message.tool_calls
    ]
    return blocks


def system_to_wire(system: str, leading: Iterable[Message]) -> str | list[Wire] | None:
    """The top-level `system`: the prompt's own text, then every leading system turn."""
    parts: list[Part] = [TextPart(text=system)] if system else []
    for message in leading:
        parts += message.parts
    if not parts:
        return None
    only = parts[0]
    if len(parts) == 1 and isinstance(only, TextPart) and only.cache_control is None:
        return only.text
    return [part_to_wire(part) for part in parts]


MAX_BREAKPOINTS = 4  # cache_control markers the Messages API takes in one request


def breakpoints(wire: Any) -> int:
    """How many cache markers a body (or a part of one) carries."""
    if isinstance(wire, dict):
        return ("cache_control" in wire) + sum(breakpoints(v) for v in wire.values())
    if isinstance(wire, list):
        return sum(breakpoints(v) for v in wire)
    return 0


def system_marked(system: str | list[Wire]) -> list[Wire]:
    """The top-level `system` with its first block (the prompt's own text) a cache breakpoint;
    a marker already there (the caller's, perhaps with a 1-hour ttl) is kept as it is."""
    text: Wire = {"type": "text", "text": system}
    blocks = [text] if isinstance(system, str) else list(system)
    if blocks and "cache_control" not in blocks[0]:
        blocks[0] = {**blocks[0], "cache_control": CacheControl().model_dump(mode="json")}
    return blocks


def messages_to_wire(system: str, messages: Sequence[Message]) -> tuple[Any, list[Wire]]:
    """(`system`, `messages`): tool results open the next user message, and a user turn that
    follows them joins it, as the Messages API requires."""
    start = 0
    while start < len(messages) and messages[start].role == "system":
        start += 1
    wire: list[Wire] = []
    open_results = False  # the last wire message holds tool results a user turn may join
    for message in messages[start:]:
        if message.role == "tool":
            if not open_results:
                wire.append({"role": "user", "content": []})
                open_results = True
            wire[-1]["content"].append(_tool_result(message))
            continue
        if message.role == "user" and open_results:
            wire[-1]["content"] += _blocks(message.content)
        elif message.role == "assistant":
            wire.append({"role": "assistant", "content": _assistant(message)})
        else:  # user, or a system turn in mid-conversation
            wire.append({"role": message.role, "content": _content(message.content)})
        open_results = False
    return system_to_wire(system, messages[:start]), wire


def tool_to_wire(tool: Tool) -> Wire:
    wire: Wire = {"name": tool.name}
    if tool.description is not None:
        wire["description"] = tool.description
    wire["input_schema"] = tool.parameters
    if tool.strict is not None:
        wire["strict"] = tool.strict
    return _marked(wire, tool.cache_control)


_CHOICE = {"auto": "auto", "none": "none", "required": "any", "tool": "tool"}


def tool_choice_to_wire(choice: ToolChoice | None, parallel: bool | None) -> Wire | None:
    """Anthropic keeps "one call at most" inside `tool_choice`."""
    if choice is None and parallel is None:
        return None
    wire: Wire = {"type": _CHOICE[choice.type if choice else "auto"]}
    if choice is not None and choice.name is not None:
        wire["name"] = choice.name
    if parallel is not None and wire["type"] != "none":
        wire["disable_parallel_tool_use"] = not parallel
    return wire


def toolset_to_wire(tools: ToolSet) -> Wire:
    wire: Wire = {"tools": [tool_to_wire(tool) for tool in tools.tools]}
    choice = tool_choice_to_wire(tools.choice, tools.parallel)
    if choice is not None:
        wire["tool_choice"] = choice
    return wire


def output_format_to_wire(response_format: ResponseFormat) -> Wire:
    """Native structured output (`output_config.format`): a JSON schema, always."""
    return {"type": "json_schema", "schema": response_format.schema_to_check}


# --- Anthropic → gateway ---------------------------------------------------------------------
# These read JSON already checked for shape (the door's request models, the adapter's reply
# models); a block kind the gateway cannot carry raises ValueError naming it.


def _cache_control(block: Mapping[str, Any]) -> CacheControl | None:
    marker = block.get("cache_control")
    return CacheControl.model_validate(marker) if marker else None


def part_from_wire(block: Mapping[str, Any]) -> Part:
    kind = block["type"]
    if kind == "text":
        return TextPart(text=block["text"], cache_control=_cache_control(block))
    if kind == "image":
        source = block["source"]
        if source["type"] == "base64":
            url = f"data:{source['media_type']};base64,{source['data']}"
        elif source["type"] == "url":
            url = source["url"]
        else:
            raise ValueError(f"an image source of type {source['type']!r} is not supported")
        return ImagePart(url=url, cache_control=_cache_control(block))
    raise ValueError(f"a {kind!r} block is not supported here")


def _parts(content: str | Sequence[Mapping[str, Any]]) -> str | list[Part]:
    if isinstance(content, str):
        return content
    return [part_from_wire(block) for block in content]


def _tool_message(block: Mapping[str, Any]) -> Message:
    return Message(
        role="tool",
        tool_call_id=block["tool_use_id"],
        content=_parts(block.get("content") or ""),
        is_error=block.get("is_error"),
        cache_control=_cache_control(block),
    )


def _user_messages(content: str | Sequence[Mapping[str, Any]]) -> list[Message]:
    """A user message's tool results become tool turns; the blocks around them user turns."""
    if isinstance(content, str):
        return [Message(role="user", content=content)]
    found: list[Message] = []
    run: list[Part] = []
    for block in content:
        if block["type"] == "tool_result":
            if run:
                found.append(Message(role="user", content=run))
                run = []
            found.append(_tool_message(block))
        else:
            run.append(part_from_wire(block))
    if run or not found:
        found.append(Message(role="user", content=run))
    return found


_REASONING_KEYS = ("type", "thinking", "signature", "data")


def assistant_from_wire(content: str | Sequence[Mapping[str, Any]]) -> Message:
    if isinstance(content, str):
        return Message(role="assistant", content=content)
    reasoning, parts, calls = [], [], []
    for block in content:
        kind = block["type"]
        if kind in ("thinking", "redacted_thinking"):
            kept = {key: block[key] for key in _REASONING_KEYS if key in block}
            reasoning.append(ReasoningBlock.model_validate(kept))
        elif kind == "tool_use":
            arguments = arguments_text(block["input"])
            marker = _cache_control(block)
            calls.append(
                ToolCall(
                    id=block["id"], name=block["name"], arguments=arguments, cache_control=marker
                )
            )
        else:
            parts.append(part_from_wire(block))
    return Message(role="assistant", content=parts, tool_calls=calls, reasoning=reasoning)


def messages_from_wire(
    system: str | Sequence[Mapping[str, Any]] | None, messages: Sequence[Mapping[str, Any]]
) -> list[Message]:
    """The conversation: the top-level system first (as one system turn), then every turn."""
    found: list[Message] = []
    if system:
        found.append(Message(role="system", content=_parts(system)))
    for message in messages:
        role, content = message["role"], message["content"]
        if role == "assistant":
            found.append(assistant_from_wire(content))
        elif role == "user":
            found += _user_messages(content)
        else:
            found.append(Message(role="system", content=_parts(content)))
    return found


def tool_from_wire(tool: Mapping[str, Any]) -> Tool:
    return Tool(
        name=tool["name"],
        description=tool.get("description"),
        parameters=tool["input_schema"],
        strict=tool.get("strict"),
        cache_control=_cache_control(tool),
    )


_CHOICE_BACK = {"auto": "auto", "none": "none", "any": "required", "tool": "tool"}


def toolset_from_wire(
    tools: Sequence[Mapping[str, Any]] | None, choice: Mapping[str, Any] | None
) -> ToolSet | None:
    if not tools:
        return None
    parallel = None
    if choice is not None and choice.get("disable_parallel_tool_use") is not None:
        parallel = not choice["disable_parallel_tool_use"]
    picked = None
    if choice is not None:
        picked = ToolChoice.model_validate(
            {"type": _CHOICE_BACK[choice["type"]], "name": choice.get("name")}
        )
    return ToolSet(tools=[tool_from_wire(tool) for tool in tools], choice=picked, parallel=parallel)
