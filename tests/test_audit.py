"""The audit trail on SQLite and PostgreSQL: one durable, redacted record per completion,
replay that proves the stored hashes, and drift detection after a silent edit."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.types import Message
from structlog.testing import capture_logs

from app.audit.redaction import Redactor
from app.audit.trail import AuditTrail, CallRun, OpenJob
from app.config import AuditSettings
from app.prompts.structured import Attempt
from app.providers import ProviderReply
from app.schemas import Usage, ValidationIssues
from app.store.db import Database
from app.store.jobs import JobRepository
from app.store.writer import AuditWriter
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import completion_scope, running_app, serve_app, settings_for

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
    assert "template_sha256" not in record  # one source hash: pattern_content_hash (0004)
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
    settings = audit_settings(fake, database_url, pattern_root, tmp_path)
    async with running_app(settings) as (app, http):
        body = json.dumps(NOTE_REQUEST).encode()
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        inbox.put_nowait({"type": "http.request", "body": body, "more_body": False})
        scope = completion_scope(body, http.headers["authorization"])
        sent: list[Message] = []

        async def send(message: Message) -> None:
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


EXTRACT = f"""---
description: Extract a person.
output_schema: {
    json.dumps(
        {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"],
            "additionalProperties": False,
        }
    )
}
---
Extract the person mentioned in the message.
"""


async def test_no_personal_data_reaches_any_stored_column(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    (pattern_root / "extract.md").write_text(EXTRACT, encoding="utf-8")
    card_digits = PII["card"].replace(" ", "")
    request = {
        "pattern_key": "note",
        "variables": {"owner": PII["email"]},
        "user_prompt": PII_PROMPT,
        "model": "anthropic/m",
        "params": {"stop": [f"Mail {PII['email']}", f"Card {PII['card']}"]},
    }
    # The first answer fails the schema; its text, its issue texts and its unknown key all
    # carry personal data, which must not survive in `attempts` either.
    fake.script(
        "openai",
        Reply.ok(
            text=json.dumps(
                {"name": f"I am {PII['name']}", "age": PII["email"], PII["iban"]: PII["phone"]}
            )
        ),
        Reply.ok(text=json.dumps({"name": "someone", "age": 3})),
    )
    structured = {
        "pattern_key": "extract",
        "user_prompt": PII_PROMPT,
        "model": f"openai/gpt-4o-{card_digits}",  # a model name carrying a card number
    }
    async with serve_app(audit_settings(fake, database_url, pattern_root, tmp_path)) as http:
        envelope = (
            await http.post(
                "/v1/completions", json=request, headers={"x-request-id": f"order-{card_digits}"}
            )
        ).json()
        record = (await http.get(f"/v1/jobs/{envelope['job_id']}")).json()
        second = await http.post("/v1/completions", json=structured)
        assert second.status_code == 200, second.text
        extracted = (await http.get(f"/v1/jobs/{second.json()['job_id']}")).json()
    # The caller still gets everything in clear; only the store is redacted.
    assert PII["email"] in envelope["prompt"]["system"]
    assert PII["card"] in envelope["response"]["text"]
    tries = extracted["output_attempts"]
    assert tries[0]["valid"] is False and len(tries) == 2
    rows = await job_rows(database_url)
    assert len(rows) == 2
    for row in rows:
        for column, value in row.items():
            stored = value if isinstance(value, bytes) else json.dumps(value, default=str).encode()
            for kind, raw in PII.items():
                assert raw.encode() not in stored, f"{kind} found in column {column}"
                assert raw.replace(" ", "").encode() not in stored, f"{kind} found in {column}"
    categories = set(record["redaction_map"].values())
    assert {"EMAIL", "PHONE", "CARD_NUMBER", "IBAN", "SIMPLE_NAME"} <= categories
    for job in (record, extracted):
        everything = json.dumps({k: v for k, v in job.items() if k != "redaction_map"})
        for token in job["redaction_map"]:
            assert token in everything


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
        with capture_logs() as logs:
            replay = (await http.post(f"/v1/jobs/{envelope['job_id']}/replay")).json()
            revealed = await http.post(f"/v1/jobs/{envelope['job_id']}/replay?reveal=true")
        metrics = (await http.get("/metrics")).text
    assert replay["reproduced"] is True and replay["differing"] == []
    # By default replay proves, it does not disclose: the prompt is redacted as stored.
    assert replay["revealed"] is False
    assert not [value for value in PII.values() if value in json.dumps(replay)]
    assert "[EMAIL_" in replay["prompt"]["messages"][-1]["content"]
    # Only an explicit reveal returns the raw prompt, and it is logged and counted.
    assert revealed.json()["revealed"] is True
    assert revealed.json()["prompt"] == envelope["prompt"]
    assert [e["job_id"] for e in logs if e["event"] == "replay_revealed"] == [envelope["job_id"]]
    assert "genai_replay_reveals_total 1.0" in metrics
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
    unknown = "0" * 32  # well formed; a malformed id is a 422 (tests/security/test_boundary.py)
    for resp in (
        await client.get(f"/v1/jobs/{unknown}"),
        await client.post(f"/v1/jobs/{unknown}/replay"),
    ):
        assert resp.status_code == 404
        assert resp.json()["error"]["type"] == "job_not_found"


async def test_migrations_match_the_table_definitions(empty_database_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from app.store.db import Database
    from app.store.partitions import outside_partitions
    from app.store.tables import Base

    database = Database(empty_database_url)
    await database.migrate()
    assert await database.schema_is_current()

    def diff(connection: Any) -> list[Any]:
        # PostgreSQL's month partitions of jobs are made at run time, not declared (0013).
        context = MigrationContext.configure(connection, opts={"include_name": outside_partitions})
        return list(compare_metadata(context, Base.metadata))

    async with database.engine.connect() as conn:
        assert await conn.run_sync(diff) == []
    await database.aclose()


async def test_a_poisoned_provider_answer_is_stored_escaped_and_never_blocks_the_trail(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    # NUL is what PostgreSQL refuses; before escaping, this one answer stalled every later record.
    fake.script("openai", Reply.ok(text="before\u0000after"))
    async with serve_app(audit_settings(fake, database_url, pattern_root, tmp_path)) as http:
        responses = [await http.post("/v1/completions", json=NOTE_REQUEST) for _ in range(4)]
        assert [r.status_code for r in responses] == [200] * 4
        assert responses[0].json()["response"]["text"] == "before\u0000after"
        records = [await http.get(f"/v1/jobs/{r.json()['job_id']}") for r in responses]
        ready = await http.get("/readyz")
    assert [r.status_code for r in records] == [200] * 4
    poisoned, *normal = (r.json() for r in records)
    assert poisoned["status"] == "completed"
    assert poisoned["response_redacted"] == "before\\u0000after"  # the literal text \u0000
    assert poisoned["escaped_fields"] == ["response_redacted"]
    assert all(r["status"] == "completed" and r["escaped_fields"] is None for r in normal)
    assert ready.json()["database"]["audit_backlog_stuck"] is False
    assert {row["status"] for row in await job_rows(database_url)} == {"completed"}


async def test_every_field_of_a_completion_is_made_storable_lone_surrogates_included(
    database_url: str, tmp_path: Path
) -> None:
    # A lone surrogate cannot travel in the fake's JSON, so the trail is driven directly.
    database = Database(database_url)
    await database.migrate()
    jobs = JobRepository(database.sessions, database.lane)
    writer = AuditWriter(jobs, flush_seconds=3600, batch_size=10)
    trail = AuditTrail(jobs=jobs, writer=writer, redactor=Redactor(b"k"), vault=None)
    from tests.support import pending_job

    await jobs.insert(pending_job("j1"))
    reply = ProviderReply(
        text="lone \ud800 and nul \x00",
        finish_reason="stop",
        usage=Usage(input_tokens=1, output_tokens=2, total_tokens=3),
    )
    attempts = [Attempt(1, False, ValidationIssues(unknown=["$.k\x00ey"]), "x\udc00")]
    run = CallRun(latency_ms=1.0, upstream_ms=0.5, output_attempts=attempts)
    await trail.completed(OpenJob("j1", {}), reply, run)
    try:
        record = await trail.reader.get("j1")
    finally:
        await writer.aclose()
        await database.aclose()
    assert record.status == "completed"
    assert record.response_redacted == "lone \\ud800 and nul \\u0000"
    assert record.output_attempts is not None
    assert record.output_attempts[0].issues.unknown == ["$.k\\u0000ey"]
    assert record.escaped_fields == ["output_attempts", "response_redacted"]


async def test_pending_rows_left_by_a_crash_are_interrupted_at_start_up_but_fresh_ones_not(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    from tests.support import pending_job

    settings = audit_settings(fake, database_url, pattern_root, tmp_path)
    database = Database(database_url)
    await database.migrate()
    jobs = JobRepository(database.sessions, database.lane)
    too_old = dt.timedelta(seconds=settings.stale_pending_after_seconds + 60)
    await jobs.insert(pending_job("a" * 32, dt.datetime.now(dt.UTC) - too_old))
    # Still within the longest a request can live: another replica may be completing it.
    await jobs.insert(pending_job("b" * 32, dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)))
    await database.aclose()
    async with serve_app(settings) as http:
        old = (await http.get(f"/v1/jobs/{'a' * 32}")).json()
        fresh = (await http.get(f"/v1/jobs/{'b' * 32}")).json()
    assert (old["status"], old["error_type"]) == ("interrupted", "interrupted")
    assert old["completed_at"] is not None
    assert fresh["status"] == "pending"


async def test_a_stuck_audit_backlog_makes_the_service_not_ready(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    # Completions wait an hour for their batch, longer than the backlog may stay undrained.
    settings = audit_settings(
        fake,
        database_url,
        pattern_root,
        tmp_path,
        audit=AuditSettings(flush_seconds=3600, stuck_after_seconds=0.001),
    )
    async with serve_app(settings) as http:
        assert (await http.get("/readyz")).status_code == 200
        job_id = (await http.post("/v1/completions", json=NOTE_REQUEST)).json()["job_id"]
        await asyncio.sleep(0.01)  # let the backlog age past stuck_after_seconds
        stuck = await http.get("/readyz")
        await http.get(f"/v1/jobs/{job_id}")  # reading a job writes the queue
        drained = await http.get("/readyz")
    assert stuck.status_code == 503
    assert stuck.json()["status"] == "not_ready"
    assert stuck.json()["database"]["audit_backlog_stuck"] is True
    assert drained.status_code == 200
    assert drained.json()["database"]["audit_backlog_stuck"] is False


async def test_a_stop_with_the_store_down_spools_and_the_next_start_writes_it(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    settings = audit_settings(
        fake, database_url, pattern_root, tmp_path, audit=AuditSettings(flush_seconds=3600)
    )
    engine = create_async_engine(database_url)
    async with serve_app(settings) as http:
        job_id = (await http.post("/v1/completions", json=NOTE_REQUEST)).json()["job_id"]
        async with engine.begin() as conn:
            await conn.execute(text("ALTER TABLE jobs RENAME TO jobs_away"))
    [spooled] = list(settings.data_dir.glob("audit-spool-*.jsonl"))
    assert stat.S_IMODE(spooled.stat().st_mode) == 0o600
    assert job_id in spooled.read_text()
    async with engine.begin() as conn:
        await conn.execute(text("ALTER TABLE jobs_away RENAME TO jobs"))
    await engine.dispose()
    async with serve_app(settings) as http:
        record = (await http.get(f"/v1/jobs/{job_id}")).json()
    assert record["status"] == "completed"
    assert list(settings.data_dir.glob("audit-spool-*")) == []


# --- GENAI_AUDIT__MODE=with-call ---------------------------------------------------------------


async def test_with_call_mode_returns_the_answer_only_once_its_record_is_durable(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    fake.script("openai", Reply.ok(text="the answer"))
    settings = audit_settings(
        fake, database_url, pattern_root, tmp_path, audit=AuditSettings(mode="with-call")
    )
    async with serve_app(settings) as http:
        resp = await http.post("/v1/completions", json=NOTE_REQUEST)
        assert resp.status_code == 200, resp.text
        job_id = resp.json()["job_id"]
        rows_when_answered = await job_rows(database_url)  # before any reader flushes anything
        record = (await http.get(f"/v1/jobs/{job_id}")).json()
    assert [row["id"] for row in rows_when_answered] == [job_id]
    assert record["status"] == "completed" and record["response_redacted"] == "the answer"


async def test_with_call_mode_withholds_the_answer_when_the_record_cannot_be_stored(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    fake.script("openai", Reply.ok(text="an answer nobody may see"))
    settings = audit_settings(
        fake, database_url, pattern_root, tmp_path, audit=AuditSettings(mode="with-call")
    )
    engine = create_async_engine(database_url)
    async with serve_app(settings) as http:
        async with engine.begin() as conn:
            await conn.execute(text("ALTER TABLE jobs RENAME TO jobs_away"))
        resp = await http.post("/v1/completions", json=NOTE_REQUEST)
        async with engine.begin() as conn:
            await conn.execute(text("ALTER TABLE jobs_away RENAME TO jobs"))
    await engine.dispose()
    assert resp.status_code == 503
    assert resp.json()["error"]["type"] == "store_unavailable"
    assert "answer is withheld" in resp.json()["error"]["message"]
    assert "an answer nobody may see" not in resp.text
    assert len(fake.requests) == 1  # called concurrently with the write, as the mode says
    assert await job_rows(database_url) == []


async def test_before_call_mode_calls_nothing_when_the_record_cannot_be_stored(
    fake: FakeProviderServer, database_url: str, pattern_root: Path, tmp_path: Path
) -> None:
    settings = audit_settings(fake, database_url, pattern_root, tmp_path)
    engine = create_async_engine(database_url)
    async with serve_app(settings) as http:
        async with engine.begin() as conn:
            await conn.execute(text("ALTER TABLE jobs RENAME TO jobs_away"))
        responses = await asyncio.gather(
            *(http.post("/v1/completions", json=NOTE_REQUEST) for _ in range(5))
        )
        async with engine.begin() as conn:
            await conn.execute(text("ALTER TABLE jobs_away RENAME TO jobs"))
    await engine.dispose()
    assert [r.status_code for r in responses] == [503] * 5
    assert {r.json()["error"]["type"] for r in responses} == {"store_unavailable"}
    assert fake.requests == []


# --- migration 0004: one source hash ------------------------------------------------------------


async def test_migration_0004_merges_the_hash_columns_up_and_down_keeping_the_data(
    empty_database_url: str,
) -> None:
    database = Database(empty_database_url)
    await database.migrate("0003")
    columns = (
        "id, status, source_kind, source_name, source_base_path, template_sha256, "
        "pattern_content_hash, variables_hash, user_prompt_hash, provider, model, params, "
        "prompt_redacted, redaction_map, snippet_ids, created_at"
    )
    async with database.engine.begin() as conn:
        await conn.execute(
            text(
                f"INSERT INTO jobs ({columns}) VALUES ('j1', 'completed', 'pattern', 'note', "
                "'patterns', 'sha256:aa', 'sha256:aa', 'sha256:v', 'sha256:u', 'openai', 'm', "
                "'{}', '{}', '{}', '[]', CURRENT_TIMESTAMP)"
            )
        )
    await database.migrate()
    async with database.engine.connect() as conn:
        after_up = dict((await conn.execute(text("SELECT * FROM jobs"))).one()._mapping)
    await database.downgrade("0003")
    async with database.engine.connect() as conn:
        row = (
            await conn.execute(text("SELECT template_sha256, pattern_content_hash FROM jobs"))
        ).one()
    await database.migrate()
    assert await database.schema_is_current()
    stored = await JobRepository(database.sessions, database.lane).get("j1")
    await database.aclose()
    assert "template_sha256" not in after_up
    assert (after_up["pattern_content_hash"], after_up["status"]) == ("sha256:aa", "completed")
    assert tuple(row) == ("sha256:aa", "sha256:aa")
    assert stored is not None and stored.pattern_content_hash == "sha256:aa"
