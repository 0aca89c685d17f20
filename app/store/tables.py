"""The database tables: versioned prompt templates, snippets, the job audit record, API keys,
teams and their limit counters."""

from __future__ import annotations

import datetime as dt
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    false,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from app.tracking import template_checksum

JSONType = JSON().with_variant(JSONB(), "postgresql")


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSONType, list[Any]: JSONType}


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timezone-aware UTC timestamp on every backend: SQLite stores no offset, so values are
    written as UTC and read back with UTC attached (PostgreSQL keeps the offset itself)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is not None and value.tzinfo is not None:
            return value.astimezone(dt.UTC)
        return value

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value


class _Timestamps:
    """Creation and last-change times, as UTC on every backend."""

    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=_now)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=_now, onupdate=_now)


class PromptTemplate(_Timestamps, Base):
    """One immutable version of a template; a change is a new row with the next version."""

    __tablename__ = "prompt_templates"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(100))
    version: Mapped[int] = mapped_column(Integer)
    template: Mapped[str] = mapped_column(Text)
    variables: Mapped[list[Any]] = mapped_column(JSONType)
    checksum: Mapped[str] = mapped_column(String(71))
    blueprint_schema: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    blueprint_instructions: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The version's own pattern test cases (PatternTestCase dumps); what a protected move runs.
    tests: Mapped[list[Any] | None] = mapped_column(JSONType, nullable=True)

    # Which version is live is no longer a flag here: the `production` label says so
    # (template_labels, migration 0009).
    __table_args__ = (Index("uq_prompt_templates_version", "name", "role", "version", unique=True),)


# ix_jobs_usage, in order: the window, what reports group by, then what they count and sum.
USAGE_INDEX_COLUMNS = (
    "created_at",
    "key_id",
    "team",
    "source_name",
    "provider",
    "model",
    "status",
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_usd",
    "cache_saved_usd",
    # The gateway's overhead (latency minus upstream time) for the percentiles (0016).
    "latency_ms",
    "upstream_latency_ms",
)


class Job(Base):
    """The audit record of one completion: written pending before the call, completed after."""

    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    request_id: Mapped[str | None] = mapped_column(String(128), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(
        UTCDateTime(), default=_now, server_default=func.now()
    )
    completed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    # pending|completed|cached|failed|cancelled|interrupted (indexed by ix_jobs_status_created)
    status: Mapped[str] = mapped_column(String(16))
    error_type: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)

    source_kind: Mapped[str] = mapped_column(String(16))  # pattern | template | fallback
    source_name: Mapped[str] = mapped_column(String(200))
    source_base_path: Mapped[str] = mapped_column(String(500))
    template_id: Mapped[int | None] = mapped_column(Integer)
    template_role: Mapped[str | None] = mapped_column(String(100))
    template_version: Mapped[int | None] = mapped_column(Integer)
    template_label: Mapped[str | None] = mapped_column(String(64), nullable=True)  # 0009
    # The source's content hash at job time: what replay proves and drift compares against.
    pattern_content_hash: Mapped[str] = mapped_column(String(71))
    variables_hash: Mapped[str] = mapped_column(String(71))
    user_prompt_hash: Mapped[str] = mapped_column(String(71))
    # prov-2: the turns after the user prompt (tool calls and results, a prefill); else null.
    continuation_hash: Mapped[str | None] = mapped_column(String(71), nullable=True)

    provider: Mapped[str] = mapped_column(String(32))
    model: Mapped[str] = mapped_column(String(200))
    params: Mapped[dict[str, Any]] = mapped_column(JSONType)
    finish_reason: Mapped[str | None] = mapped_column(String(32))
    input_tokens: Mapped[int | None] = mapped_column(Integer)
    output_tokens: Mapped[int | None] = mapped_column(Integer)
    cached_input_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reasoning_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Prompt tokens written to the provider's prompt cache (part of input_tokens), and of them
    # the ones written for an hour (Anthropic bills 5-minute and 1-hour writes differently).
    cache_write_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cache_write_1h_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cost_usd: Mapped[float | None] = mapped_column(nullable=True)
    # What the provider's prompt cache saved against the same tokens uncached (may be negative:
    # a write costs more than plain input).
    cache_saved_usd: Mapped[float | None] = mapped_column(nullable=True)
    # Who asked: the calling key's public id and its team (null with auth disabled).
    key_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    team: Mapped[str | None] = mapped_column(String(64), nullable=True)
    streamed: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    latency_ms: Mapped[float | None] = mapped_column()
    upstream_latency_ms: Mapped[float | None] = mapped_column()

    prompt_redacted: Mapped[dict[str, Any]] = mapped_column(JSONType)
    response_redacted: Mapped[str | None] = mapped_column(Text)
    # The tool calls the model answered with, their arguments redacted.
    response_tool_calls: Mapped[list[Any] | None] = mapped_column(JSONType, nullable=True)
    redaction_map: Mapped[dict[str, Any]] = mapped_column(JSONType)
    snippet_ids: Mapped[list[Any]] = mapped_column(JSONType)
    # The snippet versions used: [{identifier, version|null, source, sha256}] (null: before 0008).
    snippet_versions: Mapped[list[Any] | None] = mapped_column(JSONType, nullable=True)
    replay_inputs: Mapped[bytes | None] = mapped_column(LargeBinary)
    # Every upstream call: provider, model, outcome, error type, status, duration.
    attempts: Mapped[list[Any] | None] = mapped_column(JSONType, nullable=True)
    # Structured output: every attempt's outcome and issues (redacted), when a schema applied.
    output_attempts: Mapped[list[Any] | None] = mapped_column(JSONType, nullable=True)
    # Fields whose NUL or lone-surrogate characters were escaped so the backend would take them.
    escaped_fields: Mapped[list[Any] | None] = mapped_column(JSONType, nullable=True)
    # Its entry in the audit chain (app/store/chain.py); null until the chainer links it.
    chain_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)

    __table_args__ = (
        # Usage by key or team over a time range (GET /v1/usage, budgets' reconciliation).
        Index("ix_jobs_key_created", "key_id", "created_at"),
        Index("ix_jobs_team_created", "team", "created_at"),
        # A time range with everything a usage report groups and sums (app/store/usage.py): the
        # report reads this index alone, never the wide rows (3-5 s → under 1 s on a million
        # jobs, bench/RESULTS.md). Led by created_at, it also serves what the plain created_at
        # index did (newest jobs, stale sweeps). Key columns, not INCLUDE: SQLite has none.
        Index("ix_jobs_usage", *USAGE_INDEX_COLUMNS),
        # The job list (GET /v1/jobs): each filter, then newest first, so any combination reads
        # one index in order (migration 0015). The status one also serves the stale sweep.
        Index("ix_jobs_status_created", "status", "created_at", "id"),
        Index("ix_jobs_source_created", "source_name", "created_at", "id"),
        Index("ix_jobs_model_created", "model", "provider", "created_at", "id"),
        # What the chainer reads: only the few rows not linked yet, oldest outcome first.
        Index(
            "ix_jobs_unchained",
            "completed_at",
            "id",
            sqlite_where=text("chain_seq IS NULL"),
            postgresql_where=text("chain_seq IS NULL"),
        ),
    )


class AuditChainEntry(Base):
    """One link of the audit chain: commits to its record's content and to the previous link."""

    __tablename__ = "audit_chain"

    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    kind: Mapped[str] = mapped_column(String(16))  # job | event
    ref: Mapped[str] = mapped_column(String(64))
    record_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    content_sha256: Mapped[str] = mapped_column(String(71))
    prev_sha256: Mapped[str] = mapped_column(String(71))
    entry_sha256: Mapped[str] = mapped_column(String(71), index=True)
    chained_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=_now)


class AuditCheckpoint(Base):
    """A signed statement of the chain head: what a cut tail or a prune is measured against."""

    __tablename__ = "audit_checkpoints"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    seq: Mapped[int] = mapped_column(BigInteger, index=True)
    head_sha256: Mapped[str] = mapped_column(String(71))
    signed_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    reason: Mapped[str] = mapped_column(String(32))  # periodic | prune | shutdown | manual
    detail: Mapped[dict[str, Any]] = mapped_column(JSONType)
    # Null with signing off: the checkpoint is stored unsigned and reported so.
    kid: Mapped[str | None] = mapped_column(String(32), nullable=True)
    alg: Mapped[str | None] = mapped_column(String(16), nullable=True)
    signature: Mapped[str | None] = mapped_column(String(128), nullable=True)


_LIVE = text("live")  # outside the class: its `text` column shadows sqlalchemy's text()


def _text_checksum(context: Any) -> str:
    """`sha256:<hex>` of the row's text, for rows inserted without one."""
    return template_checksum(context.get_current_parameters()["text"])


class SnippetRow(_Timestamps, Base):
    """A reusable prompt fragment managed at runtime (file snippets live in patterns/snippets)."""

    __tablename__ = "snippets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    identifier: Mapped[str] = mapped_column(String(100))
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text)
    text: Mapped[str] = mapped_column(Text)
    tags: Mapped[list[Any]] = mapped_column(JSONType)
    # `metadata` is reserved on declarative classes, hence the attribute name.
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSONType)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    # Versioned snippets (issue 19): every edit is a new immutable row; `live` marks the one
    # version served (none after a delete), `active` keeps its meaning of shown/hidden.
    version: Mapped[int] = mapped_column(Integer, default=1)
    checksum: Mapped[str] = mapped_column(String(71), default=_text_checksum)
    live: Mapped[bool] = mapped_column(Boolean, default=True)

    __table_args__ = (
        Index("uq_snippets_identifier_version", "identifier", "version", unique=True),
        Index(
            "uq_snippets_one_live",
            "identifier",
            unique=True,
            sqlite_where=_LIVE,
            postgresql_where=_LIVE,
        ),
    )


class Team(Base):
    """A group of keys sharing budgets and rate limits (on top of each key's own)."""

    __tablename__ = "teams"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    budgets: Mapped[list[Any]] = mapped_column(JSONType, default=list)  # [{usd, window}]
    rpm: Mapped[int | None] = mapped_column(Integer, nullable=True)
    tpm: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=_now)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=_now, onupdate=_now)


class LimitCounter(Base):
    """One budget or rate counter for one window (`key:<id>:usd:day:2026-11-26`, …): what is
    spent or used, reservations of calls in flight included. Used when Redis is not configured."""

    __tablename__ = "limit_counters"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    amount: Mapped[float] = mapped_column(default=0.0)
    # When the window ends; past it the row is only history and may be deleted.
    expires_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class ApiKey(Base):
    """A caller's key: only a salted HMAC of its secret is kept, never the key itself."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # public, part of the key
    name: Mapped[str] = mapped_column(String(100))
    scope: Mapped[str] = mapped_column(String(16))  # complete | admin
    salt: Mapped[str] = mapped_column(String(64))
    digest: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=_now)
    last_used_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    expires_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    team: Mapped[str | None] = mapped_column(ForeignKey("teams.name"), nullable=True)
    budgets: Mapped[list[Any]] = mapped_column(JSONType, default=list)  # [{usd, window}]
    rpm: Mapped[int | None] = mapped_column(Integer, nullable=True)
    tpm: Mapped[int | None] = mapped_column(Integer, nullable=True)
    allowed_models: Mapped[list[Any] | None] = mapped_column(JSONType, nullable=True)
    allowed_patterns: Mapped[list[Any] | None] = mapped_column(JSONType, nullable=True)


class WebhookDelivery(Base):
    """One event bound for one receiver URL: the durable outbox and the delivery log at once.

    `emit` writes it pending; the dispatcher claims it by setting `lease_until` (a replica whose
    lease runs out lost it), posts, then marks it delivered, failed, or pending again with a
    later `next_attempt_at`."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(String(36))  # one per event, shared by its URLs
    event_type: Mapped[str] = mapped_column(String(100))
    url: Mapped[str] = mapped_column(String(2000))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType)
    status: Mapped[str] = mapped_column(String(16), default="pending")  # |delivered|failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=_now)
    last_status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_error: Mapped[str | None] = mapped_column(String(300), nullable=True)
    lease_until: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=_now)
    delivered_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    __table_args__ = (
        # The dispatcher's question: which pending rows are due?
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_created", "created_at"),
    )


# --- template labels (migration 0009) ---


class TemplateLabel(Base):
    """A named pointer (`production`, `staging`, …) at one version of (name, role), or a canary
    split between two versions by weight. `revision` is bumped on each move, so two admins
    moving the same label at once cannot both win silently."""

    __tablename__ = "template_labels"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(100))
    label: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)  # a split's first version
    split: Mapped[list[Any] | None] = mapped_column(JSONType, nullable=True)  # [{version, weight}]
    revision: Mapped[int] = mapped_column(Integer, default=1)
    moved_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=_now)

    __table_args__ = (Index("uq_template_labels", "name", "role", "label", unique=True),)


class LabelMove(Base):
    """The history of a label: who moved it (key id, `cli`, `anonymous`, `migration`), when,
    from what to what (to: null when deleted), and why. Rows are only ever appended."""

    __tablename__ = "label_moves"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(100))
    label: Mapped[str] = mapped_column(String(64))
    from_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    from_split: Mapped[list[Any] | None] = mapped_column(JSONType, nullable=True)
    to_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    to_split: Mapped[list[Any] | None] = mapped_column(JSONType, nullable=True)
    message: Mapped[str] = mapped_column(Text)
    author: Mapped[str] = mapped_column(String(64))
    moved_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=_now)

    __table_args__ = (Index("ix_label_moves_template", "name", "role", "moved_at"),)


# --- the admin event log (issue 20) ---


class AuditEvent(Base):
    """One admin action: who (key, team, `cli`), what (`key.created`, `label.moved`, …), on
    what, when and from where. Rows are only ever appended; `chain_seq` is set by the audit
    chain when it links the row (NULL until then)."""

    __tablename__ = "audit_events"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=_now)
    actor: Mapped[str] = mapped_column(String(16))  # key | cli | service | anonymous
    actor_key_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    actor_team: Mapped[str | None] = mapped_column(String(64), nullable=True)
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str | None] = mapped_column(String(300), nullable=True)
    detail: Mapped[dict[str, Any]] = mapped_column(JSONType)
    remote_addr: Mapped[str | None] = mapped_column(String(64), nullable=True)
    user_agent: Mapped[str | None] = mapped_column(String(200), nullable=True)
    request_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    chain_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)

    __table_args__ = (
        # The log's questions (newest first, keyset by (at, id); of one action; on one target),
        # and the chainer's: the rows not linked yet.
        Index("ix_audit_events_at", "at", "id"),
        Index("ix_audit_events_action", "action", "at", "id"),
        Index("ix_audit_events_target", "target", "at", "id"),
        Index(
            "ix_audit_events_unchained",
            "id",
            sqlite_where=text("chain_seq IS NULL"),
            postgresql_where=text("chain_seq IS NULL"),
        ),
    )


class ConsoleSession(Base):
    """A signed-in console session: only the SHA-256 of its cookie is kept, beside the key it
    acts as and the token every form and script must echo (CSRF)."""

    __tablename__ = "console_sessions"

    token_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_id: Mapped[str | None] = mapped_column(String(64), nullable=True)  # None: auth disabled
    csrf: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=_now)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), index=True)
