"""`genai patterns` and `genai render`: the pattern catalog, read and rendered locally."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from app.catalog import PatternCatalog
from app.cli.flags import ModelFlag, ModelForFlag, model_flags
from app.cli.runner import run
from app.config import Settings, get_settings
from app.errors import ConfigurationError, InvalidModel, InvalidPattern
from app.providers.registry import provider_names
from app.routing.policy import split_model
from app.schemas import RenderRequest

patterns_cli = typer.Typer(help="Inspect and lint the pattern catalog.", no_args_is_help=True)
# How an operator names the pattern roots (Settings.pattern_dir).
PATTERN_DIR_SETTING = "GENAI_PATTERN_DIR"


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
    flags = model_flags(model, model_for)
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
        for field, model in pattern.meta.named_models:
            try:
                split_model(model, known_providers)
            except InvalidModel as exc:
                typer.echo(f"{pattern.name}: {field}: {exc.message}", err=True)
                failures += 1
    typer.echo(f"{len(adapter.names())} patterns checked, {failures} problems")
    if failures:
        raise typer.Exit(code=1)
