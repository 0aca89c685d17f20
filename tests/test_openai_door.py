"""The official `openai` client, unchanged, gets tools, structured output, images, reasoning and
OpenAI's error semantics through the gateway, from each provider, streamed and not.

Each test serves the real app under uvicorn (`serving`) against the loopback fake provider, and
asserts both what the client sees and what the provider was sent (the translation)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from app.schemas.conversation import MAX_TOOLS
from app.tracking import continuation_hash
from tests.fakes.provider_server import SIGNATURE, FakeCall, FakeProviderServer, Reply
from tests.support import SHIPPED_PATTERNS, settings_for
from tests.test_openai_compat import PROVIDER_MODELS, Gateway, serving

WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
QUESTION: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode()


@pytest.fixture
async def gateway(fake: FakeProviderServer) -> Any:
    async with serving(settings_for(fake)) as running:
        yield running


def _tool_turns(call_id: str) -> list[Any]:
    """The second turn of a tool conversation: the call the model made, and its result."""
    return [
        *QUESTION,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "18 C, sunny"},
    ]


async def _job(gateway: Gateway, job_id: str) -> dict[str, Any]:
    record = await gateway.admin.get(f"/v1/jobs/{job_id}")
    assert record.status_code == 200, record.text
    found: dict[str, Any] = record.json()
    return found


# --- tools -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
async def test_a_tool_call_comes_back_as_openai_tool_calls_from_each_provider(
    gateway: Gateway, fake: FakeProviderServer, provider: str, model: str
) -> None:
    fake.script(provider, Reply.ok(tool_calls=(FakeCall("get_weather", {"city": "Paris"}),)))
    tool_choice: Any = "auto" if provider == "ollama" else "required"

    completion = await gateway.sdk.chat.completions.create(
        model=model, messages=QUESTION, tools=[WEATHER], tool_choice=tool_choice
    )

    (choice,) = completion.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id
    (sent,) = fake.calls(provider)
    if provider == "openai":
        assert sent.body["tools"] == [WEATHER]
        assert sent.body["tool_choice"] == "required"
    elif provider == "anthropic":
        assert sent.body["tools"] == [
            {
                "name": "get_weather",
                "description": "The weather in a city.",
                "input_schema": WEATHER["function"]["parameters"],
            }
        ]
        assert sent.body["tool_choice"] == {"type": "any"}
    else:
        assert sent.body["tools"] == [WEATHER]
    record = await _job(gateway, (completion.model_extra or {})["job_id"])
    assert record["response_tool_calls"] == [
        {"id": call.id, "name": "get_weather", "arguments": call.function.arguments}
    ]
    assert record["prompt_redacted"]["tools"]["tools"][0]["name"] == "get_weather"


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
async def test_the_tool_result_turn_is_translated_for_each_provider(
    gateway: Gateway, fake: FakeProviderServer, provider: str, model: str
) -> None:
    fake.script(provider, Reply.ok("It is 18 C and sunny in Paris."))

    completion = await gateway.sdk.chat.completions.create(
        model=model, messages=_tool_turns("call_1"), tools=[WEATHER]
    )

    assert completion.choices[0].message.content == "It is 18 C and sunny in Paris."
    (sent,) = fake.calls(provider)
    messages = sent.body["messages"]
    if provider == "openai":
        assert messages[1]["tool_calls"][0]["id"] == "call_1"
        assert messages[2] == {"role": "tool", "content": "18 C, sunny", "tool_call_id": "call_1"}
    elif provider == "anthropic":
        assert messages[1] == {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                }
            ],
        }
        assert messages[2] == {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "18 C, sunny"}],
        }
    else:
        assert messages[1]["tool_calls"] == [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
        ]
        assert messages[2] == {"role": "tool", "content": "18 C, sunny", "tool_name": "get_weather"}
    provenance = (completion.model_extra or {})["provenance"]
    assert provenance["schema_version"] == "prov-2"  # the turns after the user prompt are proven
    assert provenance["continuation_hash"] == continuation_hash(
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
                ],
            },
            {"role": "tool", "content": "18 C, sunny", "tool_call_id": "call_1"},
        ]
    )


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
async def test_streamed_tool_calls_arrive_as_openai_tool_call_deltas(
    gateway: Gateway, fake: FakeProviderServer, provider: str, model: str
) -> None:
    calls = (FakeCall("get_weather", {"city": "Paris"}), FakeCall("get_weather", {"city": "Oslo"}))
    fake.script(provider, Reply.ok("Checking.", tool_calls=calls))

    async with gateway.sdk.chat.completions.stream(
        model=model, messages=QUESTION, tools=[WEATHER]
    ) as stream:
        final = await stream.get_final_completion()

    (choice,) = final.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Checking."
    assert [json.loads(c.function.arguments) for c in choice.message.tool_calls or []] == [
        {"city": "Paris"},
        {"city": "Oslo"},
    ]
    assert len({c.id for c in choice.message.tool_calls or []}) == 2
    job_id = (final.model_extra or {}).get("job_id")
    if job_id is None:  # the SDK's accumulator keeps only known fields: read the raw stream
        raw = await gateway.sdk.chat.completions.create(
            model=model, messages=QUESTION, tools=[WEATHER], stream=True
        )
        async for chunk in raw:
            job_id = job_id or (chunk.model_extra or {}).get("job_id")
    assert job_id is not None


async def test_tool_choice_none_and_a_named_tool_reach_openai_and_anthropic(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    named: Any = {"type": "function", "function": {"name": "get_weather"}}
    await gateway.sdk.chat.completions.create(
        model="openai/gpt-4o-mini", messages=QUESTION, tools=[WEATHER], tool_choice=named
    )
    await gateway.sdk.chat.completions.create(
        model="anthropic/claude-sonnet-4-5",
        messages=QUESTION,
        tools=[WEATHER],
        tool_choice=named,
        parallel_tool_calls=False,
    )

    (to_openai,) = fake.calls("openai")
    (to_anthropic,) = fake.calls("anthropic")
    assert to_openai.body["tool_choice"] == named
    assert to_anthropic.body["tool_choice"] == {
        "type": "tool",
        "name": "get_weather",
        "disable_parallel_tool_use": True,
    }


async def test_ollama_is_held_to_a_forced_tool_choice_by_asking_again(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    """Ollama has no tool_choice: the pipeline sends the tools, and when the model answers
    without the call `required` asks for, it is told so and asked again (bounded)."""
    fake.script(
        "ollama",
        Reply.ok("It is probably sunny."),
        Reply.ok(tool_calls=(FakeCall("get_weather", {"city": "Paris"}),)),
    )

    completion = await gateway.sdk.chat.completions.create(
        model="ollama/llama3.2", messages=QUESTION, tools=[WEATHER], tool_choice="required"
    )

    (call,) = completion.choices[0].message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather"
    first, second = fake.calls("ollama")
    assert "tool_choice" not in first.body
    assert json.loads(second.body["messages"][-1]["content"])["result"] == "tool_call_required"
    record = await _job(gateway, (completion.model_extra or {})["job_id"])
    assert [attempt["valid"] for attempt in record["output_attempts"]] == [False]


# --- structured output -----------------------------------------------------------------------


class City(BaseModel):
    name: str
    population: int


@pytest.mark.parametrize(
    ("provider", "model"),
    [*PROVIDER_MODELS, ("anthropic", "anthropic/claude-3-5-haiku")],
)
async def test_parse_with_a_pydantic_model_works_on_each_provider(
    gateway: Gateway, fake: FakeProviderServer, provider: str, model: str
) -> None:
    fake.script(provider, Reply.ok(json.dumps({"name": "Paris", "population": 2100000})))

    parsed = await gateway.sdk.chat.completions.parse(
        model=model, messages=[{"role": "user", "content": "Paris?"}], response_format=City
    )

    assert parsed.choices[0].message.parsed == City(name="Paris", population=2100000)
    (sent,) = fake.calls(provider)
    if provider == "openai":
        assert sent.body["response_format"]["type"] == "json_schema"
        assert sent.body["response_format"]["json_schema"]["name"] == "City"
        assert sent.body["response_format"]["json_schema"]["strict"] is True
    elif model == "anthropic/claude-3-5-haiku":  # older: a forced tool, per capabilities file
        assert sent.body["tool_choice"] == {"type": "tool", "name": "emit_output"}
    elif provider == "anthropic":
        assert sent.body["output_config"]["format"]["type"] == "json_schema"
    else:
        assert sent.body["format"]["properties"]["population"] == {
            "title": "Population",
            "type": "integer",
        }


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
async def test_json_object_format_comes_back_as_json_text(
    gateway: Gateway, fake: FakeProviderServer, provider: str, model: str
) -> None:
    fake.script(provider, Reply.ok('{"ok": true}'))

    completion = await gateway.sdk.chat.completions.create(
        model=model, messages=QUESTION, response_format={"type": "json_object"}
    )

    assert json.loads(completion.choices[0].message.content or "") == {"ok": True}
    (sent,) = fake.calls(provider)
    if provider == "openai":
        assert sent.body["response_format"] == {"type": "json_object"}
    elif provider == "ollama":
        assert sent.body["format"] == "json"


async def test_an_answer_that_breaks_the_schema_is_repaired_by_the_pipeline(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    fake.script(
        "openai", Reply.ok('{"name": "Paris"}'), Reply.ok('{"name": "Paris", "population": 2}')
    )

    completion = await gateway.sdk.chat.completions.parse(
        model="openai/gpt-4o-mini", messages=QUESTION, response_format=City
    )

    assert completion.choices[0].message.parsed == City(name="Paris", population=2)
    assert len(fake.calls("openai")) == 2
    record = await _job(gateway, (completion.model_extra or {})["job_id"])
    assert [attempt["valid"] for attempt in record["output_attempts"]] == [False, True]


async def test_a_streamed_structured_answer_is_checked_and_recorded(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.ok(chunks=('{"name": "Par', 'is", "population": 1}')))

    async with gateway.sdk.chat.completions.stream(
        model="openai/gpt-4o-mini", messages=QUESTION, response_format=City
    ) as stream:
        final = await stream.get_final_completion()

    assert final.choices[0].message.parsed == City(name="Paris", population=1)


# --- content parts ---------------------------------------------------------------------------


def _picture_question(url: str) -> list[Any]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
            ],
        }
    ]


async def test_images_are_forwarded_and_translated(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    await gateway.sdk.chat.completions.create(
        model="openai/gpt-4o-mini", messages=_picture_question("https://example.com/cat.png")
    )
    await gateway.sdk.chat.completions.create(
        model="anthropic/claude-sonnet-4-5", messages=_picture_question(PNG)
    )
    await gateway.sdk.chat.completions.create(model="ollama/llava", messages=_picture_question(PNG))

    (to_openai,) = fake.calls("openai")
    assert to_openai.body["messages"][0]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "https://example.com/cat.png", "detail": "low"},
    }
    (to_anthropic,) = fake.calls("anthropic")
    assert to_anthropic.body["messages"][0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG.split(",", 1)[1]},
    }
    (to_ollama,) = fake.calls("ollama")
    assert to_ollama.body["messages"][0] == {
        "role": "user",
        "content": "What is this?",
        "images": [PNG.split(",", 1)[1]],
    }


@pytest.mark.parametrize(
    ("model", "url", "why"),
    [
        ("ollama/llama3.2", PNG, "no images support"),  # a text-only model
        ("openai/gpt-3.5-turbo", PNG, "no images support"),
        ("ollama/llava", "https://example.com/cat.png", "data: URIs"),  # inline images only
    ],
)
async def test_an_image_a_model_cannot_take_is_a_400_naming_messages(
    gateway: Gateway, fake: FakeProviderServer, model: str, url: str, why: str
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        await gateway.sdk.chat.completions.create(model=model, messages=_picture_question(url))
    assert (raised.value.code, raised.value.param) == ("unsupported_value", "messages")
    assert why in raised.value.message
    assert fake.requests == []  # never sent, and nothing fetched


# --- reasoning -------------------------------------------------------------------------------


async def test_anthropic_thinking_blocks_survive_the_round_trip_through_openai_clients(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    fake.script(
        "anthropic",
        Reply.ok(
            tool_calls=(FakeCall("get_weather", {"city": "Paris"}),), thinking="Use the tool."
        ),
    )
    first = await gateway.sdk.chat.completions.create(
        model="anthropic/claude-sonnet-4-5", messages=QUESTION, tools=[WEATHER]
    )
    message = first.choices[0].message
    blocks = (message.model_extra or {})["thinking_blocks"]
    assert blocks == [{"type": "thinking", "thinking": "Use the tool.", "signature": SIGNATURE}]

    # A client sends the assistant message back as it got it, then the tool result.
    assistant: Any = message.model_dump(exclude_none=True)
    call_id = (message.tool_calls or [])[0].id
    await gateway.sdk.chat.completions.create(
        model="anthropic/claude-sonnet-4-5",
        messages=[
            *QUESTION,
            assistant,
            {"role": "tool", "tool_call_id": call_id, "content": "18 C"},
        ],
        tools=[WEATHER],
    )

    second = fake.calls("anthropic")[1]
    assert second.body["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "Use the tool.",
        "signature": SIGNATURE,
    }


# --- parameters ------------------------------------------------------------------------------


async def test_no_max_tokens_is_sent_unless_asked_but_anthropic_gets_the_model_limit(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    for _, model in PROVIDER_MODELS:
        await gateway.sdk.chat.completions.create(model=model, messages=QUESTION)

    assert "max_completion_tokens" not in fake.calls("openai")[0].body
    assert "num_predict" not in fake.calls("ollama")[0].body["options"]
    assert fake.calls("anthropic")[0].body["max_tokens"] == 64000  # claude-sonnet-4*: output limit


async def test_params_are_forwarded_dropped_visibly_or_refused_per_provider(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    params: dict[str, Any] = {
        "temperature": 0.3,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.2,
        "reasoning_effort": "high",
        "seed": 4,
    }
    to_openai = await gateway.sdk.chat.completions.with_raw_response.create(
        model="openai/gpt-4o-mini", messages=QUESTION, logit_bias={"50256": -100}, **params
    )
    to_anthropic = await gateway.sdk.chat.completions.with_raw_response.create(
        model="anthropic/claude-sonnet-4-5", messages=QUESTION, **params
    )
    with pytest.raises(openai.BadRequestError) as refused:
        await gateway.sdk.chat.completions.create(
            model="ollama/llama3.2", messages=QUESTION, logit_bias={"1": 5}
        )

    openai_body = fake.calls("openai")[0].body
    assert {name: openai_body[name] for name in params} == params
    assert openai_body["logit_bias"] == {"50256": -100}
    assert "x-genai-dropped-params" not in to_openai.headers
    anthropic_body = fake.calls("anthropic")[0].body
    assert anthropic_body["output_config"] == {"effort": "high"}
    assert "temperature" not in anthropic_body  # Anthropic's API has no sampling controls...
    dropped = to_anthropic.headers["x-genai-dropped-params"].split(",")
    assert set(dropped) == {"temperature", "seed", "presence_penalty", "frequency_penalty"}
    assert (refused.value.code, refused.value.param) == ("unsupported_parameter", "logit_bias")
    assert "ollama" in refused.value.message


async def test_unknown_fields_are_ignored_and_named_in_a_header(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    raw = await gateway.sdk.chat.completions.with_raw_response.create(
        model="openai/gpt-4o-mini",
        messages=QUESTION,
        user="end-user-7",
        extra_body={"a_field_from_the_future": {"x": 1}},
    )

    assert raw.headers["x-genai-ignored-params"] == "user,a_field_from_the_future"
    assert "a_field_from_the_future" not in fake.calls("openai")[0].body


# --- errors as OpenAI's clients expect -------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "param", "code"),
    [
        (
            {
                "tools": [
                    {"type": "function", "function": {"name": "f", "parameters": {"type": 12}}}
                ]
            },
            "tools",
            "invalid_value",
        ),
        (
            {"tools": [WEATHER, WEATHER]},
            "tools",
            "invalid_value",
        ),
        (
            {
                "messages": [
                    *QUESTION,
                    {"role": "tool", "tool_call_id": "call_nobody_made", "content": "x"},
                ]
            },
            "messages[1].tool_call_id",
            "invalid_value",
        ),
        (
            {
                "messages": [
                    *QUESTION,
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": "f", "arguments": "{oops"},
                            }
                        ],
                    },
                ]
            },
            "messages[1].tool_calls[0].function.arguments",
            "invalid_value",
        ),
        (
            {"tools": [WEATHER] * (MAX_TOOLS + 1)},
            "tools",
            "invalid_value",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [{"type": "image_url", "image_url": {"url": PNG}}],
                    }
                ]
            },
            "messages[0].role",
            "invalid_value",
        ),
    ],
    ids=[
        "bad-schema",
        "duplicate-tools",
        "orphan-result",
        "arguments-not-json",
        "too-many-tools",
        "image-from-assistant",
    ],
)
async def test_bad_tool_input_is_a_400_naming_the_field(
    gateway: Gateway, fake: FakeProviderServer, change: dict[str, Any], param: str, code: str
) -> None:
    arguments: dict[str, Any] = {"model": "openai/gpt-4o-mini", "messages": QUESTION, **change}
    with pytest.raises(openai.BadRequestError) as raised:
        await gateway.sdk.chat.completions.create(**arguments)
    assert raised.value.param == param
    assert raised.value.code == code
    assert fake.requests == []


async def test_a_prompt_over_the_context_window_is_context_length_exceeded(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    long: Any = [{"role": "user", "content": "word " * 80_000}]  # ~100k tokens > gpt-3.5's 16k
    with pytest.raises(openai.BadRequestError) as ours:
        await gateway.sdk.chat.completions.create(model="openai/gpt-3.5-turbo", messages=long)
    fake.script(
        "openai",
        Reply.raw(
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 8192 tokens.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
        ),
    )
    with pytest.raises(openai.BadRequestError) as theirs:
        await gateway.sdk.chat.completions.create(model="openai/gpt-4o-mini", messages=QUESTION)

    assert (ours.value.code, ours.value.param) == ("context_length_exceeded", "messages")
    assert theirs.value.code == "context_length_exceeded"
    assert theirs.value.body["type"] == "upstream_rejected"  # type: ignore[index]


# --- models ----------------------------------------------------------------------------------


async def test_bare_model_ids_resolve_and_can_be_retrieved(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    await gateway.sdk.chat.completions.create(model="gpt-4o-mini", messages=QUESTION)
    await gateway.sdk.chat.completions.create(model="claude-sonnet-4-5", messages=QUESTION)
    await gateway.sdk.chat.completions.create(model="llama3.2", messages=QUESTION)
    retrieved = await gateway.sdk.models.retrieve("gpt-4o-mini")
    listed = await gateway.sdk.models.retrieve("openai/gpt-4o-mini")
    with pytest.raises(openai.NotFoundError) as missing:
        await gateway.sdk.models.retrieve("mystery-model")

    assert fake.calls("openai")[0].body["model"] == "gpt-4o-mini"
    assert fake.calls("anthropic")[0].body["model"] == "claude-sonnet-4-5"
    assert fake.calls("ollama")[0].body["model"] == "llama3.2"
    assert (retrieved.id, retrieved.owned_by) == ("gpt-4o-mini", "openai")
    assert listed.owned_by == "openai"
    assert missing.value.code == "model_not_found"


# --- patterns as agents ----------------------------------------------------------------------


AGENT = """---
description: Answers weather questions with the weather tool.
tools:
  - name: get_weather
    description: The weather in a city.
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
tool_choice: auto
---
You answer weather questions. Call get_weather for live data.
"""


async def test_a_pattern_brings_its_own_tools_and_runs_an_agent_loop(
    fake: FakeProviderServer, tmp_path: Path
) -> None:
    (tmp_path / "weather.md").write_text(AGENT)
    settings = settings_for(fake, pattern_dir=[tmp_path, SHIPPED_PATTERNS])
    fake.script("openai", Reply.ok(tool_calls=(FakeCall("get_weather", {"city": "Paris"}),)))
    async with serving(settings) as running:
        first = await running.sdk.chat.completions.create(
            model="pattern/weather", messages=QUESTION
        )
        call = (first.choices[0].message.tool_calls or [])[0]
        assistant: Any = first.choices[0].message.model_dump(exclude_none=True)
        second = await running.sdk.chat.completions.create(
            model="pattern/weather",
            messages=[
                *QUESTION,
                assistant,
                {"role": "tool", "tool_call_id": call.id, "content": "18 C"},
            ],
        )
        with pytest.raises(openai.BadRequestError) as own_tools:
            await running.sdk.chat.completions.create(
                model="pattern/weather", messages=QUESTION, tools=[WEATHER]
            )

    one, two = fake.calls("openai")
    assert one.body["tools"][0]["function"]["name"] == "get_weather"
    assert one.body["tool_choice"] == "auto"
    assert two.body["messages"][0]["content"].startswith("You answer weather questions.")
    assert two.body["messages"][-1] == {"role": "tool", "content": "18 C", "tool_call_id": call.id}
    first_provenance = (first.model_extra or {})["provenance"]
    second_provenance = (second.model_extra or {})["provenance"]
    assert first_provenance["schema_version"] == "prov-1"
    assert second_provenance["schema_version"] == "prov-2"
    assert second_provenance["pattern_content_hash"] == first_provenance["pattern_content_hash"]
    assert (own_tools.value.code, own_tools.value.param) == ("unsupported_parameter", "tools")


async def test_changing_one_tool_description_changes_the_proof(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    reworded: Any = {
        **WEATHER,
        "function": {**WEATHER["function"], "description": "Weather, live."},
    }
    first = await gateway.sdk.chat.completions.create(
        model="openai/gpt-4o-mini", messages=QUESTION, tools=[WEATHER]
    )
    second = await gateway.sdk.chat.completions.create(
        model="openai/gpt-4o-mini", messages=QUESTION, tools=[reworded]
    )

    hashes = [(c.model_extra or {})["provenance"]["variables_hash"] for c in (first, second)]
    assert hashes[0] != hashes[1]


async def test_a_tool_conversation_replays_to_the_same_hashes_and_is_stored_redacted(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    turns = _tool_turns("call_9")
    turns[-1] = {"role": "tool", "tool_call_id": "call_9", "content": "Mail ana@example.com"}
    completion = await gateway.sdk.chat.completions.create(
        model="anthropic/claude-sonnet-4-5", messages=turns, tools=[WEATHER]
    )
    job_id = (completion.model_extra or {})["job_id"]

    replayed = (await gateway.admin.post(f"/v1/jobs/{job_id}/replay")).json()
    record = await _job(gateway, job_id)

    assert (replayed["reproduced"], replayed["differing"]) == (True, [])
    assert "continuation_hash" in replayed["hashes"]  # prov-2's own hash is proven too
    provenance = (completion.model_extra or {})["provenance"]
    assert record["continuation_hash"] == provenance["continuation_hash"]
    stored = record["prompt_redacted"]["messages"]
    assert stored[1]["tool_calls"][0]["id"] == "call_9"
    assert "ana@example.com" not in json.dumps(record)
    assert stored[2]["role"] == "tool" and "[EMAIL_" in stored[2]["content"]


# --- CORS --------------------------------------------------------------------------------------


async def test_a_browser_preflight_is_answered_only_when_an_origin_is_allowed(
    fake: FakeProviderServer,
) -> None:
    preflight = {
        "Origin": "https://app.example.com",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    allowed = settings_for(fake, cors_origins=["https://app.example.com"])
    async with serving(allowed) as running, httpx.AsyncClient(base_url=running.base_url) as http:
        answered = await http.options("/v1/chat/completions", headers=preflight)
    async with (
        serving(settings_for(fake)) as running,
        httpx.AsyncClient(base_url=running.base_url) as http,
    ):
        closed = await http.options("/v1/chat/completions", headers=preflight)

    assert answered.status_code == 200
    assert answered.headers["access-control-allow-origin"] == "https://app.example.com"
    assert "access-control-allow-origin" not in closed.headers


# --- a bad upstream, and the audit trail ------------------------------------------------------


async def test_a_compatible_server_that_sends_no_call_id_gets_one_made_up(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    call: Any = {"id": "", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    choice = {"index": 0, "finish_reason": "tool_calls", "message": message}
    fake.script(
        "openai", Reply.raw(200, {"id": "x", "object": "chat.completion", "choices": [choice]})
    )

    completion = await gateway.sdk.chat.completions.create(
        model="openai/gpt-4o-mini", messages=QUESTION, tools=[WEATHER]
    )

    (made,) = completion.choices[0].message.tool_calls or []
    assert made.id.startswith("call_") and len(made.id) > len("call_")


async def test_every_request_that_reaches_a_provider_has_exactly_one_audit_record(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.ok(tool_calls=(FakeCall("get_weather", {"city": "Paris"}),)))
    fake.script("anthropic", Reply.ok("ok"), Reply.error(400))
    await gateway.sdk.chat.completions.create(
        model="gpt-4o-mini", messages=QUESTION, tools=[WEATHER]
    )
    stream = await gateway.sdk.chat.completions.create(
        model="anthropic/claude-sonnet-4-5", messages=QUESTION, stream=True
    )
    [chunk async for chunk in stream]
    with pytest.raises(openai.BadRequestError):  # reaches the provider, which refuses it
        await gateway.sdk.chat.completions.create(model="claude-sonnet-4-5", messages=QUESTION)
    with pytest.raises(openai.BadRequestError):  # refused at the door: never reaches one
        await gateway.sdk.chat.completions.create(model="gpt-4o-mini", messages=QUESTION, n=3)

    jobs = await gateway.audit.reader.recent(limit=50)
    assert len(fake.requests) == len(jobs) == 3
    assert sorted(job.status for job in jobs) == ["completed", "completed", "failed"]


@pytest.mark.parametrize(
    "field",
    [
        {"functions": [{"name": "f", "parameters": {"type": "object"}}]},
        {"function_call": "auto"},
        {"audio": {"voice": "alloy", "format": "mp3"}},
        {"web_search_options": {}},
    ],
    ids=lambda field: next(iter(field)),
)
async def test_fields_that_would_change_the_answer_are_refused_not_ignored(
    gateway: Gateway, fake: FakeProviderServer, field: dict[str, Any]
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        await gateway.sdk.chat.completions.create(
            model="gpt-4o-mini", messages=QUESTION, extra_body=field
        )
    assert (raised.value.code, raised.value.param) == ("unsupported_parameter", next(iter(field)))
    assert fake.requests == []


async def test_any_json_object_from_anthropic_keeps_the_callers_tools(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    """Anthropic's native format needs a schema: "any JSON object" is held to by instructions
    and the repair loop, so the caller's own tools stay callable (no forced output tool)."""
    fake.script("anthropic", Reply.ok('{"city": "Paris"}'))

    completion = await gateway.sdk.chat.completions.create(
        model="claude-sonnet-4-5",
        messages=QUESTION,
        tools=[WEATHER],
        response_format={"type": "json_object"},
    )

    assert json.loads(completion.choices[0].message.content or "") == {"city": "Paris"}
    (sent,) = fake.calls("anthropic")
    assert [tool["name"] for tool in sent.body["tools"]] == ["get_weather"]
    assert "tool_choice" not in sent.body and "output_config" not in sent.body
    assert "JSON Schema" in sent.body["system"]


async def test_anthropics_required_max_tokens_leaves_room_for_a_long_prompt(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    long: Any = [{"role": "user", "content": "word " * 60_000}]  # ~75k tokens

    await gateway.sdk.chat.completions.create(model="anthropic/claude-opus-4-6", messages=long)

    (sent,) = fake.calls("anthropic")
    assert sent.body["max_tokens"] == 200_000 - 75_000  # the context left, under the 128k limit
