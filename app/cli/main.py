"""The `genai` command: serve, render a pattern locally, and inspect or lint the catalog."""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, Field

from app.catalog import PatternCatalog
from app.cli.jobs import drift, jobs_cli
from app.cli.keys import keys_cli
from app.cli.preflight import run_preflight
from app.cli.runner import OperatorErrors, run
from app.cli.snippets import snippets_cli
from app.cli.store import db_cli, templates_cli
from app.config import Settings, get_settings
from app.errors import ConfigurationError, InvalidModel, InvalidPattern
from app.observability.logging import configure_logging, uvicorn_log_config
from app.observability.metrics import shared_across_workers
from app.providers.registry import provider_names
from app.routing.policy import split_model
from app.schemas import MODEL, RenderRequest

cli = typer.Typer(
    cls=OperatorErrors,
    help="GenAI Service: a completion gateway with provable provenance.",
    no_args_is_help=True,
)
patterns_cli = typer.Typer(help="Inspect and lint the pattern catalog.", no_args_is_help=True)
cli.add_typer(patterns_cli, name="patterns")
cli.add_typer(db_cli, name="db")
cli.add_typer(templates_cli, name="templates")
cli.add_typer(snippets_cli, name="snippets")
cli.add_typer(keys_cli, name="keys")
cli.add_typer(jobs_cli, name="jobs")
cli.command("drift")(drift)
# How an operator names the pattern roots (Settings.pattern_dir).
PATTERN_DIR_SETTING = "GENAI_PATTERN_DIR"


@cli.callback()
def _configure() -> None:
    # Commands print their results; only warnings belong beside them. (`serve` configures its own.)
    configure_logging(get_settings().model_copy(update={"log_level": "WARNING"}))


def _adapter(settings: Settings) -> PatternCatalog:
    return PatternCatalog(roots=settings.pattern_dir, defaults=settings.pattern_defaults)


def _existing_roots(settings: Settings) -> PatternCatalog:
    """The catalog, once every root exists: a relative root (the default `patterns`) is read from
    the working directory, and run elsewhere it used to list nothing and exit 0."""
    adapter = _adapter(settings)
    for root in adapter.missing_roots():
        where = "" if Path(root).is_absolute() else f" (relative to {Path.cwd()})"
        raise ConfigurationError(
            PATTERN_DIR_SETTING,
            f"pattern root {root}{where} does not exist; run genai from the project directory "
            f"or set {PATTERN_DIR_SETTING} to an absolute path",
        )
    return adapter


def _parse_var(item: str) -> tuple[str, Any]:
    """`k=v`; v is read as JSON when it parses (numbers, lists, booleans), else as text."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise typer.BadParameter(f"{item!r} is not KEY=VALUE")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


ModelFlag = Annotated[
    str | None,
    typer.Option(
        "--model",
        metavar="PROVIDER/MODEL",
        help="The model for every task, over GENAI_MODEL_<TASK>, GENAI_MODEL and the config file "
        "(a request's `model` and --model-for still win).",
    ),
]
ModelForFlag = Annotated[
    list[str] | None,
    typer.Option(
        "--model-for",
        metavar="TASK=PROVIDER/MODEL",
        help="The model for one task (a pattern name or tag), over --model; repeatable.",
    ),
]
# How `serve` hands its model flags to uvicorn's worker processes, which build their settings
# from the environment they inherit: Settings.cli_model and Settings.cli_task_models.
CLI_MODEL_VARIABLE = "GENAI_CLI_MODEL"
CLI_TASK_MODELS_VARIABLE = "GENAI_CLI_TASK_MODELS"


class _ModelFlags(BaseModel):
    """The flags' models, held to the same rule as a request's `model` (errors print one line
    per flag, exit 2)."""

    model: Annotated[str, Field(pattern=MODEL)] | None = None
    model_for: dict[str, Annotated[str, Field(pattern=MODEL)]] = Field(default_factory=dict)


def _model_flags(model: str | None, items: list[str] | None) -> _ModelFlags:
    """`--model M` and `--model-for TASK=M` (repeatable; the last one for a task wins)."""
    model_for: dict[str, str] = {}
    for item in items or []:
        task, sep, chosen = item.partition("=")
        if not sep or not task.strip() or not chosen.strip():
            raise typer.BadParameter(
                f"{item!r} is not TASK=PROVIDER/MODEL", param_hint="--model-for"
            )
        model_for[task.strip()] = chosen.strip()
    return _ModelFlags(model=model, model_for=model_for)


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


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes.")] = 1,
    model: ModelFlag = None,
    model_for: ModelForFlag = None,
) -> None:
    """Start the HTTP service (uvicorn)."""
    import uvicorn

    flags = _model_flags(model, model_for)
    if flags.model:
        os.environ[CLI_MODEL_VARIABLE] = flags.model
    if flags.model_for:
        os.environ[CLI_TASK_MODELS_VARIABLE] = json.dumps(flags.model_for)
    get_settings.cache_clear()  # read again with the flags, as each worker will read them
    settings = get_settings()
    # Settings, keys, the store and its migrations are proven here, so a problem is one line
    # from the CLI (exit 2) instead of a traceback from inside uvicorn.
    run_preflight(settings)
    if settings.auto_migrate and workers > 1:
        # Migrated once by the preflight, not racing in every worker; workers inherit the env.
        os.environ["GENAI_DATABASE_AUTO_MIGRATE"] = "false"
    with shared_across_workers(workers):  # /metrics sums every worker's counters
        uvicorn.run(
            "app.main:create_app",
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


@cli.command()
def render(
    pattern: Annotated[str, typer.Argument(help="Pattern name, e.g. summarize or email/reply.")],
    var: Annotated[
        list[str] | None, typer.Option("--var", "-v", help="KEY=VALUE, repeatable.")
    ] = None,
    user_prompt: Annotated[str, typer.Option(help="The verbatim user message.")] = "",
    model: ModelFlag = None,
    model_for: ModelForFlag = None,
) -> None:
    """Render a pattern locally and print the prompt, model choice and hashes as JSON."""
    variables = dict(_parse_var(item) for item in var or [])
    request = RenderRequest(pattern_key=pattern, variables=variables, user_prompt=user_prompt)
    settings = get_settings()
    _existing_roots(settings)
    flags = _model_flags(model, model_for)
    if flags.model or flags.model_for:  # the flags are two links of the model chain, as in serve
        cli_model = flags.model or settings.cli_model
        cli_task_models = flags.model_for or settings.cli_task_models
        settings = settings.model_copy(
            update={"cli_model": cli_model, "cli_task_models": cli_task_models}
        )
    result = run(lambda runtime: runtime.service.render(request), settings)
    typer.echo(result.model_dump_json(indent=2))


@patterns_cli.command("list")
def patterns_list() -> None:
    """One line per pattern: name and description (bodies are not compiled: see validate)."""
    for entry in _existing_roots(get_settings()).listing():
        if isinstance(entry, InvalidPattern):
            typer.echo(f"{entry.name:<28} INVALID (run: genai patterns validate)")
        else:
            typer.echo(f"{entry.name:<28} {entry.meta.description}")


@patterns_cli.command("show")
def patterns_show(name: str) -> None:
    """A pattern's metadata, variables and content hash as JSON."""
    pattern = _existing_roots(get_settings()).get(name)
    documented = pattern.meta.variables or {}
    typer.echo(
        json.dumps(
            {
                "name": pattern.name,
                "base_path": pattern.base_path,
                "content_hash": pattern.content_hash,
                **pattern.meta.model_dump(mode="json", exclude={"variables"}),
                # Every variable the body uses, with its description (None if undocumented).
                "variables": {v: documented.get(v) for v in sorted(pattern.referenced)},
                "required_variables": pattern.required_variables,
            },
            indent=2,
        )
    )


@patterns_cli.command("validate")
def patterns_validate() -> None:
    """Lint every pattern (front-matter, Jinja syntax, declared variables); exit 1 on problems."""
    adapter = _adapter(get_settings())
    failures = 0
    for root in adapter.missing_roots():
        typer.echo(f"root {root}: does not exist", err=True)
        failures += 1
    for name, problem in sorted(adapter.check().items()):  # compiles every body
        for text in problem.problems:
            typer.echo(f"{name}: {text}", err=True)
        failures += 1
    for name, roots in sorted(adapter.shadowed().items()):
        typer.echo(f"{name}: found in {', '.join(roots)}; the first one is used")
    known_providers = provider_names(get_settings())
    for pattern in adapter.loadable():
        named = [("model_hint", pattern.meta.model_hint)] if pattern.meta.model_hint else []
        named += [(f"fallbacks[{i}]", model) for i, model in enumerate(pattern.meta.fallbacks)]
        for field, model in named:
            try:
                split_model(model, known_providers)
            except InvalidModel as exc:
                typer.echo(f"{pattern.name}: {field}: {exc.message}", err=True)
                failures += 1
    typer.echo(f"{len(adapter.names())} patterns checked, {failures} problems")
    if failures:
        raise typer.Exit(code=1)


def main() -> None:
    cli()
