"""Everything long-lived, built in one place from Settings and closed in reverse order."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from app.audit.redaction import Redactor
from app.audit.replay import Replayer
from app.audit.trail import AuditTrail
from app.auth.authenticator import Authenticator
from app.cache import ResponseCache, build_cache
from app.catalog import PatternCatalog
from app.catalog.chat import CHAT_SOURCE
from app.catalog.renderer import TemplateRenderer
from app.catalog.resolver import SourceResolver
from app.concurrency.limits import ConcurrencyLimits
from app.config import Settings
from app.errors import ConfigurationProblems, StoreUnavailable
from app.observability.metric_labels import LabelVocabulary
from app.observability.metrics import Metrics
from app.observability.readiness import Readiness
from app.pipeline.model_check import unservable_patterns
from app.pipeline.prepare import PromptPreparer
from app.pipeline.upstream import StreamTimeouts, Upstream
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

    async def aclose(self) -> None:
        """Drain queued audit writes first: a clean stop loses no record."""
        try:
            await self.writer.aclose()
        finally:
            self.renderer.close()
            await self.cache.aclose()
            await self.providers.aclose()
            await self.database.aclose()


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
    jobs = JobRepository(database.sessions)
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
        jobs=jobs,
        writer=writer,
        preparer=preparer,
        patterns=patterns,
        templates=templates,
        redactor=redactor,
        vault=vault,
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
