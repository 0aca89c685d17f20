"""The clients teams already use, unchanged, against the gateway's OpenAI door: LangChain's
ChatOpenAI (tools, structured output, context overflow), pydantic-ai (function tools, typed
output) and the `llm` command line (--schema, tools). Each talks HTTP to a real server; the
fake provider behind it answers with tool calls and JSON as a model would.

instructor is not here: its releases pin an older openai SDK than the gateway's tests use.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from app.auth import Scope
from tests.fakes.provider_server import FakeCall, FakeProviderServer, Reply
from tests.live_server import LiveGateway, live_gateway
from tests.processes import run_process
from tests.support import settings_for

MODELS = [("openai", "gpt-4o-mini"), ("anthropic", "claude-sonnet-4-5"), ("ollama", "llama3.2")]


class City(BaseModel):
    name: str
    population: int


@pytest.fixture
def gateway(fake: FakeProviderServer) -> Any:
    with live_gateway(settings_for(fake)) as running:
        yield running


def _key(gateway: LiveGateway) -> str:
    """A `complete` key, as an application holds (minted with the live admin key)."""
    made = httpx.post(
        f"{gateway.base_url}/v1/keys",
        headers={"Authorization": f"Bearer {gateway.admin_key}"},
        json={"scope": Scope.complete.value, "name": "client"},
    )
    made.raise_for_status()
    return str(made.json()["key"])


# --- LangChain -------------------------------------------------------------------------------


def _chat(gateway: LiveGateway, model: str) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=model, base_url=f"{gateway.base_url}/v1", api_key=_key(gateway), max_retries=0
    )


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"18 C in {city}"


@pytest.mark.parametrize(("provider", "model"), MODELS)
async def test_langchain_bind_tools_and_the_tool_loop(
    gateway: LiveGateway, fake: FakeProviderServer, provider: str, model: str
) -> None:
    from langchain_core.messages import HumanMessage, ToolMessage

    fake.script(
        provider,
        Reply.ok(tool_calls=(FakeCall("get_weather", {"city": "Paris"}),)),
        Reply.ok("It is 18 C in Paris."),
    )
    chat = _chat(gateway, model).bind_tools([get_weather])

    asked = HumanMessage("Weather in Paris?")
    first = await chat.ainvoke([asked])
    (call,) = first.tool_calls
    result = ToolMessage(get_weather(**call["args"]), tool_call_id=call["id"])
    second = await chat.ainvoke([asked, first, result])

    assert (call["name"], call["args"]) == ("get_weather", {"city": "Paris"})
    assert second.content == "It is 18 C in Paris."
    sent = fake.calls(provider)[1].body
    assert "18 C in Paris" in json.dumps(sent["messages"])


@pytest.mark.parametrize(("provider", "model"), MODELS)
async def test_langchain_streams_tool_call_chunks(
    gateway: LiveGateway, fake: FakeProviderServer, provider: str, model: str
) -> None:
    fake.script(provider, Reply.ok(tool_calls=(FakeCall("get_weather", {"city": "Oslo"}),)))
    chat = _chat(gateway, model).bind_tools([get_weather])

    merged: Any = None
    async for chunk in chat.astream("Weather in Oslo?"):
        merged = chunk if merged is None else merged + chunk

    assert [(c["name"], c["args"]) for c in merged.tool_calls] == [
        ("get_weather", {"city": "Oslo"})
    ]


@pytest.mark.parametrize("method", ["json_schema", "function_calling", "json_mode"])
async def test_langchain_with_structured_output_in_each_method(
    gateway: LiveGateway, fake: FakeProviderServer, method: str
) -> None:
    answer = {"name": "Paris", "population": 2100000}
    if method == "function_calling":
        fake.script("openai", Reply.ok(tool_calls=(FakeCall("City", answer),)))
    else:
        fake.script("openai", Reply.ok(json.dumps(answer)))
    chat = _chat(gateway, "gpt-4o-mini").with_structured_output(City, method=method)

    city = await chat.ainvoke("Paris? Answer in JSON.")

    assert city == City(name="Paris", population=2100000)


async def test_langchain_recognises_a_context_overflow(gateway: LiveGateway) -> None:
    from langchain_core.exceptions import ContextOverflowError

    chat = _chat(gateway, "openai/gpt-3.5-turbo")  # a 16k context in the capabilities file
    with pytest.raises(ContextOverflowError):
        await chat.ainvoke("word " * 80_000)


# --- pydantic-ai -----------------------------------------------------------------------------


def _agent(gateway: LiveGateway, model: str, **options: Any) -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=f"{gateway.base_url}/v1", api_key=_key(gateway))
    return Agent(OpenAIChatModel(model, provider=provider), **options)


@pytest.mark.parametrize(("provider", "model"), MODELS)
async def test_pydantic_ai_typed_output_and_a_function_tool(
    gateway: LiveGateway, fake: FakeProviderServer, provider: str, model: str
) -> None:
    agent = _agent(gateway, model, output_type=City, tools=[get_weather])
    final_tool = "final_result"  # pydantic-ai's own output tool
    fake.script(
        provider,
        Reply.ok(tool_calls=(FakeCall("get_weather", {"city": "Paris"}),)),
        Reply.ok(tool_calls=(FakeCall(final_tool, {"name": "Paris", "population": 3}),)),
    )

    result = await agent.run("Weather and size of Paris?")

    assert result.output == City(name="Paris", population=3)
    second = fake.calls(provider)[1].body
    assert "18 C in Paris" in json.dumps(second["messages"])


# --- the llm command line --------------------------------------------------------------------


def _llm(gateway: LiveGateway, home: Path, *args: str) -> CompletedProcess[str]:
    """`llm` in its own process, its home a temporary folder holding a gateway model."""
    home.mkdir(exist_ok=True)
    (home / "extra-openai-models.yaml").write_text(
        "- model_id: gw\n"
        "  model_name: gpt-4o-mini\n"
        f"  api_base: {gateway.base_url}/v1\n"
        "  api_key_name: gateway\n"
        "  supports_schema: true\n"
        "  supports_tools: true\n"
    )
    (home / "keys.json").write_text(json.dumps({"gateway": _key(gateway)}))
    llm = Path(sys.executable).with_name("llm")
    return run_process(
        [str(llm), "-m", "gw", "--no-log", *args],
        env={**os.environ, "LLM_USER_PATH": str(home)},
        timeout=60,
        check=False,
    )


def test_llm_cli_schema_and_tools(
    gateway: LiveGateway, fake: FakeProviderServer, tmp_path: Path
) -> None:
    fake.script("openai", Reply.ok(json.dumps({"name": "Paris", "population": 2})))
    schema = _llm(gateway, tmp_path / "llm", "--schema", "name, population int", "Paris?")
    fake.script(
        "openai",
        Reply.ok(tool_calls=(FakeCall("get_weather", {"city": "Paris"}),)),
        Reply.ok("It is 18 C."),
    )
    tools = _llm(
        gateway,
        tmp_path / "llm",
        "--functions",
        "def get_weather(city: str) -> str:\n    return '18 C in ' + city\n",
        "Weather in Paris?",
    )

    assert schema.returncode == 0, schema.stderr
    assert json.loads(schema.stdout) == {"name": "Paris", "population": 2}
    assert (
        schema.stdout and fake.calls("openai")[0].body["response_format"]["type"] == "json_schema"
    )
    assert tools.returncode == 0, tools.stderr
    assert "It is 18 C." in tools.stdout
    second = fake.calls("openai")[2].body["messages"]
    assert second[-1]["role"] == "tool" and "18 C in Paris" in second[-1]["content"]
