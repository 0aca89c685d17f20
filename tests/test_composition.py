"""Prompt composition end to end: snippets, tri-section assembly, capabilities, chat patterns and
structured output, checked at the HTTP boundary of each provider with the real SDKs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.catalog import PatternCatalog
from app.tracking import pattern_content_hash, user_prompt_hash
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import serve_app, settings_for

SUPPORT = """---
description: Answer a support question.
snippets: [PERSONA]
---
Answer the customer's question about {{ product }}.
"""

FEW_SHOT = """---
description: Classify sentiment with examples.
---
Classify the sentiment of the message as positive or negative.
=== user ===
I love it
=== assistant ===
positive
=== user ===
It broke after a day
=== assistant ===
negative
"""

TEMPLATED_USER = """---
description: Wrap the user's text in a review request.
user_template: true
---
You review text.
=== user ===
Please review this for {{ audience }}:
<text>{{ user_prompt }}</text>
"""

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}

EXTRACT = f"""---
description: Extract a person.
output_schema: {json.dumps(SCHEMA)}
---
Extract the person mentioned in the message.
"""

EXTRACT_FILE = """---
description: Extract a person, schema in a file.
output_schema: person.schema.json
---
Extract the person mentioned in the message.
"""

TOOLS = """---
description: Needs tool calling.
requires: [tools]
---
Use your tools.
"""

PERSONA = """---
name: Persona
tags: persona
---
You are Nova, a calm support agent."""

TONE = """---
name: Tone
tags: [tone]
---
Be formal."""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "patterns"
    (root / "snippets").mkdir(parents=True)
    files = {
        "support.md": SUPPORT,
        "few_shot.md": FEW_SHOT,
        "templated.md": TEMPLATED_USER,
        "extract.md": EXTRACT,
        "extract_file.md": EXTRACT_FILE,
        "tools.md": TOOLS,
        "snippets/nova.md": PERSONA,
        "snippets/formal.md": TONE,
    }
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    (root / "person.schema.json").write_text(json.dumps(SCHEMA), encoding="utf-8")
    return root


def composed_settings(fake: FakeProviderServer, root: Path, tmp_path: Path, **extra: Any) -> Any:
    return settings_for(fake, pattern_dir=[root], data_dir=tmp_path / "data", **extra)


SUPPORT_REQUEST = {
    "pattern_key": "support",
    "variables": {"product": "the router"},
    "user_prompt": "It keeps rebooting.",
    "snippets": {"PERSONA": "nova", "TONE": "formal"},
    "instructions": "Answer in at most three sentences.",
}
EXPECTED_SYSTEM = (
    "PERSONA:\nYou are Nova, a calm support agent.\n\nTONE:\nBe formal.\n\n"
    "Answer the customer's question about the router.\n\n"
    "Configured rule for support.\n\n"
    "Answer in at most three sentences."
)


@pytest.mark.parametrize("provider", ["openai", "anthropic", "ollama"])
async def test_snippets_and_user_instructions_assemble_the_same_for_every_provider(
    fake: FakeProviderServer, root: Path, tmp_path: Path, provider: str
) -> None:
    settings = composed_settings(
        fake, root, tmp_path, task_instructions={"support": "Configured rule for support."}
    )
    async with serve_app(settings) as http:
        resp = await http.post(
            "/v1/completions", json={**SUPPORT_REQUEST, "model": f"{provider}/m"}
        )
        assert resp.status_code == 200, resp.text
        envelope = resp.json()
        record = (await http.get(f"/v1/jobs/{envelope['job_id']}")).json()
        replay = (await http.post(f"/v1/jobs/{envelope['job_id']}/replay")).json()
    assert envelope["prompt"]["system"] == EXPECTED_SYSTEM
    [sent] = fake.calls(provider)
    user = {"role": "user", "content": "It keeps rebooting."}
    if provider == "anthropic":
        # A pattern's system prompt goes as one block marked as a prompt-cache breakpoint.
        system = [{"type": "text", "text": EXPECTED_SYSTEM, "cache_control": {"type": "ephemeral"}}]
        assert sent.body["system"] == system and sent.body["messages"] == [user]
    else:
        assert sent.body["messages"] == [{"role": "system", "content": EXPECTED_SYSTEM}, user]
    assert envelope["provenance"]["snippet_ids"] == ["nova", "formal"]
    assert record["snippet_ids"] == ["nova", "formal"]
    assert replay["reproduced"] is True, replay["differing"]


async def test_a_pattern_missing_its_declared_snippet_label_is_422(
    fake: FakeProviderServer, root: Path, tmp_path: Path
) -> None:
    async with serve_app(composed_settings(fake, root, tmp_path)) as http:
        missing = await http.post("/v1/render", json={**SUPPORT_REQUEST, "snippets": {}})
        unknown = await http.post(
            "/v1/render", json={**SUPPORT_REQUEST, "snippets": {"PERSONA": "nobody"}}
        )
    assert missing.status_code == 422
    assert (
        missing.json()["error"] | {"type": "missing_snippets", "labels": ["PERSONA"]}
        == missing.json()["error"]
    )
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "snippet_not_found"


async def test_a_model_without_system_prompt_gets_it_folded_into_the_user_message(
    fake: FakeProviderServer, root: Path, tmp_path: Path
) -> None:
    async with serve_app(composed_settings(fake, root, tmp_path)) as http:
        resp = await http.post(
            "/v1/completions", json={**SUPPORT_REQUEST, "model": "ollama/gemma:2b"}
        )
    assert resp.status_code == 200, resp.text
    prompt = resp.json()["prompt"]
    assert prompt["system_folded"] is True and prompt["system"] == ""
    [sent] = fake.calls("ollama")
    assert [m["role"] for m in sent.body["messages"]] == ["user"]
    content = sent.body["messages"][0]["content"]
    assert content.startswith("PERSONA:\nYou are Nova") and content.endswith("It keeps rebooting.")


async def test_few_shot_chat_pattern_sends_examples_before_the_verbatim_user_text(
    client_for: Any, fake: FakeProviderServer
) -> None:
    async with client_for() as http:
        resp = await http.post(
            "/v1/completions",
            json={
                "pattern_key": "few_shot",
                "user_prompt": "Meh, it works",
                "model": "anthropic/m",
            },
        )
    assert resp.status_code == 200, resp.text
    [sent] = fake.calls("anthropic")
    assert [block["text"] for block in sent.body["system"]] == [
        "Classify the sentiment of the message as positive or negative."
    ]
    assert [(m["role"], m["content"]) for m in sent.body["messages"]] == [
        ("user", "I love it"),
        ("assistant", "positive"),
        ("user", "It broke after a day"),
        ("assistant", "negative"),
        ("user", "Meh, it works"),
    ]


async def test_user_templating_is_opt_in_and_the_hash_stays_on_the_raw_user_text(
    client_for: Any, fake: FakeProviderServer
) -> None:
    async with client_for() as http:
        resp = await http.post(
            "/v1/completions",
            json={
                "pattern_key": "templated",
                "variables": {"audience": "lawyers"},
                "user_prompt": "Terms apply.",
                "model": "openai/m",
            },
        )
    assert resp.status_code == 200, resp.text
    envelope = resp.json()
    [sent] = fake.calls("openai")
    assert sent.body["messages"][-1] == {
        "role": "user",
        "content": "Please review this for lawyers:\n<text>Terms apply.</text>",
    }
    assert envelope["provenance"]["user_prompt_hash"] == user_prompt_hash("Terms apply.")


@pytest.fixture
def client_for(fake: FakeProviderServer, root: Path, tmp_path: Path) -> Any:
    def factory(**extra: Any) -> Any:
        return serve_app(composed_settings(fake, root, tmp_path, **extra))

    return factory


GOOD = json.dumps({"name": "Ada", "age": 36})
BAD = json.dumps({"name": "Ada", "age": -1, "nickname": "A"})


@pytest.mark.parametrize(
    ("model", "provider"),
    [
        ("openai/gpt-4o-mini", "openai"),
        ("anthropic/claude-sonnet-4-5", "anthropic"),
        ("anthropic/claude-3-5-haiku", "anthropic"),  # older: through a forced tool
        ("ollama/llama3.2", "ollama"),
    ],
)
async def test_output_schema_goes_natively_to_each_provider_and_parsed_is_returned(
    client_for: Any, fake: FakeProviderServer, model: str, provider: str
) -> None:
    fake.script(provider, Reply.ok(text=GOOD))
    async with client_for() as http:
        resp = await http.post(
            "/v1/completions",
            json={"pattern_key": "extract", "user_prompt": "Ada is 36.", "model": model},
        )
    assert resp.status_code == 200, resp.text
    envelope = resp.json()
    assert envelope["parsed"] == {"name": "Ada", "age": 36}
    assert envelope["validation"] == {
        "valid": True,
        "attempts": 1,
        "mode": "native",
        "issues": None,
    }
    body = fake.calls(provider)[0].body
    if provider == "openai":
        assert body["response_format"]["json_schema"]["schema"] == SCHEMA
    elif provider == "ollama":
        assert body["format"] == SCHEMA
    elif model.startswith("anthropic/claude-3"):
        assert body["tool_choice"] == {"type": "tool", "name": "emit_output"}
        assert body["tools"][0]["input_schema"] == SCHEMA
    else:
        assert body["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}
        assert "tools" not in body
    assert "Return the result as a JSON value" in envelope["prompt"]["system"]


async def test_without_native_support_the_schema_travels_in_adapter_instructions(
    client_for: Any, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.ok(text=f"```json\n{GOOD}\n```"))
    async with client_for() as http:
        resp = await http.post(
            "/v1/completions",
            json={
                "pattern_key": "extract_file",
                "user_prompt": "Ada is 36.",
                "model": "openai/o1-mini",
            },
        )
    assert resp.status_code == 200, resp.text
    envelope = resp.json()
    assert envelope["validation"]["mode"] == "instructions"
    assert envelope["parsed"] == {"name": "Ada", "age": 36}
    body = fake.calls("openai")[0].body
    assert "response_format" not in body
    # o1-mini takes no system prompt, so everything is folded into the user message.
    content = body["messages"][0]["content"]
    assert '"additionalProperties": false' in content and content.endswith("Ada is 36.")


async def test_an_invalid_answer_is_repaired_with_structured_feedback(
    client_for: Any, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.ok(text=BAD), Reply.ok(text=GOOD))
    async with client_for() as http:
        resp = await http.post(
            "/v1/completions", json={"pattern_key": "extract", "user_prompt": "Ada is 36."}
        )
        envelope = resp.json()
        record = (await http.get(f"/v1/jobs/{envelope['job_id']}")).json()
    assert resp.status_code == 200, resp.text
    assert envelope["parsed"] == {"name": "Ada", "age": 36}
    assert envelope["validation"]["attempts"] == 2
    assert envelope["response"]["usage"]["input_tokens"] == 22  # both attempts are counted
    _, second = fake.calls("openai")
    repair = second.body["messages"][-2:]
    assert repair[0] == {"role": "assistant", "content": BAD}
    feedback = json.loads(repair[1]["content"])
    assert list(feedback) == ["result", "issues", "issue_count", "action"]
    assert feedback["result"] == "validation_failed" and feedback["issue_count"] == 2
    assert feedback["issues"]["unknown"] == ["nickname"]
    assert feedback["issues"]["invalid"][0]["field"] == "age"
    assert [a["valid"] for a in record["output_attempts"]] == [False, True]


async def test_a_final_validation_failure_is_502_with_every_attempt_recorded(
    client_for: Any, fake: FakeProviderServer
) -> None:
    fake.script("ollama", *[Reply.ok(text="not json")] * 3)
    async with client_for(structured_max_attempts=3) as http:
        resp = await http.post(
            "/v1/completions",
            json={
                "pattern_key": "extract",
                "user_prompt": "Ada is 36.",
                "model": "ollama/llama3.2",
            },
        )
        error = resp.json()["error"]
        record = (await http.get(f"/v1/jobs/{error['job_id']}")).json()
    assert resp.status_code == 502
    assert error["type"] == "structured_output_invalid" and error["attempts"] == 3
    assert len(fake.calls("ollama")) == 3
    assert record["status"] == "failed" and len(record["output_attempts"]) == 3
    assert record["error_type"] == "structured_output_invalid"


async def test_a_model_lacking_a_required_capability_is_refused_before_any_call(
    client_for: Any, fake: FakeProviderServer
) -> None:
    async with client_for() as http:
        resp = await http.post(
            "/v1/completions",
            json={"pattern_key": "tools", "user_prompt": "x", "model": "ollama/gemma:2b"},
        )
        too_long = await http.post(
            "/v1/render",
            json={
                "pattern_key": "tools",
                "user_prompt": "x",
                "model": "ollama/llama3.2",
                "params": {"max_tokens": 50_000},
            },
        )
    assert resp.status_code == 422
    error = resp.json()["error"]
    assert error["type"] == "capability_missing" and error["missing"] == ["no tools support"]
    assert too_long.status_code == 422
    assert "exceeds its output limit 4096" in too_long.json()["error"]["missing"][0]
    assert fake.requests == []


async def test_a_configured_capable_fallback_is_chosen_and_the_reason_recorded(
    client_for: Any, fake: FakeProviderServer
) -> None:
    async with client_for(capable_fallback_models=["ollama/gemma2", "anthropic/claude-x"]) as http:
        resp = await http.post(
            "/v1/completions",
            json={"pattern_key": "tools", "user_prompt": "x", "model": "ollama/gemma:2b"},
        )
    assert resp.status_code == 200, resp.text
    choice = resp.json()["model_choice"]
    assert (choice["model"], choice["source"]) == ("anthropic/claude-x", "capability_fallback")
    assert "no tools support" in choice["reason"]
    assert len(fake.calls("anthropic")) == 1 and fake.calls("ollama") == []


async def test_invalid_chat_and_schema_patterns_fail_at_load_with_clear_problems(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    root = tmp_path / "broken"
    root.mkdir()
    (root / "ends_user.md").write_text("---\ndescription: d\n---\nx\n=== user ===\nhi\n")
    (root / "bad_schema.md").write_text(
        "---\ndescription: d\noutput_schema: {type: nonsense}\n---\nx\n"
    )
    (root / "lower_label.md").write_text("---\ndescription: d\nsnippets: [persona]\n---\nx\n")
    async with serve_app(settings_for(fake, pattern_dir=[root])) as http:
        problems = {
            name: (
                await http.post("/v1/render", json={"pattern_key": name, "user_prompt": "x"})
            ).json()["error"]
            for name in ("ends_user", "bad_schema", "lower_label")
        }
    assert all(p["type"] == "invalid_pattern" for p in problems.values())
    assert "user_template" in problems["ends_user"]["message"]
    assert "not a valid JSON Schema" in problems["bad_schema"]["message"]
    assert "UPPER_CASE" in problems["lower_label"]["message"]


def test_editing_a_sibling_schema_file_changes_the_content_hash(root: Path) -> None:
    adapter = PatternCatalog(base_path=root)
    before = adapter.get("extract_file")
    assert before.output_schema == SCHEMA
    schema = {**SCHEMA, "required": ["name"]}
    (root / "person.schema.json").write_text(json.dumps(schema), encoding="utf-8")
    assert adapter.refresh() is True
    after = adapter.get("extract_file")
    assert after.output_schema == schema
    assert after.content_hash != before.content_hash
    raw = (root / "extract_file.md").read_bytes()
    assert after.content_hash == pattern_content_hash(raw + b"\0" + json.dumps(schema).encode())
