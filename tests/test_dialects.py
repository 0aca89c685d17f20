"""Each wire format translated there and back leaves a tool conversation unchanged (hypothesis).

The conversations are generated in the gateway's canonical form (one plain text part is a string,
tool arguments are compact JSON), with what each format can carry: OpenAI everything; Anthropic
everything but an image's `detail` and more than one leading system turn; Ollama text, inline
images and tool calls, whose ids it does not carry (they are compared by position).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.dialects import anthropic, ollama, openai
from app.schemas import (
    CacheControl,
    ImagePart,
    Message,
    ReasoningBlock,
    ResponseFormat,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
    ToolSet,
)
from app.schemas.conversation import arguments_text

text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=30)
words = st.text("abcdefghij _-", min_size=1, max_size=12).filter(str.strip)
name = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(name, inner, max_size=3),
    max_leaves=8,
)
arguments = st.dictionaries(name, json_value, max_size=4).map(arguments_text)
data_image = st.binary(min_size=1, max_size=12).map(
    lambda raw: "data:image/png;base64," + __import__("base64").b64encode(raw).decode()
)
marker = st.none() | st.just(CacheControl())


def _ids() -> Any:
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


@st.composite
def conversations(
    draw: st.DrawFn,
    *,
    images: bool,
    markers: bool,
    reasoning: bool,
    detail: bool,
    texts: bool,
    urls: bool = True,
) -> list[Message]:
    """A plausible tool conversation: a system turn, user turns (text, parts), assistant turns
    with tool calls, each answered by a tool result, in order."""
    messages: list[Message] = []
    if draw(st.booleans()):
        messages.append(Message(role="system", content=draw(words)))
    counter = itertools.count()
    for _ in range(draw(st.integers(1, 3))):
        parts: list[Any] = [
            TextPart(text=draw(words), cache_control=draw(marker) if markers else None)
        ]
        if texts and draw(st.booleans()):
            parts.append(TextPart(text=draw(words)))
        if images and draw(st.booleans()):
            parts.append(
                ImagePart(
                    url=draw(data_image | st.just("https://example.com/cat.png"))
                    if urls
                    else draw(data_image),
                    detail=draw(st.sampled_from([None, "low", "high"])) if detail else None,
                )
            )
        messages.append(Message(role="user", content=parts))
        calls = [
            ToolCall(id=f"call_{next(counter)}", name=draw(name), arguments=draw(arguments))
            for _ in range(draw(st.integers(0, 2)))
        ]
        blocks = []
        if reasoning and draw(st.booleans()):
            blocks = [ReasoningBlock(type="thinking", thinking=draw(words), signature="sig")]
        said = draw(st.just("") | words) if calls else draw(words)
        messages.append(Message(role="assistant", content=said, tool_calls=calls, reasoning=blocks))
        for call in calls:
            messages.append(Message(role="tool", tool_call_id=call.id, content=draw(words)))
    return messages


@settings(max_examples=200, deadline=None)
@given(conversations(images=True, markers=False, reasoning=True, detail=True, texts=True))
def test_openai_there_and_back(messages: list[Message]) -> None:
    wire = [openai.message_to_wire(m, with_reasoning=True) for m in messages]
    assert [openai.message_from_wire(json.loads(json.dumps(w))) for w in wire] == messages


@settings(max_examples=200, deadline=None)
@given(conversations(images=True, markers=True, reasoning=True, detail=False, texts=True))
def test_anthropic_there_and_back(messages: list[Message]) -> None:
    system, wire = anthropic.messages_to_wire("", messages)
    back = anthropic.messages_from_wire(system, json.loads(json.dumps(wire)))
    assert back == messages


def _without_ids(messages: list[Message]) -> list[dict[str, Any]]:
    """The conversation with every call id replaced by its position among the calls."""
    order: dict[str, int] = {}
    found = []
    for message in messages:
        data = message.model_dump(mode="json")
        for call in data.get("tool_calls", ()):
            call["id"] = order.setdefault(call["id"], len(order))
        if "tool_call_id" in data:
            data["tool_call_id"] = order.get(data["tool_call_id"])
        found.append(data)
    return found


@settings(max_examples=200, deadline=None)
@given(
    conversations(
        images=True, markers=False, reasoning=False, detail=False, texts=False, urls=False
    )
)
def test_ollama_there_and_back(messages: list[Message]) -> None:
    """Ollama carries inline images only (the preparer refuses image URLs for it) and no ids."""
    wire = ollama.messages_to_wire("", messages)
    back = ollama.messages_from_wire(json.loads(json.dumps(wire)), _ids())
    assert _without_ids(back) == _without_ids(messages)


@settings(max_examples=100, deadline=None)
@given(conversations(images=True, markers=False, reasoning=True, detail=False, texts=True))
def test_openai_to_anthropic_and_back_to_openai(messages: list[Message]) -> None:
    """What an OpenAI client sends, carried to Anthropic and read back, is what it sent."""
    client_wire = [openai.message_to_wire(m, with_reasoning=True) for m in messages]
    ours = [openai.message_from_wire(w) for w in client_wire]
    system, anthropic_wire = anthropic.messages_to_wire("", ours)
    again = anthropic.messages_from_wire(system, anthropic_wire)
    assert [openai.message_to_wire(m, with_reasoning=True) for m in again] == client_wire


tools = st.lists(
    st.builds(
        Tool,
        name=name,
        description=st.none() | words,
        parameters=st.just({"type": "object", "properties": {"q": {"type": "string"}}}),
        strict=st.none() | st.booleans(),
    ),
    min_size=1,
    max_size=4,
    unique_by=lambda tool: tool.name,
)


@st.composite
def toolsets(draw: st.DrawFn) -> ToolSet:
    offered = draw(tools)
    kind = draw(st.sampled_from([None, "auto", "none", "required", "tool"]))
    choice = None
    if kind is not None:
        choice = ToolChoice(type=kind, name=offered[0].name if kind == "tool" else None)
    parallel = draw(st.none() | st.booleans()) if choice is not None and kind != "none" else None
    return ToolSet(tools=offered, choice=choice, parallel=parallel)


@settings(max_examples=100, deadline=None)
@given(toolsets())
def test_tool_definitions_there_and_back(offered: ToolSet) -> None:
    wire = openai.toolset_to_wire(offered)
    assert (
        openai.toolset_from_wire(
            wire["tools"], wire.get("tool_choice"), wire.get("parallel_tool_calls")
        )
        == offered
    )
    wire = anthropic.toolset_to_wire(offered)
    assert anthropic.toolset_from_wire(wire["tools"], wire.get("tool_choice")) == offered


def test_an_openai_response_format_there_and_back() -> None:
    wanted = ResponseFormat(
        type="json_schema",
        name="person",
        json_schema={"type": "object", "properties": {"name": {"type": "string"}}},
        strict=True,
    )
    assert openai.response_format_from_wire(openai.response_format_to_wire(wanted)) == wanted
    assert openai.response_format_from_wire({"type": "text"}) is None


def test_tool_results_open_the_next_user_message_at_anthropic() -> None:
    calls = [ToolCall(id="a", name="f", arguments="{}"), ToolCall(id="b", name="f", arguments="{}")]
    system, wire = anthropic.messages_to_wire(
        "Be brief.",
        [
            Message(role="user", content="hi"),
            Message(role="assistant", content="", tool_calls=calls),
            Message(role="tool", tool_call_id="a", content="1"),
            Message(role="tool", tool_call_id="b", content="2", is_error=True),
            Message(role="user", content="and?"),
        ],
    )
    assert system == "Be brief."
    assert wire[1] == {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "a", "name": "f", "input": {}},
            {"type": "tool_use", "id": "b", "name": "f", "input": {}},
        ],
    }
    assert wire[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "1"},
            {"type": "tool_result", "tool_use_id": "b", "content": "2", "is_error": True},
            {"type": "text", "text": "and?"},
        ],
    }


def test_ollama_names_the_tool_a_result_answers() -> None:
    wire = ollama.messages_to_wire(
        "",
        [
            Message(
                role="assistant",
                tool_calls=[ToolCall(id="x", name="weather", arguments='{"c":"P"}')],
            ),
            Message(role="tool", tool_call_id="x", content="sunny"),
        ],
    )
    assert wire == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "weather", "arguments": {"c": "P"}}}],
        },
        {"role": "tool", "content": "sunny", "tool_name": "weather"},
    ]
