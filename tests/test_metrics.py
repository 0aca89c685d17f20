"""`/metrics` after real traffic through the app: every documented series, with sane values.

Each family is read back through prometheus-client's own parser, so a series that is missing,
mislabelled (a raw path instead of the route template) or counted twice fails here.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from app.config import LimitSettings
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.security.live import live_service, service_env
from tests.support import running_app, settings_for
from tests.test_serve_workers import BATCH, _complete_on_fresh_connections, _completed_per_worker

NOTE = """---
description: Write a short note.
defaults:
  tone: calm
---
Write a {{ tone }} note for {{ owner }}.
"""
NOTE_REQUEST: dict[str, Any] = {
    "pattern_key": "note",
    "variables": {"owner": "Ops"},
    "user_prompt": "hello there",
    "model": "openai/gpt-4o-mini",
}
FALLBACKS = {"openai/gpt-4o-mini": ["anthropic/claude-haiku-4-5"]}
UPSTREAM_DELAY = 0.2

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(exposition: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample with exactly these labels (histogram `le` aside: use the _count/_sum)."""
    key = (name, frozenset(labels.items()))
    assert key in samples, (
        f"{name}{labels} missing; have: {sorted(k for k in samples if k[0] == name)}"
    )
    return samples[key]


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of `name` whose labels include these."""
    wanted = set(labels.items())
    return sum(v for (n, found), v in samples.items() if n == name and wanted <= found)


def labels_of(samples: Samples, name: str) -> Iterable[dict[str, str]]:
    return [dict(found) for (n, found) in samples if n == name]


def completion_labels(provider: str, model: str, status: str = "200") -> dict[str, str]:
    return {
        "route": "/v1/completions",
        "pattern": "note",
        "provider": provider,
        "model": model,
        "status": status,
    }


async def test_every_series_appears_after_real_traffic(
    fake: FakeProviderServer, tmp_path: Path
) -> None:
    root = tmp_path / "patterns"
    root.mkdir()
    (root / "note.md").write_text(NOTE, encoding="utf-8")
    settings = settings_for(
        fake,
        pattern_dir=[root],
        fallbacks=FALLBACKS,
        limits=LimitSettings(max_concurrent=1, max_queued=0),
    )
    async with running_app(settings) as (_, http):
        fake.script("openai", Reply.delay(UPSTREAM_DELAY))
        answered = await http.post("/v1/completions", json=NOTE_REQUEST)
        assert answered.status_code == 200, answered.text
        # Two 5xx (retried), a third: the fallback model answers.
        fake.script("openai", *[Reply.error(500)] * 3)
        fell_back = await http.post("/v1/completions", json=NOTE_REQUEST)
        assert fell_back.json()["response"]["provider"] == "anthropic", fell_back.text
        # The response cache: a miss, then a hit.
        for _ in range(2):
            cached = await http.post("/v1/completions", json={**NOTE_REQUEST, "cache": True})
            assert cached.status_code == 200, cached.text
        # The variable contract: `owner` has no default.
        refused = await http.post("/v1/completions", json={**NOTE_REQUEST, "variables": {}})
        assert refused.json()["error"]["type"] == "missing_variables", refused.text
        # A template role without templates renders the fallback prompt.
        fallback_prompt = await http.post(
            "/v1/render",
            json={
                "template": {"name": "reply", "role": "critic"},
                "variables": {},
                "user_prompt": "x",
            },
        )
        assert fallback_prompt.status_code == 200, fallback_prompt.text
        # One slot and no queue: of two at once, one is shed.
        fake.script("openai", Reply.delay(UPSTREAM_DELAY))
        pair = await asyncio.gather(
            *(http.post("/v1/completions", json=NOTE_REQUEST) for _ in range(2))
        )
        assert sorted(r.status_code for r in pair) == [200, 503], [r.text for r in pair]
        job = await http.get(f"/v1/jobs/{answered.json()['job_id']}")
        assert job.status_code == 200, job.text
        assert (await http.get("/no/such/path")).status_code == 404
        # A pattern edited after use is drift.
        (root / "note.md").write_text(NOTE.replace("short", "long"), encoding="utf-8")
        assert (await http.get("/v1/drift")).json()["drifted"], "the edit is drift"
        samples = parse((await http.get("/metrics")).text)

    openai, anthropic = ("openai", "gpt-4o-mini"), ("anthropic", "claude-haiku-4-5")
    # Requests by route template, pattern, answering provider and model, and status.
    # Answered, the cache's miss and hit, and the one of the pair that was not shed.
    assert value(samples, "genai_requests_total", **completion_labels(*openai)) == 4
    assert value(samples, "genai_requests_total", **completion_labels(*anthropic)) == 1
    # Refused before a pattern was rendered: no pattern or model to name.
    unrendered = {"pattern": "", "provider": "", "model": ""}
    assert (
        value(samples, "genai_requests_total", route="/v1/completions", **unrendered, status="422")
        == 1
    )
    # Shed before routing, like a request for no route at all.
    assert value(samples, "genai_requests_total", route="unrouted", **unrendered, status="503") == 1
    assert value(samples, "genai_requests_total", route="unrouted", **unrendered, status="404") == 1
    assert value(samples, "genai_request_seconds_count", **completion_labels(*openai)) == 4
    no_model = {"pattern": "", "provider": "", "model": "", "status": "200"}
    assert value(samples, "genai_requests_total", route="/v1/jobs/{job_id}", **no_model) == 1
    assert value(samples, "genai_requests_total", route="/v1/drift", **no_model) == 1
    routes = {labels["route"] for labels in labels_of(samples, "genai_requests_total")}
    assert not [route for route in routes if answered.json()["job_id"] in route], routes
    # A template is labelled `template`: its name is the caller's to choose.
    render = {"route": "/v1/render", "pattern": "template", "status": "200"}
    assert total(samples, "genai_requests_total", **render) == 1
    # Upstream latency and the gateway's overhead: the 0.2 s upstream delay is never overhead.
    upstream = value(samples, "genai_upstream_seconds_sum", provider="openai", model="gpt-4o-mini")
    assert upstream >= 2 * UPSTREAM_DELAY
    assert (
        value(
            samples, "genai_upstream_seconds_count", provider="anthropic", model="claude-haiku-4-5"
        )
        == 1
    )
    overhead = value(samples, "genai_gateway_overhead_seconds_sum", route="/v1/completions")
    requests = total(samples, "genai_request_seconds_sum", route="/v1/completions")
    assert 0 < overhead <= requests - 2 * UPSTREAM_DELAY
    assert value(samples, "genai_gateway_overhead_seconds_count", route="/v1/completions") == 6
    # Retries, fallbacks, cache, shedding.
    assert (
        value(
            samples, "genai_upstream_retries_total", provider="openai", error_type="upstream_error"
        )
        == 2
    )
    fallback = {"from_model": "openai/gpt-4o-mini", "to_model": "anthropic/claude-haiku-4-5"}
    assert value(samples, "genai_fallbacks_total", **fallback) == 1
    assert value(samples, "genai_cache_requests_total", result="hit") == 1
    assert value(samples, "genai_cache_requests_total", result="miss") == 1
    assert value(samples, "genai_shed_total", limit="global") == 1
    # Tokens and cost (the fake reports 11 in, 7 out per call; gpt-4o-mini is priced).
    assert (
        value(samples, "genai_tokens_total", provider="openai", model="gpt-4o-mini", kind="input")
        == 11 * 3
    )
    assert (
        value(
            samples,
            "genai_tokens_total",
            provider="anthropic",
            model="claude-haiku-4-5",
            kind="output",
        )
        == 7
    )
    assert value(samples, "genai_cost_usd_total", provider="openai", model="gpt-4o-mini") > 0
    # The prompt-contract monitors.
    assert value(samples, "genai_template_fallbacks_total") == 1
    assert (
        value(
            samples, "genai_contract_failures_total", pattern="note", error_type="missing_variables"
        )
        == 1
    )
    assert value(samples, "genai_drift_detections_total", source_kind="pattern") == 1
    system_chars = value(samples, "genai_rendered_prompt_chars_sum", pattern="note", role="system")
    rendered = 5  # every completion rendered (the refused and the shed one were not)
    assert (
        value(samples, "genai_rendered_prompt_chars_count", pattern="note", role="system")
        == rendered
    )
    assert system_chars == rendered * len("Write a calm note for Ops.")
    user_chars = value(samples, "genai_rendered_prompt_chars_sum", pattern="note", role="user")
    assert user_chars == rendered * len("hello there")


HINTED = """---
description: A note whose model comes from its own file.
model_hint: anthropic/claude-from-the-pattern-file
---
Write a note for {{ owner }}.
"""


async def test_only_configured_models_and_catalogued_patterns_become_label_values(
    fake: FakeProviderServer, tmp_path: Path
) -> None:
    root = tmp_path / "patterns"
    root.mkdir()
    (root / "note.md").write_text(NOTE, encoding="utf-8")
    (root / "hinted.md").write_text(HINTED, encoding="utf-8")
    settings = settings_for(
        fake,
        pattern_dir=[root],
        fallbacks={"note": ["anthropic/claude-haiku-4-5"]},
        model_aliases={"quick": "openai/gpt-4o"},
    )
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    async with running_app(settings) as (_, http):
        sent = [
            # A model no one configured, answered by a known provider, then by its fallback.
            await http.post("/v1/completions", json={**NOTE_REQUEST, "model": "openai/made-up-1"}),
            await http.post("/v1/chat/completions", json={**chat, "model": "anthropic/made-up-2"}),
            # The model the pattern file names, and a configured one by its alias.
            await http.post(
                "/v1/completions",
                json={"pattern_key": "hinted", "variables": {"owner": "Ops"}, "user_prompt": "x"},
            ),
            await http.post("/v1/chat/completions", json={**chat, "model": "quick"}),
            # A template with no active version: the fallback prompt.
            await http.post(
                "/v1/render",
                json={"template": {"name": "made-up-3", "role": "made-up-4"}, "user_prompt": "x"},
            ),
            await http.post(
                "/v1/templates",
                json={
                    "name": "made-up-5",
                    "role": "writer",
                    "template": "Hi {{ who }}.",
                    "variables": ["who"],
                },
            ),
        ]
        fake.script("openai", *[Reply.error(500)] * 3)
        sent.append(
            await http.post("/v1/completions", json={**NOTE_REQUEST, "model": "openai/made-up-6"})
        )
        refused = await http.post(
            "/v1/render",
            json={"template": {"name": "made-up-5", "role": "writer"}, "user_prompt": "x"},
        )
        exposition = (await http.get("/metrics")).text
    assert [r.status_code for r in sent] == [200, 200, 200, 200, 200, 201, 200], [
        r.text for r in sent
    ]
    assert refused.json()["error"]["type"] == "variable_contract_violation", refused.text
    assert "made-up" not in exposition
    samples = parse(exposition)
    requests = "genai_requests_total"
    assert value(samples, requests, **completion_labels("openai", "other")) == 1
    assert value(samples, requests, **completion_labels("anthropic", "claude-haiku-4-5")) == 1
    door = {"route": "/v1/chat/completions", "pattern": "builtin:chat", "status": "200"}
    assert value(samples, requests, **door, provider="anthropic", model="other") == 1
    assert value(samples, requests, **door, provider="openai", model="gpt-4o") == 1
    hinted = {"provider": "anthropic", "model": "claude-from-the-pattern-file"}
    assert total(samples, requests, pattern="hinted", **hinted) == 1
    assert total(samples, requests, route="/v1/render", pattern="template", status="200") == 1
    fallback = {"from_model": "other", "to_model": "anthropic/claude-haiku-4-5"}
    assert value(samples, "genai_fallbacks_total", **fallback) == 1
    assert value(samples, "genai_upstream_seconds_count", provider="openai", model="other") == 1
    assert total(samples, "genai_tokens_total", provider="anthropic", model="other") > 0
    contract = {"pattern": "template", "error_type": "variable_contract_violation"}
    assert value(samples, "genai_contract_failures_total", **contract) == 1
    chars = {"pattern": "template", "role": "system"}
    assert value(samples, "genai_rendered_prompt_chars_count", **chars) == 1
    assert value(samples, "genai_template_fallbacks_total") == 1


async def test_every_response_carries_its_request_id_and_the_gateway_overhead(
    fake: FakeProviderServer,
) -> None:
    async with running_app(settings_for(fake)) as (_, http):
        fake.script("openai", Reply.delay(UPSTREAM_DELAY))
        request = {"pattern_key": "summarize", "variables": {}, "user_prompt": "a text"}
        completed = await http.post("/v1/completions", json=request)
        health = await http.get("/healthz", headers={"x-request-id": "probe-1"})
        missing = await http.get("/v1/jobs/nope")
    for response in (completed, health, missing):
        assert response.headers["x-request-id"]
        overhead = float(response.headers["x-genai-overhead-ms"])
        assert overhead >= 0
    assert health.headers["x-request-id"] == "probe-1"
    # The upstream's delay is left out of the completion's overhead, never counted in it.
    upstream_ms = sum(a["duration_ms"] for a in completed.json()["attempts"])
    assert upstream_ms >= UPSTREAM_DELAY * 1000
    assert (
        float(completed.headers["x-genai-overhead-ms"])
        < completed.elapsed.total_seconds() * 1000 - upstream_ms + 1
    )


async def test_two_workers_report_the_same_summed_series(
    fake: FakeProviderServer, tmp_path: Path
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = service_env(
        fake,
        tmp_path / "data",
        GENAI_DEFAULT_MODEL="openai/gpt-4o-mini",
        GENAI_AUTH_DISABLED="1",
        TMPDIR=str(temp),  # where `serve` makes its private metrics directory
    )
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    labels = {
        "route": "/v1/completions",
        "pattern": "summarize",
        "provider": "openai",
        "model": "gpt-4o-mini",
        "status": "200",
    }
    with live_service(env, tmp_path, "--workers", "2") as service:
        (shared_dir,) = temp.glob("genai-metrics-*")
        sent = 0
        per_worker: Counter[str] = Counter()
        while len(per_worker) < 2 and sent < 20 * BATCH:
            await _complete_on_fresh_connections(service.base_url, BATCH)
            sent += BATCH
            per_worker = _completed_per_worker(shared_dir, tmp_path)
        assert len(per_worker) == 2, f"one worker served all {sent} requests: {per_worker}"
        scrapes = []
        for _ in range(6):  # fresh connections: each lands on either worker
            async with httpx.AsyncClient(base_url=service.base_url, timeout=30) as http:
                scrapes.append(parse((await http.get("/metrics")).text))
        service.stop()
    for samples in scrapes:
        assert value(samples, "genai_requests_total", **labels) == sent
        assert value(samples, "genai_request_seconds_count", **labels) == sent
        overhead = value(samples, "genai_gateway_overhead_seconds_count", route="/v1/completions")
        assert overhead == sent
        chars = {"pattern": "summarize", "role": "system"}
        assert value(samples, "genai_rendered_prompt_chars_count", **chars) == sent
        input_tokens = {"provider": "openai", "model": "gpt-4o-mini", "kind": "input"}
        assert value(samples, "genai_tokens_total", **input_tokens) == 11 * sent
    # Uvicorn's own lines (each worker's start-up) come through the same JSON renderer.
    started = [
        json.loads(line) for line in service.log().splitlines() if "Started server process" in line
    ]
    assert len(started) == 2, service.log()
    assert {(line["level"], line["logger"]) for line in started} == {("info", "uvicorn.error")}
