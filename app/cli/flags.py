"""The model flags `serve` and `render` share: `--model` and `--model-for TASK=MODEL`."""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import BaseModel, Field

from app.schemas import MODEL

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


class ModelFlags(BaseModel):
    """The flags' models, held to the same rule as a request's `model` (errors print one line
    per flag, exit 2)."""

    model: Annotated[str, Field(pattern=MODEL)] | None = None
    model_for: dict[str, Annotated[str, Field(pattern=MODEL)]] = Field(default_factory=dict)


def model_flags(model: str | None, items: list[str] | None) -> ModelFlags:
    """`--model M` and `--model-for TASK=M` (repeatable; the last one for a task wins)."""
    model_for: dict[str, str] = {}
    for item in items or []:
        task, sep, chosen = item.partition("=")
        if not sep or not task.strip() or not chosen.strip():
            raise typer.BadParameter(
                f"{item!r} is not TASK=PROVIDER/MODEL", param_hint="--model-for"
            )
        model_for[task.strip()] = chosen.strip()
    return ModelFlags(model=model, model_for=model_for)
