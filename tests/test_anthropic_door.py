"""The official `anthropic` SDK, pointed at the gateway served by uvicorn on a loopback port,
drives `POST /v1/messages` (streamed and not) and `/v1/messages/count_tokens` against each
upstream provider: text, tools and tool results, thinking, images, structured output, cache
markers, errors in Anthropic's shape, and one audit record per completion whose hashes the
answer's provenance matches."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import pytest
import uvicorn
from anthropic import AsyncAnthropic
from anthropic.types import (
    InputJSONDelta,
    Message,
    RawContentBlockDeltaEvent,
    RawMessageDeltaEvent,
    RawMessageStreamEvent,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ToolUseBlock,
)
from openai import AsyncOpenAI

from app.audit.trail import AuditTrail
from app.catalog.chat import CHAT_HASHES
from app.config import LimitSettings, Settings
from app.main import create_app
from app.schemas import ApiKeyCreate, ToolCall
from app.schemas import Message as Turn
from app.tracking import continuation_hash, user_prompt_hash
from tests.fakes.provider_server import SIGNATURE, FakeCall, FakeProviderServer, Reply
from tests.support import settings_for

PROVIDER_MODELS = [
    ("openai", "openai/gpt-4o-mini"),
    ("anthropic", "anthropic/claude-sonnet-4-5"),
    ("ollama", "ollama/llama3.2"),
]
# What the model names resolve to, as provenance and the audit record state them.
RESOLVED = {
    "openai/gpt-4o-mini": ("openai", "gpt-4o-mini"),
    "anthropic/claude-sonnet-4-5": ("anthropic", "claude-sonnet-4-5"),
    "ollama/llama3.2": ("ollama", "llama3.2"),
    "claude-sonnet-4-5": ("anthropic", "claude-sonnet-4-5"),
    "gpt-4o-mini": ("openai", "gpt-4o-mini"),
    "llama3.2": ("ollama", "llama3.2"),
}
SYSTEM = "Answer in one sentence."
TURNS: list[Any] = [
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "Blue."},
    {"role": "user", "content": "Another one?"},
]
WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}
WEATHER_TOOL: Any = {
    "name": "get_weather",
    "description": "The forecast for a city.",
    "input_schema": WEATHER_SCHEMA,
}
WEATHER_FUNCTION: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The forecast for a city.",
        "parameters": WEATHER_SCHEMA,
    },
}
# A 1x1 transparent PNG.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
IMAGE_URL = "https://images.example.com/cat.jpg"
HOW_MANY_TOKENS = 1234


@dataclass
class Door:
    base_url: str
    key: str  # a `complete`-scope key, as an application holds
    sdk: AsyncAnthropic  # holds that key
    admin: httpx.AsyncClient  # reads the audit trail
    audit: AuditTrail  # counts the records


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[Door]:
    """The real app (lifespan included) under uvicorn on an ephemeral loopback port; the SDK's
    base URL is the server's root, since it appends /v1/messages itself."""
    app = create_app(settings)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_config=None, access_log=False))
    serve = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if serve.done():
                serve.result()  # start-up failed: raise its error
            await asyncio.sleep(0.01)
        runtime = app.state.runtime
        caller = await runtime.authenticator.create(ApiKeyCreate(scope="complete", name="sdk"))
        admin = await runtime.authenticator.create(ApiKeyCreate(scope="admin", name="admin"))
        sdk = AsyncAnthropic(base_url=base_url, api_key=caller.key, max_retries=0)
        async with (
            sdk,
            httpx.AsyncClient(
                base_url=base_url, headers={"Authorization": f"Bearer {admin.key}"}
            ) as http,
        ):
            yield Door(base_url, caller.key, sdk, http, runtime.audit)
    finally:
        server.should_exit = True
        await serve
        sock.close()
        shutil.rmtree(settings.data_dir, ignore_errors=True)


@pytest.fixture
async def door(fake: FakeProviderServer) -> AsyncIterator[Door]:
    async with serving(settings_for(fake)) as running:
        yield running


# --- reading answers -------------------------------------------------------------------------


def extra(model: Any) -> dict[str, Any]:
    """The fields the gateway adds beside Anthropic's (`provenance`, `job_id`)."""
    found: dict[str, Any] | None = model.model_extra
    return found or {}


def texts(message: Message) -> list[str]:
    return [block.text for block in message.content if isinstance(block, TextBlock)]


def tool_uses(message: Message) -> list[ToolUseBlock]:
    return [block for block in message.content if isinstance(block, ToolUseBlock)]


def kinds(message: Message) -> list[str]:
    return [block.type for block in message.content]


async def streamed(
    door: Door, **arguments: Any
) -> tuple[Message, dict[str, Any], list[RawMessageStreamEvent]]:
    """`messages.stream(...)`: the final message, the message_delta's gateway fields, and every
    event (the SDK's own events included)."""
    seen: list[Any] = []
    async with door.sdk.messages.stream(**arguments) as stream:
        async for event in stream:
            seen.append(event)
        final = await stream.get_final_message()
    deltas = [event for event in seen if isinstance(event, RawMessageDeltaEvent)]
    assert len(deltas) == 1
    return final, extra(deltas[0]), seen


async def raw_events(door: Door, **arguments: Any) -> list[RawMessageStreamEvent]:
    """`messages.create(stream=True)`: the raw events, pings left out by the SDK."""
    stream = await door.sdk.messages.create(**arguments, stream=True)
    return [event async for event in stream]


def text_of(events: Sequence[RawMessageStreamEvent]) -> str:
    return "".join(
        event.delta.text
        for event in events
        if isinstance(event, RawContentBlockDeltaEvent) and isinstance(event.delta, TextDelta)
    )


def final_delta(events: Sequence[RawMessageStreamEvent]) -> RawMessageDeltaEvent:
    (delta,) = [event for event in events if isinstance(event, RawMessageDeltaEvent)]
    return delta


def sse_events(body: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) for each Server-Sent Event of a body."""
    found: list[tuple[str, dict[str, Any]]] = []
    for frame in body.split("\n\n"):
        if not frame.strip():
            continue
        fields = dict(line.split(": ", 1) for line in frame.splitlines())
        found.append((fields["event"], json.loads(fields["data"])))
    return found


async def the_one_record(door: Door, job_id: str, provenance: dict[str, Any]) -> dict[str, Any]:
    """The completion's audit record, after checking it is the only one and that the answer's
    provenance proves what it recorded."""
    recorded = await door.audit.reader.recent(limit=10)
    assert [job.id for job in recorded] == [job_id]
    reply = await door.admin.get(f"/v1/jobs/{job_id}")
    assert reply.status_code == 200, reply.text
    record: dict[str, Any] = reply.json()
    assert record["source_name"] == provenance["pattern_name"] == "builtin:chat"
    assert provenance["pattern_content_hash"] in CHAT_HASHES
    for name in ("pattern_content_hash", "variables_hash", "user_prompt_hash", "provider", "model"):
        assert record[name] == provenance[name], name
    return record


async def no_record(door: Door) -> None:
    assert await door.audit.reader.recent(limit=10) == []


def error_of(raised: pytest.ExceptionInfo[anthropic.APIStatusError]) -> dict[str, Any]:
    """The `error` object of an Anthropic-shaped error body, after checking the shape."""
    body: Any = raised.value.body
    assert body["type"] == "error"
    assert body["request_id"]
    error: dict[str, Any] = body["error"]
    assert error["message"]
    return error


# --- plain text ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "model"),
    [*PROVIDER_MODELS, ("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-4o-mini")],
)
async def test_a_text_answer_comes_back_as_a_message_and_the_conversation_is_translated(
    door: Door, fake: FakeProviderServer, provider: str, model: str
) -> None:
    fake.script(provider, Reply.ok("Green.", input_tokens=21, output_tokens=3))

    message = await door.sdk.messages.create(
        model=model, max_tokens=50, system=SYSTEM, messages=TURNS
    )

    assert (message.type, message.role, message.model) == ("message", "assistant", model)
    assert message.id.startswith("msg_")
    assert kinds(message) == ["text"] and texts(message) == ["Green."]
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (21, 3)
    provenance = extra(message)["provenance"]
    assert (provenance["provider"], provenance["model"]) == RESOLVED[model]
    assert provenance["user_prompt_hash"] == user_prompt_hash("Another one?")
    assert provenance["schema_version"] == "prov-1"
    (call,) = fake.calls(provider)
    if provider == "anthropic":  # the system prompt stays top-level
        assert (call.body["system"], call.body["messages"]) == (SYSTEM, TURNS)
    else:  # a system message first
        assert "system" not in call.body
        assert call.body["messages"] == [{"role": "system", "content": SYSTEM}, *TURNS]
    record = await the_one_record(door, extra(message)["job_id"], provenance)
    assert (record["status"], record["streamed"]) == ("completed", False)
    assert record["params"]["max_tokens"] == 50


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
async def test_a_system_prompt_of_blocks_reaches_the_provider_translated(
    door: Door, fake: FakeProviderServer, provider: str, model: str
) -> None:
    blocks: list[Any] = [
        {"type": "text", "text": "Be brief."},
        {"type": "text", "text": "Use British spelling."},
    ]
    fake.script(provider, Reply.ok("Colour."))

    message = await door.sdk.messages.create(
        model=model, max_tokens=50, system=blocks, messages=[{"role": "user", "content": "Hi"}]
    )

    (call,) = fake.calls(provider)
    if provider == "anthropic":
        assert call.body["system"] == blocks
        assert call.body["messages"] == [{"role": "user", "content": "Hi"}]
    elif provider == "openai":
        assert call.body["messages"][0] == {"role": "system", "content": blocks}
    else:  # Ollama's content is one string
        assert call.body["messages"][0] == {
            "role": "system",
            "content": "Be brief.\nUse British spelling.",
        }
    await the_one_record(door, extra(message)["job_id"], extra(message)["provenance"])


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
async def test_a_streamed_text_answer_assembles_in_the_sdk_stream_helper(
    door: Door, fake: FakeProviderServer, provider: str, model: str
) -> None:
    fake.script(provider, Reply.ok(chunks=("Gre", "en", "."), input_tokens=21, output_tokens=3))

    final, gateway, _ = await streamed(
        door, model=model, max_tokens=50, system=SYSTEM, messages=TURNS
    )

    assert (final.role, final.model) == ("assistant", model)
    assert kinds(final) == ["text"] and texts(final) == ["Green."]
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (21, 3)
    provenance = gateway["provenance"]
    assert (provenance["provider"], provenance["model"]) == RESOLVED[model]
    assert provenance["user_prompt_hash"] == user_prompt_hash("Another one?")
    record = await the_one_record(door, gateway["job_id"], provenance)
    assert (record["status"], record["streamed"]) == ("completed", True)
    (call,) = fake.calls(provider)
    assert call.body["stream"] is True


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
async def test_raw_stream_events_carry_the_text_then_stop_reason_and_provenance(
    door: Door, fake: FakeProviderServer, provider: str, model: str
) -> None:
    fake.script(provider, Reply.ok(chunks=("Gre", "en", ".")))

    events = await raw_events(door, model=model, max_tokens=50, messages=TURNS)

    types = [event.type for event in events]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    assert text_of(events) == "Green."
    delta = final_delta(events)
    assert delta.delta.stop_reason == "end_turn"
    gateway = extra(delta)
    assert (gateway["provenance"]["provider"], gateway["provenance"]["model"]) == RESOLVED[model]
    record = await the_one_record(door, gateway["job_id"], gateway["provenance"])
    assert (record["status"], record["streamed"]) == ("completed", True)


@pytest.mark.parametrize(
    ("provider", "model", "input_tokens"),
    [
        # Anthropic's own input_tokens already exclude the cache reads: they come back as sent.
        ("anthropic", "anthropic/claude-sonnet-4-5", 20),
        # OpenAI's prompt_tokens include them: the door takes them out.
        ("openai", "openai/gpt-4o-mini", 15),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_usage_counts_cache_reads_beside_input_tokens_as_anthropic_does(
    door: Door,
    fake: FakeProviderServer,
    provider: str,
    model: str,
    input_tokens: int,
    stream: bool,
) -> None:
    fake.script(provider, Reply.ok("Green.", input_tokens=20, cached_input_tokens=5))
    arguments: dict[str, Any] = {"model": model, "max_tokens": 50, "messages": TURNS}

    if stream:
        message, _, _ = await streamed(door, **arguments)
    else:
        message = await door.sdk.messages.create(**arguments)

    assert message.usage.input_tokens == input_tokens
    assert message.usage.cache_read_input_tokens == 5
    (job,) = await door.audit.reader.recent(limit=10)
    assert (job.input_tokens, job.cached_input_tokens) == (input_tokens + 5, 5)


async def test_unknown_top_level_fields_are_ignored_and_named_in_a_header(
    door: Door, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.ok("Green."))

    raw = await door.sdk.messages.with_raw_response.create(
        model="openai/gpt-4o-mini",
        max_tokens=50,
        messages=TURNS,
        metadata={"user_id": "end-user-7"},
        extra_body={"frobnicate": True},
    )
    message = await raw.parse()

    assert raw.headers["x-genai-ignored-params"] == "metadata,frobnicate"
    assert texts(message) == ["Green."]
    (call,) = fake.calls("openai")
    assert "end-user-7" not in json.dumps(call.body)
    assert "frobnicate" not in json.dumps(call.body)


@pytest.mark.parametrize(
    ("provider", "native", "expected"),
    [
        ("anthropic", "max_tokens", "max_tokens"),
        ("anthropic", "refusal", "refusal"),
        ("openai", "length", "max_tokens"),
        ("openai", "content_filter", "refusal"),
        ("ollama", "length", "max_tokens"),
    ],
)
async def test_finish_reasons_come_back_as_anthropic_stop_reasons(
    door: Door, fake: FakeProviderServer, provider: str, native: str, expected: str
) -> None:
    fake.script(provider, Reply.ok("cut", finish=native), Reply.ok("cut", finish=native))
    model = dict(PROVIDER_MODELS)[provider]

    message = await door.sdk.messages.create(model=model, max_tokens=50, messages=TURNS)
    final, _, _ = await streamed(door, model=model, max_tokens=50, messages=TURNS)

    assert (message.stop_reason, final.stop_reason) == (expected, expected)
    assert texts(final) == ["cut"]
    assert len(await door.audit.reader.recent(limit=10)) == 2  # one record per completion


@pytest.mark.parametrize(
    ("provider", "model", "sent"),
    [
        (
            "openai",
            "openai/gpt-4o-mini",
            {"temperature": 0.2, "top_p": 0.9, "stop": ["END"], "max_completion_tokens": 50},
        ),
        # The Messages API has no sampling controls: the adapter sends only what it has.
        ("anthropic", "anthropic/claude-sonnet-4-5", {"stop_sequences": ["END"], "max_tokens": 50}),
        (
            "ollama",
            "ollama/llama3.2",
            {"options": {"temperature": 0.2, "top_p": 0.9, "stop": ["END"], "num_predict": 50}},
        ),
    ],
)
async def test_sampling_params_and_stop_sequences_reach_the_provider_in_its_names(
    door: Door, fake: FakeProviderServer, provider: str, model: str, sent: dict[str, Any]
) -> None:
    fake.script(provider, Reply.ok("Green."))

    message = await door.sdk.messages.create(
        model=model,
        max_tokens=50,
        messages=TURNS,
        stop_sequences=["END"],
        extra_body={"temperature": 0.2, "top_p": 0.9},
    )

    (call,) = fake.calls(provider)
    assert {name: call.body.get(name) for name in sent} == sent
    if provider == "anthropic":
        assert "temperature" not in call.body and "top_p" not in call.body
    await the_one_record(door, extra(message)["job_id"], extra(message)["provenance"])


async def test_a_pattern_renders_with_the_variables_and_the_last_user_message(
    door: Door, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.ok("- revenue up"), Reply.ok(chunks=("- revenue", " up")))
    arguments: dict[str, Any] = {
        "model": "pattern/summarize",
        "max_tokens": 200,
        "messages": [
            {"role": "user", "content": "ignored earlier turn"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "Revenue rose 12%."},
        ],
        "extra_body": {"variables": {"max_words": 42, "audience": "executives"}},
    }

    message = await door.sdk.messages.create(**arguments)
    final, gateway, _ = await streamed(door, **arguments)

    assert texts(message) == texts(final) == ["- revenue up"]
    provenance = extra(message)["provenance"]
    assert provenance["pattern_name"] == "summarize"
    assert provenance["user_prompt_hash"] == user_prompt_hash("Revenue rose 12%.")
    assert gateway["provenance"] == provenance  # same inputs, same proof
    first, _ = fake.calls("openai")
    assert "at most 42 words" in json.dumps(first.body)
    assert "ignored earlier turn" not in json.dumps(first.body)  # the pattern owns the turns
    record = (await door.admin.get(f"/v1/jobs/{extra(message)['job_id']}")).json()
    assert (record["source_name"], record["variables_hash"]) == (
        "summarize",
        provenance["variables_hash"],
    )


async def test_a_streamed_answer_from_the_cache_replays_its_blocks_as_events(
    door: Door, fake: FakeProviderServer
) -> None:
    fake.script(
        "anthropic",
        Reply.ok(
            "Checking.",
            thinking="Look it up.",
            tool_calls=(FakeCall("get_weather", {"city": "Oslo"}),),
        ),
    )
    arguments: dict[str, Any] = {
        "model": "anthropic/claude-sonnet-4-5",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": [WEATHER_TOOL],
        "extra_body": {"cache": True},
    }

    first = await door.sdk.messages.create(**arguments)
    again, gateway, _ = await streamed(door, **arguments)

    assert len(fake.calls("anthropic")) == 1
    assert [block.to_dict() for block in again.content] == [
        block.to_dict() for block in first.content
    ]
    assert kinds(again) == ["thinking", "text", "tool_use"]
    assert again.stop_reason == "tool_use"
    assert gateway["provenance"] == extra(first)["provenance"]
    record = (await door.admin.get(f"/v1/jobs/{gateway['job_id']}")).json()
    assert record["status"] == "cached"
    assert len(await door.audit.reader.recent(limit=10)) == 2  # one record per completion


# --- tools -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "choice", "tools", "sent_choice"),
    [
        ("openai", {"type": "any"}, [WEATHER_FUNCTION], "required"),
        (
            "openai",
            {"type": "tool", "name": "get_weather"},
            [WEATHER_FUNCTION],
            {"type": "function", "function": {"name": "get_weather"}},
        ),
        ("openai", {"type": "auto"}, [WEATHER_FUNCTION], "auto"),
        ("anthropic", {"type": "any"}, [WEATHER_TOOL], {"type": "any"}),
        (
            "anthropic",
            {"type": "tool", "name": "get_weather"},
            [WEATHER_TOOL],
            {"type": "tool", "name": "get_weather"},
        ),
        ("ollama", {"type": "auto"}, [WEATHER_FUNCTION], None),  # Ollama has no tool_choice
    ],
)
async def test_tools_and_tool_choice_reach_the_provider_in_its_shape(
    door: Door,
    fake: FakeProviderServer,
    provider: str,
    choice: Any,
    tools: list[Any],
    sent_choice: Any,
) -> None:
    fake.script(provider, Reply.ok("ok"))

    message = await door.sdk.messages.create(
        model=dict(PROVIDER_MODELS)[provider],
        max_tokens=50,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],
        tool_choice=choice,
    )

    (call,) = fake.calls(provider)
    assert call.body["tools"] == tools
    assert call.body.get("tool_choice") == sent_choice
    await the_one_record(door, extra(message)["job_id"], extra(message)["provenance"])


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
async def test_a_tool_call_comes_back_as_a_tool_use_block(
    door: Door, fake: FakeProviderServer, provider: str, model: str
) -> None:
    fake.script(provider, Reply.ok(tool_calls=(FakeCall("get_weather", {"city": "Paris"}),)))

    message = await door.sdk.messages.create(
        model=model,
        max_tokens=50,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],
    )

    assert message.stop_reason == "tool_use"
    (use,) = tool_uses(message)
    assert use.id and (use.name, use.input) == ("get_weather", {"city": "Paris"})
    record = await the_one_record(door, extra(message)["job_id"], extra(message)["provenance"])
    assert record["status"] == "completed"
    assert [(c["id"], c["name"]) for c in record["response_tool_calls"]] == [
        (use.id, "get_weather")
    ]


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
async def test_streamed_tool_input_arrives_as_input_json_deltas_the_sdk_assembles(
    door: Door, fake: FakeProviderServer, provider: str, model: str
) -> None:
    calls = (
        FakeCall("get_weather", {"city": "Paris", "days": 3}),
        FakeCall("get_weather", {"city": "Oslo"}),
    )
    fake.script(provider, Reply.ok(tool_calls=calls), Reply.ok(tool_calls=calls))
    arguments: dict[str, Any] = {
        "model": model,
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "Weather in Paris and Oslo?"}],
        "tools": [WEATHER_TOOL],
    }

    final, gateway, _ = await streamed(door, **arguments)
    events = await raw_events(door, **arguments)

    uses = tool_uses(final)
    assert [(use.name, use.input) for use in uses] == [
        ("get_weather", {"city": "Paris", "days": 3}),
        ("get_weather", {"city": "Oslo"}),
    ]
    assert len({use.id for use in uses}) == 2
    assert final.stop_reason == "tool_use"
    pieces: dict[int, str] = {}
    for event in events:
        if isinstance(event, RawContentBlockDeltaEvent) and isinstance(event.delta, InputJSONDelta):
            pieces[event.index] = pieces.get(event.index, "") + event.delta.partial_json
    assert [json.loads(text) for _, text in sorted(pieces.items())] == [
        {"city": "Paris", "days": 3},
        {"city": "Oslo"},
    ]
    assert final_delta(events).delta.stop_reason == "tool_use"
    first = (await door.admin.get(f"/v1/jobs/{gateway['job_id']}")).json()
    assert [c["id"] for c in first["response_tool_calls"]] == [use.id for use in uses]
    assert len(await door.audit.reader.recent(limit=10)) == 2  # one record per completion


# A second turn: the assistant's calls, then the results (one an error), in Anthropic's shape.
SECOND_TURN: list[Any] = [
    {"role": "user", "content": "Weather in Paris and Atlantis?"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking both."},
            {
                "type": "tool_use",
                "id": "toolu_01",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
            {
                "type": "tool_use",
                "id": "toolu_02",
                "name": "get_weather",
                "input": {"city": "Atlantis"},
            },
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "18C and sunny"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_02",
                "content": "no such city",
                "is_error": True,
            },
        ],
    },
]
SECOND_TURN_CONTINUATION = [
    Turn(
        role="assistant",
        content="Checking both.",
        tool_calls=[
            ToolCall(id="toolu_01", name="get_weather", arguments='{"city":"Paris"}'),
            ToolCall(id="toolu_02", name="get_weather", arguments='{"city":"Atlantis"}'),
        ],
    ),
    Turn(role="tool", tool_call_id="toolu_01", content="18C and sunny"),
    Turn(role="tool", tool_call_id="toolu_02", content="no such city", is_error=True),
]
SECOND_TURN_AT = {
    "openai": [
        {"role": "user", "content": "Weather in Paris and Atlantis?"},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {
                    "id": "toolu_01",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "toolu_02",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Atlantis"}'},
                },
            ],
        },
        {"role": "tool", "content": "18C and sunny", "tool_call_id": "toolu_01"},
        {"role": "tool", "content": "no such city", "tool_call_id": "toolu_02"},
    ],
    "ollama": [
        {"role": "user", "content": "Weather in Paris and Atlantis?"},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                {"function": {"name": "get_weather", "arguments": {"city": "Atlantis"}}},
            ],
        },
        {"role": "tool", "content": "18C and sunny", "tool_name": "get_weather"},
        {"role": "tool", "content": "no such city", "tool_name": "get_weather"},
    ],
    "anthropic": SECOND_TURN,  # as sent
}


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
@pytest.mark.parametrize("stream", [False, True])
async def test_tool_results_reach_each_provider_paired_with_their_calls_and_are_proven(
    door: Door, fake: FakeProviderServer, provider: str, model: str, stream: bool
) -> None:
    fake.script(provider, Reply.ok("Paris is sunny; Atlantis is unknown."))
    arguments: dict[str, Any] = {
        "model": model,
        "max_tokens": 50,
        "messages": SECOND_TURN,
        "tools": [WEATHER_TOOL],
    }

    if stream:
        message, gateway, _ = await streamed(door, **arguments)
    else:
        message = await door.sdk.messages.create(**arguments)
        gateway = extra(message)

    assert texts(message) == ["Paris is sunny; Atlantis is unknown."]
    (call,) = fake.calls(provider)
    assert call.body["messages"] == SECOND_TURN_AT[provider]
    provenance = gateway["provenance"]
    assert provenance["schema_version"] == "prov-2"
    assert provenance["user_prompt_hash"] == user_prompt_hash("Weather in Paris and Atlantis?")
    turns = [turn.model_dump(mode="json") for turn in SECOND_TURN_CONTINUATION]
    assert provenance["continuation_hash"] == continuation_hash(turns)
    record = await the_one_record(door, gateway["job_id"], provenance)
    assert (record["status"], record["streamed"]) == ("completed", stream)
    recorded = record["prompt_redacted"]["messages"]
    assert [call["id"] for call in recorded[-3]["tool_calls"]] == ["toolu_01", "toolu_02"]
    assert [(m["role"], m["tool_call_id"], m.get("is_error")) for m in recorded[-2:]] == [
        ("tool", "toolu_01", None),
        ("tool", "toolu_02", True),
    ]


# --- thinking --------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_a_thinking_block_comes_back_signed_and_returns_to_anthropic_unchanged(
    door: Door, fake: FakeProviderServer, stream: bool
) -> None:
    fake.script("anthropic", Reply.ok("Green.", thinking="The user wants a colour."))
    first: dict[str, Any] = {
        "model": "anthropic/claude-sonnet-4-5",
        "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "Name a colour."}],
    }

    if stream:
        message, gateway, _ = await streamed(door, **first)
    else:
        message = await door.sdk.messages.create(**first)
        gateway = extra(message)

    assert kinds(message) == ["thinking", "text"]
    thinking = message.content[0]
    assert isinstance(thinking, ThinkingBlock)
    assert (thinking.thinking, thinking.signature) == ("The user wants a colour.", SIGNATURE)
    await the_one_record(door, gateway["job_id"], gateway["provenance"])

    sent_back: list[Any] = [
        {
            "type": "thinking",
            "thinking": "The user wants a colour.",
            "signature": SIGNATURE,
        },
        {"type": "text", "text": "Green."},
    ]
    next_turn: dict[str, Any] = {
        **first,
        "messages": [
            *first["messages"],
            {"role": "assistant", "content": sent_back},
            {"role": "user", "content": "Another one?"},
        ],
    }
    await door.sdk.messages.create(**next_turn)
    _, second = fake.calls("anthropic")
    assert second.body["messages"][1] == {"role": "assistant", "content": sent_back}


async def test_a_thinking_block_is_not_sent_to_openai(door: Door, fake: FakeProviderServer) -> None:
    fake.script("openai", Reply.ok("Red."))
    messages: list[Any] = [
        {"role": "user", "content": "Name a colour."},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Pick one.", "signature": SIGNATURE},
                {"type": "text", "text": "Green."},
            ],
        },
        {"role": "user", "content": "Another one?"},
    ]

    await door.sdk.messages.create(model="openai/gpt-4o-mini", max_tokens=50, messages=messages)

    (call,) = fake.calls("openai")
    assert call.body["messages"][1] == {"role": "assistant", "content": "Green."}
    assert SIGNATURE not in json.dumps(call.body)


@pytest.mark.parametrize(
    "reasoning",
    [
        {"type": "thinking", "thinking": "I need the forecast.", "signature": SIGNATURE},
        {"type": "redacted_thinking", "data": "RW5jcnlwdGVkIHJlYXNvbmluZw=="},
    ],
)
async def test_reasoning_before_a_tool_call_returns_to_anthropic_unchanged_in_the_tool_loop(
    door: Door, fake: FakeProviderServer, reasoning: dict[str, Any]
) -> None:
    fake.script("anthropic", Reply.ok("Sunny."))
    messages: list[Any] = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                reasoning,
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "18C"}],
        },
    ]

    message = await door.sdk.messages.create(
        model="anthropic/claude-sonnet-4-5", max_tokens=50, messages=messages, tools=[WEATHER_TOOL]
    )

    (call,) = fake.calls("anthropic")
    assert call.body["messages"] == messages
    record = await the_one_record(door, extra(message)["job_id"], extra(message)["provenance"])
    assert record["prompt_redacted"]["messages"][-2]["reasoning"] == [reasoning]


async def test_a_streamed_thinking_text_and_tool_answer_is_anthropics_exact_event_sequence(
    door: Door, fake: FakeProviderServer
) -> None:
    fake.script(
        "anthropic",
        Reply.ok(
            chunks=("Check", "ing."),
            thinking="Look it up.",
            tool_calls=(FakeCall("get_weather", {"city": "Oslo"}),),
        ),
    )
    request = {
        "model": "anthropic/claude-sonnet-4-5",
        "max_tokens": 50,
        "stream": True,
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": [WEATHER_TOOL],
    }

    async with httpx.AsyncClient(base_url=door.base_url, headers={"x-api-key": door.key}) as http:
        reply = await http.post("/v1/messages", json=request)

    events = sse_events(reply.text)
    assert [(name, data.get("index")) for name, data in events] == [
        ("message_start", None),
        ("content_block_start", 0),
        ("ping", None),
        ("content_block_delta", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_delta", 1),
        ("content_block_delta", 1),
        ("content_block_stop", 1),
        ("content_block_start", 2),
        *[("content_block_delta", 2)] * 3,
        ("content_block_stop", 2),
        ("message_delta", None),
        ("message_stop", None),
    ]
    data = [payload for _, payload in events]
    assert data[1]["content_block"] == {"type": "thinking", "thinking": ""}
    assert [data[3]["delta"], data[4]["delta"]] == [
        {"type": "thinking_delta", "thinking": "Look it up."},
        {"type": "signature_delta", "signature": SIGNATURE},
    ]
    assert data[6]["content_block"] == {"type": "text", "text": ""}
    assert data[10]["content_block"]["type"] == "tool_use"
    finish = data[-2]
    assert finish["delta"]["stop_reason"] == "tool_use"
    await the_one_record(door, finish["job_id"], finish["provenance"])


@pytest.mark.parametrize(
    "thinking",
    [
        {"type": "enabled", "budget_tokens": 1024},
        {"type": "adaptive"},
        {"type": "disabled"},
    ],
)
async def test_a_thinking_config_reaches_anthropic_or_is_named_as_ignored(
    door: Door, fake: FakeProviderServer, thinking: Any
) -> None:
    fake.script("anthropic", Reply.ok("Green."))

    raw = await door.sdk.messages.with_raw_response.create(
        model="anthropic/claude-sonnet-4-5",
        max_tokens=2048,
        messages=TURNS,
        thinking=thinking,
    )

    (call,) = fake.calls("anthropic")
    ignored = raw.headers.get("x-genai-ignored-params", "").split(",")
    assert call.body.get("thinking") == thinking or (
        "thinking" in ignored and "output_config" not in call.body
    ), (call.body, ignored)


# --- images ----------------------------------------------------------------------------------

IMAGE_TURN: list[Any] = [
    {"type": "text", "text": "What is in these?"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    {"type": "image", "source": {"type": "url", "url": IMAGE_URL}},
]


@pytest.mark.parametrize(
    ("provider", "model", "expected"),
    [
        (
            "openai",
            "openai/gpt-4o-mini",
            [
                {"type": "text", "text": "What is in these?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "image_url", "image_url": {"url": IMAGE_URL}},
            ],
        ),
        ("anthropic", "anthropic/claude-sonnet-4-5", IMAGE_TURN),
    ],
)
async def test_images_reach_the_provider_as_its_image_parts(
    door: Door, fake: FakeProviderServer, provider: str, model: str, expected: list[Any]
) -> None:
    fake.script(provider, Reply.ok("A cat."))

    message = await door.sdk.messages.create(
        model=model, max_tokens=50, messages=[{"role": "user", "content": IMAGE_TURN}]
    )

    assert texts(message) == ["A cat."]
    (call,) = fake.calls(provider)
    assert call.body["messages"] == [{"role": "user", "content": expected}]
    await the_one_record(door, extra(message)["job_id"], extra(message)["provenance"])


async def test_an_ollama_vision_model_takes_an_inline_image_in_images(
    door: Door, fake: FakeProviderServer
) -> None:
    fake.script("ollama", Reply.ok("A pixel."))

    message = await door.sdk.messages.create(
        model="ollama/llava", max_tokens=50, messages=[{"role": "user", "content": IMAGE_TURN[:2]}]
    )

    assert texts(message) == ["A pixel."]
    (call,) = fake.calls("ollama")
    assert call.body["messages"] == [
        {"role": "user", "content": "What is in these?", "images": [PNG]}
    ]
    await the_one_record(door, extra(message)["job_id"], extra(message)["provenance"])


# --- structured output -----------------------------------------------------------------------

COLOUR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"colour": {"type": "string"}},
    "required": ["colour"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("provider", "model", "field", "expected"),
    [
        (
            "openai",
            "openai/gpt-4o-mini",
            "response_format",
            {"type": "json_schema", "json_schema": {"name": "output", "schema": COLOUR_SCHEMA}},
        ),
        (
            "anthropic",
            "anthropic/claude-sonnet-4-5",
            "output_config",
            {"format": {"type": "json_schema", "schema": COLOUR_SCHEMA}},
        ),
        ("ollama", "ollama/llama3.2", "format", COLOUR_SCHEMA),
    ],
)
async def test_structured_output_reaches_the_provider_as_its_format_and_comes_back_as_text(
    door: Door, fake: FakeProviderServer, provider: str, model: str, field: str, expected: Any
) -> None:
    fake.script(provider, Reply.ok('{"colour": "green"}'))

    message = await door.sdk.messages.create(
        model=model,
        max_tokens=50,
        messages=[{"role": "user", "content": "Name a colour."}],
        output_config={"format": {"type": "json_schema", "schema": COLOUR_SCHEMA}},
    )

    (text,) = texts(message)
    assert json.loads(text) == {"colour": "green"}
    (call,) = fake.calls(provider)
    assert call.body[field] == expected
    await the_one_record(door, extra(message)["job_id"], extra(message)["provenance"])


@pytest.mark.parametrize("stream", [False, True])
async def test_structured_output_through_anthropics_forced_tool_is_text_that_ends_the_turn(
    door: Door, fake: FakeProviderServer, stream: bool
) -> None:
    """Older Claude models take the schema as a forced tool (the capabilities file's
    `structured_output_via: tool`); the caller asked for no tool, so none may show."""
    fake.script("anthropic", Reply.ok('{"colour": "green"}'))
    arguments: dict[str, Any] = {
        "model": "anthropic/claude-sonnet-4-0",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "Name a colour."}],
        "output_config": {"format": {"type": "json_schema", "schema": COLOUR_SCHEMA}},
    }

    if stream:
        message, gateway, _ = await streamed(door, **arguments)
    else:
        message = await door.sdk.messages.create(**arguments)
        gateway = extra(message)

    (call,) = fake.calls("anthropic")
    assert call.body["tool_choice"]["type"] == "tool"  # the schema went as a forced tool
    assert kinds(message) == ["text"]
    assert json.loads(texts(message)[0]) == {"colour": "green"}
    await the_one_record(door, gateway["job_id"], gateway["provenance"])
    assert message.stop_reason == "end_turn"


# --- cache markers ---------------------------------------------------------------------------

MARK: dict[str, Any] = {"type": "ephemeral"}
MARK_1H: dict[str, Any] = {"type": "ephemeral", "ttl": "1h"}
MARKED_SYSTEM: list[Any] = [
    {"type": "text", "text": "A long, stable preamble.", "cache_control": MARK_1H},
    {"type": "text", "text": "Answer in one sentence."},
]
MARKED_MESSAGES: list[Any] = [
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "Blue."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "A long document.", "cache_control": MARK},
            {"type": "text", "text": "Another one?"},
        ],
    },
]
MARKED_TOOL: Any = {**WEATHER_TOOL, "cache_control": MARK}


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
async def test_cache_markers_reach_anthropic_unchanged_and_no_other_provider(
    door: Door, fake: FakeProviderServer, provider: str, model: str
) -> None:
    fake.script(provider, Reply.ok("Red."))

    message = await door.sdk.messages.create(
        model=model,
        max_tokens=50,
        system=MARKED_SYSTEM,
        messages=MARKED_MESSAGES,
        tools=[MARKED_TOOL],
    )

    assert texts(message) == ["Red."]
    (call,) = fake.calls(provider)
    if provider == "anthropic":
        assert call.body["system"] == MARKED_SYSTEM
        assert call.body["messages"] == MARKED_MESSAGES
        assert call.body["tools"] == [MARKED_TOOL]
    else:
        assert "cache_control" not in json.dumps(call.body)
        assert "A long document." in json.dumps(call.body)
    await the_one_record(door, extra(message)["job_id"], extra(message)["provenance"])


async def test_cache_markers_on_tool_use_and_tool_result_blocks_reach_anthropic_unchanged(
    door: Door, fake: FakeProviderServer
) -> None:
    fake.script("anthropic", Reply.ok("Sunny."))
    messages: list[Any] = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                    "cache_control": MARK,
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": "18C",
                    "cache_control": MARK,
                }
            ],
        },
    ]

    await door.sdk.messages.create(
        model="anthropic/claude-sonnet-4-5", max_tokens=50, messages=messages, tools=[WEATHER_TOOL]
    )

    (call,) = fake.calls("anthropic")
    assert call.body["messages"] == messages


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["nowhere/some-model", "mystery-model-9"])
async def test_an_unknown_model_is_a_not_found_error(door: Door, model: str) -> None:
    with pytest.raises(anthropic.NotFoundError) as raised:
        await door.sdk.messages.create(model=model, max_tokens=50, messages=TURNS)

    error = error_of(raised)
    assert (error["type"], error["gateway_type"]) == ("not_found_error", "invalid_model")
    assert raised.value.type == "not_found_error"
    await no_record(door)


async def test_a_model_the_provider_does_not_know_is_a_not_found_error(
    door: Door, fake: FakeProviderServer
) -> None:
    fake.script("anthropic", Reply.error(404, message="model: claude-nope"))

    with pytest.raises(anthropic.NotFoundError) as raised:
        await door.sdk.messages.create(model="anthropic/claude-nope", max_tokens=50, messages=TURNS)

    error = error_of(raised)
    assert (error["type"], error["gateway_type"]) == ("not_found_error", "upstream_rejected")
    (job,) = await door.audit.reader.recent(limit=10)
    assert (job.id, job.status) == (error["job_id"], "failed")


async def test_a_system_turn_inside_messages_stays_where_the_caller_put_it(
    door: Door, fake: FakeProviderServer
) -> None:
    """The Messages API takes `system` turns among the messages (the SDK's SystemMessageParam):
    one in mid-conversation is forwarded in place, not folded into the top-level system."""
    fake.script("anthropic", Reply.ok("Vert."))
    messages: list[Any] = [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "system", "content": "From now on, answer in French."},
        {"role": "user", "content": "Another one?"},
    ]

    await door.sdk.messages.create(
        model="anthropic/claude-sonnet-4-5", max_tokens=50, messages=messages
    )

    (call,) = fake.calls("anthropic")
    assert "system" not in call.body
    assert call.body["messages"] == messages


CLAUDE = "anthropic/claude-sonnet-4-5"
BAD_REQUESTS: list[tuple[str, str, dict[str, Any], str]] = [
    (
        "a server tool",
        CLAUDE,
        {"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]},
        "invalid_request",
    ),
    (
        "a document block",
        CLAUDE,
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "document",
                            "source": {"type": "text", "media_type": "text/plain", "data": "x"},
                        }
                    ],
                }
            ]
        },
        "invalid_request",
    ),
    (
        "a tool_result answering no earlier tool_use",
        "openai/gpt-4o-mini",
        {
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "Let me look."},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_99", "content": "18C"}
                    ],
                },
            ],
            "tools": [WEATHER_TOOL],
        },
        "invalid_conversation",
    ),
    (
        "a tool_choice without tools",
        CLAUDE,
        {"tool_choice": {"type": "any"}},
        "invalid_conversation",
    ),
    (
        "a tool_choice naming no offered tool",
        CLAUDE,
        {"tools": [WEATHER_TOOL], "tool_choice": {"type": "tool", "name": "get_time"}},
        "invalid_conversation",
    ),
    (
        "an image from the assistant",
        CLAUDE,
        {
            "messages": [
                {"role": "user", "content": "Draw."},
                {"role": "assistant", "content": IMAGE_TURN[1:2]},
                {"role": "user", "content": "Again."},
            ]
        },
        "invalid_conversation",
    ),
    (
        "an image to a model without image support",
        "ollama/llama3.2",
        {"messages": [{"role": "user", "content": IMAGE_TURN[:2]}]},
        "capability_missing",
    ),
    (
        "an image URL to Ollama, which takes inline images only",
        "ollama/llava",
        {"messages": [{"role": "user", "content": [IMAGE_TURN[0], IMAGE_TURN[2]]}]},
        "capability_missing",
    ),
    (
        "variables without a pattern",
        CLAUDE,
        {"extra_body": {"variables": {"a": 1}}},
        "unsupported_parameter",
    ),
    (
        "tools with a pattern",
        "pattern/summarize",
        {"tools": [WEATHER_TOOL]},
        "unsupported_parameter",
    ),
]


@pytest.mark.parametrize(
    ("model", "arguments", "gateway_type"),
    [
        pytest.param(model, arguments, kind, id=name)
        for name, model, arguments, kind in BAD_REQUESTS
    ],
)
async def test_a_request_the_gateway_cannot_serve_is_a_400_in_anthropics_shape(
    door: Door, fake: FakeProviderServer, model: str, arguments: dict[str, Any], gateway_type: str
) -> None:
    request: dict[str, Any] = {
        "model": model,
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "News today?"}],
        **arguments,
    }

    with pytest.raises(anthropic.BadRequestError) as raised:
        await door.sdk.messages.create(**request)

    assert raised.value.status_code == 400
    error = error_of(raised)
    assert (error["type"], error["gateway_type"]) == ("invalid_request_error", gateway_type)
    assert fake.requests == []  # refused before any provider call
    await no_record(door)


async def test_a_caller_without_a_valid_key_is_refused_in_anthropics_shape(door: Door) -> None:
    body: dict[str, Any] = {"model": "openai/gpt-4o-mini", "max_tokens": 50, "messages": TURNS}
    async with httpx.AsyncClient(base_url=door.base_url) as anonymous:
        missing = await anonymous.post("/v1/messages", json=body)
    stranger = AsyncAnthropic(
        base_url=door.base_url, api_key="gsk_0000000000000000_wrong", max_retries=0
    )
    async with stranger:
        with pytest.raises(anthropic.AuthenticationError) as raised:
            await stranger.messages.create(**body)

    assert missing.status_code == 401
    assert missing.json()["type"] == "error"
    assert missing.json()["error"]["type"] == "authentication_error"
    assert error_of(raised)["type"] == "authentication_error"
    await no_record(door)


@pytest.mark.parametrize("header", ["x-api-key", "authorization"])
async def test_the_sdk_gets_in_with_its_key_as_x_api_key_or_a_bearer_token(
    door: Door, fake: FakeProviderServer, header: str
) -> None:
    fake.script("openai", Reply.ok("Green."))
    value = door.key if header == "x-api-key" else f"Bearer {door.key}"
    sdk = AsyncAnthropic(base_url=door.base_url, api_key=None, default_headers={header: value})

    async with sdk:
        raw = await sdk.messages.with_raw_response.create(
            model="openai/gpt-4o-mini", max_tokens=50, messages=TURNS
        )
    message = await raw.parse()

    assert raw.http_request.headers[header] == value  # only this one credential went out
    assert ("authorization" in raw.http_request.headers) == (header == "authorization")
    assert texts(message) == ["Green."]
    await the_one_record(door, extra(message)["job_id"], extra(message)["provenance"])


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
async def test_an_upstream_rate_limit_is_a_rate_limit_error_and_a_failed_record(
    door: Door, fake: FakeProviderServer, provider: str, model: str
) -> None:
    fake.script(provider, *[Reply.error(429, headers={"retry-after": "0"})] * 3)

    with pytest.raises(anthropic.RateLimitError) as raised:
        await door.sdk.messages.create(model=model, max_tokens=50, messages=TURNS)

    error = error_of(raised)
    assert (error["type"], error["gateway_type"]) == ("rate_limit_error", "rate_limited")
    (job,) = await door.audit.reader.recent(limit=10)
    assert error["job_id"] == job.id
    assert (job.status, job.error_type) == ("failed", "rate_limited")


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
@pytest.mark.parametrize(
    ("kind", "gateway_type"),
    [("cut", "stream_interrupted"), ("stream_error", "upstream_error")],
)
async def test_a_failure_mid_stream_raises_in_the_sdk_and_the_job_is_failed(
    door: Door, fake: FakeProviderServer, provider: str, model: str, kind: str, gateway_type: str
) -> None:
    chunks = ("one ", "two ", "three")
    failing = (
        Reply.cut(after=2, chunks=chunks)
        if kind == "cut"
        else Reply.stream_error(after=2, status=500, chunks=chunks)
    )
    fake.script(provider, failing)
    received: list[str] = []

    with pytest.raises(anthropic.APIStatusError) as raised:
        async with door.sdk.messages.stream(model=model, max_tokens=50, messages=TURNS) as stream:
            async for text in stream.text_stream:
                received.append(text)

    assert "".join(received) == "one two "
    assert raised.value.status_code == 200  # the status was sent before the failure
    error = error_of(raised)
    assert (error["type"], error["gateway_type"]) == ("api_error", gateway_type)
    (job,) = await door.audit.reader.recent(limit=10)
    assert error["job_id"] == job.id
    assert (job.status, job.error_type) == ("failed", gateway_type)


# --- count_tokens ----------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["anthropic/claude-sonnet-4-5", "claude-sonnet-4-5"])
async def test_count_tokens_asks_anthropic_to_count_the_translated_request(
    door: Door, fake: FakeProviderServer, model: str
) -> None:
    fake.script("anthropic", Reply.ok(input_tokens=HOW_MANY_TOKENS))

    counted = await door.sdk.messages.count_tokens(
        model=model, system=SYSTEM, messages=TURNS, tools=[WEATHER_TOOL]
    )

    assert counted.input_tokens == HOW_MANY_TOKENS
    (call,) = fake.calls("anthropic")
    assert call.path == "/v1/messages/count_tokens"
    assert call.body["model"] == "claude-sonnet-4-5"
    assert (call.body["system"], call.body["messages"]) == (SYSTEM, TURNS)
    assert call.body["tools"] == [WEATHER_TOOL]
    assert "max_tokens" not in call.body
    await no_record(door)  # nothing was answered, so nothing is recorded


@pytest.mark.parametrize("model", ["openai/gpt-4o-mini", "ollama/llama3.2"])
async def test_count_tokens_for_a_provider_that_cannot_count_is_refused(
    door: Door, fake: FakeProviderServer, model: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        await door.sdk.messages.count_tokens(model=model, messages=TURNS)

    error = error_of(raised)
    assert (error["type"], error["gateway_type"]) == (
        "invalid_request_error",
        "unsupported_parameter",
    )
    assert fake.requests == []


async def test_count_tokens_names_the_fields_it_ignores_as_create_does(
    door: Door, fake: FakeProviderServer
) -> None:
    arguments: dict[str, Any] = {
        "model": "anthropic/claude-sonnet-4-5",
        "messages": TURNS,
        "extra_body": {"metadata": {"user_id": "u-7"}, "frobnicate": True},
    }

    created = await door.sdk.messages.with_raw_response.create(max_tokens=50, **arguments)
    counted = await door.sdk.messages.with_raw_response.count_tokens(**arguments)

    assert created.headers["x-genai-ignored-params"] == "metadata,frobnicate"
    assert counted.headers.get("x-genai-ignored-params") == "metadata,frobnicate"


# --- the exact event sequence ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "model", "tool_deltas"),
    [
        ("openai", "openai/gpt-4o-mini", 3),  # arguments streamed in fragments
        ("anthropic", "anthropic/claude-sonnet-4-5", 3),
        ("ollama", "ollama/llama3.2", 1),  # Ollama sends a call whole
    ],
)
async def test_a_streamed_text_and_tool_use_answer_is_anthropics_exact_event_sequence(
    door: Door, fake: FakeProviderServer, provider: str, model: str, tool_deltas: int
) -> None:
    fake.script(
        provider,
        Reply.ok(chunks=("Check", "ing."), tool_calls=(FakeCall("get_weather", {"city": "Oslo"}),)),
    )
    request = {
        "model": model,
        "max_tokens": 50,
        "stream": True,
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": [WEATHER_TOOL],
    }

    async with httpx.AsyncClient(base_url=door.base_url, headers={"x-api-key": door.key}) as http:
        reply = await http.post("/v1/messages", json=request)

    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = sse_events(reply.text)
    assert all(data["type"] == name for name, data in events)
    sequence = [(name, data.get("index")) for name, data in events]
    assert sequence == [
        ("message_start", None),
        ("content_block_start", 0),
        ("ping", None),
        ("content_block_delta", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        *[("content_block_delta", 1)] * tool_deltas,
        ("content_block_stop", 1),
        ("message_delta", None),
        ("message_stop", None),
    ]
    data = [payload for _, payload in events]
    assert data[0]["message"]["model"] == model
    assert data[1]["content_block"] == {"type": "text", "text": ""}
    assert [data[3]["delta"], data[4]["delta"]] == [
        {"type": "text_delta", "text": "Check"},
        {"type": "text_delta", "text": "ing."},
    ]
    opened = data[6]["content_block"]
    assert (opened["type"], opened["name"], opened["input"]) == ("tool_use", "get_weather", {})
    pieces = data[7 : 7 + tool_deltas]
    assert {piece["delta"]["type"] for piece in pieces} == {"input_json_delta"}
    assert json.loads("".join(p["delta"]["partial_json"] for p in pieces)) == {"city": "Oslo"}
    finish = data[-2]
    assert finish["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert finish["usage"]["output_tokens"] == 7
    record = await the_one_record(door, finish["job_id"], finish["provenance"])
    assert [c["id"] for c in record["response_tool_calls"]] == [opened["id"]]


async def test_the_same_conversation_through_either_door_is_sent_and_proven_the_same(
    door: Door, fake: FakeProviderServer
) -> None:
    """One pipeline: Anthropic's wire format and OpenAI's, read into the same conversation, make
    the same upstream call and the same provenance."""
    anthropic_turns: list[Any] = json.loads(json.dumps(SECOND_TURN))
    del anthropic_turns[2]["content"][1]["is_error"]  # OpenAI's wire format has no is_error
    openai_turns: list[Any] = [
        {"role": "system", "content": SYSTEM},
        *SECOND_TURN_AT["openai"],
    ]
    fake.script("openai", Reply.ok("Sunny."), Reply.ok("Sunny."))
    openai_sdk = AsyncOpenAI(base_url=f"{door.base_url}/v1", api_key=door.key, max_retries=0)

    message = await door.sdk.messages.create(
        model="openai/gpt-4o-mini",
        max_tokens=50,
        system=SYSTEM,
        messages=anthropic_turns,
        tools=[WEATHER_TOOL],
    )
    async with openai_sdk:
        completion = await openai_sdk.chat.completions.create(
            model="openai/gpt-4o-mini",
            max_completion_tokens=50,
            messages=openai_turns,
            tools=[WEATHER_FUNCTION],  # type: ignore[list-item]
        )

    through_messages, through_chat = fake.calls("openai")
    assert through_messages.body == through_chat.body
    assert extra(message)["provenance"] == (completion.model_extra or {})["provenance"]


async def test_a_full_gateway_sheds_a_message_at_the_door_in_anthropics_error_format(
    fake: FakeProviderServer,
) -> None:
    fake.script("openai", Reply.delay(1.0))
    settings = settings_for(fake, limits=LimitSettings(max_concurrent=1, max_queued=0))
    user: Any = [{"role": "user", "content": "hi"}]
    async with serving(settings) as running:
        busy = asyncio.create_task(
            running.sdk.messages.create(model="openai/gpt-4o-mini", max_tokens=50, messages=user)
        )
        for _ in range(500):  # until the one slot is taken by a call upstream
            if fake.calls("openai"):
                break
            await asyncio.sleep(0.01)

        with pytest.raises(anthropic.InternalServerError) as shed:
            await running.sdk.messages.create(
                model="openai/gpt-4o-mini", max_tokens=50, messages=user
            )
        # At the door: before the key is checked or the body read.
        async with httpx.AsyncClient(base_url=running.base_url) as anonymous_client:
            anonymous = await anonymous_client.post("/v1/messages", content=b"{not json")
        answered = await busy

    assert shed.value.status_code == 503
    assert shed.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert anonymous.status_code == 503
    assert anonymous.json()["error"]["type"] == "overloaded_error"
    assert answered.content
