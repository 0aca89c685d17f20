"""What the audit trail stores, without a database: the pure record builders (RecordBuilder) and
the typed values they hand to the store, whose JSON must stay what was stored before."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, get_type_hints

from app.audit.records import CallRun, OpenJob, RecordBuilder
from app.audit.redaction import Redactor
from app.catalog.source import RenderedSource
from app.errors import ProviderError
from app.pipeline.prepare import Prepared
from app.prompts.structured import Attempt
from app.providers import ProviderReply
from app.schemas import (
    CallAttempt,
    JobRecord,
    Message,
    ModelChoice,
    ModelParams,
    RecordedParams,
    RenderedPrompt,
    RenderRequest,
    StoredParams,
    ToolCall,
    Usage,
    ValidationIssues,
)
from app.snippets.library import ComposedSnippets
from app.store.records import SOURCE_COLUMNS, JobOutcome, PendingJob
from app.store.secrets import KEY_BYTES, ReplayVault
from app.store.tables import Job
from app.tracking import RenderedFrom, build_provenance

EMAIL = "jane.doe@example.com"
REDACTOR = Redactor(b"k")


def prepared(
    *, kind: str = "pattern", name: str = "note", stop: list[str] | None = None
) -> Prepared:
    request = RenderRequest(
        pattern_key=name, variables={"owner": EMAIL}, user_prompt=f"Mail {EMAIL}", model="openai/m"
    )
    source = RenderedSource(
        kind=kind,  # type: ignore[arg-type]
        name=name,
        base_path="patterns",
        content_hash="sha256:" + "0" * 64,
        system=f"Write to {EMAIL}.",
        variables={"owner": EMAIL},
        user=request.user_prompt,
    )
    choice = ModelChoice(
        model="openai/m", provider="openai", name="m", source="request", reason="r"
    )
    return Prepared(
        request=request,
        source=source,
        snippets=ComposedSnippets("", ["s1"]),
        prompt=RenderedPrompt(
            system=source.system, messages=[Message(role="user", content=request.user_prompt)]
        ),
        choice=choice,
        params=ModelParams(temperature=0.5, stop=stop),
        provenance=build_provenance(
            RenderedFrom(source.name, source.base_path, source.content_hash, source.variables),
            user_prompt=request.user_prompt,
            provider="openai",
            model="m",
            snippet_ids=["s1"],
        ),
        native_schema=False,
    )


def reply(**fields: Any) -> ProviderReply:
    return ProviderReply(
        text=fields.pop("text", f"Sent to {EMAIL}"),
        finish_reason="stop",
        usage=Usage(input_tokens=3, output_tokens=4, total_tokens=7),
        **fields,
    )


def test_the_pending_record_redacts_every_caller_text_and_keeps_the_fingerprints() -> None:
    p = prepared(stop=[EMAIL])
    pending = RecordBuilder(REDACTOR, None).pending("j1", p, p.request, f"req {EMAIL}")
    stored = json.dumps(pending.as_row(), default=str)
    assert EMAIL not in stored
    assert pending.status == "pending" and pending.replay_inputs is None
    assert pending.params["temperature"] == 0.5 and pending.params["stop"] != [EMAIL]
    assert pending.user_prompt_hash == p.provenance.user_prompt_hash
    assert pending.variables_hash == p.provenance.variables_hash
    assert pending.snippet_ids == ["s1"]
    assert set(pending.redaction_map.values()) == {"EMAIL"}  # each token names its kind


def test_a_fallback_source_name_is_free_text_and_redacted_a_pattern_name_is_not() -> None:
    fallback = prepared(kind="fallback", name=f"ask {EMAIL}")
    pending = RecordBuilder(REDACTOR, None).pending("j1", fallback, fallback.request, None)
    assert EMAIL not in pending.source_name
    note = prepared()
    assert (
        RecordBuilder(REDACTOR, None).pending("j2", note, note.request, None).source_name == "note"
    )


def test_replay_inputs_are_sealed_for_the_job_and_hold_the_raw_inputs() -> None:
    vault = ReplayVault(b"\x01" * KEY_BYTES)
    p = prepared()
    pending = RecordBuilder(REDACTOR, vault).pending("j1", p, p.request, None)
    assert pending.replay_inputs is not None
    inputs = vault.open("j1", pending.replay_inputs)
    assert inputs["user_prompt"] == f"Mail {EMAIL}" and inputs["model"] == "openai/m"


def test_a_completion_stores_the_same_json_as_before_the_values_were_typed() -> None:
    call = ToolCall(id="call_1", name="send", arguments=json.dumps({"to": EMAIL}))
    upstream = CallAttempt(provider="openai", model="m", outcome="completed", duration_ms=1.5)
    tries = [Attempt(1, False, ValidationIssues(unknown=[f"$.{EMAIL}"]), f"to {EMAIL}")]
    run = CallRun(latency_ms=2.0, upstream_ms=1.0, calls=[upstream], output_attempts=tries)
    outcome = RecordBuilder(REDACTOR, None).completed(
        OpenJob("j1", {}), reply(tool_calls=(call,)), run, cost_usd=0.1
    )
    row = outcome.as_row()
    # The shapes the dicts had before they were typed values, built the way they were built.
    arguments = REDACTOR.redact(call.arguments).text
    assert row["response_tool_calls"] == [{**call.model_dump(mode="json"), "arguments": arguments}]
    assert json.dumps(row["attempts"]) == json.dumps([upstream.model_dump()])
    redacted_tries, _ = REDACTOR.redact_data([attempt.as_record() for attempt in tries])
    assert json.dumps(row["output_attempts"]) == json.dumps(redacted_tries)
    assert EMAIL not in json.dumps(row, default=str)
    assert row["status"] == "completed" and row["streamed"] is False and row["cost_usd"] == 0.1
    assert "provider" not in row  # only a fallback's answer rewrites the model columns


def test_an_unchanged_call_is_not_copied() -> None:
    """Nothing to redact in a model name: the caller's value itself is stored (no copy)."""
    upstream = CallAttempt(provider="openai", model="m", outcome="failed", duration_ms=1.0)
    outcome = RecordBuilder(REDACTOR, None).failed(
        OpenJob("j1", {}), ProviderError("down", provider="openai"), CallRun(1.0, calls=[upstream])
    )
    assert outcome.attempts is not None and outcome.attempts[0] is upstream


def test_a_failure_and_a_cancellation_keep_what_they_know() -> None:
    builder, job = RecordBuilder(REDACTOR, None), OpenJob("j1", {"<T>": "x"})
    failed = builder.failed(
        job, ProviderError(f"no {EMAIL}", provider="openai"), CallRun(3.0, 2.0, streamed=True)
    )
    assert failed.status == "failed" and failed.streamed and failed.upstream_latency_ms == 2.0
    assert failed.error_message is not None and EMAIL not in failed.error_message
    assert failed.redaction_map["<T>"] == "x"  # the pending record's tokens travel on
    cancelled = builder.cancelled(job, CallRun(4.0, 2.0, streamed=True))
    assert cancelled.error_type == "client_disconnected" and cancelled.latency_ms == 4.0
    assert cancelled.upstream_latency_ms is None and not cancelled.streamed
    assert builder.cancelled(job, CallRun(1.0), reason="gone").error_type == "gone"


def test_an_escaped_typed_column_stays_typed_and_survives_the_spool_round_trip() -> None:
    call = ToolCall(id="call_1", name="send", arguments='{"a": "\x00"}')
    outcome = RecordBuilder(REDACTOR, None).completed(
        OpenJob("j1", {}), reply(text="ok", tool_calls=(call,)), CallRun(1.0)
    )
    stored = outcome.made_storable()
    assert stored.escaped_fields == ("response_tool_calls",)
    assert stored.response_tool_calls is not None
    assert stored.response_tool_calls[0].arguments == '{"a": "\\u0000"}'
    assert JobOutcome.from_row(stored.as_row()) == stored


def test_stored_params_name_every_parameter_the_record_reads_back() -> None:
    names = set(get_type_hints(StoredParams))
    assert names == set(RecordedParams.model_fields) == set(ModelParams.model_fields)


def test_the_rows_written_and_the_record_read_back_name_the_same_columns() -> None:
    """The table is the columns' home: what the trail writes (a pending record, then one outcome)
    covers every column, and the API's JobRecord reads each back (replay inputs only as
    `replay_available`)."""
    columns = {column.name for column in Job.__table__.columns}
    written = {f.name for f in dataclasses.fields(PendingJob)} | {
        f.name for f in dataclasses.fields(JobOutcome)
    }
    assert written == columns - {"chain_seq"}  # the chainer's to write (app/store/chain.py)
    assert set(JobRecord.model_fields) == columns - {"replay_inputs"} | {"replay_available"}
    assert set(SOURCE_COLUMNS) <= columns


def test_a_typed_value_is_scanned_in_place_and_escaped_even_when_nested() -> None:
    """A NUL inside a try's issues (a model inside a model) is found without dumping the
    record, escaped, and read back typed; a clean typed value is kept as it was (no copy)."""
    tries = [Attempt(1, False, ValidationIssues(unknown=["$.k\x00ey"]), "x")]
    upstream = CallAttempt(provider="openai", model="m", outcome="completed", duration_ms=1.0)
    run = CallRun(1.0, calls=[upstream], output_attempts=tries)
    outcome = RecordBuilder(REDACTOR, None).completed(OpenJob("j1", {}), reply(text="ok"), run)
    stored = outcome.made_storable()
    assert stored.escaped_fields == ("output_attempts",)
    assert stored.output_attempts is not None
    assert stored.output_attempts[0].issues.unknown == ["$.k\\u0000ey"]
    assert stored.attempts is outcome.attempts
