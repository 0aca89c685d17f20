"""Signed answers at both doors and at the command line: the official OpenAI and Anthropic SDKs'
responses (whole and streamed) carry a `signature` that the independent verifier of
tests/signing_spec.py accepts, rebuilding the response from what the SDK returned; and
`genai verify` says valid (0), what fails (1) or what is wrong with its input (2), in one line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from anthropic import AsyncAnthropic

from app.store.signing_keys import load_signer
from tests.fakes.provider_server import FakeCall, FakeProviderServer, Reply
from tests.signing_spec import arguments_value, check, response_hash
from tests.support import run_cli, running_app, settings_for
from tests.test_openai_compat import serving

QUESTION: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


async def keys_of(base_url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base_url) as anonymous:
        resp = await anonymous.get("/v1/provenance/keys")
    assert resp.status_code == 200, resp.text
    keys: dict[str, Any] = resp.json()
    return keys


def openai_verdict(body: dict[str, Any], keys: dict[str, Any]) -> str | None:
    message = body["choices"][0]["message"]
    calls = [
        {
            "id": c["id"],
            "name": c["function"]["name"],
            "arguments": arguments_value(c["function"]["arguments"]),
        }
        for c in message.get("tool_calls") or []
    ]
    digest = response_hash(
        text=message.get("content") or "", tool_calls=calls, parsed=body.get("parsed")
    )
    return check(
        signature=body["signature"],
        job_id=body["job_id"],
        provenance=body["provenance"],
        response_sha256=digest,
        keys=keys,
    )


async def test_openai_sdk_answers_whole_and_streamed_carry_a_verifiable_signature(
    fake: FakeProviderServer,
) -> None:
    fake.script("openai", Reply.ok(tool_calls=(FakeCall("get_weather", {"city": "Paris"}),)))
    async with serving(settings_for(fake)) as gateway:
        keys = await keys_of(gateway.base_url)
        called = await gateway.sdk.chat.completions.create(
            model="openai/gpt-4o-mini", messages=QUESTION, tools=[WEATHER]
        )
        plain = await gateway.sdk.chat.completions.create(
            model="openai/gpt-4o-mini", messages=QUESTION
        )
        text, final = "", None
        stream = await gateway.sdk.chat.completions.create(
            model="openai/gpt-4o-mini", messages=QUESTION, stream=True
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
            if (chunk.model_extra or {}).get("signature"):
                final = chunk.model_extra
    for completion in (called, plain):
        body = completion.model_dump(mode="json")
        assert body["signature"]["kid"] == keys["keys"][0]["kid"]
        assert openai_verdict(body, keys) is None
        body["choices"][0]["message"]["content"] = (
            body["choices"][0]["message"]["content"] or ""
        ) + "!"
        assert openai_verdict(body, keys) == "response"
    assert called.choices[0].message.tool_calls  # the tool call is part of what was signed
    assert final is not None and text
    digest = response_hash(text=text, tool_calls=[], parsed=None)
    verdict = check(
        signature=final["signature"],
        job_id=final["job_id"],
        provenance=final["provenance"],
        response_sha256=digest,
        keys=keys,
    )
    assert verdict is None


def anthropic_verdict(body: dict[str, Any], keys: dict[str, Any]) -> str | None:
    blocks = body["content"]
    text = "".join(b["text"] for b in blocks if b["type"] == "text")
    calls = [
        {"id": b["id"], "name": b["name"], "arguments": b["input"]}
        for b in blocks
        if b["type"] == "tool_use"
    ]
    return check(
        signature=body["signature"],
        job_id=body["job_id"],
        provenance=body["provenance"],
        response_sha256=response_hash(text=text, tool_calls=calls, parsed=body.get("parsed")),
        keys=keys,
    )


async def test_anthropic_sdk_answers_whole_and_streamed_carry_a_verifiable_signature(
    fake: FakeProviderServer,
) -> None:
    fake.script("anthropic", Reply.ok(tool_calls=(FakeCall("get_weather", {"city": "Oslo"}),)))
    async with serving(settings_for(fake)) as gateway:
        keys = await keys_of(gateway.base_url)
        sdk = AsyncAnthropic(base_url=gateway.base_url, api_key=gateway.sdk.api_key, max_retries=0)
        async with sdk:
            tools: Any = [{"name": "get_weather", "input_schema": {"type": "object"}}]
            called = await sdk.messages.create(
                model="anthropic/claude-sonnet-4-5", max_tokens=50, messages=QUESTION, tools=tools
            )
            plain = await sdk.messages.create(
                model="anthropic/claude-sonnet-4-5", max_tokens=50, messages=QUESTION
            )
            text, final = "", None
            async with sdk.messages.stream(
                model="anthropic/claude-sonnet-4-5", max_tokens=50, messages=QUESTION
            ) as stream:
                async for event in stream:
                    if event.type == "text":
                        text += event.text
                    if event.type == "message_delta":
                        final = event.model_extra
    for message in (called, plain):
        body = message.model_dump(mode="json")
        assert anthropic_verdict(body, keys) is None
        body["job_id"] = body["job_id"][:-1] + ("0" if body["job_id"][-1] != "0" else "1")
        assert anthropic_verdict(body, keys) == "signature"
    assert any(b.type == "tool_use" for b in called.content)
    assert final is not None and text
    verdict = check(
        signature=final["signature"],
        job_id=final["job_id"],
        provenance=final["provenance"],
        response_sha256=response_hash(text=text, tool_calls=[], parsed=None),
        keys=keys,
    )
    assert verdict is None


@pytest.fixture
async def signed_answers(fake: FakeProviderServer, tmp_path: Path, cli_env: Any) -> dict[str, Path]:
    """A native envelope and an OpenAI and an Anthropic body, saved as files, signed with the
    key of the data dir the CLI then reads (GENAI_DATA_DIR)."""
    settings = settings_for(fake, data_dir=tmp_path / "data")
    cli_env(GENAI_DATA_DIR=str(settings.data_dir))
    files = {}
    async with running_app(settings) as (_, http):
        bodies = {
            "envelope": await http.post(
                "/v1/completions",
                json={
                    "pattern_key": "summarize",
                    "user_prompt": "Revenue rose.",
                    "model": "openai/gpt-4o-mini",
                },
            ),
            "openai": await http.post(
                "/v1/chat/completions", json={"model": "openai/gpt-4o-mini", "messages": QUESTION}
            ),
            "anthropic": await http.post(
                "/v1/messages",
                json={
                    "model": "anthropic/claude-sonnet-4-5",
                    "max_tokens": 20,
                    "messages": QUESTION,
                },
            ),
            "keys": await http.get("/v1/provenance/keys"),
        }
        for name, resp in bodies.items():
            assert resp.status_code == 200, resp.text
            files[name] = tmp_path / f"{name}.json"
            files[name].write_text(resp.text)
    return files


def test_genai_verify_accepts_each_signed_shape(signed_answers: dict[str, Path]) -> None:
    keys = json.loads(signed_answers["keys"].read_text())
    for name in ("envelope", "openai", "anthropic"):
        for extra in ([], ["--keys", str(signed_answers["keys"])]):
            result = run_cli("verify", str(signed_answers[name]), *extra)
            assert result.exit_code == 0, (name, result.output)
            assert result.stdout.startswith(f"valid: signed by {keys['keys'][0]['kid']} at ")
    printed = run_cli("provenance", "keys")
    assert printed.exit_code == 0 and json.loads(printed.stdout) == keys


def test_genai_verify_says_exactly_what_fails(
    signed_answers: dict[str, Path], tmp_path: Path
) -> None:
    envelope = json.loads(signed_answers["envelope"].read_text())

    def verify_changed(change: Any, *extra: str) -> Any:
        altered = json.loads(json.dumps(envelope))
        change(altered)
        path = tmp_path / "altered.json"
        path.write_text(json.dumps(altered))
        return run_cli("verify", str(path), *extra)

    cases = [
        (
            lambda e: e["response"].update(text=e["response"]["text"] + "."),
            "invalid: response_sha256 does not match the response",
        ),
        (lambda e: e["provenance"].update(model="gpt-4o"), "invalid: signature does not match"),
        (lambda e: e.update(job_id="0" * 32), "invalid: signature does not match"),
        (
            lambda e: e["signature"].update(kid="0" * 16),
            "invalid: unknown key id '0000000000000000'",
        ),
    ]
    for change, line in cases:
        result = verify_changed(change)
        assert result.exit_code == 1, result.output
        assert result.stderr.strip() == line
    # Keys of another installation: the key id is unknown there.
    other = load_signer(settings_for(None, data_dir=tmp_path / "other")).ring.published()
    (tmp_path / "other.json").write_text(other.model_dump_json())
    result = run_cli(
        "verify", str(signed_answers["envelope"]), "--keys", str(tmp_path / "other.json")
    )
    assert result.exit_code == 1 and result.stderr.startswith("invalid: unknown key id")


def test_genai_verify_bad_input_is_one_line_and_exit_2(
    signed_answers: dict[str, Path], tmp_path: Path
) -> None:
    envelope = str(signed_answers["envelope"])
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "plain.json").write_text('{"hello": 1}')
    (tmp_path / "badkeys.json").write_text('{"keys": [{"kid": "x"}]}')
    cases = [
        ([str(tmp_path / "broken.json")], "is not JSON"),
        ([str(tmp_path / "plain.json")], "is not a signed answer"),
        ([str(tmp_path / "missing.json")], "cannot be read: No such file or directory"),
        ([envelope, "--keys", str(tmp_path / "nokeys.json")], "cannot be read"),
        ([envelope, "--keys", str(tmp_path / "badkeys.json")], "is not a key list"),
        ([envelope, "--keys", str(tmp_path / "broken.json")], "is not JSON"),
        ([envelope, "--keys", "http://127.0.0.1:9/v1/provenance/keys"], "cannot be fetched"),
    ]
    for args, problem in cases:
        result = run_cli("verify", *args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("genai: ") and problem in lines[0], lines


async def test_genai_verify_fetches_the_keys_from_a_running_service(
    fake: FakeProviderServer, tmp_path: Path, cli_env: Any
) -> None:
    """`--keys URL`: the open keys route of a live service, fetched by the command (run in a
    thread, so the server on this loop keeps answering)."""
    async with serving(settings_for(fake)) as gateway:
        completion = await gateway.sdk.chat.completions.create(
            model="openai/gpt-4o-mini", messages=QUESTION
        )
        saved = tmp_path / "answer.json"
        saved.write_text(completion.model_dump_json())
        url = f"{gateway.base_url}/v1/provenance/keys"
        result = await asyncio.to_thread(run_cli, "verify", str(saved), "--keys", url)
    assert result.exit_code == 0, result.output
    kid = (completion.model_extra or {})["signature"]["kid"]
    assert result.stdout.startswith(f"valid: signed by {kid} at ")
