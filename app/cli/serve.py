"""`genai serve`: prove the settings and the store, then run uvicorn (one or more workers)."""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.cli.flags import (
    CLI_MODEL_VARIABLE,
    CLI_TASK_MODELS_VARIABLE,
    ModelFlag,
    ModelForFlag,
    model_flags,
)
from app.cli.preflight import run_preflight
from app.config import Settings, get_settings
from app.observability.logging import uvicorn_log_config
from app.observability.metrics import shared_across_workers

if TYPE_CHECKING:
    from fastapi import FastAPI

    from app.catalog import PatternCatalog

_WORKER_START_SECONDS = 60


def _http_protocol(settings: Settings) -> Any:
    """httptools when installed (not on Windows), bounded in the size and time of a request's
    head (app/middleware/http_protocol.py); else h11, whose own bound is set from the same
    setting."""
    if importlib.util.find_spec("httptools") is None:
        return "h11"
    from app.middleware.http_protocol import BoundedHeadProtocol

    return functools.partial(
        BoundedHeadProtocol,
        max_head_bytes=settings.request.max_head_bytes,
        head_timeout_seconds=settings.request.head_timeout_seconds,
    )


def _app_factory(
    settings: Settings, patterns: PatternCatalog, workers: int
) -> str | Callable[[], FastAPI]:
    """What uvicorn builds the app from. One worker runs in this process: it is handed the
    settings and the catalog the preflight read (with 1,000 patterns, reading them took 0.7 s
    of a 5.6 s start under cProfile). Several workers are other processes, so each imports
    the factory."""
    if workers > 1:
        return "app.main:create_app"
    from app.main import create_app

    return functools.partial(create_app, settings, patterns=patterns)


def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes.")] = 1,
    model: ModelFlag = None,
    model_for: ModelForFlag = None,
) -> None:
    """Start the HTTP service (uvicorn)."""
    import uvicorn

    flags = model_flags(model, model_for)
    if flags.model:
        os.environ[CLI_MODEL_VARIABLE] = flags.model
    if flags.model_for:
        os.environ[CLI_TASK_MODELS_VARIABLE] = json.dumps(flags.model_for)
    get_settings.cache_clear()  # read again with the flags, as each worker will read them
    settings = get_settings()
    # Settings, keys, the store and its migrations are proven here, so a problem is one line
    # from the CLI (exit 2) instead of a traceback from inside uvicorn.
    patterns = run_preflight(settings)
    if settings.auto_migrate and workers > 1:
        # Migrated once by the preflight, not racing in every worker; workers inherit the env.
        os.environ["GENAI_DATABASE_AUTO_MIGRATE"] = "false"
    with shared_across_workers(workers):  # /metrics sums every worker's counters
        uvicorn.run(
            _app_factory(settings, patterns, workers),
            factory=True,
            host=host,
            port=port,
            workers=workers,
            # uvloop and httptools when installed (not on Windows); the access log is off
            # because RequestContextMiddleware already writes one line per request.
            loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
            http=_http_protocol(settings),
            h11_max_incomplete_event_size=settings.request.max_head_bytes,
            access_log=False,
            # Uvicorn's own lines (start-up, errors) through the same structlog renderer (JSON).
            log_config=uvicorn_log_config(settings),
            proxy_headers=True,
            timeout_graceful_shutdown=math.ceil(settings.shutdown_grace_seconds),
            # A worker answers uvicorn's health check only once it has imported the app (seconds
            # on a busy machine); with the default 5 s every worker was killed while starting.
            timeout_worker_healthcheck=_WORKER_START_SECONDS,
        )
