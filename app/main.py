"""The application factory: everything is built here, nothing at import time."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from app import __version__
from app.api import (
    audit_chain,  # the audit chain (issue 20)
    audit_events,  # the admin event log (issue 20)
    audit_status,  # the audit trail's state, for the console (issue 21)
    chat,
    completions,
    health,
    jobs,
    key_limits,
    keys,
    messages,
    patterns,
    provenance,  # signed envelopes (issue 20)
    snippets,
    teams,
    templates,
    usage,
    webhooks,
)
from app.api.errors import install_error_handlers
from app.api.openapi import GatewayAPI
from app.api.responses import GatewayJSONResponse
from app.catalog import PatternCatalog
from app.config import Settings, get_settings
from app.console.router import install_console
from app.middleware.auth import AuthMiddleware
from app.middleware.body_limit import BodyLimitMiddleware
from app.middleware.request_context import RequestContextMiddleware
from app.middleware.shedding import ShedMiddleware
from app.observability.logging import configure_logging
from app.observability.metrics import Metrics
from app.observability.tracing import configure_tracing, shutdown_tracing
from app.runtime import Runtime, build_runtime

# What a browser client may read of an answer besides the basics.
EXPOSED_HEADERS = [
    "x-request-id",
    "x-genai-overhead-ms",
    "retry-after",
    "x-genai-ignored-params",
    "x-genai-dropped-params",
]


# The OpenAPI document's sections, in the order it lists them.
OPENAPI_TAGS = [
    {"name": "completions", "description": "Render patterns and call models."},
    {"name": "patterns", "description": "The prompt pattern catalog (files)."},
    {"name": "templates", "description": "Versioned prompt templates (database)."},
    {"name": "snippets", "description": "Reusable prompt fragments (database and files)."},
    {"name": "jobs", "description": "The audit trail: records, replay, drift."},
    {"name": "keys", "description": "API keys: scopes, limits, teams, expiry (admin)."},
    {"name": "teams", "description": "Teams whose keys share budgets and rate limits (admin)."},
    {"name": "usage", "description": "Requests, tokens and cost, grouped (a key sees its own)."},
    {"name": "health", "description": "Probes and metrics for operators."},
    {
        "name": "openai-compatible",
        "description": "OpenAI Chat Completions and model list, for OpenAI SDKs.",
    },
    {
        "name": "anthropic-compatible",
        "description": "Anthropic Messages and token counting, for Anthropic SDKs.",
    },
    {"name": "webhooks", "description": "Release events sent to receivers: the delivery log."},
    {"name": "provenance", "description": "The public keys that verify signed envelopes (open)."},
    {
        "name": "audit",
        "description": "The admin event log (who did what, when, from where) and the "
        "tamper-evident audit chain's verification (admin).",
    },
]


def _metrics_of(app: FastAPI) -> Metrics | None:
    """The app's metrics once its lifespan has built the runtime."""
    runtime: Runtime | None = getattr(app.state, "runtime", None)
    return runtime.metrics if runtime is not None else None


# Every router of the API, in the order a request is matched against them.
# key_limits before keys: `/v1/keys/me` must not be read as a key id.
API_MODULES = (
    completions,
    chat,
    messages,
    patterns,
    templates,
    snippets,
    jobs,
    usage,
    key_limits,
    keys,
    teams,
    health,
    webhooks,
    provenance,  # signed envelopes (issue 20)
    audit_events,  # the admin event log (issue 20)
    audit_chain,  # the audit chain (issue 20)
    audit_status,  # the audit trail's state, for the console (issue 21)
)


def create_app(
    settings: Settings | None = None, *, patterns: PatternCatalog | None = None
) -> FastAPI:
    """The app; its lifespan builds the runtime (with `patterns`, a catalog already read)."""
    settings = settings or get_settings()
    configure_tracing(__version__)  # first: log lines then carry the trace id
    configure_logging(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        """The runtime's lifetime is the app's: built, started, stopped and closed here."""
        runtime = await build_runtime(settings, patterns=patterns)
        app.state.runtime = runtime
        try:
            await runtime.start()
            yield
        finally:
            await runtime.aclose()
            shutdown_tracing()  # exports the spans still buffered

    app = GatewayAPI(
        title="GenAI Service",
        version=__version__,
        summary="A completion gateway with managed prompt patterns and provable provenance.",
        lifespan=lifespan,
        default_response_class=GatewayJSONResponse,
        openapi_tags=OPENAPI_TAGS,
    )
    app.auth_enabled = not settings.auth_disabled  # documents 401/403 only when they happen
    install_error_handlers(app)
    _add_middleware(app, settings)
    for module in API_MODULES:
        app.include_router(module.router)
    if settings.console.enabled:
        install_console(app)  # outermost of the middleware: its headers cover every answer
    return app


def _add_middleware(app: FastAPI, settings: Settings) -> None:
    """Each one added wraps the ones before it: the last added runs first on a request."""
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
