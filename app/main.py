"""The application factory: everything is built here, nothing at import time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import structlog
from fastapi import FastAPI
from sqlalchemy.exc import SQLAlchemyError
from starlette.middleware.cors import CORSMiddleware

from app import __version__
from app.api import (
    chat,
    completions,
    health,
    jobs,
    keys,
    messages,
    patterns,
    snippets,
    templates,
)
from app.api.errors import install_error_handlers
from app.api.openapi import GatewayAPI
from app.api.responses import GatewayJSONResponse
from app.audit.trail import AuditTrail
from app.auth.authenticator import Authenticator
from app.auth.banner import warn_auth_disabled
from app.auth.first_key import issue_first_admin_key
from app.catalog.watch import FileWatcher, Owners
from app.config import Settings, get_settings
from app.errors import GenAIError
from app.middleware.auth import AuthMiddleware
from app.middleware.body_limit import BodyLimitMiddleware
from app.middleware.request_context import RequestContextMiddleware
from app.middleware.shedding import ShedMiddleware
from app.observability.logging import configure_logging
from app.observability.metrics import Metrics
from app.observability.tracing import configure_tracing, shutdown_tracing
from app.runtime import Runtime, build_runtime

log = structlog.get_logger(__name__)
_KEY_USE_SECONDS = 30.0
# What a browser client may read of an answer besides the basics.
EXPOSED_HEADERS = [
    "x-request-id",
    "x-genai-overhead-ms",
    "retry-after",
    "x-genai-ignored-params",
    "x-genai-dropped-params",
]


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


def _metrics_of(app: FastAPI) -> Metrics | None:
    """The app's metrics once its lifespan has built the runtime."""
    runtime: Runtime | None = getattr(app.state, "runtime", None)
    return runtime.metrics if runtime is not None else None


# Every router of the API, in the order a request is matched against them.
API_MODULES = (completions, chat, messages, patterns, templates, snippets, jobs, keys, health)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    configure_tracing(__version__)  # first: log lines then carry the trace id
    configure_logging(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = await build_runtime(settings)
        app.state.runtime = runtime
        await issue_first_admin_key(runtime.authenticator, settings)
        if settings.auth_disabled:
            warn_auth_disabled()
            log.warning("auth_disabled", hint="unset GENAI_AUTH_DISABLED outside development")
        key_use = asyncio.create_task(_save_key_use(runtime.authenticator, _KEY_USE_SECONDS))
        stale_after = settings.stale_pending_after_seconds
        await _interrupt_stale_jobs(runtime.audit, stale_after)  # before serving
        stop_stale_checks = asyncio.Event()
        stale_checks = asyncio.create_task(
            _keep_interrupting_stale_jobs(runtime.audit, stale_after, stop_stale_checks)
        )
        watcher = None
        if settings.pattern_reload_seconds > 0:  # pattern and snippet files, one watcher
            owners = Owners(
                patterns=runtime.patterns.refresh, snippets=runtime.snippets.refresh_files
            )
            watcher = FileWatcher(
                settings.pattern_dir, owners, quiet_seconds=settings.pattern_reload_seconds
            )
            watcher.start()
        log.info(
            "service_started",
            patterns=len(runtime.patterns.names()),
            providers=runtime.providers.status(),
            database=runtime.database.safe_url,
        )
        try:
            yield
        finally:
            stop_stale_checks.set()
            await stale_checks
            key_use.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await key_use
            with contextlib.suppress(GenAIError):  # best effort: last-use times are advisory
                await runtime.authenticator.save_last_use()
            if watcher is not None:
                await watcher.aclose()
            await runtime.aclose()
            log.info("service_stopped")
            shutdown_tracing()  # exports the spans still buffered

    app = GatewayAPI(
        title="GenAI Service",
        version=__version__,
        summary="A completion gateway with managed prompt patterns and provable provenance.",
        lifespan=lifespan,
        default_response_class=GatewayJSONResponse,
        openapi_tags=[
            {"name": "completions", "description": "Render patterns and call models."},
            {"name": "patterns", "description": "The prompt pattern catalog (files)."},
            {"name": "templates", "description": "Versioned prompt templates (database)."},
            {"name": "snippets", "description": "Reusable prompt fragments (database and files)."},
            {"name": "jobs", "description": "The audit trail: records, replay, drift."},
            {"name": "keys", "description": "API keys and their scopes (admin)."},
            {"name": "health", "description": "Probes and metrics for operators."},
            {
                "name": "openai-compatible",
                "description": "OpenAI Chat Completions and model list, for OpenAI SDKs.",
            },
            {
                "name": "anthropic-compatible",
                "description": "Anthropic Messages and token counting, for Anthropic SDKs.",
            },
        ],
    )
    app.auth_enabled = not settings.auth_disabled  # documents 401/403 only when they happen
    install_error_handlers(app)
    # Added first, so it runs inside RequestContextMiddleware: a 413 still has a request id.
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        limits=settings.request.input_limits(),
    )
    # Outside the body limit: a caller without a key is refused before any body is read.
    app.add_middleware(AuthMiddleware)
    # Outside authentication: a request that would be shed costs as little as possible.
    app.add_middleware(ShedMiddleware)
    app.add_middleware(RequestContextMiddleware, metrics=lambda: _metrics_of(app))
    if settings.cors_origins:
        # Outermost: a browser's preflight carries no key, so it must not reach authentication.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PUT", "DELETE"],
            allow_headers=["*"],
            expose_headers=EXPOSED_HEADERS,
            max_age=600,
        )
    for module in API_MODULES:
        app.include_router(module.router)
    return app
