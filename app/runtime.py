"""Everything long-lived, built in one place from Settings and closed in reverse order.

`build_runtime` builds (the CLI stops there); `Runtime.start` makes it serve: the first admin key,
a sweep of stale jobs, and the background work (last-use times of keys, periodic stale-job
checks, the pattern file watcher) that `Runtime.aclose` stops before it closes anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import structlog
from sqlalchemy.exc import SQLAlchemyError

from app.audit.redaction import Redactor
from app.audit.replay import Replayer
from app.audit.trail import AuditTrail
from app.auth.authenticator import Authenticator
from app.auth.banner import warn_auth_disabled
from app.auth.first_key import issue_first_admin_key
from app.cache import ResponseCache, build_cache
from app.catalog import PatternCatalog
from app.catalog.chat import CHAT_SOURCE
from app.catalog.renderer import TemplateRenderer
from app.catalog.resolver import SourceResolver
from app.catalog.watch import FileWatcher, Owners
from app.concurrency.limits import ConcurrencyLimits
from app.config import Settings
from app.errors import ConfigurationProblems, GenAIError, StoreUnavailable
from app.observability.metric_labels import LabelVocabulary
from app.observability.metrics import Metrics
from app.observability.readiness import Readiness
from app.pipeline.calls import StreamTimeouts
from app.pipeline.model_check import unservable_patterns
from app.pipeline.prepare import PromptPreparer
from app.pipeline.upstream import Upstream
from app.prompts.assembler import PromptAssembler, default_registry
from app.providers import ProviderRegistry
from app.providers.registry import provider_names
from app.providers.retry import RetryPolicy
from app.routing.capabilities import CapabilityCatalog
from app.routing.policy import ModelSelectionPolicy, configured_model_ids
from app.routing.prices import PriceTable
from app.schemas import ModelParams
from app.service import GenAIService
from app.snippets import SnippetLibrary
from app.store.db import Database, describe_storage_error
from app.store.jobs import JobRepository
from app.store.keys import ApiKeyRepository
from app.store.secrets import ReplayVault, load_or_create_key
from app.store.snippets import SnippetRepository
from app.store.templates import TemplateRepository
from app.store.writer import AuditWriter

log = structlog.get_logger(__name__)
_KEY_USE_SECONDS = 30.0


async def _save_key_use(authenticator: Authenticator, every: float) -> None:
    """Last-use times of API keys reach the store in the background, never on a request."""
    while True:
        await asyncio.sleep(every)
        try:
            await authenticator.save_last_use()
        except GenAIError as exc:  # the store is down: the times are kept for the next round
            log.warning("key_use_not_saved", error_type=exc.error_type)


async def _interrupt_stale_jobs(trail: AuditTrail, older_than: float) -> None:
    """Pending records no live process can complete (see app/audit/trail.py) → interrupted."""
    try:
        count = await trail.interrupt_stale(older_than_seconds=older_than)
    except (GenAIError, SQLAlchemyError, OSError) as exc:  # the store is down: next round
        log.warning("stale_jobs_not_checked", error_type=type(exc).__name__)
        return
    if count:
        log.warning("stale_jobs_interrupted", jobs=count, older_than_s=older_than)


async def _keep_interrupting_stale_jobs(
    trail: AuditTrail, older_than: float, stop: asyncio.Event
) -> None:
    """Re-checks periodically; stopped through `stop`, never cancelled mid-transaction."""
    every = min(300.0, max(1.0, older_than / 4))
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
        if not stop.is_set():
            await _interrupt_stale_jobs(trail, older_than)


class _Background:
    """What `Runtime.start` leaves running until `Runtime.aclose`; nothing before `start`."""

    def __init__(self) -> None:
        self.serving = False  # start finished: aclose then says the service stopped
        self.key_use: asyncio.Task[None] | None = None
        self.stop_stale_checks = asyncio.Event()
        self.stale_checks: asyncio.Task[None] | None = None
        self.watcher: FileWatcher | None = None


@dataclass(frozen=True, slots=True)
class Runtime:
    """Each long-lived component once; routes and commands take the one they need from here."""

    settings: Settings
    database: Database
    writer: AuditWriter
    metrics: Metrics
    patterns: PatternCatalog
    templates: TemplateRepository
    snippets: SnippetLibrary
    renderer: TemplateRenderer
    providers: ProviderRegistry
    audit: AuditTrail
    preparer: PromptPreparer
    service: GenAIService
    replayer: Replayer
    readiness: Readiness
    authenticator: Authenticator
    cache: ResponseCache
    limits: ConcurrencyLimits
    _background: _Background = field(default_factory=_Background, repr=False, compare=False)

    async def start(self) -> None:
        """Ready to serve: the first admin key, stale jobs interrupted before the first request,
        then the background work. Commands that only build a runtime never start it."""
        settings, background = self.settings, self._background
        await issue_first_admin_key(self.authenticator, settings)
        if settings.auth_disabled:
            warn_auth_disabled()
            log.warning("auth_disabled", hint="unset GENAI_AUTH_DISABLED outside development")
        background.key_use = asyncio.create_task(
            _save_key_use(self.authenticator, _KEY_USE_SECONDS)
        )
        stale_after = settings.stale_pending_after_seconds
        await _interrupt_stale_jobs(self.audit, stale_after)  # before serving
        background.stale_checks = asyncio.create_task(
            _keep_interrupting_stale_jobs(self.audit, stale_after, background.stop_stale_checks)
        )
        if settings.pattern_reload_seconds > 0:  # pattern and snippet files, one watcher
            owners = Owners(patterns=self.patterns.refresh, snippets=self.snippets.refresh_files)
            background.watcher = FileWatcher(
                settings.pattern_dir, owners, quiet_seconds=settings.pattern_reload_seconds
            )
            background.watcher.start()
        log.info(
            "service_started",
            patterns=len(self.patterns.names()),
            providers=self.providers.status(),
            database=self.database.safe_url,
        )
        background.serving = True

    async def _stop(self) -> None:
        """Stop what `start` started: the stale-job checks between two rounds, never inside
        one; the key-use loop, whose last times are then saved once more."""
        background = self._background
        if background.stale_checks is not None:
            background.stop_stale_checks.set()
            await background.stale_checks
        if background.key_use is not None:
            background.key_use.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await background.key_use
            with contextlib.suppress(GenAIError):  # best effort: last-use times are advisory
                await self.authenticator.save_last_use()
        if background.watcher is not None:
            await background.watcher.aclose()

    async def aclose(self) -> None:
        """Stop the background work, then drain queued audit writes first: a clean stop loses
        no record."""
        await self._stop()
        try:
            await self.writer.aclose()
        finally:
            self.renderer.close()
            await self.cache.aclose()
            await self.providers.aclose()
            await self.database.aclose()
        if self._background.serving:
            log.info("service_stopped")


async def _warn_if_schema_outdated(database: Database) -> None:
    """Start even when the store is down (routes answer 503, /readyz says why) so the service
    recovers by itself when the database comes back; `genai serve` refuses to start instead."""
    try:
        if not await database.schema_is_current():
            log.warning("database_schema_outdated", hint="run `genai db upgrade`")
    except StoreUnavailable as exc:
        log.warning(
            "database_unreachable",
            url=database.safe_url,
            error=describe_storage_error(exc.__cause__ or exc),
        )


def _label_vocabulary(
    settings: Settings, policy: ModelSelectionPolicy, patterns: PatternCatalog
) -> LabelVocabulary:
    """What metric labels may name: the configured models and providers, the catalogued
    patterns (the built-in chat among them) and the models their files name."""

    def is_pattern(name: str) -> bool:
        return name == CHAT_SOURCE or any(library.has(name) for library in patterns.libraries)

    def pattern_models() -> frozenset[str]:
        infos = patterns.loadable()
        return policy.model_ids(
            model
            for info in infos
            for model in (info.meta.model_hint, *info.meta.fallbacks)
            if model
        )

    return LabelVocabulary(
        models=configured_model_ids(settings),
        providers=frozenset(provider_names(settings)),
        is_pattern=is_pattern,
        pattern_models=pattern_models,
    )


async def build_runtime(settings: Settings) -> Runtime:
    # The model configuration is proven before anything is opened: a refusal leaves nothing
    # to close, and names every problem at once (ConfigurationProblems, one line each).
    patterns = PatternCatalog(roots=settings.pattern_dir, defaults=settings.pattern_defaults)
    capabilities = CapabilityCatalog.load(settings.capabilities_file)
    policy = ModelSelectionPolicy.from_settings(settings)
    default_params = ModelParams(max_tokens=settings.default_max_tokens)
    unservable = unservable_patterns(
        patterns.loadable(),
        policy=policy,
        capabilities=capabilities,
        default_params=default_params,
        describe=ProviderRegistry.descriptor,
    )
    if unservable:
        raise ConfigurationProblems(unservable)
    database = Database.from_settings(settings)
    if settings.auto_migrate:
        await database.migrate()
    else:
        await _warn_if_schema_outdated(database)
    keys_dir = settings.data_dir / "keys"
    redactor = Redactor(
        load_or_create_key(
            settings.redaction_key, keys_dir / "redaction.key", what="GENAI_REDACTION_KEY"
        )
    )
    # Seals replay inputs and (with Redis) cached answers; replicas share it via GENAI_DATA_KEY.
    data_key = load_or_create_key(settings.data_key, keys_dir / "data.key", what="GENAI_DATA_KEY")
    vault = ReplayVault(data_key) if settings.audit.store_replay_inputs else None
    authenticator = Authenticator(
        ApiKeyRepository(database.sessions),
        load_or_create_key(settings.auth_secret, keys_dir / "auth.key", what="GENAI_AUTH_SECRET"),
        cache_seconds=settings.auth_cache_seconds,
        disabled=settings.auth_disabled,
    )
    metrics = Metrics(labels=_label_vocabulary(settings, policy, patterns))
    jobs = JobRepository(database.sessions, database.lane)
    writer = AuditWriter(
        jobs,
        flush_seconds=settings.audit.flush_seconds,
        batch_size=settings.audit.batch_size,
        insert_window_seconds=settings.audit.insert_window_seconds,
        stuck_after_seconds=settings.audit.stuck_after_seconds,
        spool_dir=settings.data_dir,
    )
    await writer.restore_spooled()  # completions a stop could not write, before anything new
    writer.start()
    templates = TemplateRepository(database.sessions)
    snippets = SnippetLibrary(
        store=SnippetRepository(database.sessions), file_roots=list(settings.pattern_dir)
    )
    snippets.refresh_files()
    renderer = TemplateRenderer(
        timeout_seconds=settings.render_timeout_seconds,
        max_chars=settings.render_max_chars,
        workers=settings.render_workers,
    )
    providers = ProviderRegistry.from_settings(settings)
    preparer = PromptPreparer(
        resolver=SourceResolver(
            patterns=patterns,
            templates=templates,
            renderer=renderer,
            on_fallback=lambda role: metrics.template_fallbacks.inc(),
        ),
        snippets=snippets,
        policy=policy,
        capabilities=capabilities,
        assembler=PromptAssembler(default_registry(), settings.task_instructions),
        describe=providers.descriptor,
        default_params=default_params,
        fallback_chains=settings.fallbacks,
    )
    audit = AuditTrail(
        jobs=jobs, writer=writer, redactor=redactor, vault=vault, mode=settings.audit.mode
    )
    limits = ConcurrencyLimits(settings.limits, metrics=metrics)
    cache = build_cache(settings, metrics=metrics, data_key=data_key)
    upstream = Upstream(
        preparer=preparer,
        providers=providers,
        retry=RetryPolicy(settings.upstream, metrics=metrics),
        structured_max_attempts=settings.structured_max_attempts,
        slot=limits.provider,
        metrics=metrics,
        max_answer_bytes=settings.upstream.max_answer_bytes,
    )
    service = GenAIService(
        preparer=preparer,
        upstream=upstream,
        audit=audit,
        metrics=metrics,
        deadline_seconds=settings.upstream.deadline_seconds,
        stream_timeouts=StreamTimeouts(
            first_token_seconds=settings.upstream.first_token_seconds,
            idle_seconds=settings.upstream.idle_seconds,
        ),
        completion_slot=limits.completion,
        cache=cache,
        prices=PriceTable.load(settings.prices),
        cache_per_key=settings.cache.scope == "key",
    )
    replayer = Replayer(
        reader=audit.reader,
        preparer=preparer,
        patterns=patterns,
        templates=templates,
        redactor=redactor,
        metrics=metrics,
    )
    readiness = Readiness(
        patterns=patterns,
        providers=providers,
        schema_is_current=database.schema_is_current,
        store_probe=audit.check_ready,
        audit_backlog=writer,
        auth_disabled=settings.auth_disabled,
        probe_timeout_seconds=settings.database_lock_timeout_seconds,
    )
    return Runtime(
        settings=settings,
        database=database,
        writer=writer,
        metrics=metrics,
        patterns=patterns,
        templates=templates,
        snippets=snippets,
        renderer=renderer,
        providers=providers,
        audit=audit,
        preparer=preparer,
        service=service,
        replayer=replayer,
        readiness=readiness,
        authenticator=authenticator,
        cache=cache,
        limits=limits,
    )
