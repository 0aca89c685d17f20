"""All configuration in one typed object, from (highest first) init arguments, the environment
(prefix `GENAI_`), `.env`, the `genai.yaml` file GENAI_CONFIG names, then the defaults."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from app.config.file import ConfigFileSource
from app.config.prices import ModelPrice
from app.errors import ConfigurationError
from app.schemas.base import InputLimits

TASK_MODEL_ENV_PREFIX = "GENAI_MODEL_"
_ENDPOINT_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")


def task_model_env_name(task: str) -> str:
    """GENAI_MODEL_<TASK>: the task upper-cased, every character but A-Z and 0-9 turned to `_`
    (`email/reply` → GENAI_MODEL_EMAIL_REPLY)."""
    return TASK_MODEL_ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", task.upper())


class ProviderSettings(BaseSettings):
    """A built-in provider's own group: its field name in Settings is the provider's name, so
    BUILTIN_PROVIDERS is read from the groups rather than written out again."""


class OpenAISettings(ProviderSettings):
    """Read from the SDK's own variables, so an existing OpenAI set-up works unchanged."""

    model_config = SettingsConfigDict(env_prefix="OPENAI_", extra="ignore")
    api_key: SecretStr | None = None
    base_url: str | None = Field(default=None, description="Any OpenAI-compatible server.")


class AnthropicSettings(ProviderSettings):
    model_config = SettingsConfigDict(env_prefix="ANTHROPIC_", extra="ignore")
    api_key: SecretStr | None = None
    base_url: str | None = None


class OllamaSettings(ProviderSettings):
    model_config = SettingsConfigDict(env_prefix="OLLAMA_", extra="ignore")
    host: str | None = Field(default=None, description="Default: the SDK's http://127.0.0.1:11434.")


class EndpointSettings(BaseModel):
    """An extra OpenAI-compatible server (vLLM, Groq, LM Studio…), reached as `<name>/<model>`."""

    model_config = ConfigDict(extra="forbid")
    base_url: str = Field(description="The API root, e.g. http://127.0.0.1:8000/v1.")
    api_key: SecretStr | None = Field(
        default=None, description="In the config file: `api_key_env: VARIABLE`."
    )


class UpstreamSettings(BaseModel):
    """How patiently the gateway talks to providers; the retry policy reads these."""

    timeout_seconds: float = Field(default=60.0, gt=0, description="One attempt, at most.")
    connect_timeout_seconds: float = Field(
        default=5.0, gt=0, description="Opening a connection to a provider, at most."
    )
    deadline_seconds: float = Field(
        default=120.0,
        gt=0,
        description="One request, every retry and fallback included; `x-genai-deadline-ms` "
        "may shorten it, never lengthen it.",
    )
    first_token_seconds: float = Field(
        default=30.0, gt=0, description="A stream's first text, at most this long after the call."
    )
    idle_seconds: float = Field(
        default=30.0, gt=0, description="A stream silent this long between chunks is cut off."
    )
    max_retries: int = Field(default=2, ge=0, le=10)
    backoff_initial_seconds: float = Field(default=0.5, ge=0)
    backoff_max_seconds: float = Field(default=8.0, ge=0)
    max_retry_after_seconds: float = Field(
        default=20.0, ge=0, description="A longer Retry-After is passed to the caller, not waited."
    )
    max_answer_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1024,
        description="The most one answer may hold (the body, or a stream's text, tool calls and "
        "reasoning together); a provider that sends more is cut off with an error.",
    )


class CacheSettings(BaseModel):
    """The response cache, used by patterns with `cache: true` and requests with `"cache": true`."""

    ttl_seconds: float = Field(default=3600.0, gt=0, description="How long an answer is reused.")
    max_entries: int = Field(
        default=10_000, ge=1, description="In-memory cache size (least recently used go first)."
    )
    redis_timeout_seconds: float = Field(
        default=0.25,
        gt=0,
        le=10,
        description="A Redis lookup or store slower than this is given up (a miss); the "
        "completion goes upstream, never fails.",
    )
    scope: Literal["shared", "key"] = Field(
        default="key",
        description="key: each API key has its own entries, so no caller can learn (from a fast "
        "answer, or `cache: hit`) that another sent the same prompt. shared: every caller's "
        "identical request shares one entry (more hits; an explicit opt-in).",
    )


class RequestSettings(BaseModel):
    """What one request may carry besides its byte size (GENAI_MAX_BODY_BYTES): bounds on the
    work that grows with the input, so no caller can stall the others."""

    max_variables: int = Field(
        default=256, ge=1, description="Variables one request may send (top-level names)."
    )
    max_variables_bytes: int = Field(
        default=1_000_000,
        ge=1_000,
        description="The variables' total size: the bytes of their JSON (UTF-8).",
    )
    max_depth: int = Field(
        default=32,
        ge=4,
        le=64,
        description="How deep a request's JSON may nest (variables, tool schemas…).",
    )
    max_values: int = Field(
        default=100_000,
        ge=1_000,
        description="JSON values (strings, numbers, objects, arrays) one request body may hold.",
    )
    max_head_bytes: int = Field(
        default=65_536,
        ge=8_192,
        description="The request line and headers of one request; past it 431 "
        "`request_head_too_large` and the connection is closed.",
    )
    head_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="How long a request's line and headers may take to arrive after its first "
        "byte; past it 408 `request_head_timeout` and the connection is closed (slowloris).",
    )
    stream_send_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="How long one send of a stream may wait on a client that stopped reading; "
        "past it the stream ends, its slot is freed and the job is recorded cancelled.",
    )

    def input_limits(self) -> InputLimits:
        return InputLimits(
            max_depth=self.max_depth,
            max_values=self.max_values,
            max_variables=self.max_variables,
            max_variables_bytes=self.max_variables_bytes,
        )


class LimitSettings(BaseModel):
    """Concurrency limits: beyond them a bounded queue, beyond that 503 `overloaded` at once."""

    max_concurrent: int = Field(
        default=256, ge=1, description="Completions in flight at once, over all providers."
    )
    max_queued: int = Field(
        default=256, ge=0, description="Completions waiting for a slot; more are shed at once."
    )
    per_provider: dict[str, int] = Field(
        default_factory=dict,
        description='Upstream calls in flight at once per provider, e.g. {"ollama": 4}.',
    )
    retry_after_seconds: float = Field(
        default=1.0, gt=0, description="The Retry-After a shed request is given."
    )


class AuditSettings(BaseModel):
    """The durable job record: what is kept, and how completions are batched to the store."""

    store_replay_inputs: bool = Field(
        default=True,
        description="Keep the variables and user prompt (encrypted) so a job can be replayed.",
    )
    mode: Literal["before-call", "with-call"] = Field(
        default="before-call",
        description="before-call: the pending record is durable before the provider is called. "
        "with-call: it is written during the call and the answer waits until it is durable.",
    )
    insert_window_seconds: float = Field(
        default=0.0,
        ge=0,
        le=0.05,
        description="Pending records that arrive within this window share one commit (0: those "
        "that queued while the previous commit ran).",
    )
    flush_seconds: float = Field(default=0.05, gt=0, description="Max delay of a completion write.")
    batch_size: int = Field(default=200, ge=1, le=10_000, description="Max rows per transaction.")
    stuck_after_seconds: float = Field(
        default=30.0, gt=0, description="/readyz reports a backlog that has not drained this long."
    )
    chain_enabled: bool = Field(
        default=True,
        description="Link every finished job into the tamper-evident audit chain (a background "
        'chainer on every replica; docs/provenance-and-audit.md, "The audit chain").',
    )
    chain_seconds: float = Field(
        default=0.1,
        gt=0,
        le=60,
        description="How often the chainer links finished records: the window in which a "
        "record is not yet protected.",
    )
    chain_batch: int = Field(
        default=20,
        ge=1,
        le=10_000,
        description="Max records linked per chainer transaction. Small steps often, not big ones "
        "seldom: a step's hashing runs on the event loop, and 100-record steps once a second "
        "put +126 ms on the c=1 p99 of requests (bench/RESULTS.md).",
    )
    checkpoint_every: int = Field(
        default=1000, ge=1, description="Sign the chain head after this many new entries."
    )
    checkpoint_seconds: float = Field(
        default=300.0, gt=0, description="…or after this many seconds with new entries."
    )
    unchained_grace_seconds: float = Field(
        default=300.0,
        gt=0,
        description="Verify reports a finished record not chained this long after it finished "
        "as inserted behind the service's back.",
    )
    verify_max_entries: int = Field(
        default=100_000,
        ge=1,
        description="Max entries one GET /v1/audit/verify checks; the report's next_from "
        "continues.",
    )


class QuotaSettings(BaseModel):
    """Where the budget and rate counters of keys and teams live, and what happens without them."""

    store: Literal["auto", "database", "redis"] = Field(
        default="auto",
        description="auto: Redis when GENAI_REDIS_URL is set (replicas share one budget), "
        "else the database.",
    )
    on_store_error: Literal["closed", "open"] = Field(
        default="closed",
        description="closed: a key or team with limits is refused (503 quota_store_unavailable) "
        "while its counters cannot be reached; open: it is served unchecked and the gap logged. "
        "Keys without limits never touch the counters.",
    )
    reserve_output_tokens: int = Field(
        default=4096,
        ge=1,
        le=1_000_000,
        description="Output tokens reserved against a budget when a request sets no max_tokens "
        "(the settled cost replaces the reservation once the answer is in).",
    )
    redis_timeout_seconds: float = Field(
        default=0.25, gt=0, le=10, description="A counter call to Redis slower than this fails."
    )


class WebhookSettings(BaseModel):
    """Release events (label moves, new versions) posted to receivers: docs/webhooks.md."""

    urls: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Receiver URLs (http/https): a JSON list or comma-separated. Empty: no "
        "webhooks.",
    )
    secret: SecretStr | None = Field(
        default=None, description="Signs every delivery (HMAC-SHA256); required with urls."
    )
    timeout_seconds: float = Field(default=10.0, gt=0, le=120, description="Per attempt.")
    max_attempts: int = Field(default=8, ge=1, le=50, description="Then the delivery fails.")
    backoff_initial_seconds: float = Field(
        default=5.0, gt=0, le=3600, description="Wait after the first failure; doubles each time."
    )
    backoff_max_seconds: float = Field(
        default=600.0, gt=0, le=86_400, description="The longest wait between two attempts."
    )

    @field_validator("urls", mode="before")
    @classmethod
    def _split_urls(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("urls")
    @classmethod
    def _http_only(cls, value: list[str]) -> list[str]:
        for url in value:
            scheme, _, rest = url.partition("://")
            if scheme.lower() not in {"http", "https"} or not rest.strip("/"):
                raise ValueError(f"{url!r}: a webhook URL must be http:// or https://host/…")
        return value


class ReleaseSettings(BaseModel):
    """Which template labels are protected, and what a version needs to take one."""

    protected_labels: list[str] = Field(
        default_factory=lambda: ["production"],
        description="Labels only an admin key may move, and only to versions whose pattern "
        "tests pass; they cannot be deleted.",
    )
    require_tests: bool = Field(
        default=False, description="A version without tests cannot take a protected label."
    )


class SigningSettings(BaseModel):
    """Signed envelopes (issue 20): the Ed25519 key that signs every answer, and the public keys
    of earlier ones that still verify what they signed (rotation)."""

    enabled: bool = Field(
        default=True, description="Sign every envelope; off: answers carry no `signature`."
    )
    key: SecretStr | None = Field(
        default=None,
        description="Base64url of the 32-byte Ed25519 seed; generated in data_dir/keys/"
        "signing.key (0600) if unset.",
    )
    previous_keys: list[str] = Field(
        default_factory=list,
        description="Verify-only public keys of rotated-out signing keys (base64url of the raw "
        "32 bytes, as `genai provenance keys` prints them), as JSON.",
    )


MAX_RETENTION_DAYS = 36_500
"""A hundred years: the longest retention there is (a cut-off further back than year 1 has no
date, and keeping everything is leaving retention unset)."""


class RetentionSettings(BaseModel):
    """How long finished jobs are kept (issue 20): pruned by month partitions on PostgreSQL,
    batched deletes on SQLite, after a signed checkpoint of the audit chain."""

    jobs_days: int | None = Field(
        default=None,
        ge=0,
        le=MAX_RETENTION_DAYS,
        description="Prune finished jobs (and settled webhook deliveries) older than this many "
        "days, every interval; unset: keep everything.",
    )
    batch_size: int = Field(
        default=5000, ge=1, le=100_000, description="Rows per DELETE transaction when pruning."
    )
    interval_seconds: float = Field(
        default=86_400.0,
        ge=1.0,
        description="How often the retention round runs (partitions ahead made, then the prune).",
    )
    partitions_ahead: int = Field(
        default=3, ge=1, le=24, description="PostgreSQL: months of `jobs` partitions made ahead."
    )


class ConsoleSettings(BaseModel):
    """The web console at /console (issue 21): signed-in sessions and how long they last."""

    enabled: bool = Field(default=True, description="Serve the web console at /console.")
    session_hours: float = Field(
        default=8.0,
        gt=0,
        le=24 * 30,
        description="A console session ends this long after sign-in (sign in again then).",
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="GENAI_",
        env_nested_delimiter="__",
        env_file=".env",
        extra="ignore",
    )

    pattern_dir: Annotated[list[Path], NoDecode] = Field(
        default_factory=lambda: [Path("patterns")],
        description=f"One or more pattern roots, separated by {os.pathsep!r}; earlier roots win.",
    )
    pattern_defaults: dict[str, Any] = Field(
        default_factory=dict, description="Library-wide variable defaults (lowest precedence)."
    )
    pattern_reload_seconds: float = Field(
        default=1.0,
        ge=0,
        description="A file watcher applies pattern and snippet edits once they have settled "
        "this many seconds; 0 turns reloading off.",
    )

    config: Path | None = Field(
        default=None,
        description="GENAI_CONFIG: the genai.yaml to read (none is read when unset); the "
        "environment and .env override it.",
    )
    default_model: str = Field(
        default="openai/gpt-4o-mini",
        description="The last link of the model chain: used when nothing above it names one.",
    )
    model: str | None = Field(
        default=None,
        description="GENAI_MODEL: the model for every task, over pattern hints and the config "
        "file's task entries (a request's `model` and the CLI flags still win).",
    )
    cli_model: str | None = Field(
        default=None,
        description="`genai serve/render --model`; serve hands it to its workers as "
        "GENAI_CLI_MODEL.",
    )
    cli_task_models: dict[str, str] = Field(
        default_factory=dict,
        description="`--model-for TASK=M`; serve hands them to its workers as "
        "GENAI_CLI_TASK_MODELS (JSON).",
    )
    env_task_models: dict[str, str] = Field(
        default_factory=dict,
        description="Every GENAI_MODEL_<TASK> variable, by variable name (collected, not set).",
    )
    task_models: dict[str, str] = Field(
        default_factory=dict,
        description="The config file's per-task models: pattern name or tag → provider/model.",
    )
    model_aliases: dict[str, str] = Field(
        default_factory=dict,
        description="Bare model ids → a provider or a `provider/model`, over the shipped "
        'name families (gpt-* → openai, claude-* → anthropic, llama* → ollama…): {"fast": '
        '"openai/gpt-4o-mini", "mistral-*": "vllm"}. Keys may be shell-style patterns.',
    )
    fallbacks: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Fallback chains: a model, or a task (pattern name or tag) → the models "
        "tried in order when it fails for a reason worth retrying elsewhere.",
    )
    default_max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="The max_tokens sent when neither the request nor the pattern sets one. "
        "Unset, none is sent, except to Anthropic, whose API needs one: the model's output "
        "limit from the capabilities file, within what its context window leaves.",
    )
    capabilities_file: Path | None = Field(
        default=None, description="Extra capability data layered over the shipped file."
    )
    capable_fallback_models: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated provider/model list tried, in order, when the chosen model "
        "lacks a needed capability. Empty: such a request is refused with 422.",
    )
    task_instructions: dict[str, str] = Field(
        default_factory=dict, description="Per-task (pattern name) user instructions, as JSON."
    )
    structured_max_attempts: int = Field(
        default=3, ge=1, le=10, description="Attempts (first answer + repairs) for output_schema."
    )

    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    cache: CacheSettings = Field(default_factory=CacheSettings)
    redis_url: SecretStr | None = Field(
        default=None,
        description="redis://…: the response cache and the quota counters in Redis, shared by "
        "replicas.",
    )
    limits: LimitSettings = Field(default_factory=LimitSettings)
    quotas: QuotaSettings = Field(default_factory=QuotaSettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    request: RequestSettings = Field(default_factory=RequestSettings)
    prices: dict[str, ModelPrice] = Field(
        default_factory=dict,
        description="Price overrides over the shipped table (app/routing/prices.yaml), keyed "
        '"provider/model" or "provider/*".',
    )
    openai: OpenAISettings = Field(default_factory=OpenAISettings)
    anthropic: AnthropicSettings = Field(default_factory=AnthropicSettings)
    ollama: OllamaSettings = Field(default_factory=OllamaSettings)
    endpoints: dict[str, EndpointSettings] = Field(
        default_factory=dict,
        description="Extra OpenAI-compatible servers by provider name: `vllm` serves `vllm/…`.",
    )

    data_dir: Path = Field(
        default=Path("data"), description="Where the embedded database and generated keys live."
    )
    database_url: str | None = Field(
        default=None,
        description="Default: SQLite at <data_dir>/genai.db. PostgreSQL: postgresql+asyncpg://…",
    )
    database_auto_migrate: bool | None = Field(
        default=None, description="Apply migrations at start-up; default on for SQLite only."
    )
    redaction_key: SecretStr | None = Field(
        default=None, description="HMAC key for redaction tokens; generated in data_dir if unset."
    )
    data_key: SecretStr | None = Field(
        default=None,
        description="Base64 of 32 bytes, encrypts replay inputs; generated in data_dir if unset.",
    )
    database_statement_timeout_seconds: float = Field(
        default=10.0, gt=0, description="No query runs longer (PostgreSQL statement_timeout)."
    )
    database_lock_timeout_seconds: float = Field(
        default=3.0, gt=0, description="No query waits longer for a lock or a connection."
    )
    audit: AuditSettings = Field(default_factory=AuditSettings)
    # Template labels (release flow): GENAI_RELEASE__PROTECTED_LABELS, …__REQUIRE_TESTS.
    release: ReleaseSettings = Field(default_factory=ReleaseSettings)
    # Signed envelopes (issue 20): GENAI_SIGNING__ENABLED, …__KEY, …__PREVIOUS_KEYS.
    signing: SigningSettings = Field(default_factory=SigningSettings)
    # Retention (issue 20): GENAI_RETENTION__JOBS_DAYS, …__BATCH_SIZE, …__INTERVAL_SECONDS.
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    # The web console (issue 21): GENAI_CONSOLE__ENABLED, …__SESSION_HOURS.
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)

    # API keys: every /v1 route needs one; only a salted HMAC of each is stored.
    auth_disabled: bool = Field(
        default=False, description="Development only: no key is checked (a warning says so)."
    )
    auth_secret: SecretStr | None = Field(
        default=None,
        description="HMAC key for stored key hashes; generated in data_dir if unset. Replicas "
        "sharing a database must share it.",
    )
    auth_cache_seconds: float = Field(
        default=5.0, ge=0, le=300, description="How long a verified key is trusted un-rechecked."
    )

    # Budgets every template render runs under, so no template can stall the process.
    render_timeout_seconds: float = Field(default=2.0, gt=0, le=60)
    render_max_chars: int = Field(default=1_000_000, ge=1_000, le=100_000_000)
    render_workers: int = Field(
        default=4, ge=1, le=64, description="Threads that compile and render templates."
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated origins a browser may call the API from (e.g. "
        "https://app.example.com, or * for any); empty: no CORS headers at all.",
    )
    max_body_bytes: int = Field(
        default=4 * 1024 * 1024, ge=1024, description="Larger request bodies get 413 unread."
    )
    shutdown_grace_seconds: float = Field(
        default=30.0, ge=0, description="On SIGTERM, how long in-flight requests may finish."
    )

    log_level: str = "INFO"
    log_json: bool | None = Field(default=None, description="Default: JSON unless stderr is a TTY.")

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite+aiosqlite:///{self.data_dir / 'genai.db'}"

    @property
    def longest_request_seconds(self) -> float:
        """The longest one completion can take: its render, its whole upstream deadline (every
        retry, fallback and repair is inside it), then the shutdown grace (in-flight requests may
        finish during it)."""
        return (
            self.upstream.deadline_seconds
            + self.render_timeout_seconds
            + self.shutdown_grace_seconds
        )

    @property
    def stale_pending_after_seconds(self) -> float:
        """A `pending` job older than this was left by a process that stopped: no live one (this
        or another replica) can still complete it. A quarter more than the longest request plus
        a minute, for clock skew between replicas and a slow audit write."""
        return self.longest_request_seconds * 1.25 + 60.0

    @property
    def auto_migrate(self) -> bool:
        if self.database_auto_migrate is not None:
            return self.database_auto_migrate
        return self.resolved_database_url.startswith("sqlite")

    @field_validator("pattern_dir", mode="before")
    @classmethod
    def _split_roots(cls, value: Any) -> Any:
        if isinstance(value, str | Path):
            return [Path(part) for part in str(value).split(os.pathsep) if part]
        return value

    @field_validator("capable_fallback_models", "cors_origins", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("endpoints")
    @classmethod
    def _endpoint_names(cls, value: dict[str, EndpointSettings]) -> dict[str, EndpointSettings]:
        for name in value:
            if name in BUILTIN_PROVIDERS:
                raise ValueError(f"{name!r} is a built-in provider: configure it under {name}:")
            if not _ENDPOINT_NAME.fullmatch(name):
                raise ValueError(
                    f"endpoint name {name!r}: lower-case letters, digits, '.', '_' or '-' "
                    "(it becomes the provider part of `name/model`)"
                )
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Init arguments > environment > .env > the config file > defaults."""
        environment = _Environment(env_settings, dotenv_settings)
        return (
            init_settings,
            env_settings,
            dotenv_settings,
            _TaskModelVariables(settings_cls, environment),
            ConfigFileSource(
                settings_cls, path_field="config", env=environment.get, env_only=_NOT_IN_FILE
            ),
            file_secret_settings,
        )


# The built-in providers, in the order Settings declares their groups (the providers layer's
# descriptors must agree: tests/test_config_file.py); an endpoint may not take one of these names.
BUILTIN_PROVIDERS: tuple[str, ...] = tuple(
    name
    for name, field in Settings.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, ProviderSettings)
)

_NOT_IN_FILE = {
    "config": "the config file cannot name another one (GENAI_CONFIG names this one)",
    "model": "is GENAI_MODEL, an environment override; the file sets default_model and task_models",
    "cli_model": "is set by `genai serve/render --model`",
    "cli_task_models": "is set by `genai serve/render --model-for`",
    "env_task_models": "collects GENAI_MODEL_<TASK> variables; the file sets task_models",
}


class _Environment:
    """Variables as the settings sources read them: the process environment over `.env`."""

    def __init__(self, *sources: PydanticBaseSettingsSource) -> None:
        self._sources = [s for s in sources if isinstance(s, EnvSettingsSource)]

    def get(self, name: str) -> str | None:
        for source in self._sources:
            value = source.env_vars.get(name if source.case_sensitive else name.lower())
            if value:
                return value
        return None

    def with_prefix(self, prefix: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for source in reversed(self._sources):  # the environment last, so it wins
            for name, value in source.env_vars.items():
                if name.upper().startswith(prefix) and len(name) > len(prefix) and value:
                    found[name.upper()] = value
        return found


_MODEL_SETTINGS = frozenset({"GENAI_MODEL_ALIASES"})


class _TaskModelVariables(PydanticBaseSettingsSource):
    """GENAI_MODEL_<TASK> names no field, so this source gathers them into env_task_models."""

    def __init__(self, settings_cls: type[BaseSettings], environment: _Environment) -> None:
        super().__init__(settings_cls)
        self._environment = environment

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ scans the variables at once

    def __call__(self) -> dict[str, Any]:
        found: Mapping[str, str] = self._environment.with_prefix(TASK_MODEL_ENV_PREFIX)
        # GENAI_MODEL_ALIASES is a setting of its own, not the model of a task named "aliases".
        tasks = {name: value for name, value in found.items() if name not in _MODEL_SETTINGS}
        return {"env_task_models": tasks} if tasks else {}


def _env_name(model_title: str | None, loc: tuple[int | str, ...]) -> str:
    """The environment variable behind a validation error's location."""
    prefixes = {
        cls.__name__: str(cls.model_config.get("env_prefix", ""))
        for cls in (Settings, OpenAISettings, AnthropicSettings, OllamaSettings)
    }
    return prefixes.get(model_title or "", "GENAI_") + "__".join(map(str, loc)).upper()


def settings_error(exc: ValidationError) -> ConfigurationError:
    """A settings ValidationError as one operator line naming the variable (never its value)."""
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return ConfigurationError(_env_name(exc.title, first["loc"]), first["msg"] + more)


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings; tests build their own `Settings(...)` instead.

    Raises ConfigurationError (one line, the variable named) for a value that does not validate.
    """
    try:
        return Settings()
    except ValidationError as exc:
        raise settings_error(exc) from None
    except SettingsError as exc:  # a value that is not even parseable (say, broken JSON)
        raise ConfigurationError("environment", str(exc)) from None
