"""structlog set up once: context variables first, secrets scrubbed, JSON when not on a TTY."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from app.config import Settings
from app.observability.facts import add_request_facts
from app.observability.tracing import add_trace_ids, tracing_enabled

_SECRET_KEYS = re.compile(r"authorization|api[-_]?key|secret|password|cookie", re.IGNORECASE)


def scrub_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Never let a credential reach a log line, whatever a caller binds."""
    for key in list(event):
        if _SECRET_KEYS.search(key):
            event[key] = "[redacted]"
    return event


def logs_as_json(settings: Settings) -> bool:
    return settings.log_json if settings.log_json is not None else not sys.stderr.isatty()


def _renderer(as_json: bool) -> Any:
    return structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()


def configure_logging(settings: Settings) -> None:
    """Call after `configure_tracing`: with tracing on, every line names its trace and span."""
    as_json = logs_as_json(settings)
    renderer = _renderer(as_json)
    traced = [add_trace_ids] if tracing_enabled() else []
    structlog.configure(
        processors=[
            add_request_facts,
            *traced,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            scrub_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(settings.log_level.upper(), logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )


def uvicorn_formatter(as_json: bool) -> logging.Formatter:
    """Uvicorn's own lines (start-up, errors) rendered like ours: timestamp, level, JSON."""
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            add_request_facts,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            scrub_secrets,
        ],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, _renderer(as_json)],
    )


def uvicorn_log_config(settings: Settings) -> dict[str, Any]:
    """uvicorn's `log_config`: its loggers write through `uvicorn_formatter` to stderr.

    Plain data (the formatter named by its import path), because uvicorn hands it to every
    worker process.
    """
    level = settings.log_level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "structlog": {
                "()": "app.observability.logging.uvicorn_formatter",
                "as_json": logs_as_json(settings),
            }
        },
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "structlog",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            name: {"handlers": ["stderr"], "level": level, "propagate": False}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
        },
    }
