"""The application factory: everything is built here, nothing at import time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import structlog
from fastapi import FastAPI

from app import __version__
from app.api import completions, health, jobs, patterns, snippets, templates
from app.api.errors import install_error_handlers
from app.config import Settings, get_settings
from app.logging import RequestContextMiddleware, configure_logging
from app.runtime import build_runtime

log = structlog.get_logger(__name__)


async def _keep_files_fresh(refreshers: list[Callable[[], bool]], every: float) -> None:
    """Re-scan pattern and snippet files off the event loop, so edits apply without a restart."""
    while True:
        await asyncio.sleep(every)
        for refresh in refreshers:
            try:
                if await asyncio.to_thread(refresh):
                    log.info("files_reloaded", source=getattr(refresh, "__qualname__", "files"))
            except OSError as exc:
                log.warning("files_reload_failed", error=str(exc))


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    configure_logging(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = await build_runtime(settings)
        app.state.runtime = runtime
        app.state.service = runtime.service
        reloader = None
        if settings.pattern_reload_seconds > 0:
            refreshers = [runtime.service.patterns.refresh, runtime.snippets.refresh_files]
            reloader = asyncio.create_task(
                _keep_files_fresh(refreshers, settings.pattern_reload_seconds)
            )
        log.info(
            "service_started",
            patterns=len(runtime.service.patterns.names()),
            providers=runtime.service.providers.status(),
            database=runtime.database.safe_url,
        )
        try:
            yield
        finally:
            if reloader is not None:
                reloader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reloader
            await runtime.aclose()
            log.info("service_stopped")

    app = FastAPI(
        title="GenAI Service",
        version=__version__,
        summary="A completion gateway with managed prompt patterns and provable provenance.",
        lifespan=lifespan,
        openapi_tags=[
            {"name": "completions", "description": "Render patterns and call models."},
            {"name": "patterns", "description": "The prompt pattern catalog (files)."},
            {"name": "templates", "description": "Versioned prompt templates (database)."},
            {"name": "snippets", "description": "Reusable prompt fragments (database and files)."},
            {"name": "jobs", "description": "The audit trail: records, replay, drift."},
            {"name": "health", "description": "Probes and metrics for operators."},
        ],
    )
    install_error_handlers(app)
    app.add_middleware(RequestContextMiddleware)
    for module in (completions, patterns, templates, snippets, jobs, health):
        app.include_router(module.router)
    return app
