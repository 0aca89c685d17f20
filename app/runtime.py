"""Everything long-lived, built in one place from Settings and closed in reverse order."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog

from app.audit.replay import Auditor
from app.audit.trail import AuditTrail
from app.catalog import PatternsAdapter
from app.config import Settings
from app.metrics import Metrics
from app.prompts.assembler import PromptAssembler, default_registry
from app.prompts.redaction import Redactor
from app.providers import ProviderRegistry
from app.routing.capabilities import CapabilityCatalog
from app.routing.policy import ModelSelectionPolicy
from app.routing.retry import RetryPolicy
from app.schemas import ModelParams
from app.service import GenAIService
from app.snippets import SnippetLibrary
from app.store.db import Database
from app.store.jobs import AuditWriter, JobRepository
from app.store.secrets import ReplayVault, load_or_create_key
from app.store.templates import TemplateRepository

log = structlog.get_logger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Runtime:
    settings: Settings
    database: Database
    writer: AuditWriter
    metrics: Metrics
    service: GenAIService
    auditor: Auditor
    snippets: SnippetLibrary

    async def aclose(self) -> None:
        """Drain queued audit writes first: a clean stop loses no record."""
        try:
            await self.writer.aclose()
        finally:
            await self.service.providers.aclose()
            await self.database.aclose()


async def build_runtime(settings: Settings) -> Runtime:
    database = Database(settings.resolved_database_url)
    if settings.auto_migrate:
        await database.migrate()
    elif not await database.schema_is_current():
        log.warning("database_schema_outdated", hint="run `genai db upgrade`")
    keys_dir = settings.data_dir / "keys"
    redactor = Redactor(
        load_or_create_key(
            settings.redaction_key, keys_dir / "redaction.key", what="GENAI_REDACTION_KEY"
        )
    )
    vault = None
    if settings.audit.store_replay_inputs:
        vault = ReplayVault(
            load_or_create_key(settings.data_key, keys_dir / "data.key", what="GENAI_DATA_KEY")
        )
    metrics = Metrics()
    jobs = JobRepository(database.sessions)
    writer = AuditWriter(
        jobs, flush_seconds=settings.audit.flush_seconds, batch_size=settings.audit.batch_size
    )
    writer.start()
    patterns = PatternsAdapter(roots=settings.pattern_dir, defaults=settings.pattern_defaults)
    templates = TemplateRepository(database.sessions)
    snippets = SnippetLibrary(sessions=database.sessions, file_roots=list(settings.pattern_dir))
    snippets.refresh_files()
    service = GenAIService(
        patterns=patterns,
        templates=templates,
        snippets=snippets,
        policy=ModelSelectionPolicy.from_settings(settings),
        capabilities=CapabilityCatalog.load(settings.capabilities_file),
        assembler=PromptAssembler(default_registry(), settings.task_instructions),
        providers=ProviderRegistry.from_settings(settings),
        retry=RetryPolicy(settings.upstream),
        audit=AuditTrail(jobs=jobs, writer=writer, redactor=redactor, vault=vault),
        metrics=metrics,
        default_params=ModelParams(max_tokens=settings.default_max_tokens),
        structured_max_attempts=settings.structured_max_attempts,
    )
    auditor = Auditor(
        jobs=jobs, writer=writer, service=service, redactor=redactor, vault=vault, metrics=metrics
    )
    return Runtime(
        settings=settings,
        database=database,
        writer=writer,
        metrics=metrics,
        service=service,
        auditor=auditor,
        snippets=snippets,
    )


def run_with_runtime(
    work: Callable[[Runtime], Awaitable[T]], settings: Settings | None = None
) -> T:
    """For the CLI: build the runtime, run one piece of work, close everything."""
    from app.config import get_settings

    async def main() -> T:
        runtime = await build_runtime(settings or get_settings())
        try:
            return await work(runtime)
        finally:
            await runtime.aclose()

    return asyncio.run(main())
