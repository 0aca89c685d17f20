"""The audit trail on SQLite and PostgreSQL: one durable, redacted record per completion,
replay that proves the stored hashes, and drift detection after a silent edit."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from app.config import AuditSettings
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import running_app, serve_app, settings_for

NOTE = """---
description: Write a short note.
defaults:
  tone: calm
---
Write a {{ tone }} note for {{ owner }}.
"""

PII = {
    "email": "jane.doe@example.com",
    "phone": "+44 20 7946 0958",
    "card": "4111 1111 1111 1111",
    "iban": "GB82 WEST 1234 5698 7654 32",
    "name": "Jane Doe",
}
PII_PROMPT = (
    f"My name is {PII['name']}. Mail {PII['email']} or call {PII['phone']}. "
    f"Card {PII['card']}, IBAN {PII['iban']}."
)


@pytest.fixture
def pattern_root(tmp_path: Path) -> Path:
    root = tmp_path / "patterns"
    root.mkdir()
    (root / "note.md").write_text(NOTE, encoding="utf-8")
    return root


def audit_settings(
    fake: FakeProviderServer,
    database_url: str,
    pattern_root: Path,
    tmp_path: Path,
    **overrides: Any,
) -> Any:
    return settings_for(
        fake,
        database_url=database_url,
        database_auto_migrate=True,
        pattern_dir=[pattern_root],
        data_dir=tmp_path / "data",
        **overrides,
    )


async def job_rows(database_url: str) -> list[dict[str, Any]]:
    """Every column of every stored job, read straight from the database."""
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            result = await conn.execute(text("SELECT * FROM jobs ORDER BY created_at"))
            return [dict(row._mapping) for row in result]
    finally:
        await engine.dispose()


NOTE_REQUEST = {"pattern_key": "note", "variables": {"owner": "Ops"}, "user_prompt": "hello"}


async def test_every_completion_leaves_exactly_one_completed_record(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    async with serve_app(audit_settings(fake, database_url, pattern_root, tmp_path)) as http:
        resp = await http.post(
            "/v1/completions",
            json={**NOTE_REQUEST, "model": "ollama/m"},
            headers={"x-request-id": "req-audit-1"},
        )
        assert resp.status_code == 200, resp.text
        envelope = resp.json()
        record = (await http.get(f"/v1/jobs/{envelope['job_id']}")).json()
    assert record["status"] == "completed"
    assert record["request_id"] == "req-audit-1"
    assert (record["source_kind"], record["source_name"]) == ("pattern", "note")
    prov = envelope["provenance"]
    assert record["template_sha256"] == prov["pattern_content_hash"]
    for name in ("pattern_content_hash", "variables_hash", "user_prompt_hash"):
        assert record[name] == prov[name]
    assert (record["provider"], record["model"]) == ("ollama", "m")
    assert record["params"] == {k: v for k, v in envelope["params"].items() if v is not None}
    assert (record["input_tokens"], record["output_tokens"]) == (11, 7)
    assert record["finish_reason"] == "stop"
    assert record["latency_ms"] >= record["upstream_latency_ms"] >= 0
    assert record["prompt_redacted"]["system"] == "Write a calm note for Ops."
    assert record["response_redacted"] == "echo: hello"
    assert record["snippet_ids"] == [] and record["replay_available"] is True
    assert len(await job_rows(database_url)) == 1


@pytest.mark.parametrize(
    ("replies", "error_type", "status"),
    [
        ([Reply.error(500)] * 3, "upstream_error", 502),
        ([Reply.error(401)], "upstream_auth_failed", 502),
        ([Reply.delay(3.0)], "upstream_timeout", 504),
    ],
)
async def test_a_failed_provider_call_leaves_a_failed_record_named_in_the_error(
    fake: FakeProviderServer,
    database_url: str,
    pattern_root: Path,
    tmp_path: Path,
    replies: list[Reply],
    error_type: str,
    status: int,
) -> None:
    fake.script("openai", *replies)
    settings = audit_settings(fake, database_url, pattern_root, tmp_path)
    settings.upstream.timeout_seconds = 0.3
    async with serve_app(settings) as http:
        resp = await http.post("/v1/completions", json=NOTE_REQUEST)
        assert resp.status_code == status
        error = resp.json()["error"]
        assert error["type"] == error_type
        record = (await http.get(f"/v1/jobs/{error['job_id']}")).json()
    assert record["status"] == "failed" and record["error_type"] == error_type
    assert record["response_redacted"] is None
    assert len(await job_rows(database_url)) == 1


async def test_an_unconfigured_provider_is_recorded_as_failed_too(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    settings = audit_settings(None, database_url, pattern_root, tmp_path)  # type: ignore[arg-type]
    async with serve_app(settings) as http:
        resp = await http.post("/v1/completions", json=NOTE_REQUEST)
        assert resp.status_code == 503
        job_id = resp.json()["error"]["job_id"]
        record = (await http.get(f"/v1/jobs/{job_id}")).json()
    assert record["error_type"] == "provider_unavailable"


async def test_validation_failures_before_rendering_create_no_record(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    async with serve_app(audit_settings(fake, database_url, pattern_root, tmp_path)) as http:
        resp = await http.post("/v1/completions", json={**NOTE_REQUEST, "variables": {}})
        assert resp.status_code == 422
        assert "job_id" not in resp.json()["error"]
    assert await job_rows(database_url) == []


async def test_a_client_that_disconnects_leaves_a_cancelled_record(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    fake.script("openai", Reply.delay(10.0))
    async with running_app(audit_settings(fake, database_url, pattern_root, tmp_path)) as (app, _):
        body = json.dumps(NOTE_REQUEST).encode()
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        inbox.put_nowait({"type": "http.request", "body": body, "more_body": False})
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/completions",
            "raw_path": b"/v1/completions",
            "query_string": b"",
            "root_path": "",
            "client": ("127.0.0.1", 5000),
            "server": ("gateway.test", 80),
            "headers": [
                (b"host", b"gateway.test"),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        request = asyncio.create_task(app(scope, inbox.get, send))
        for _ in range(500):  # wait until the provider call is in flight
            if fake.calls("openai"):
                break
            await asyncio.sleep(0.01)
        assert fake.calls("openai"), "the provider was never called"
        inbox.put_nowait({"type": "http.disconnect"})
        with pytest.raises(asyncio.CancelledError):
            await request
        assert not any(m["type"] == "http.response.start" for m in sent)
    [row] = await job_rows(database_url)  # the app has stopped: queued writes were drained
    assert (row["status"], row["error_type"]) == ("cancelled", "client_disconnected")


async def test_a_clean_stop_writes_every_queued_completion(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    # Completions would wait an hour for the next batch; only the shutdown drain writes them.
    settings = audit_settings(
        fake, database_url, pattern_root, tmp_path, audit=AuditSettings(flush_seconds=3600)
    )
    async with serve_app(settings) as http:
        for _ in range(5):
            assert (await http.post("/v1/completions", json=NOTE_REQUEST)).status_code == 200
        ready = (await http.get("/readyz")).json()
        assert ready["database"]["audit_backlog"] == 5
    rows = await job_rows(database_url)
    assert [row["status"] for row in rows] == ["completed"] * 5


async def test_no_personal_data_reaches_any_stored_column(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    request = {
        "pattern_key": "note",
        "variables": {"owner": PII["email"]},
        "user_prompt": PII_PROMPT,
        "model": "anthropic/m",
    }
    async with serve_app(audit_settings(fake, database_url, pattern_root, tmp_path)) as http:
        envelope = (await http.post("/v1/completions", json=request)).json()
        record = (await http.get(f"/v1/jobs/{envelope['job_id']}")).json()
    # The caller still gets everything in clear; only the store is redacted.
    assert PII["email"] in envelope["prompt"]["system"]
    assert PII["card"] in envelope["response"]["text"]
    [row] = await job_rows(database_url)
    for column, value in row.items():
        stored = value if isinstance(value, bytes) else json.dumps(value, default=str).encode()
        for kind, raw in PII.items():
            assert raw.encode() not in stored, f"{kind} found in column {column}"
            assert raw.replace(" ", "").encode() not in stored, f"{kind} found in {column}"
    categories = set(record["redaction_map"].values())
    assert {"EMAIL", "PHONE", "CARD_NUMBER", "IBAN", "SIMPLE_NAME"} <= categories
    for token in record["redaction_map"]:
        assert (
            token
            in record["prompt_redacted"]["messages"][0]["content"]
            + record["prompt_redacted"]["system"]
            + record["response_redacted"]
        )


async def test_the_audit_store_being_down_stops_the_call_with_503(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    async with serve_app(audit_settings(fake, database_url, pattern_root, tmp_path)) as http:
        engine = create_async_engine(database_url)
        async with engine.begin() as conn:
            await conn.execute(text("DROP TABLE jobs"))
        await engine.dispose()
        resp = await http.post("/v1/completions", json=NOTE_REQUEST)
        ready = await http.get("/readyz")
    assert resp.status_code == 503
    assert resp.json()["error"]["type"] == "store_unavailable"
    assert fake.requests == []  # never call a provider without a record
    assert ready.status_code == 503


async def test_replay_rebuilds_the_prompt_and_every_hash_matches(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    request = {**NOTE_REQUEST, "user_prompt": PII_PROMPT}
    async with serve_app(audit_settings(fake, database_url, pattern_root, tmp_path)) as http:
        envelope = (await http.post("/v1/completions", json=request)).json()
        replay = (await http.post(f"/v1/jobs/{envelope['job_id']}/replay")).json()
    assert replay["reproduced"] is True and replay["differing"] == []
    assert replay["prompt"] == envelope["prompt"]
    assert (
        replay["hashes"]["user_prompt_hash"]["recomputed"]
        == envelope["provenance"]["user_prompt_hash"]
    )
    assert set(replay["hashes"]) == {
        "pattern_content_hash",
        "variables_hash",
        "user_prompt_hash",
        "prompt_redacted",
    }


async def test_a_silent_pattern_edit_is_drift_and_replay_says_which_hash_differs(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    async with serve_app(audit_settings(fake, database_url, pattern_root, tmp_path)) as http:
        envelope = (await http.post("/v1/completions", json=NOTE_REQUEST)).json()
        clean = (await http.get("/v1/drift")).json()
        (pattern_root / "note.md").write_text(NOTE.replace("short", "long"), encoding="utf-8")
        drift = (await http.get("/v1/drift")).json()
        replay = (await http.post(f"/v1/jobs/{envelope['job_id']}/replay")).json()
        metrics = (await http.get("/metrics")).text
    assert clean == {"checked_sources": 1, "drifted": []}
    [finding] = drift["drifted"]
    assert (finding["source_kind"], finding["source_name"], finding["jobs"]) == (
        "pattern",
        "note",
        1,
    )
    assert finding["recorded_sha256"] == envelope["provenance"]["pattern_content_hash"]
    assert finding["current_sha256"] != finding["recorded_sha256"]
    assert replay["reproduced"] is False
    assert replay["differing"] == ["pattern_content_hash"]
    assert 'genai_drift_detections_total{source_kind="pattern"} 1.0' in metrics


async def test_a_silent_database_edit_of_a_template_is_drift(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    async with serve_app(audit_settings(fake, database_url, pattern_root, tmp_path)) as http:
        created = await http.post(
            "/v1/templates",
            json={
                "name": "greeter",
                "role": "writer",
                "template": "Greet {{ who }}.",
                "variables": ["who"],
            },
        )
        assert created.status_code == 201, created.text
        request = {
            "template": {"name": "greeter", "role": "writer"},
            "variables": {"who": "Ana"},
            "user_prompt": "hi",
        }
        envelope = (await http.post("/v1/completions", json=request)).json()
        assert (await http.get("/v1/drift")).json()["drifted"] == []
        engine = create_async_engine(database_url)
        async with engine.begin() as conn:  # bypasses the API: versions are meant to be immutable
            await conn.execute(text("UPDATE prompt_templates SET template = 'Insult {{ who }}.'"))
        await engine.dispose()
        drift = (await http.get("/v1/drift")).json()
        replay = (await http.post(f"/v1/jobs/{envelope['job_id']}/replay")).json()
    [finding] = drift["drifted"]
    assert (finding["source_kind"], finding["source_name"]) == ("template", "greeter")
    assert finding["template_version"] == 1
    assert "pattern_content_hash" in replay["differing"]
    assert "Insult Ana." in replay["prompt"]["system"]


async def test_without_kept_inputs_replay_is_a_clear_409_and_nothing_is_stored(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    settings = audit_settings(
        fake, database_url, pattern_root, tmp_path, audit=AuditSettings(store_replay_inputs=False)
    )
    async with serve_app(settings) as http:
        envelope = (await http.post("/v1/completions", json=NOTE_REQUEST)).json()
        resp = await http.post(f"/v1/jobs/{envelope['job_id']}/replay")
    assert resp.status_code == 409
    assert resp.json()["error"]["type"] == "replay_unavailable"
    [row] = await job_rows(database_url)
    assert row["replay_inputs"] is None


async def test_replay_inputs_sealed_under_another_key_are_a_clear_409(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    async with serve_app(audit_settings(fake, database_url, pattern_root, tmp_path)) as http:
        job_id = (await http.post("/v1/completions", json=NOTE_REQUEST)).json()["job_id"]
    (tmp_path / "data" / "keys" / "data.key").unlink()  # the next start generates a new key
    async with serve_app(audit_settings(fake, database_url, pattern_root, tmp_path)) as http:
        resp = await http.post(f"/v1/jobs/{job_id}/replay")
        record = await http.get(f"/v1/jobs/{job_id}")
    assert resp.status_code == 409 and "cannot be decrypted" in resp.json()["error"]["message"]
    assert record.status_code == 200


async def test_unknown_job_is_404(client: httpx.AsyncClient) -> None:
    for resp in (await client.get("/v1/jobs/nope"), await client.post("/v1/jobs/nope/replay")):
        assert resp.status_code == 404
        assert resp.json()["error"]["type"] == "job_not_found"


async def test_migrations_match_the_table_definitions(database_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from app.store.db import Database
    from app.store.tables import Base

    database = Database(database_url)
    await database.migrate()
    assert await database.schema_is_current()

    def diff(connection: Any) -> list[Any]:
        return compare_metadata(MigrationContext.configure(connection), Base.metadata)

    async with database.engine.connect() as conn:
        assert await conn.run_sync(diff) == []
    await database.aclose()
