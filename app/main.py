"""The application factory: everything is built here, nothing at import time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import structlog
from fastapi import FastAPI

from app import __version__
from app.api import completions, health, patterns
from app.api.errors import install_error_handlers
from app.catalog import PatternsAdapter
from app.config import Settings, get_settings
from app.logging import RequestContextMiddleware, configure_logging
from app.providers import ProviderRegistry
from app.routing.policy import ModelSelectionPolicy
from app.routing.retry import RetryPolicy
from app.schemas import ModelParams
from app.service import GenAIService

log = structlog.get_logger(__name__)


async def _keep_patterns_fresh(adapter: PatternsAdapter, every: float) -> None:
    """Re-scan pattern roots off the event loop, so edits apply without a restart."""
    while True:
        await asyncio.sleep(every)
        try:
            if await asyncio.to_thread(adapter.refresh):
                log.info("patterns_reloaded", count=len(adapter.names()))
        except OSError as exc:
            log.warning("patterns_reload_failed", error=str(exc))


def build_service(settings: Settings) -> GenAIService:
    return GenAIService(
        patterns=PatternsAdapter(roots=settings.pattern_dir, defaults=settings.pattern_defaults),
        policy=ModelSelectionPolicy.from_settings(settings),
        providers=ProviderRegistry.from_settings(settings),
        retry=RetryPolicy(settings.upstream),
        default_params=ModelParams(max_tokens=settings.default_max_tokens),
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    configure_logging(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service = build_service(settings)
        app.state.settings = settings
        app.state.service = service
        reloader = None
        if settings.pattern_reload_seconds > 0:
            reloader = asyncio.create_task(
                _keep_patterns_fresh(service.patterns, settings.pattern_reload_seconds)
            )
        log.info(
            "service_started",
            patterns=len(service.patterns.names()),
            providers=service.providers.status(),
        )
        try:
            yield
        finally:
            if reloader is not None:
                reloader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reloader
            await service.providers.aclose()
            log.info("service_stopped")

    app = FastAPI(
        title="GenAI Service",
        version=__version__,
        summary="A completion gateway with managed prompt patterns and provable provenance.",
        lifespan=lifespan,
        openapi_tags=[
            {"name": "completions", "description": "Render patterns and call models."},
            {"name": "patterns", "description": "The prompt pattern catalog."},
            {"name": "health", "description": "Probes for orchestrators."},
        ],
    )
    install_error_handlers(app)
    app.add_middleware(RequestContextMiddleware)
    app.include_router(completions.router)
    app.include_router(patterns.router)
    app.include_router(health.router)
    return app
