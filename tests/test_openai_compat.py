"""The official `openai` client, pointed at the gateway served by uvicorn on a loopback port,
gets completions (streamed and not) from each provider and from a pattern, with provenance."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import uvicorn
from openai import AsyncOpenAI

from app.audit.trail import AuditTrail
from app.catalog.chat import CHAT_V2_SHA256
from app.config import AnthropicSettings, LimitSettings, Settings
from app.main import create_app
from app.schemas import ApiKeyCreate
from app.tracking import continuation_hash, user_prompt_hash, variables_hash
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import settings_for

PROVIDER_MODELS = [
    ("openai", "openai/gpt-4o-mini"),
    ("anthropic", "anthropic/claude-sonnet-4-6"),
    ("ollama", "ollama/llama3.2"),
]
CONVERSATION: list[Any] = [
    {"role": "system", "content": "Answer in one sentence."},
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "Blue."},
    {"role": "user", "content": [{"type": "text", "text": "Another one?"}]},
]


@dataclass
class Gateway:
    base_url: str
    sdk: AsyncOpenAI  # holds a `complete`-scope key, as an application would
    admin: httpx.AsyncClient  # reads the audit trail
    audit: AuditTrail  # the server's own, to count its records


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[Gateway]:
    """The real app (lifespan included) under uvicorn on an ephemeral loopback port."""
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
        authenticator = app.state.runtime.authenticator
        caller = await authenticator.create(ApiKeyCreate(scope="complete", name="sdk"))
        admin = await authenticator.create(ApiKeyCreate(scope="admin", name="admin"))
        sdk = AsyncOpenAI(base_url=f"{base_url}/v1", api_key=caller.key, max_retries=0)
        async with (
            sdk,
            httpx.AsyncClient(
                base_url=base_url, headers={"Authorization": f"Bearer {admin.key}"}
            ) as http,
        ):
            yield Gateway(base_url, sdk, http, app.state.runtime.audit)
    finally:
        server.should_exit = True
        await serve
        sock.close()
        shutil.rmtree(settings.data_dir, ignore_errors=True)


@pytest.fixture
async def gateway(fake: FakeProviderServer) -> AsyncIterator[Gateway]:
    async with serving(settings_for(fake)) as running:
        yield running


def _expected_chat_provenance(model: str) -> dict[str, Any]:
    """What provenance must prove for CONVERSATION sent to `model` through builtin:chat (v2:
    every turn before the last user message, the system turn where it stood)."""
    provider, name = model.split("/", 1)
    sent = {
        "version": 2,
        "messages": [
            {"role": "system", "content": "Answer in one sentence."},
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue."},
        ],
    }
    return {
        "schema_version": "prov-1",
        "pattern_name": "builtin:chat",
        "pattern_base_path": "builtin",
        "pattern_content_hash": CHAT_V2_SHA256,
        "variables_hash": variables_hash(sent),
        "user_prompt_hash": user_prompt_hash("Another one?"),
        "provider": provider,
        "model": name,
    }


def _sent_text(fake: FakeProviderServer, provider: str) -> str:
    """Everything the provider received, as one string (system and every message)."""
    (call,) = fake.calls(provider)
    return str(call.body)


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
async def test_a_direct_call_reaches_each_provider_with_the_whole_conversation(
    gateway: Gateway, fake: FakeProviderServer, provider: str, model: str
) -> None:
    fake.script(provider, Reply.ok("Green.", input_tokens=21, output_tokens=3))

    completion = await gateway.sdk.chat.completions.create(
        model=model, messages=CONVERSATION, temperature=0.1, max_completion_tokens=50, seed=7
    )

    assert completion.object == "chat.completion"
    assert completion.model == model
    assert completion.id.startswith("chatcmpl-")
    (choice,) = completion.choices
    assert (choice.message.role, choice.message.content) == ("assistant", "Green.")
    assert choice.finish_reason == "stop"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (21, 3)
    assert completion.usage.total_tokens == 24
    extra = completion.model_extra or {}
    assert {k: extra["provenance"][k] for k in _expected_chat_provenance(model)} == (
        _expected_chat_provenance(model)
    )
    sent = _sent_text(fake, provider)
    for text in ("Answer in one sentence.", "Name a colour.", "Blue.", "Another one?"):
        assert text in sent
    job = await gateway.admin.get(f"/v1/jobs/{extra['job_id']}")
    assert job.status_code == 200
    record = job.json()
    assert record["status"] == "completed"
    assert record["source_name"] == "builtin:chat"
    assert record["variables_hash"] == extra["provenance"]["variables_hash"]
    assert record["params"]["max_tokens"] == 50


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
async def test_a_streamed_direct_call_yields_openai_chunks_then_provenance_and_usage(
    gateway: Gateway, fake: FakeProviderServer, provider: str, model: str
) -> None:
    fake.script(provider, Reply.ok(chunks=("Gre", "en", "."), input_tokens=21, output_tokens=3))

    stream = await gateway.sdk.chat.completions.create(
        model=model,
        messages=CONVERSATION,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]

    assert {chunk.object for chunk in chunks} == {"chat.completion.chunk"}
    assert len({chunk.id for chunk in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Green."
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason is not None]
    assert [c.choices[0].finish_reason for c in finals] == ["stop"]
    extra = finals[0].model_extra or {}
    assert (
        extra["provenance"]["variables_hash"] == _expected_chat_provenance(model)["variables_hash"]
    )
    usage = chunks[-1]
    assert usage.choices == [] and usage.usage is not None
    assert (usage.usage.prompt_tokens, usage.usage.completion_tokens) == (21, 3)
    record = (await gateway.admin.get(f"/v1/jobs/{extra['job_id']}")).json()
    assert (record["status"], record["streamed"]) == ("completed", True)


async def test_a_pattern_takes_its_variables_from_extra_body_and_the_last_user_message(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.ok("- revenue up"), Reply.ok(chunks=("- revenue", " up")))
    messages: list[Any] = [
        {"role": "user", "content": "ignored earlier turn"},
        {"role": "user", "content": "Revenue rose 12%."},
    ]
    variables = {"max_words": 42, "audience": "executives"}

    completion = await gateway.sdk.chat.completions.create(
        model="pattern/summarize", messages=messages, extra_body={"variables": variables}
    )
    stream = await gateway.sdk.chat.completions.create(
        model="pattern/summarize",
        messages=messages,
        extra_body={"variables": variables},
        stream=True,
    )
    chunks = [chunk async for chunk in stream]

    assert completion.choices[0].message.content == "- revenue up"
    provenance = (completion.model_extra or {})["provenance"]
    assert provenance["pattern_name"] == "summarize"
    assert provenance["user_prompt_hash"] == user_prompt_hash("Revenue rose 12%.")
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "- revenue up"
    final = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
    assert (final.model_extra or {})["provenance"] == provenance  # same inputs, same proof
    first, _ = fake.calls("openai")
    assert "at most 42 words" in str(first.body)
    assert "ignored earlier turn" not in str(first.body)  # the pattern owns the conversation


async def test_model_list_has_configured_models_of_configured_providers_and_patterns(
    fake: FakeProviderServer,
) -> None:
    settings = settings_for(
        fake,
        task_models={"summarize": "ollama/llama3.2", "proofread": "anthropic/claude-x"},
        fallbacks={"openai/gpt-4o-mini": ["ollama/qwen2.5"]},
        anthropic=AnthropicSettings(api_key=None),  # not configured: its models are not listed
    )
    async with serving(settings) as running:
        listed = await running.sdk.models.list()

    ids = [model.id for model in listed.data]
    assert ids[:3] == ["openai/gpt-4o-mini", "ollama/llama3.2", "ollama/qwen2.5"]
    assert "anthropic/claude-x" not in ids
    assert {"pattern/summarize", "pattern/proofread", "pattern/email/reply"} <= set(ids)
    assert {model.object for model in listed.data} == {"model"}
    assert next(m for m in listed.data if m.id == "pattern/summarize").owned_by == "gateway"


async def test_errors_raise_the_sdk_exception_for_their_status(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    user: list[Any] = [{"role": "user", "content": "hi"}]
    cases: list[tuple[dict[str, Any], type[openai.APIStatusError], str, str | None]] = [
        ({"model": "nowhere/model"}, openai.NotFoundError, "invalid_model", "model_not_found"),
        ({"model": "mystery-model"}, openai.NotFoundError, "invalid_model", "model_not_found"),
        (
            {"model": "pattern/no-such-pattern"},
            openai.NotFoundError,
            "pattern_not_found",
            "model_not_found",
        ),
        (
            {"model": "openai/m", "temperature": 7},
            openai.BadRequestError,
            "invalid_request",
            "invalid_value",
        ),
        (
            {"model": "openai/m", "extra_body": {"variables": {"a": 1}}},
            openai.BadRequestError,
            "unsupported_parameter",
            None,
        ),
        ({"model": "openai/m", "n": 2}, openai.BadRequestError, "unsupported_parameter", None),
    ]
    for arguments, error_class, error_type, code in cases:
        with pytest.raises(error_class) as raised:
            await gateway.sdk.chat.completions.create(messages=user, **arguments)
        assert isinstance(raised.value.body, dict)
        assert raised.value.body["type"] == error_type, arguments
        assert raised.value.body["message"], arguments
        assert raised.value.code == (code or "unsupported_parameter"), arguments

    fake.script("openai", Reply.error(429, headers={"retry-after": "0"}))
    fake.script("openai", Reply.error(429, headers={"retry-after": "0"}))
    fake.script("openai", Reply.error(429, headers={"retry-after": "0"}))
    with pytest.raises(openai.RateLimitError) as limited:
        await gateway.sdk.chat.completions.create(model="openai/m", messages=user)
    assert limited.value.body["job_id"]  # type: ignore[index]

    stranger = AsyncOpenAI(base_url=f"{gateway.base_url}/v1", api_key="gk-wrong", max_retries=0)
    async with stranger:
        with pytest.raises(openai.AuthenticationError):
            await stranger.chat.completions.create(model="openai/m", messages=user)


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
async def test_a_conversation_ending_with_an_assistant_prefill_is_sent_as_is(
    gateway: Gateway, fake: FakeProviderServer, provider: str, model: str
) -> None:
    completion = await gateway.sdk.chat.completions.create(
        model=model,
        messages=[
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "The colour is"},
        ],
    )

    (call,) = fake.calls(provider)
    assert call.body["messages"][-1] == {"role": "assistant", "content": "The colour is"}
    provenance = (completion.model_extra or {})["provenance"]
    # The prefill comes after the user prompt: a continuation, proven by prov-2's own hash.
    assert provenance["schema_version"] == "prov-2"
    assert provenance["continuation_hash"] == continuation_hash(
        [{"role": "assistant", "content": "The colour is"}]
    )


@pytest.mark.parametrize(("provider", "model"), PROVIDER_MODELS)
async def test_a_system_only_conversation_is_sent_as_is(
    gateway: Gateway, fake: FakeProviderServer, provider: str, model: str
) -> None:
    await gateway.sdk.chat.completions.create(
        model=model, messages=[{"role": "system", "content": "Say hello."}]
    )

    (call,) = fake.calls(provider)
    if provider == "anthropic":  # the Messages API needs a turn: the system text is the user's
        assert "system" not in call.body
        assert call.body["messages"] == [{"role": "user", "content": "Say hello."}]
    else:
        assert call.body["messages"] == [{"role": "system", "content": "Say hello."}]


async def test_a_failure_mid_stream_reaches_the_sdk_as_an_error_and_is_recorded(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.cut(after=2, chunks=("one ", "two ", "three")))

    stream = await gateway.sdk.chat.completions.create(
        model="openai/m", messages=[{"role": "user", "content": "count"}], stream=True
    )
    received: list[str] = []
    with pytest.raises(openai.APIError) as raised:
        async for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")

    assert not isinstance(raised.value, openai.APIStatusError)  # the status was already 200
    assert "".join(received) == "one two "
    body: Any = raised.value.body
    assert body["type"] == "stream_interrupted"
    record = (await gateway.admin.get(f"/v1/jobs/{body['job_id']}")).json()
    assert record["status"] == "failed"


async def test_both_routes_refuse_a_caller_without_a_valid_key(gateway: Gateway) -> None:
    stranger = AsyncOpenAI(
        base_url=f"{gateway.base_url}/v1", api_key="gsk_0000000000000000_wrong", max_retries=0
    )
    async with stranger:
        with pytest.raises(openai.AuthenticationError) as models:
            await stranger.models.list()
        with pytest.raises(openai.AuthenticationError):
            await stranger.chat.completions.create(
                model="openai/m", messages=[{"role": "user", "content": "hi"}]
            )
    assert models.value.body["type"] == "unauthenticated"  # type: ignore[index]


async def test_a_chat_job_replays_to_the_same_prompt(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    fake.script("anthropic", Reply.ok("Green."))
    completion = await gateway.sdk.chat.completions.create(
        model="anthropic/claude-sonnet-4-6", messages=CONVERSATION
    )
    job_id = (completion.model_extra or {})["job_id"]

    replayed = await gateway.admin.post(f"/v1/jobs/{job_id}/replay", params={"reveal": "true"})

    assert replayed.status_code == 200, replayed.text
    result = replayed.json()
    assert (result["reproduced"], result["differing"]) == (True, [])
    assert result["prompt"]["system"] == ""  # the system turn stays where the caller put it
    assert [m["content"] for m in result["prompt"]["messages"]] == [
        "Answer in one sentence.",
        "Name a colour.",
        "Blue.",
        "Another one?",
    ]
    drift = (await gateway.admin.get("/v1/drift")).json()
    assert drift["checked_sources"] == 1 and drift["drifted"] == []  # built in: never drifts


async def test_the_builtin_chat_source_checks_its_variables_on_the_native_route(
    gateway: Gateway,
) -> None:
    reply = await gateway.admin.post(
        "/v1/completions",
        json={
            "pattern_key": "builtin:chat",
            "model": "openai/m",
            "variables": {"messages": [{"role": "tool", "content": "x"}]},
            "user_prompt": "hi",
        },
    )

    assert reply.status_code == 422
    error = reply.json()["error"]
    assert error["type"] == "invalid_request"
    assert error["errors"][0]["loc"][:4] == ["body", "variables", "messages", 0]


async def test_sampling_params_reach_the_provider_and_labels_are_ignored(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.ok("ok"))

    await gateway.sdk.chat.completions.create(
        model="openai/gpt-4o-mini",
        messages=[{"role": "developer", "content": "Be terse."}, {"role": "user", "content": "hi"}],
        stop="END",
        top_p=0.5,
        max_tokens=20,
        n=1,
        user="end-user-7",
        metadata={"team": "a"},
        store=False,
        response_format={"type": "text"},
    )

    (call,) = fake.calls("openai")
    assert call.body["stop"] == ["END"]
    assert call.body["top_p"] == 0.5
    assert 20 in (call.body.get("max_tokens"), call.body.get("max_completion_tokens"))
    assert "Be terse." in str(call.body["messages"][0])
    assert "end-user-7" not in str(call.body)  # a label for the gateway, not forwarded


@pytest.mark.parametrize(
    ("arguments", "param"),
    [
        ({"max_completion_tokens": 0}, "max_completion_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"extra_body": {"max_tokens": True}}, "max_tokens"),
        ({"temperature": 7}, "temperature"),
        ({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "messages[0]"),
    ],
)
async def test_a_bad_param_is_a_400_naming_the_openai_field(
    gateway: Gateway, arguments: dict[str, Any], param: str
) -> None:
    arguments = {"messages": [{"role": "user", "content": "hi"}], **arguments}
    with pytest.raises(openai.BadRequestError) as raised:
        await gateway.sdk.chat.completions.create(model="openai/m", **arguments)
    body: Any = raised.value.body
    assert body["type"] == "invalid_request"
    assert raised.value.param is not None and raised.value.param.startswith(param)
    assert raised.value.code == "invalid_value"


async def test_a_full_gateway_sheds_a_chat_completion_at_the_door(
    fake: FakeProviderServer,
) -> None:
    fake.script("openai", Reply.delay(1.0))
    settings = settings_for(fake, limits=LimitSettings(max_concurrent=1, max_queued=0))
    user: list[Any] = [{"role": "user", "content": "hi"}]
    async with serving(settings) as running:
        busy = asyncio.create_task(
            running.sdk.chat.completions.create(model="openai/gpt-4o-mini", messages=user)
        )
        for _ in range(500):  # until the one slot is taken by a call upstream
            if fake.calls("openai"):
                break
            await asyncio.sleep(0.01)

        with pytest.raises(openai.InternalServerError) as shed:
            await running.sdk.chat.completions.create(model="openai/gpt-4o-mini", messages=user)
        # At the door: before the key is checked or the body read.
        async with httpx.AsyncClient(base_url=running.base_url) as anonymous_client:
            anonymous = await anonymous_client.post("/v1/chat/completions", content=b"{not json")
        answered = await busy

    assert shed.value.status_code == 503
    assert shed.value.body["type"] == "overloaded"  # type: ignore[index]
    assert anonymous.status_code == 503
    assert answered.choices[0].message.content


@pytest.mark.parametrize(
    ("provider", "native", "expected"),
    [
        ("anthropic", "max_tokens", "length"),
        ("anthropic", "refusal", "content_filter"),
        ("openai", "content_filter", "content_filter"),
        ("ollama", "length", "length"),
        ("ollama", "unload", "stop"),  # no OpenAI name: a normal stop to OpenAI clients
    ],
)
async def test_finish_reasons_are_mapped_back_to_openai_names(
    gateway: Gateway, fake: FakeProviderServer, provider: str, native: str, expected: str
) -> None:
    fake.script(provider, Reply.ok("cut", finish=native), Reply.ok("cut", finish=native))
    model = dict(PROVIDER_MODELS)[provider]
    user: list[Any] = [{"role": "user", "content": "hi"}]

    completion = await gateway.sdk.chat.completions.create(model=model, messages=user)
    stream = await gateway.sdk.chat.completions.create(model=model, messages=user, stream=True)
    finishes = [c.choices[0].finish_reason async for c in stream if c.choices]

    assert completion.choices[0].finish_reason == expected
    assert [reason for reason in finishes if reason] == [expected]


async def test_extra_body_cache_answers_the_second_call_from_the_cache(
    gateway: Gateway, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.ok("Green."))
    arguments: dict[str, Any] = {
        "model": "openai/gpt-4o-mini",
        "messages": CONVERSATION,
        "extra_body": {"cache": True},
    }

    first = await gateway.sdk.chat.completions.create(**arguments)
    second = await gateway.sdk.chat.completions.create(**arguments)
    streamed = await gateway.sdk.chat.completions.create(**arguments, stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in streamed if c.choices])

    assert len(fake.calls("openai")) == 1
    assert second.choices[0].message.content == text == "Green."
    first_extra, second_extra = first.model_extra or {}, second.model_extra or {}
    assert second_extra["provenance"] == first_extra["provenance"]
    record = (await gateway.admin.get(f"/v1/jobs/{second_extra['job_id']}")).json()
    assert record["status"] == "cached"
