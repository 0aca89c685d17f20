"""Upstream faults end to end: what the caller gets, every upstream attempt, the fallback order and
the audit record, on SQLite and PostgreSQL.

Each test runs the real app against the loopback fake (real SDK code), scripted to fail one way;
timeouts are fractions of a second so the whole suite stays quick.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.types import Message
from structlog.testing import capture_logs

from app.config import LimitSettings, OpenAISettings, Settings, UpstreamSettings
from app.observability.facts import add_request_facts
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import OPENAI_KEY, completion_scope, running_app, settings_for

FIRST = ("openai", "gpt-4o-mini")
SECOND = ("anthropic", "claude-haiku-4-5")
THIRD = ("ollama", "llama3.2")
FALLBACKS = {"openai/gpt-4o-mini": ["anthropic/claude-haiku-4-5", "ollama/llama3.2"]}
REQUEST: dict[str, Any] = {
    "pattern_key": "summarize",
    "variables": {"max_words": 40},
    "user_prompt": "Long text.",
    "model": "openai/gpt-4o-mini",
}
STREAM = {**REQUEST, "stream": True}
RETRIES = 2  # each model: one call and two retries

Attempt = tuple[str, str, str, str | None, int | None]


def fault_settings(
    fake: FakeProviderServer,
    database_url: str,
    *,
    timeout: float = 2.0,
    deadline: float = 5.0,
    first_token: float = 2.0,
    idle: float = 2.0,
    **overrides: Any,
) -> Settings:
    """Settings for a fault test: generous timeouts unless the test is about one (a busy CI
    machine must not turn a slow answer into a fallback), quick retries."""
    upstream = UpstreamSettings(
        timeout_seconds=timeout,
        connect_timeout_seconds=timeout,
        deadline_seconds=deadline,
        first_token_seconds=first_token,
        idle_seconds=idle,
        max_retries=RETRIES,
        backoff_initial_seconds=0.01,
        backoff_max_seconds=0.02,
        max_retry_after_seconds=0.2,
    )
    return settings_for(
        fake,
        database_url=database_url,
        database_auto_migrate=True,  # the PostgreSQL database is new and empty
        fallbacks=FALLBACKS,
        upstream=upstream,
        **overrides,
    )


@contextlib.asynccontextmanager
async def gateway(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with running_app(settings) as (_, http):
        yield http


def attempts_of(attempts: list[dict[str, Any]]) -> list[Attempt]:
    """What each upstream call was and how it ended (durations vary, so they are left out)."""
    return [
        (a["provider"], a["model"], a["outcome"], a["error_type"], a["upstream_status"])
        for a in attempts
    ]


def failed(model: tuple[str, str], error_type: str, status: int | None) -> Attempt:
    return (*model, "failed", error_type, status)


def answered(model: tuple[str, str]) -> Attempt:
    return (*model, "completed", None, None)


def upstream_calls(fake: FakeProviderServer) -> list[str]:
    """Which provider received each chat request, in order."""
    return [call.provider for call in fake.requests]


async def job(http: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    resp = await http.get(f"/v1/jobs/{job_id}")
    assert resp.status_code == 200, resp.text
    record: dict[str, Any] = resp.json()
    return record


def sse_events(body: str) -> list[tuple[str, Any]]:
    """(event name, decoded data) for each Server-Sent Event of a response body."""
    events = []
    for frame in body.split("\n\n"):
        if not frame.strip():
            continue
        fields = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        events.append((fields["event"], json.loads(fields["data"])))
    return events


async def assert_fallback_answered(
    http: httpx.AsyncClient, resp: httpx.Response, expected: list[Attempt]
) -> None:
    """The second model of the chain answered, and envelope and record say so alike."""
    assert resp.status_code == 200, resp.text
    envelope = resp.json()
    assert attempts_of(envelope["attempts"]) == expected
    choice = envelope["model_choice"]
    assert (choice["source"], choice["model"]) == ("fallback", "anthropic/claude-haiku-4-5")
    answer, provenance = envelope["response"], envelope["provenance"]
    assert (answer["provider"], answer["model"]) == SECOND
    assert (provenance["provider"], provenance["model"]) == SECOND
    record = await job(http, envelope["job_id"])
    assert record["status"] == "completed"
    assert (record["provider"], record["model"]) == SECOND
    assert record["attempts"] == envelope["attempts"]


# Non-streamed completions: retries per model, then the fallback chain in order.


async def test_a_5xx_is_retried_then_the_next_model_of_the_chain_answers(
    fake: FakeProviderServer, database_url: str
) -> None:
    fake.script("openai", *[Reply.error(500)] * (RETRIES + 1))
    async with gateway(fault_settings(fake, database_url)) as http:
        resp = await http.post("/v1/completions", json=REQUEST)
        await assert_fallback_answered(
            http, resp, [failed(FIRST, "upstream_error", 500)] * 3 + [answered(SECOND)]
        )
    assert upstream_calls(fake) == ["openai"] * 3 + ["anthropic"]
    assert fake.calls("anthropic")[0].body["model"] == "claude-haiku-4-5"


@pytest.mark.parametrize("stream", [False, True])
async def test_after_a_fallback_every_report_names_the_model_that_answered(
    fake: FakeProviderServer, database_url: str, stream: bool
) -> None:
    """The log lines, the metric labels, the overhead header, the envelope and the record are
    all rendered from one record of the request, so none of them names the model that failed."""
    fake.script("openai", *[Reply.error(500)] * (RETRIES + 1))
    async with gateway(fault_settings(fake, database_url)) as http:
        with capture_logs(processors=[add_request_facts]) as logs:
            resp = await http.post("/v1/completions", json={**REQUEST, "stream": stream})
        assert resp.status_code == 200, resp.text
        envelope = sse_events(resp.text)[-1][1] if stream else resp.json()
        record = await job(http, envelope["job_id"])
        samples = list(text_string_to_metric_families((await http.get("/metrics")).text))
    assert float(resp.headers["x-genai-overhead-ms"]) >= 0
    answered_by = (envelope["response"]["provider"], envelope["response"]["model"])
    assert answered_by == SECOND and (record["provider"], record["model"]) == SECOND
    (line,) = [entry for entry in logs if entry["event"] == "request"]
    assert (line["provider"], line["model"], line["job_id"]) == (*SECOND, envelope["job_id"])
    assert line["upstream_ms"] > 0 and "error_type" not in line
    # The warning written when the first model failed names the model it was about, and the
    # request's line the one that answered.
    (warning,) = [entry for entry in logs if entry["event"] == "upstream_fallback"]
    assert warning["model"] == "openai/gpt-4o-mini"
    requests = [
        sample.labels
        for family in samples
        if family.name == "genai_requests"
        for sample in family.samples
        if sample.name == "genai_requests_total" and sample.labels["route"] == "/v1/completions"
    ]
    assert [(labels["provider"], labels["model"]) for labels in requests] == [SECOND]


async def test_a_429_is_retried_after_its_retry_after_then_falls_back(
    fake: FakeProviderServer, database_url: str
) -> None:
    fake.script("openai", *[Reply.error(429, headers={"retry-after": "0"})] * (RETRIES + 1))
    async with gateway(fault_settings(fake, database_url)) as http:
        resp = await http.post("/v1/completions", json=REQUEST)
        await assert_fallback_answered(
            http, resp, [failed(FIRST, "rate_limited", 429)] * 3 + [answered(SECOND)]
        )
    assert upstream_calls(fake) == ["openai"] * 3 + ["anthropic"]


async def test_a_retry_after_too_long_to_wait_moves_to_the_next_model_at_once(
    fake: FakeProviderServer, database_url: str
) -> None:
    fake.script("openai", Reply.error(429, headers={"retry-after": "30"}))
    async with gateway(fault_settings(fake, database_url)) as http:
        resp = await http.post("/v1/completions", json=REQUEST)
        await assert_fallback_answered(
            http, resp, [failed(FIRST, "rate_limited", 429), answered(SECOND)]
        )
    assert upstream_calls(fake) == ["openai", "anthropic"]


async def test_a_timeout_is_not_retried_on_the_same_model_but_falls_back(
    fake: FakeProviderServer, database_url: str
) -> None:
    fake.script("openai", Reply.delay(5.0))
    async with gateway(fault_settings(fake, database_url, timeout=0.3)) as http:
        resp = await http.post("/v1/completions", json=REQUEST)
        await assert_fallback_answered(
            http, resp, [failed(FIRST, "upstream_timeout", None), answered(SECOND)]
        )
    assert upstream_calls(fake) == ["openai", "anthropic"]


@pytest.mark.parametrize(
    ("status", "error_type", "calls"),
    [
        (408, "upstream_timeout", 1),  # a timeout upstream: not retried, like ours
        (409, "upstream_error", RETRIES + 1),
        (502, "upstream_error", RETRIES + 1),
        (503, "upstream_error", RETRIES + 1),
        (504, "upstream_timeout", 1),
    ],
)
async def test_retriable_statuses_fall_back_after_the_retries(
    fake: FakeProviderServer, database_url: str, status: int, error_type: str, calls: int
) -> None:
    fake.script("openai", *[Reply.error(status)] * calls)
    async with gateway(fault_settings(fake, database_url)) as http:
        resp = await http.post("/v1/completions", json=REQUEST)
        await assert_fallback_answered(
            http, resp, [failed(FIRST, error_type, status)] * calls + [answered(SECOND)]
        )
    assert upstream_calls(fake) == ["openai"] * calls + ["anthropic"]


async def test_a_refused_connection_is_retried_then_falls_back(
    fake: FakeProviderServer, database_url: str
) -> None:
    # Port 9 (discard) on loopback: nothing listens, every connection is refused.
    unreachable = OpenAISettings(api_key=OPENAI_KEY, base_url="http://127.0.0.1:9/v1")
    settings = fault_settings(fake, database_url, openai=unreachable)
    async with gateway(settings) as http:
        resp = await http.post("/v1/completions", json=REQUEST)
        await assert_fallback_answered(
            http, resp, [failed(FIRST, "upstream_error", None)] * 3 + [answered(SECOND)]
        )
    assert upstream_calls(fake) == ["anthropic"]


async def test_a_reset_connection_is_retried_then_falls_back(
    fake: FakeProviderServer, database_url: str
) -> None:
    fake.script("openai", *[Reply.reset()] * (RETRIES + 1))
    async with gateway(fault_settings(fake, database_url)) as http:
        resp = await http.post("/v1/completions", json=REQUEST)
        await assert_fallback_answered(
            http, resp, [failed(FIRST, "upstream_error", None)] * 3 + [answered(SECOND)]
        )
    assert upstream_calls(fake) == ["openai"] * 3 + ["anthropic"]


async def test_when_the_whole_chain_fails_the_caller_gets_the_last_error_and_every_attempt(
    fake: FakeProviderServer, database_url: str
) -> None:
    for provider in ("openai", "anthropic", "ollama"):
        fake.script(provider, *[Reply.error(500)] * (RETRIES + 1))
    async with gateway(fault_settings(fake, database_url)) as http:
        resp = await http.post("/v1/completions", json=REQUEST)
        assert resp.status_code == 502, resp.text
        error = resp.json()["error"]
        assert (error["type"], error["provider"], error["upstream_status"]) == (
            "upstream_error",
            "ollama",
            500,
        )
        record = await job(http, error["job_id"])
    assert (record["status"], record["error_type"]) == ("failed", "upstream_error")
    assert attempts_of(record["attempts"]) == [
        failed(model, "upstream_error", 500) for model in (FIRST, SECOND, THIRD) for _ in range(3)
    ]
    assert upstream_calls(fake) == ["openai"] * 3 + ["anthropic"] * 3 + ["ollama"] * 3


@pytest.mark.parametrize(
    ("status", "answered_status", "error_type"),
    [
        (400, 422, "upstream_rejected"),
        (401, 502, "upstream_auth_failed"),
        (404, 422, "upstream_rejected"),
        (422, 422, "upstream_rejected"),
    ],
)
async def test_what_the_caller_or_operator_must_fix_never_falls_back(
    fake: FakeProviderServer,
    database_url: str,
    status: int,
    answered_status: int,
    error_type: str,
) -> None:
    fake.script("openai", Reply.error(status))
    async with gateway(fault_settings(fake, database_url)) as http:
        resp = await http.post("/v1/completions", json=REQUEST)
        assert resp.status_code == answered_status, resp.text
        error = resp.json()["error"]
        assert (error["type"], error["upstream_status"]) == (error_type, status)
        record = await job(http, error["job_id"])
    assert (record["status"], record["error_type"]) == ("failed", error_type)
    assert attempts_of(record["attempts"]) == [failed(FIRST, error_type, status)]
    assert upstream_calls(fake) == ["openai"]


# Deadlines: the whole request, every retry and fallback included.


async def test_a_hang_ends_at_the_deadline_with_504(
    fake: FakeProviderServer, database_url: str
) -> None:
    fake.script("openai", Reply.delay(10.0))
    settings = fault_settings(fake, database_url, timeout=8.0, deadline=1.0)
    async with gateway(settings) as http:
        started = time.monotonic()
        resp = await http.post("/v1/completions", json=REQUEST)
        waited = time.monotonic() - started
        assert resp.status_code == 504, resp.text
        error = resp.json()["error"]
        assert (error["type"], error["deadline_ms"]) == ("deadline_exceeded", 1000)
        record = await job(http, error["job_id"])
    assert waited < 8.0  # the deadline ended it, not the attempt's own timeout
    assert (record["status"], record["error_type"]) == ("failed", "deadline_exceeded")
    [attempt] = record["attempts"]
    assert (attempt["provider"], attempt["model"]) == FIRST
    assert attempt["outcome"] != "completed"
    assert upstream_calls(fake) == ["openai"]


async def test_the_deadline_covers_the_whole_fallback_chain(
    fake: FakeProviderServer, database_url: str
) -> None:
    for provider in ("openai", "anthropic", "ollama"):
        fake.script(provider, Reply.delay(10.0))
    # Two whole attempt timeouts fit in the deadline; the third model's is cut short by it. The
    # half-second margins each side absorb a busy CI machine's stalls (0.2 s did not).
    settings = fault_settings(fake, database_url, timeout=1.0, deadline=2.5)
    async with gateway(settings) as http:
        resp = await http.post("/v1/completions", json=REQUEST)
        assert resp.status_code == 504, resp.text
        error = resp.json()["error"]
        assert error["type"] == "deadline_exceeded"
        record = await job(http, error["job_id"])
    assert (record["status"], record["error_type"]) == ("failed", "deadline_exceeded")
    calls = attempts_of(record["attempts"])
    assert calls[:2] == [
        failed(FIRST, "upstream_timeout", None),
        failed(SECOND, "upstream_timeout", None),
    ]
    assert [call[:2] for call in calls[2:]] == [THIRD]
    assert upstream_calls(fake) == ["openai", "anthropic", "ollama"]


async def test_the_deadline_header_shortens_the_deadline(
    fake: FakeProviderServer, database_url: str
) -> None:
    fake.script("openai", Reply.delay(10.0))
    settings = fault_settings(fake, database_url, timeout=8.0, deadline=8.0)
    async with gateway(settings) as http:
        resp = await http.post(
            "/v1/completions", json=REQUEST, headers={"x-genai-deadline-ms": "300"}
        )
        assert resp.status_code == 504, resp.text
        error = resp.json()["error"]
        assert (error["type"], error["deadline_ms"]) == ("deadline_exceeded", 300)
        record = await job(http, error["job_id"])
    assert (record["status"], record["error_type"]) == ("failed", "deadline_exceeded")


async def test_the_deadline_header_never_lengthens_the_deadline(
    fake: FakeProviderServer, database_url: str
) -> None:
    fake.script("openai", Reply.delay(10.0))
    settings = fault_settings(fake, database_url, timeout=8.0, deadline=0.5)
    async with gateway(settings) as http:
        resp = await http.post(
            "/v1/completions", json=REQUEST, headers={"x-genai-deadline-ms": "60000"}
        )
    assert resp.status_code == 504, resp.text
    error = resp.json()["error"]
    assert (error["type"], error["deadline_ms"]) == ("deadline_exceeded", 500)


async def test_an_invalid_deadline_header_is_422_and_calls_nobody(
    fake: FakeProviderServer, database_url: str
) -> None:
    async with gateway(fault_settings(fake, database_url)) as http:
        for value in ["soon", "0", "-5", "1.5"]:
            resp = await http.post(
                "/v1/completions", json=REQUEST, headers={"x-genai-deadline-ms": value}
            )
            assert resp.status_code == 422, (value, resp.text)
            error = resp.json()["error"]
            assert error["type"] == "invalid_request"
            assert "x-genai-deadline-ms" in json.dumps(error)
            assert "job_id" not in error
    assert fake.requests == []


# Streaming: deltas then the envelope; after the first delta, failures are `error` events.


@pytest.mark.parametrize("model", [FIRST, SECOND, THIRD])
async def test_a_stream_sends_deltas_then_the_envelope_on_every_provider(
    fake: FakeProviderServer, database_url: str, model: tuple[str, str]
) -> None:
    provider, name = model
    fake.script(provider, Reply.ok(chunks=("Quarterly ", "revenue ", "rose.")))
    async with gateway(fault_settings(fake, database_url)) as http:
        resp = await http.post("/v1/completions", json={**STREAM, "model": f"{provider}/{name}"})
        assert resp.status_code == 200, resp.text
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = sse_events(resp.text)
        names = [event for event, _ in events]
        assert names == ["delta"] * (len(names) - 1) + ["envelope"]
        envelope = events[-1][1]
        text = "".join(data["text"] for event, data in events if event == "delta")
        assert text == envelope["response"]["text"] == "Quarterly revenue rose."
        assert attempts_of(envelope["attempts"]) == [answered(model)]
        record = await job(http, envelope["job_id"])
    assert (record["status"], record["streamed"]) == ("completed", True)
    assert record["response_redacted"] == text
    assert record["attempts"] == envelope["attempts"]


async def test_a_cut_stream_ends_with_an_error_event_and_never_falls_back(
    fake: FakeProviderServer, database_url: str
) -> None:
    fake.script("openai", Reply.cut(2, chunks=("Quarterly ", "revenue ", "rose.")))
    async with gateway(fault_settings(fake, database_url)) as http:
        resp = await http.post("/v1/completions", json=STREAM)
        assert resp.status_code == 200, resp.text
        events = sse_events(resp.text)
        assert [event for event, _ in events[:-1]] == ["delta"] * (len(events) - 1)
        assert len(events) >= 2  # at least one delta reached the caller first
        name, data = events[-1]
        assert name == "error"
        error = data["error"]
        assert error["type"] == "stream_interrupted"
        record = await job(http, error["job_id"])
    assert (record["status"], record["error_type"]) == ("failed", "stream_interrupted")
    assert attempts_of(record["attempts"]) == [failed(FIRST, "stream_interrupted", None)]
    assert upstream_calls(fake) == ["openai"]  # bytes were sent: no other model may continue


async def test_a_stream_silent_past_the_idle_timeout_ends_with_an_error_event(
    fake: FakeProviderServer, database_url: str
) -> None:
    # Each chunk comes 0.6 s after the last: the first within first_token_seconds, the second
    # past idle_seconds.
    fake.script("openai", Reply.slow(0.6, chunks=("Quarterly ", "revenue ", "rose.")))
    settings = fault_settings(fake, database_url, timeout=5.0, first_token=3.0, idle=0.3)
    async with gateway(settings) as http:
        resp = await http.post("/v1/completions", json=STREAM)
        events = sse_events(resp.text)
        assert events[0][0] == "delta"
        name, data = events[-1]
        assert (name, data["error"]["type"]) == ("error", "upstream_timeout")
        record = await job(http, data["error"]["job_id"])
    assert (record["status"], record["error_type"]) == ("failed", "upstream_timeout")
    assert attempts_of(record["attempts"]) == [failed(FIRST, "upstream_timeout", None)]
    assert upstream_calls(fake) == ["openai"]


async def test_a_provider_error_inside_a_stream_ends_with_an_error_event(
    fake: FakeProviderServer, database_url: str
) -> None:
    fake.script("openai", Reply.stream_error(after=1, status=500))
    async with gateway(fault_settings(fake, database_url)) as http:
        resp = await http.post("/v1/completions", json=STREAM)
        assert resp.status_code == 200, resp.text
        events = sse_events(resp.text)
        assert events[0][0] == "delta"
        name, data = events[-1]
        assert (name, data["error"]["type"]) == ("error", "upstream_error")
        record = await job(http, data["error"]["job_id"])
    assert (record["status"], record["error_type"]) == ("failed", "upstream_error")
    assert [attempt[:3] for attempt in attempts_of(record["attempts"])] == [(*FIRST, "failed")]
    assert upstream_calls(fake) == ["openai"]


async def test_a_stream_without_a_first_token_in_time_falls_back(
    fake: FakeProviderServer, database_url: str
) -> None:
    fake.script("openai", Reply.delay(5.0))
    settings = fault_settings(fake, database_url, timeout=3.0, first_token=0.3)
    async with gateway(settings) as http:
        resp = await http.post("/v1/completions", json=STREAM)
        assert resp.status_code == 200, resp.text
        events = sse_events(resp.text)
        name, envelope = events[-1]
        assert name == "envelope"
        assert attempts_of(envelope["attempts"]) == [
            failed(FIRST, "upstream_timeout", None),
            answered(SECOND),
        ]
        assert envelope["model_choice"]["source"] == "fallback"
        assert (envelope["response"]["provider"], envelope["response"]["model"]) == SECOND
        record = await job(http, envelope["job_id"])
    assert (record["status"], record["streamed"]) == ("completed", True)
    assert upstream_calls(fake) == ["openai", "anthropic"]


async def test_a_stream_that_fails_before_its_first_text_is_retried_then_falls_back(
    fake: FakeProviderServer, database_url: str
) -> None:
    fake.script("openai", *[Reply.error(503)] * (RETRIES + 1))
    async with gateway(fault_settings(fake, database_url)) as http:
        resp = await http.post("/v1/completions", json=STREAM)
        assert resp.status_code == 200, resp.text
        name, envelope = sse_events(resp.text)[-1]
        assert name == "envelope"
        assert attempts_of(envelope["attempts"]) == [
            *[failed(FIRST, "upstream_error", 503)] * 3,
            answered(SECOND),
        ]
    assert upstream_calls(fake) == ["openai"] * 3 + ["anthropic"]


async def test_a_stream_refused_before_its_first_text_is_an_ordinary_error_answer(
    fake: FakeProviderServer, database_url: str
) -> None:
    # Nothing was streamed yet, so the caller gets a status code rather than an event.
    fake.script("openai", Reply.error(400))
    async with gateway(fault_settings(fake, database_url)) as http:
        resp = await http.post("/v1/completions", json=STREAM)
        assert resp.status_code == 422, resp.text
        error = resp.json()["error"]
        assert error["type"] == "upstream_rejected"
        record = await job(http, error["job_id"])
    assert (record["status"], record["error_type"]) == ("failed", "upstream_rejected")
    assert upstream_calls(fake) == ["openai"]


async def stored_jobs(database_url: str) -> list[dict[str, Any]]:
    """Every stored job, read straight from the database (for a request that got no answer)."""
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            result = await conn.execute(text("SELECT id, status FROM jobs"))
            return [dict(row._mapping) for row in result]
    finally:
        await engine.dispose()


async def test_a_client_that_leaves_mid_stream_cancels_the_call_and_the_record_says_so(
    fake: FakeProviderServer, database_url: str
) -> None:
    fake.script("openai", Reply.slow(0.3, chunks=("one ", "two ", "three ", "four.")))
    settings = fault_settings(fake, database_url, timeout=5.0, first_token=2.0, idle=2.0)
    async with running_app(settings) as (app, http):
        body = json.dumps(STREAM).encode()
        inbox: asyncio.Queue[Message] = asyncio.Queue()
        inbox.put_nowait({"type": "http.request", "body": body, "more_body": False})
        first_delta = asyncio.Event()
        sent: list[Message] = []

        async def send(message: Message) -> None:
            sent.append(message)
            if b"event: delta" in message.get("body", b""):
                first_delta.set()

        scope = completion_scope(body, http.headers["authorization"])
        request = asyncio.create_task(app(scope, inbox.get, send))
        await asyncio.wait_for(first_delta.wait(), 5)
        inbox.put_nowait({"type": "http.disconnect"})
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(request, 5)
        frames = b"".join(m.get("body", b"") for m in sent)
        assert b"event: envelope" not in frames
        [row] = await stored_jobs(database_url)
        record = await job(http, row["id"])
    assert record["status"] == "cancelled"
    assert attempts_of(record["attempts"]) == [(*FIRST, "cancelled", None, None)]
    assert upstream_calls(fake) == ["openai"]


# Overload: a full line is answered 503 at once.


async def metric(http: httpx.AsyncClient, name: str, labels: dict[str, str]) -> float | None:
    exposition = (await http.get("/metrics")).text
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


async def wait_for_metric(
    http: httpx.AsyncClient, name: str, labels: dict[str, str], value: float
) -> None:
    for _ in range(500):
        if await metric(http, name, labels) == value:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{name}{labels} never reached {value}")


async def test_overload_is_answered_503_at_once_while_the_slow_ones_still_run(
    fake: FakeProviderServer, database_url: str
) -> None:
    fake.script("openai", Reply.delay(1.5), Reply.delay(1.5))
    limits = LimitSettings(max_concurrent=2, max_queued=2, retry_after_seconds=2.0)
    settings = fault_settings(fake, database_url, timeout=5.0, limits=limits)
    async with gateway(settings) as http:
        slow = [asyncio.create_task(http.post("/v1/completions", json=REQUEST)) for _ in range(4)]
        await wait_for_metric(http, "genai_inflight", {"limit": "global"}, 2)
        await wait_for_metric(http, "genai_queue_waiting", {"limit": "global"}, 2)

        shed = await http.post("/v1/completions", json=REQUEST)
        assert not any(task.done() for task in slow)  # answered while all four still wait

        assert shed.status_code == 503, shed.text
        assert shed.headers["retry-after"] == "2"
        error = shed.json()["error"]
        assert (error["type"], error["limit"]) == ("overloaded", "global")
        assert "job_id" not in error  # shed before any work, so no record either
        assert await metric(http, "genai_shed_total", {"limit": "global"}) == 1
        # Shed at the door: before the key is checked or the body read (it is not even JSON).
        anonymous = await http.post(
            "/v1/completions", content=b"{not json", headers={"authorization": ""}
        )
        assert anonymous.status_code == 503, anonymous.text
        assert anonymous.json()["error"]["type"] == "overloaded"
        assert await metric(http, "genai_shed_total", {"limit": "global"}) == 2

        answers = await asyncio.gather(*slow)
        assert [answer.status_code for answer in answers] == [200] * 4
        assert await metric(http, "genai_inflight", {"limit": "global"}) == 0
    assert upstream_calls(fake) == ["openai"] * 4


# The "done means" scenarios.


async def test_with_one_upstream_call_in_three_failing_every_caller_gets_an_envelope(
    fake: FakeProviderServer, database_url: str
) -> None:
    fake.script("openai", *[Reply.error(500), Reply.ok(), Reply.ok()] * 10)
    # Thirty at once on a busy two-core machine: no slow answer may turn into a timeout here.
    settings = fault_settings(fake, database_url, timeout=15.0, deadline=30.0)
    async with gateway(settings) as http:
        answers = await asyncio.gather(
            *(http.post("/v1/completions", json=REQUEST) for _ in range(30))
        )
        assert [answer.status_code for answer in answers] == [200] * 30
        envelopes = [answer.json() for answer in answers]
        records = [await job(http, envelope["job_id"]) for envelope in envelopes]
    attempts = [a for envelope in envelopes for a in envelope["attempts"]]
    assert len(attempts) == 40  # 30 answers and the 10 scripted failures, each retried once
    assert sum(a["outcome"] == "failed" for a in attempts) == 10
    assert len(fake.requests) == 40
    assert {record["status"] for record in records} == {"completed"}


async def test_a_cached_repeat_makes_no_upstream_call(
    fake: FakeProviderServer, database_url: str
) -> None:
    async with gateway(fault_settings(fake, database_url)) as http:
        first = await http.post("/v1/completions", json={**REQUEST, "cache": True})
        second = await http.post("/v1/completions", json={**REQUEST, "cache": True})
        assert first.status_code == second.status_code == 200, second.text
        miss, hit = first.json(), second.json()
        assert (miss["cache"], hit["cache"]) == ("miss", "hit")
        assert hit["response"]["text"] == miss["response"]["text"]
        assert hit["attempts"] == []
        assert hit["job_id"] != miss["job_id"]
        record = await job(http, hit["job_id"])
    assert record["status"] == "cached"
    assert not record["attempts"]
    assert upstream_calls(fake) == ["openai"]


async def test_stream_and_cache_take_only_json_booleans(
    fake: FakeProviderServer, database_url: str
) -> None:
    async with gateway(fault_settings(fake, database_url)) as http:
        for field, value in (("stream", "yes"), ("stream", 1), ("cache", "maybe"), ("cache", 0)):
            answer = await http.post("/v1/completions", json={**REQUEST, field: value})
            assert answer.status_code == 422, (field, value, answer.text)
            error = answer.json()["error"]
            assert error["type"] == "invalid_request"
            assert error["errors"][0]["loc"] == ["body", field]
    assert upstream_calls(fake) == []


async def test_a_patterns_own_chain_wins_and_an_invalid_model_in_it_is_skipped(
    fake: FakeProviderServer, database_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "patterns"
    root.mkdir()
    (root / "brief.md").write_text(
        "---\ndescription: Be brief.\n"
        "fallbacks: [not-a-model, ollama/llama3.2]\n---\nAnswer in one line.\n"
    )
    fake.script("openai", *[Reply.error(503)] * (RETRIES + 1))
    settings = fault_settings(fake, database_url, pattern_dir=[root])
    async with gateway(settings) as http:
        answer = await http.post(
            "/v1/completions", json={"pattern_key": "brief", "user_prompt": "Hi."}
        )
        assert answer.status_code == 200, answer.text
        envelope = answer.json()
        record = await job(http, envelope["job_id"])
    # The pattern's chain replaces the config's (anthropic is never tried); the bad entry is
    # skipped rather than failing the request (`genai patterns validate` reports it).
    assert upstream_calls(fake) == ["openai"] * (RETRIES + 1) + ["ollama"]
    assert envelope["model_choice"]["source"] == "fallback"
    assert (envelope["provenance"]["provider"], record["provider"]) == ("ollama", "ollama")
