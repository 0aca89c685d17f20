"""The HTTP API end to end: real app, real SDKs, a loopback provider speaking each API."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.types import Message
from structlog.testing import capture_logs

from app.observability.facts import add_request_facts
from app.tracking import user_prompt_hash, variables_hash
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import ANTHROPIC_KEY, OPENAI_KEY, running_app, serve_app, settings_for

SUMMARIZE = {
    "pattern_key": "summarize",
    "variables": {"max_words": 40},
    "user_prompt": "Long text.",
}


@pytest.mark.parametrize(
    ("model", "provider"),
    [
        ("openai/gpt-4o-mini", "openai"),
        ("anthropic/claude-sonnet-4-6", "anthropic"),
        ("ollama/llama3.2", "ollama"),
    ],
)
async def test_completion_envelope_holds_exactly_what_was_sent_upstream(
    client: httpx.AsyncClient, fake: FakeProviderServer, model: str, provider: str
) -> None:
    resp = await client.post("/v1/completions", json={**SUMMARIZE, "model": model})
    assert resp.status_code == 200, resp.text
    envelope = resp.json()
    [sent] = fake.calls(provider)
    body = sent.body
    system, messages = envelope["prompt"]["system"], envelope["prompt"]["messages"]
    assert "at most 40 words" in system
    assert messages == [{"role": "user", "content": "Long text."}]
    if provider == "anthropic":  # a pattern's system prompt is a prompt-cache breakpoint
        assert body["system"] == [
            {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}
        ]
        assert body["messages"] == messages
    else:
        assert body["messages"] == [{"role": "system", "content": system}, *messages]
    assert body["model"] == model.split("/", 1)[1]
    response = envelope["response"]
    assert response["text"] == "echo: Long text."
    assert (response["provider"], response["model"]) == (provider, model.split("/", 1)[1])
    assert response["finish_reason"] == "stop"
    assert response["usage"] == {
        "input_tokens": 11,
        "output_tokens": 7,
        "total_tokens": 18,
        "cached_input_tokens": None,
        "reasoning_tokens": None,
        "cache_write_tokens": None,
        "cache_write_1h_tokens": None,
    }
    prov = envelope["provenance"]
    assert prov["schema_version"] == "prov-1"
    assert prov["user_prompt_hash"] == user_prompt_hash("Long text.")
    assert prov["provider"] == provider
    assert envelope["model_choice"]["source"] == "request"


async def test_pattern_params_reach_each_provider_under_its_own_names(
    client: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    request = {**SUMMARIZE, "params": {"temperature": 0.9, "stop": ["END"], "seed": 7}}
    for model in ("openai/m1", "anthropic/m2", "ollama/m3"):
        resp = await client.post("/v1/completions", json={**request, "model": model})
        assert resp.status_code == 200, resp.text
    openai_body = fake.calls("openai")[0].body
    anthropic_body = fake.calls("anthropic")[0].body
    ollama_body = fake.calls("ollama")[0].body
    # Request params win over the pattern's (temperature 0.3, max_tokens 800).
    assert (openai_body["temperature"], openai_body["max_completion_tokens"]) == (0.9, 800)
    assert (openai_body["stop"], openai_body["seed"]) == (["END"], 7)
    assert anthropic_body["max_tokens"] == 800 and anthropic_body["stop_sequences"] == ["END"]
    # Anthropic's Messages API takes no temperature or seed: they are dropped, and the
    # envelope reports only what was sent.
    assert "seed" not in anthropic_body and "temperature" not in anthropic_body
    assert ollama_body["options"] == {
        "temperature": 0.9,
        "num_predict": 800,
        "stop": ["END"],
        "seed": 7,
    }
    assert ollama_body["stream"] is False


async def test_anthropic_always_gets_max_tokens_even_when_nothing_sets_it(
    fake: FakeProviderServer,
) -> None:
    async with serve_app(settings_for(fake, default_max_tokens=333)) as http:
        resp = await http.post(
            "/v1/completions",
            json={
                "pattern_key": "answer_from_context",
                "variables": {"context": "Sky is blue."},
                "user_prompt": "What colour is the sky?",
            },
        )
    assert resp.status_code == 200, resp.text
    [sent] = fake.calls("anthropic")  # the pattern's model_hint picked Anthropic
    assert sent.body["model"] == "claude-sonnet-4-6"
    assert sent.body["max_tokens"] == 1000  # the pattern's params beat the configured default
    assert resp.json()["model_choice"]["source"] == "hint"


async def test_render_is_a_dry_run_with_hashes_and_model_choice(
    client: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    resp = await client.post("/v1/render", json=SUMMARIZE)
    assert resp.status_code == 200, resp.text
    result = resp.json()
    assert fake.requests == []
    assert result["model_choice"]["model"] == "openai/gpt-4o-mini"
    assert result["model_choice"]["source"] == "config_default"
    assert "GENAI_DEFAULT_MODEL" in result["model_choice"]["reason"]
    effective = {"max_words": 40, "audience": "", "format": "bullets"}
    assert result["provenance"]["variables_hash"] == variables_hash(effective)
    assert result["params"]["max_tokens"] == 800


async def test_completion_and_render_agree_on_prompt_and_provenance(
    client: httpx.AsyncClient,
) -> None:
    rendered = (await client.post("/v1/render", json=SUMMARIZE)).json()
    completed = (await client.post("/v1/completions", json=SUMMARIZE)).json()
    assert rendered["prompt"] == completed["prompt"]
    assert rendered["provenance"] == completed["provenance"]


async def test_unknown_pattern_is_404_pattern_not_found(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/completions", json={**SUMMARIZE, "pattern_key": "nope/none"})
    assert resp.status_code == 404
    error = resp.json()["error"]
    assert error["type"] == "pattern_not_found" and error["pattern"] == "nope/none"
    assert error["request_id"] == resp.headers["x-request-id"]


async def test_missing_variables_are_422_with_every_name(
    client: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    resp = await client.post(
        "/v1/completions",
        json={"pattern_key": "answer_from_context", "variables": {}, "user_prompt": "q"},
    )
    assert resp.status_code == 422
    error = resp.json()["error"]
    assert error["type"] == "missing_variables"
    assert error["missing"] == ["context"]
    assert fake.requests == []


@pytest.mark.parametrize(
    "body",
    [
        {"variables": {}, "user_prompt": "x"},
        {"pattern_key": "summarize", "user_prompt": "x", "surprise": 1},
        {"pattern_key": "summarize", "user_prompt": "x", "params": {"temperature": 9}},
        {"pattern_key": "summarize", "user_prompt": 5},
    ],
)
async def test_invalid_request_is_422_invalid_request(
    client: httpx.AsyncClient, body: dict[str, object]
) -> None:
    resp = await client.post("/v1/completions", json=body)
    assert resp.status_code == 422
    error = resp.json()["error"]
    assert error["type"] == "invalid_request"
    assert error["errors"] and "input" not in error["errors"][0]


async def test_malformed_json_is_422_invalid_request(client: httpx.AsyncClient) -> None:
    resp = await client.post(
        "/v1/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert resp.status_code == 422
    assert resp.json()["error"]["type"] == "invalid_request"


async def test_badly_written_model_is_422_invalid_model(client: httpx.AsyncClient) -> None:
    for model in ("mystery-model", "mistral/large"):  # no alias; no such provider
        resp = await client.post("/v1/completions", json={**SUMMARIZE, "model": model})
        assert resp.status_code == 422
        assert resp.json()["error"]["type"] == "invalid_model"


async def test_without_keys_the_service_serves_render_patterns_and_health_but_not_completions(
    fake: FakeProviderServer,
) -> None:
    async with serve_app(settings_for(None)) as http:
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        ready = await http.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["providers"] == {"openai": False, "anthropic": False, "ollama": True}
        assert (await http.get("/v1/patterns")).status_code == 200
        assert (await http.post("/v1/render", json=SUMMARIZE)).status_code == 200
        resp = await http.post("/v1/completions", json=SUMMARIZE)
    assert resp.status_code == 503
    error = resp.json()["error"]
    assert error["type"] == "provider_unavailable" and error["provider"] == "openai"
    assert "OPENAI_API_KEY" in error["message"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_upstream_429_with_a_long_retry_after_is_passed_back_at_once(
    client: httpx.AsyncClient, fake: FakeProviderServer, provider: str
) -> None:
    # 30 s is beyond the gateway's max_retry_after_seconds (1 s here), so it does not wait.
    fake.script(provider, Reply.error(429, headers={"retry-after": "30"}))
    resp = await client.post("/v1/completions", json={**SUMMARIZE, "model": f"{provider}/m"})
    assert resp.status_code == 429
    assert resp.headers["retry-after"] == "30"
    error = resp.json()["error"]
    assert error["type"] == "rate_limited" and error["provider"] == provider
    assert error["retry_after"] == 30
    assert len(fake.calls(provider)) == 1


async def test_ollama_429_without_retry_after_is_retried_then_answered_429(
    client: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    fake.script("ollama", *[Reply.error(429)] * 3)
    resp = await client.post("/v1/completions", json={**SUMMARIZE, "model": "ollama/m"})
    assert resp.status_code == 429
    assert "retry-after" not in resp.headers
    assert resp.json()["error"]["type"] == "rate_limited"
    assert len(fake.calls("ollama")) == 3


async def test_short_retry_after_is_honoured_then_the_call_succeeds(
    client: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.error(429, headers={"retry-after": "0"}))
    resp = await client.post("/v1/completions", json=SUMMARIZE)
    assert resp.status_code == 200
    assert len(fake.calls("openai")) == 2


@pytest.mark.parametrize("provider", ["openai", "anthropic", "ollama"])
async def test_upstream_5xx_is_retried_then_502_upstream_error(
    client: httpx.AsyncClient, fake: FakeProviderServer, provider: str
) -> None:
    fake.script(provider, *[Reply.error(500)] * 3)
    resp = await client.post("/v1/completions", json={**SUMMARIZE, "model": f"{provider}/m"})
    assert resp.status_code == 502
    error = resp.json()["error"]
    assert error["type"] == "upstream_error" and error["upstream_status"] == 500
    assert len(fake.calls(provider)) == 3  # one call and the two configured retries


async def test_a_transient_5xx_is_retried_and_succeeds(
    client: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    fake.script("anthropic", Reply.error(529), Reply.error(503))
    resp = await client.post("/v1/completions", json={**SUMMARIZE, "model": "anthropic/m"})
    assert resp.status_code == 200
    assert len(fake.calls("anthropic")) == 3


@pytest.mark.parametrize("provider", ["openai", "anthropic", "ollama"])
async def test_upstream_timeout_is_504_and_not_retried(
    fake: FakeProviderServer, provider: str
) -> None:
    fake.script(provider, Reply.delay(3.0))
    settings = settings_for(fake)
    settings.upstream.timeout_seconds = 0.3
    async with serve_app(settings) as http:
        resp = await http.post("/v1/completions", json={**SUMMARIZE, "model": f"{provider}/m"})
    assert resp.status_code == 504
    assert resp.json()["error"]["type"] == "upstream_timeout"
    assert len(fake.calls(provider)) == 1


async def test_connection_failure_is_502_upstream_error(fake: FakeProviderServer) -> None:
    settings = settings_for(None)  # Ollama points at a closed loopback port
    async with serve_app(settings) as http:
        resp = await http.post("/v1/completions", json={**SUMMARIZE, "model": "ollama/m"})
    assert resp.status_code == 502
    error = resp.json()["error"]
    assert error["type"] == "upstream_error" and "OLLAMA_HOST" in error["message"]


@pytest.mark.parametrize(
    ("status", "error_type", "code"),
    [
        (401, "upstream_auth_failed", 502),
        (400, "upstream_rejected", 422),
        (404, "upstream_rejected", 422),
    ],
)
async def test_upstream_client_errors_are_not_retried(
    client: httpx.AsyncClient, fake: FakeProviderServer, status: int, error_type: str, code: int
) -> None:
    fake.script("openai", Reply.error(status, message="model gpt-x does not exist"))
    resp = await client.post("/v1/completions", json=SUMMARIZE)
    assert resp.status_code == code
    error = resp.json()["error"]
    assert error["type"] == error_type and error["upstream_status"] == status
    assert error["upstream_request_id"].startswith("req_fake_")
    assert len(fake.calls("openai")) == 1


async def test_errors_never_carry_keys_or_tracebacks(
    client: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.error(401), Reply.error(500), Reply.error(500), Reply.error(500))
    bodies = [(await client.post("/v1/completions", json=SUMMARIZE)).text for _ in range(2)]
    for text in bodies:
        assert OPENAI_KEY not in text and ANTHROPIC_KEY not in text
        assert "Traceback" not in text and 'File "' not in text


async def test_unexpected_failure_is_a_plain_500_without_traceback(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.service import GenAIService

    async def explode(self: object, *args: object, **kwargs: object) -> None:
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(GenAIService, "render", explode)
    with capture_logs() as logs:
        resp = await client.post("/v1/render", json=SUMMARIZE)
    assert resp.status_code == 500
    error = resp.json()["error"]
    assert error["type"] == "internal_error" and error["request_id"] == resp.headers["x-request-id"]
    assert "secret internal detail" not in resp.text
    assert [e["error_type"] for e in logs if e["event"] == "unhandled_error"] == ["RuntimeError"]


async def test_request_id_is_echoed_or_generated(client: httpx.AsyncClient) -> None:
    given = await client.get("/healthz", headers={"x-request-id": "caller-id-1"})
    assert given.headers["x-request-id"] == "caller-id-1"
    made = await client.get("/healthz", headers={"x-request-id": "bad id with spaces"})
    assert made.headers["x-request-id"] != "bad id with spaces"
    assert len(made.headers["x-request-id"]) == 32


async def test_one_canonical_log_line_per_request_without_secrets(
    client: httpx.AsyncClient,
) -> None:
    with capture_logs(processors=[add_request_facts]) as logs:
        resp = await client.post("/v1/completions", json={**SUMMARIZE, "model": "anthropic/m"})
        refused = await client.post(
            "/v1/completions",
            json=SUMMARIZE,
            headers={"authorization": f"Bearer {ANTHROPIC_KEY}"},
        )
    assert refused.status_code == 401
    lines = [entry for entry in logs if entry["event"] == "request"]
    assert len(lines) == 2
    line = lines[0]
    assert line["request_id"] == resp.headers["x-request-id"]
    assert (line["pattern"], line["provider"], line["model"]) == ("summarize", "anthropic", "m")
    assert line["status"] == 200 and line["duration_ms"] >= 0 and line["upstream_ms"] >= 0
    assert line["job_id"] == resp.json()["job_id"] and "error_type" not in line
    assert (lines[1]["status"], lines[1]["error_type"]) == (401, "unauthenticated")
    assert OPENAI_KEY not in repr(logs) and ANTHROPIC_KEY not in repr(logs)
    our_key = client.headers["authorization"].removeprefix("Bearer ")
    assert our_key not in repr(logs)


async def test_a_client_gone_while_its_body_is_read_is_a_499_not_an_error(
    fake: FakeProviderServer,
) -> None:
    """Starlette raises ClientDisconnect from the body read; that is the client leaving (499),
    not a failure of the service: no error line, no 500 in the request line or the metrics."""
    async with running_app(settings_for(fake)) as (app, http):
        messages: list[Message] = [
            {"type": "http.request", "body": b'{"pattern_key": "sum', "more_body": True},
            {"type": "http.disconnect"},
        ]
        sent: list[Message] = []

        async def receive() -> Message:
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "path": "/v1/completions",
            "raw_path": b"/v1/completions",
            "query_string": b"",
            "root_path": "",
            "scheme": "http",
            "server": ("gateway.test", 80),
            "client": ("127.0.0.1", 5000),
            "headers": [
                (b"host", b"gateway.test"),
                (b"content-type", b"application/json"),
                (b"content-length", b"100"),
                (b"authorization", http.headers["authorization"].encode()),
            ],
        }
        with capture_logs(processors=[add_request_facts]) as logs:
            await app(scope, receive, send)
        metrics = (await http.get("/metrics")).text
    assert sent == []  # nobody is left to answer
    assert [entry["event"] for entry in logs if entry["log_level"] == "error"] == []
    (line,) = [entry for entry in logs if entry["event"] == "request"]
    assert line["status"] == 499
    statuses = {
        sample.labels["status"]
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == "genai_requests_total" and sample.labels["route"] == "/v1/completions"
    }
    assert statuses == {"499"}


async def test_pattern_list_and_detail(client: httpx.AsyncClient) -> None:
    listing = (await client.get("/v1/patterns")).json()["patterns"]
    names = {p["name"] for p in listing}
    assert {"summarize", "translate", "extract", "classify", "email/reply"} <= names
    detail = await client.get("/v1/patterns/email/reply")
    assert detail.status_code == 200
    body = detail.json()
    assert body["content_hash"].startswith("sha256:") and len(body["content_hash"]) == 71
    assert body["base_path"] == str(settings_for(None).pattern_dir[0])
    assert set(body["variables"]) == set(body["defaults"]) | set(body["required_variables"])
    missing = await client.get("/v1/patterns/does-not-exist")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "pattern_not_found"


async def test_unknown_route_uses_the_error_shape(client: httpx.AsyncClient) -> None:
    resp = await client.get("/v2/nothing")
    assert resp.status_code == 404
    assert resp.json()["error"]["type"] == "not_found"


async def test_openapi_has_stable_operation_ids_and_examples(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    ids = {op["operationId"] for path in spec["paths"].values() for op in path.values()}
    assert ids == {
        "createCompletion",
        "renderPrompt",
        "listPatterns",
        "getPattern",
        "healthz",
        "readyz",
        "metrics",
        "createTemplateVersion",
        "listTemplateVersions",
        "getTemplateVersion",
        "activateTemplateVersion",
        "createSnippet",
        "listSnippets",
        "getSnippet",
        "updateSnippet",
        "deleteSnippet",
        "getJob",
        "createApiKey",
        "getKeyStatus",
        "getOwnKeyStatus",
        "getApiKey",
        "updateApiKey",
        "listApiKeys",
        "revokeApiKey",
        "createTeam",  # teams and usage (issue 18)
        "listTeams",
        "getTeam",
        "updateTeam",
        "deleteTeam",
        "getUsage",
        "replayJob",
        "checkDrift",
        "createChatCompletion",  # the OpenAI-compatible routes (tests/test_openai_compat.py)
        "listModels",
        "retrieveModel",
        "createMessage",  # the Anthropic-compatible routes (tests/test_anthropic_door.py)
        "countMessageTokens",
        "listSnippetVersions",  # snippet versions (issue 19)
        "getSnippetVersion",
        "activateSnippetVersion",
        "listWebhookDeliveries",  # the webhook delivery log (tests/test_webhooks_http.py)
        "retryWebhookDelivery",
        "sendTestWebhook",
        "testTemplateVersion",
        "moveTemplateLabel",  # template labels (issue 19, tests/test_template_labels.py)
        "listTemplateLabels",
        "templateLabelHistory",
        "deleteTemplateLabel",
        "testPattern",  # pattern tests (issue 19, tests/test_pattern_tests_api.py)
        "listSigningKeys",  # signed envelopes (issue 20, tests/test_signing.py)
        "verifyAuditChain",  # the audit chain (issue 20, tests/test_audit_chain_http.py)
        "getAuditStatus",  # the audit trail's state (issue 21, tests/console/test_integrity.py)
        "listAdminEvents",  # the admin event log (issue 20, tests/test_admin_events.py)
        "listJobs",  # the job list (issue 21, tests/test_jobs_list_api.py)
    }
    assert spec["components"]["schemas"]["RenderRequest"]["examples"]
    completion = spec["paths"]["/v1/completions"]["post"]
    assert {"404", "422", "429", "502", "503", "504"} <= set(completion["responses"])


async def test_the_running_service_picks_up_pattern_edits_without_a_restart(
    fake: FakeProviderServer, tmp_path: Path
) -> None:
    root = tmp_path / "patterns"
    root.mkdir()
    (root / "hello.md").write_text("---\ndescription: Greet.\n---\nSay hello.\n")
    request = {"pattern_key": "hello", "user_prompt": "hi"}
    async with serve_app(
        settings_for(fake, pattern_dir=[root], pattern_reload_seconds=0.05)
    ) as http:
        before = (await http.post("/v1/render", json=request)).json()["prompt"]["system"]
        (root / "hello.md").write_text("---\ndescription: Greet.\n---\nSay hello warmly.\n")
        (root / "added.md").write_text("---\ndescription: New.\n---\nNew pattern.\n")
        for _ in range(200):  # wait for the background re-scan; no timing is asserted
            after = (await http.post("/v1/render", json=request)).json()["prompt"]["system"]
            added = await http.get("/v1/patterns/added")
            if after != before and added.status_code == 200:
                break
            await asyncio.sleep(0.02)
    assert (before, after) == ("Say hello.", "Say hello warmly.")
    assert added.status_code == 200


async def test_pattern_list_marks_a_broken_file_instead_of_dropping_it(
    fake: FakeProviderServer, tmp_path: Path
) -> None:
    root = tmp_path / "patterns"
    root.mkdir()
    (root / "good.md").write_text("---\ndescription: Fine.\n---\nSay hello.\n")
    (root / "bad_yaml.md").write_text("---\ndescription: [unclosed\n---\nSay hello.\n")
    (root / "bad_jinja.md").write_text("---\ndescription: Broken body.\n---\n{% if %}\n")
    async with serve_app(settings_for(fake, pattern_dir=[root])) as http:
        before = {p["name"]: p for p in (await http.get("/v1/patterns")).json()["patterns"]}
        # A body's problem is known once it has been compiled (here by the detail route).
        detail = await http.get("/v1/patterns/bad_jinja")
        after = {p["name"]: p for p in (await http.get("/v1/patterns")).json()["patterns"]}
    assert set(before) == {"good", "bad_yaml", "bad_jinja"}
    assert before["good"]["valid"] is True and before["good"]["problems"] == []
    assert before["good"]["content_hash"].startswith("sha256:")
    broken = before["bad_yaml"]
    assert broken["valid"] is False and broken["content_hash"] is None
    assert broken["problems"] and all(isinstance(text, str) for text in broken["problems"])
    assert detail.status_code == 422 and detail.json()["error"]["type"] == "invalid_pattern"
    assert after["bad_jinja"]["valid"] is False
    assert after["bad_jinja"]["problems"] == detail.json()["error"]["problems"]
