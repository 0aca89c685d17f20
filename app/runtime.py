"""Everything long-lived, built in one place from Settings and closed in reverse order.

`build_runtime` builds (the CLI stops there); `Runtime.start` makes it serve: the first admin key,
a sweep of stale jobs, and the background work (last-use times of keys, periodic stale-job
checks, the pattern file watcher, the retention round) that `Runtime.aclose` stops before it
closes anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from dataclasses import dataclass, field

import structlog
from sqlalchemy.exc import SQLAlchemyError

from app.audit.chain import ChainVerifier
from app.audit.chainer import Chainer, chainer_from_settings, verifier_from_settings
from app.audit.events import AdminEvents  # the admin event log (issue 20)
from app.audit.redaction import Redactor
from app.audit.replay import Replayer
from app.audit.retention import keep_retention
from app.audit.trail import AuditTrail
from app.auth.authenticator import Authenticator
from app.auth.banner import warn_auth_disabled
from app.auth.first_key import issue_first_admin_key
from app.auth.sessions import ConsoleSessions
from app.cache import ResponseCache, build_cache
from app.catalog import PatternCatalog
from app.catalog.chat import CHAT_SOURCE
from app.catalog.labels import ReleaseGate, TemplateLabels
from app.catalog.renderer import TemplateRenderer
from app.catalog.resolver import SourceResolver
from app.catalog.watch import FileWatcher, Owners
from app.concurrency.limits import ConcurrencyLimits
from app.config import Settings
from app.errors import ConfigurationError, ConfigurationProblems, GenAIError, StoreUnavailable
from app.observability.metric_labels import LabelVocabulary
from app.observability.metrics import Metrics
from app.observability.readiness import Readiness, StoreState
from app.pipeline.calls import StreamTimeouts
from app.pipeline.model_check import unservable_patterns
from app.pipeline.prepare import ModelRules, PromptPreparer
from app.pipeline.upstream import Upstream, UpstreamTuning
from app.prompts.assembler import PromptAssembler, default_registry
from app.providers import ProviderRegistry
from app.providers.registry import provider_names
from app.providers.retry import RetryPolicy
from app.quotas.counters import CounterStore
from app.quotas.guard import QuotaGuard
from app.release import PatternTestGate
from app.routing.capabilities import CapabilityCatalog
from app.routing.policy import ModelSelectionPolicy, configured_model_ids
from app.routing.prices import PriceTable
from app.schemas import ModelParams
from app.service import CompletionTimeouts, GenAIService, Outcomes
from app.snippets import SnippetLibrary
from app.store.chain import ChainRepository
from app.store.console_sessions import ConsoleSessionRepository
from app.store.counters import CounterRepository
from app.store.db import Database, describe_storage_error
from app.store.events import AdminEventRepository  # the admin event log (issue 20)
from app.store.jobs import JobRepository
from app.store.keys import ApiKeyRepository
from app.store.labels import LabelRepository
from app.store.retention import JobPruner, ProofKeeper
from app.store.secrets import ReplayVault, load_or_create_key
from app.store.signing_keys import signer_from_settings  # signed envelopes (issue 20)
from app.store.snippets import SnippetRepository
from app.store.teams import TeamRepository
from app.store.templates import TemplateRepository
from app.store.webhooks import DeliveryRepository
from app.store.writer import AuditWriter
from app.tracking.signing import Signer  # signed envelopes (issue 20)
from app.webhooks import EventSink, NoEvents
from app.webhooks.dispatcher import WebhookDispatcher, dispatcher_from_settings

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


async def _keep_house(
    trail: AuditTrail, quotas: QuotaGuard, older_than: float, stop: asyncio.Event
) -> None:
    """Periodically: stale jobs interrupted, counters of periods long over deleted. Stopped
    through `stop`, never cancelled mid-transaction."""
    every = min(300.0, max(1.0, older_than / 4))
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
        if not stop.is_set():
            await _interrupt_stale_jobs(trail, older_than)
            await quotas.tidy()


class _Background:
    """What `Runtime.start` leaves running until `Runtime.aclose`; nothing before `start`."""

    def __init__(self) -> None:
        self.serving = False  # start finished: aclose then says the service stopped
        self.key_use: asyncio.Task[None] | None = None
        self.stop_stale_checks = asyncio.Event()
        self.stale_checks: asyncio.Task[None] | None = None
        self.watcher: FileWatcher | None = None
        self.stop_retention = asyncio.Event()
        self.retention: asyncio.Task[None] | None = None


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
    teams: TeamRepository
    cache: ResponseCache
    limits: ConcurrencyLimits
    quotas: QuotaGuard
    deliveries: DeliveryRepository
    webhooks: WebhookDispatcher | None  # None without GENAI_WEBHOOKS__URLS
    template_labels: TemplateLabels  # release flow: label moves, their gate and history
    pruner: JobPruner  # retention (issue 20): `genai jobs prune` and the background policy
    admin_events: AdminEvents  # the admin event log (issue 20)
    signer: Signer | None = None  # signed envelopes (issue 20); None: signing is off
    chain: ChainVerifier | None = None  # the audit chain (issue 20): what verify walks
    chainer: Chainer | None = None  # None with GENAI_AUDIT__CHAIN_ENABLED=false
    console: ConsoleSessions | None = None  # the web console's sessions; None when it is off
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
            _keep_house(self.audit, self.quotas, stale_after, background.stop_stale_checks)
        )
        if settings.retention.jobs_days is not None or not self.database.is_sqlite:
            # PostgreSQL always: its month partitions are made ahead by the same round.
            background.retention = asyncio.create_task(
                keep_retention(
                    self.pruner, self.admin_events, settings.retention, background.stop_retention
                )
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
        if self.webhooks is not None:
            self.webhooks.start()
        if self.chainer is not None:
            self.chainer.start()
        background.serving = True

    @property
    def events(self) -> EventSink:
        """Where release actions report what they did: the dispatcher, or nowhere."""
        return self.webhooks if self.webhooks is not None else NoEvents()

    async def _stop(self) -> None:
        """Stop what `start` started: the stale-job checks between two rounds, never inside
        one; the key-use loop, whose last times are then saved once more."""
        background = self._background
        if background.stale_checks is not None:
            background.stop_stale_checks.set()
            await background.stale_checks
        if background.retention is not None:
            background.stop_retention.set()
            await background.retention
        if background.key_use is not None:
            background.key_use.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await background.key_use
            with contextlib.suppress(GenAIError):  # best effort: last-use times are advisory
                await self.authenticator.save_last_use()
        if background.watcher is not None:
            await background.watcher.aclose()
        if self.webhooks is not None:  # between two rounds, then its HTTP client
            await self.webhooks.aclose()
        if self.chainer is not None:
            await self.chainer.stop()

    async def aclose(self) -> None:
        """Stop the background work, then drain queued audit writes first: a clean stop loses
        no record."""
        await self._stop()
        try:
            await self.quotas.drain()  # settlements in flight reach the counters
            await self.writer.aclose()
            if self.chainer is not None and self._background.serving:
                await self.chainer.finish()  # what the writer drained, linked and signed
        finally:
            await self.quotas.aclose()
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
        return policy.model_ids(model for info in infos for _, model in info.meta.named_models)

    return LabelVocabulary(
        models=configured_model_ids(settings),
        providers=frozenset(provider_names(settings)),
        is_pattern=is_pattern,
        pattern_models=pattern_models,
    )


@dataclass(frozen=True, slots=True)
class _Models:
    """The model configuration, proven servable before anything is opened."""

    patterns: PatternCatalog
    rules: ModelRules


def _proven_models(settings: Settings, patterns: PatternCatalog | None) -> _Models:
    """A refusal leaves nothing to close, and names every problem at once
    (ConfigurationProblems, one line each)."""
    if patterns is None:
        patterns = PatternCatalog(roots=settings.pattern_dir, defaults=settings.pattern_defaults)
    rules = ModelRules(
        policy=ModelSelectionPolicy.from_settings(settings),
        capabilities=CapabilityCatalog.load(settings.capabilities_file),
        describe=ProviderRegistry.descriptor,  # known even for unconfigured providers
        default_params=ModelParams(max_tokens=settings.default_max_tokens),
        fallback_chains=settings.fallbacks,
    )
    unservable = unservable_patterns(
        patterns.loadable(),
        policy=rules.policy,
        capabilities=rules.capabilities,
        default_params=rules.default_params,
        describe=rules.describe,
    )
    if unservable:
        raise ConfigurationProblems(unservable)
    return _Models(patterns=patterns, rules=rules)


async def _open_database(settings: Settings) -> Database:
    """Migrated on start when GENAI_AUTO_MIGRATE says so, else only checked."""
    database = Database.from_settings(settings)
    if settings.auto_migrate:
        await database.migrate()
    else:
        await _warn_if_schema_outdated(database)
    return database


@dataclass(frozen=True, slots=True)
class _Keys:
    """The secrets under the data directory, each created on first start unless configured."""

    redactor: Redactor
    data_key: bytes  # seals replay inputs and (with Redis) cached answers; replicas share it
    vault: ReplayVault | None
    auth_secret: bytes

    @classmethod
    def load(cls, settings: Settings) -> _Keys:
        keys_dir = settings.data_dir / "keys"
        redaction = load_or_create_key(
            settings.redaction_key, keys_dir / "redaction.key", what="GENAI_REDACTION_KEY"
        )
        data = load_or_create_key(settings.data_key, keys_dir / "data.key", what="GENAI_DATA_KEY")
        auth = load_or_create_key(
            settings.auth_secret, keys_dir / "auth.key", what="GENAI_AUTH_SECRET"
        )
        return cls(
            redactor=Redactor(redaction),
            data_key=data,
            vault=ReplayVault(data) if settings.audit.store_replay_inputs else None,
            auth_secret=auth,
        )


def _authenticator(settings: Settings, database: Database, keys: _Keys) -> Authenticator:
    return Authenticator(
        ApiKeyRepository(database.sessions),
        keys.auth_secret,
        cache_seconds=settings.auth_cache_seconds,
        disabled=settings.auth_disabled,
    )


@dataclass(frozen=True, slots=True)
class _Store:
    """The audit store: the database, its job records, the background writer, the trail."""

    database: Database
    jobs: JobRepository
    writer: AuditWriter
    audit: AuditTrail


async def _audit_store(
    settings: Settings, database: Database, keys: _Keys, metrics: Metrics
) -> _Store:
    """The writer is started here: completions a stop could not write are restored first,
    before anything new is queued."""
    audit = settings.audit
    jobs = JobRepository(database.sessions, database.lane)
    writer = AuditWriter(
        jobs,
        flush_seconds=audit.flush_seconds,
        batch_size=audit.batch_size,
        insert_window_seconds=audit.insert_window_seconds,
        stuck_after_seconds=audit.stuck_after_seconds,
        spool_dir=settings.data_dir,
    )
    await writer.restore_spooled()
    writer.start()
    trail = AuditTrail(
        jobs=jobs,
        writer=writer,
        redactor=keys.redactor,
        vault=keys.vault,
        mode=audit.mode,
        on_redacted=metrics.count_redactions,
    )
    return _Store(database=database, jobs=jobs, writer=writer, audit=trail)


def _readiness(
    settings: Settings, patterns: PatternCatalog, providers: ProviderRegistry, store: _Store
) -> Readiness:
    return Readiness(
        patterns=patterns,
        providers=providers,
        store=StoreState(
            schema_is_current=store.database.schema_is_current,
            probe=store.audit.check_ready,
            backlog=store.writer,
            probe_timeout_seconds=settings.database_lock_timeout_seconds,
        ),
        auth_disabled=settings.auth_disabled,
    )


@dataclass(frozen=True, slots=True)
class _Catalog:
    """Where prompts come from: pattern files, stored templates, snippets, the renderer."""

    patterns: PatternCatalog
    templates: TemplateRepository
    snippets: SnippetLibrary
    renderer: TemplateRenderer
    labels: LabelRepository

    def resolver(self, metrics: Metrics) -> SourceResolver:
        return SourceResolver(
            patterns=self.patterns,
            templates=self.templates,
            labels=self.labels,
            renderer=self.renderer,
            on_fallback=lambda role: metrics.template_fallbacks.inc(),
        )


def _catalog(
    settings: Settings, database: Database, patterns: PatternCatalog, events: EventSink
) -> _Catalog:
    snippets = SnippetLibrary(
        store=SnippetRepository(database.sessions),
        file_roots=list(settings.pattern_dir),
        events=events,
    )
    snippets.refresh_files()
    renderer = TemplateRenderer(
        timeout_seconds=settings.render_timeout_seconds,
        max_chars=settings.render_max_chars,
        workers=settings.render_workers,
    )
    templates = TemplateRepository(database.sessions)
    return _Catalog(
        patterns=patterns,
        templates=templates,
        snippets=snippets,
        renderer=renderer,
        labels=LabelRepository(database.sessions),
    )


def _template_labels(
    settings: Settings, catalog: _Catalog, gate: ReleaseGate, events: EventSink
) -> TemplateLabels:
    """Label moves, their gate (the version's own pattern tests) and history; each committed
    move or new version is an event."""
    return TemplateLabels(
        templates=catalog.templates,
        labels=catalog.labels,
        gate=gate,
        events=events,
        protected=settings.release.protected_labels,
        require_tests=settings.release.require_tests,
    )


def _upstream(
    settings: Settings,
    preparer: PromptPreparer,
    providers: ProviderRegistry,
    limits: ConcurrencyLimits,
    metrics: Metrics,
) -> Upstream:
    return Upstream(
        preparer=preparer,
        providers=providers,
        retry=RetryPolicy(settings.upstream, metrics=metrics),
        tuning=UpstreamTuning(
            structured_max_attempts=settings.structured_max_attempts,
            max_answer_bytes=settings.upstream.max_answer_bytes,
        ),
        slot=limits.provider,
        metrics=metrics,
    )


def _quotas(settings: Settings, database: Database, prices: PriceTable) -> QuotaGuard:
    """Budget and rate counters in Redis when configured (replicas share them), else in the
    database; ConfigurationError for `store: redis` without GENAI_REDIS_URL."""
    quotas = settings.quotas
    use_redis = quotas.store == "redis" or (quotas.store == "auto" and settings.redis_url)
    counters: CounterStore
    if use_redis:
        if settings.redis_url is None:
            raise ConfigurationError("GENAI_QUOTAS__STORE", "redis needs GENAI_REDIS_URL")
        from app.quotas.redis_counters import RedisCounters  # only when used: see its module

        counters = RedisCounters.from_url(
            settings.redis_url.get_secret_value(), timeout_seconds=quotas.redis_timeout_seconds
        )
    else:
        counters = CounterRepository(database.sessions, postgres=not database.is_sqlite)
    return QuotaGuard(
        counters,
        prices,
        reserve_output_tokens=quotas.reserve_output_tokens,
        fail_open=quotas.on_store_error == "open",
    )


def _service(
    settings: Settings,
    upstream: Upstream,
    outcomes: Outcomes,
    limits: ConcurrencyLimits,
    quotas: QuotaGuard,
) -> GenAIService:
    timing = settings.upstream
    return GenAIService(
        preparer=upstream.preparer,
        upstream=upstream,
        outcomes=outcomes,
        timeouts=CompletionTimeouts(
            deadline_seconds=timing.deadline_seconds,
            stream=StreamTimeouts(
                first_token_seconds=timing.first_token_seconds, idle_seconds=timing.idle_seconds
            ),
        ),
        quotas=quotas,
        cache_per_key=settings.cache.scope == "key",
        completion_slot=limits.completion,
    )


def _pruner(settings: Settings, database: Database, *, proof: ProofKeeper | None) -> JobPruner:
    """Retention's one seam to the audit chain: `proof` (the chainer) links what is finished
    and signs a checkpoint before any prune (None with the chain off: no checkpoint)."""
    return JobPruner(database.engine, proof=proof, batch_size=settings.retention.batch_size)


async def build_runtime(settings: Settings, *, patterns: PatternCatalog | None = None) -> Runtime:
    """The composition root: each long-lived component once, in the order they depend on each
    other. The model configuration is proven before anything is opened. `patterns`: a catalog
    already read from `settings.pattern_dir` (by `genai serve`'s preflight), not read again."""
    models = _proven_models(settings, patterns)
    if settings.webhooks.urls and settings.webhooks.secret is None:  # refused before opening
        raise ConfigurationError(
            "GENAI_WEBHOOKS__SECRET", "is required when GENAI_WEBHOOKS__URLS is set"
        )
    database = await _open_database(settings)
    keys = _Keys.load(settings)
    authenticator = _authenticator(settings, database, keys)
    metrics = Metrics(labels=_label_vocabulary(settings, models.rules.policy, models.patterns))
    store = await _audit_store(settings, database, keys, metrics)
    deliveries = DeliveryRepository(database.sessions, postgres=not database.is_sqlite)
    webhooks = dispatcher_from_settings(settings.webhooks, deliveries=deliveries, metrics=metrics)
    events: EventSink = webhooks if webhooks is not None else NoEvents()
    catalog = _catalog(settings, database, models.patterns, events)
    providers = ProviderRegistry.from_settings(settings)
    preparer = PromptPreparer(
        resolver=catalog.resolver(metrics),
        snippets=catalog.snippets,
        assembler=PromptAssembler(default_registry(), settings.task_instructions),
        models=models.rules,
    )
    limits = ConcurrencyLimits(settings.limits, metrics=metrics)
    cache = build_cache(settings, metrics=metrics, data_key=keys.data_key)
    upstream = _upstream(settings, preparer, providers, limits, metrics)
    prices = PriceTable.load(settings.prices)
    signer = signer_from_settings(settings)  # signed envelopes (issue 20)
    outcomes = Outcomes(
        audit=store.audit, metrics=metrics, cache=cache, prices=prices, signer=signer
    )
    quotas = _quotas(settings, database, prices)
    gate = PatternTestGate(preparer=preparer, templates=catalog.templates)
    chain = ChainRepository(database.sessions, postgres=not database.is_sqlite)
    chainer = chainer_from_settings(settings, chain, signer)
    replayer = Replayer(
        reader=store.audit.reader,
        preparer=preparer,
        patterns=catalog.patterns,
        templates=catalog.templates,
        redactor=keys.redactor,
        metrics=metrics,
        snippets=catalog.snippets,
    )
    return Runtime(
        settings=settings,
        database=database,
        writer=store.writer,
        metrics=metrics,
        patterns=catalog.patterns,
        templates=catalog.templates,
        snippets=catalog.snippets,
        renderer=catalog.renderer,
        providers=providers,
        audit=store.audit,
        preparer=preparer,
        service=_service(settings, upstream, outcomes, limits, quotas),
        replayer=replayer,
        readiness=_readiness(settings, catalog.patterns, providers, store),
        authenticator=authenticator,
        teams=TeamRepository(database.sessions),
        cache=cache,
        limits=limits,
        quotas=quotas,
        deliveries=deliveries,
        webhooks=webhooks,
        template_labels=_template_labels(settings, catalog, gate, events),
        pruner=_pruner(settings, database, proof=chainer),
        admin_events=AdminEvents(AdminEventRepository(database.sessions)),
        signer=signer,
        chain=verifier_from_settings(settings, chain, signer),
        chainer=chainer,
        console=_console_sessions(settings, database, authenticator),
    )


def _console_sessions(
    settings: Settings, database: Database, authenticator: Authenticator
) -> ConsoleSessions | None:
    if not settings.console.enabled:
        return None
    return ConsoleSessions(
        ConsoleSessionRepository(database.sessions),
        authenticator,
        lifetime=dt.timedelta(hours=settings.console.session_hours),
        clock=authenticator.clock,
    )
