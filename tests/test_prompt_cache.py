"""Prompt caching as a cost lever: a pattern's system prompt goes to Anthropic as a cache
breakpoint unless the pattern opts out (`prompt_cache: false`); markers the caller sent are kept,
and never pushed past Anthropic's four; the marker is a transport detail, so the rendered prompt,
its fingerprints and the audit record do not change with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.catalog.pattern import read_pattern
from app.errors import InvalidPattern
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import serve_app, settings_for

SYSTEM = "You answer with the capital city only."
MARK: dict[str, Any] = {"type": "ephemeral"}
MARK_1H: dict[str, Any] = {"type": "ephemeral", "ttl": "1h"}
MODEL = "anthropic/claude-sonnet-4-5"


def pattern(front_matter: str = "") -> bytes:
    return f"---\ndescription: Capitals.\n{front_matter}---\n{SYSTEM}\n".encode()


def patterns(tmp_path: Path) -> Path:
    root = tmp_path / "patterns"
    root.mkdir(parents=True)
    (root / "capital.md").write_bytes(pattern())
    (root / "capital_uncached.md").write_bytes(pattern("prompt_cache: false\n"))
    return root


async def complete(
    tmp_path: Path, fake: FakeProviderServer, name: str, **extra: Any
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(the body Anthropic received, the envelope, the audit record)."""
    fake.script("anthropic", Reply.ok("Paris."))
    request = {"pattern_key": name, "user_prompt": "France?", "model": MODEL, **extra}
    async with serve_app(settings_for(fake, pattern_dir=[patterns(tmp_path)])) as http:
        resp = await http.post("/v1/completions", json=request)
        assert resp.status_code == 200, resp.text
        envelope = resp.json()
        record = (await http.get(f"/v1/jobs/{envelope['job_id']}")).json()
    return fake.calls("anthropic")[-1].body, envelope, record


async def test_a_patterns_system_prompt_is_a_cache_breakpoint_by_default(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    body, envelope, record = await complete(tmp_path, fake, "capital")
    assert body["system"] == [{"type": "text", "text": SYSTEM, "cache_control": MARK}]
    # The marker is not part of the prompt that was rendered, recorded and fingerprinted.
    assert envelope["prompt"]["system"] == SYSTEM
    assert record["prompt_redacted"]["system"] == SYSTEM


async def test_a_pattern_that_opts_out_sends_its_system_prompt_unmarked(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    body, envelope, _ = await complete(tmp_path, fake, "capital_uncached")
    assert body["system"] == SYSTEM
    assert envelope["prompt"]["system"] == SYSTEM


async def test_the_marker_does_not_change_the_prompts_fingerprints(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    _, marked, _ = await complete(tmp_path, fake, "capital")
    _, unmarked, _ = await complete(tmp_path / "again", fake, "capital_uncached")
    for field in ("variables_hash", "user_prompt_hash"):
        assert marked["provenance"][field] == unmarked["provenance"][field]
    assert marked["prompt"] == unmarked["prompt"]


async def test_markers_the_caller_sent_are_kept_beside_the_patterns(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    marked_turn = {
        "role": "user",
        "content": [{"type": "text", "text": "And Italy?", "cache_control": MARK_1H}],
    }
    continuation = [{"role": "assistant", "content": "Paris."}, marked_turn]
    body, _, _ = await complete(tmp_path, fake, "capital", continuation=continuation)
    assert body["system"] == [{"type": "text", "text": SYSTEM, "cache_control": MARK}]
    assert body["messages"][-1]["content"] == marked_turn["content"]


async def test_no_marker_is_added_to_a_request_that_already_has_four(
    tmp_path: Path, fake: FakeProviderServer
) -> None:
    turns: list[dict[str, Any]] = []
    for n in range(4):
        turns.append({"role": "assistant", "content": f"Answer {n}."})
        part = {"type": "text", "text": f"Question {n}?", "cache_control": MARK}
        turns.append({"role": "user", "content": [part]})
    body, _, _ = await complete(tmp_path, fake, "capital", continuation=turns)
    assert body["system"] == SYSTEM  # a fifth breakpoint would be refused by Anthropic
    assert sum("cache_control" in str(m["content"]) for m in body["messages"]) == 4


def test_prompt_cache_front_matter_defaults_to_on_and_must_be_a_boolean() -> None:
    assert read_pattern("p", "/r", pattern()).info.meta.prompt_cache is True
    assert read_pattern("p", "/r", pattern("prompt_cache: false\n")).info.meta.prompt_cache is False
    with pytest.raises(InvalidPattern) as caught:
        read_pattern("p", "/r", pattern("prompt_cache: [1]\n"))
    assert any("prompt_cache" in problem for problem in caught.value.problems)
