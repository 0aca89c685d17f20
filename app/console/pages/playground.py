"""The playground (issue 21, page 2): a form built from a pattern's (or a database template's)
variables; render shows the exact prompt, the model choice and the fingerprints; run and
compare answer through the API (streamed by playground.js, or posted without JS)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.datastructures import FormData
from starlette.responses import HTMLResponse

from app.console.api import ApiError, ConsoleApi
from app.console.guard import FormDep, VisitDep
from app.console.pages.playground_fields import (
    CHOSEN_KINDS,
    VariableField,
    fields_of,
    variables_of,
)

router = APIRouter()
PATH = "/playground"
_NAME = Annotated[str | None, Query(max_length=200)]
_TEXT_FIELDS = ("user_prompt", "model_a", "model_b", "version_a", "version_b", "label_a", "label_b")


@dataclass(frozen=True, slots=True)
class Source:
    """What is played: a pattern file (`pattern`) or a database template (`name/role`)."""

    pattern: str | None = None
    template: tuple[str, str] | None = None

    @property
    def label(self) -> str:
        return "/".join(self.template) if self.template is not None else self.pattern or ""

    def reference(self, version: int | None, label: str | None) -> dict[str, Any]:
        """The request's pattern_key or template (with the variant's version or label)."""
        if self.template is None:
            return {"pattern_key": self.pattern}
        name, role = self.template
        chosen = {"version": version, "label": label or None}
        return {
            "template": {
                "name": name,
                "role": role,
                **{k: v for k, v in chosen.items() if v is not None},
            }
        }


def _source(pattern: str | None, template: str | None) -> Source | None:
    if pattern:
        return Source(pattern=pattern)
    if template and template.count("/") == 1:
        name, role = template.split("/")
        return Source(template=(name, role))
    return None


@dataclass
class Play:
    """Everything the page shows: the choices, the form, and what render or run answered."""

    patterns: list[str] = field(default_factory=list)
    catalog: set[str] = field(default_factory=set)  # every pattern name, broken ones too
    templates: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    source: Source | None = None
    description: str = ""
    versions: list[dict[str, Any]] = field(default_factory=list)
    fields: list[VariableField] = field(default_factory=list)
    form: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    load_error: ApiError | None = None
    rendered: Any = None
    render_error: ApiError | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)


async def _choices(api: ConsoleApi, play: Play) -> None:
    """The patterns, templates and models to pick from."""
    patterns, templates, models = await asyncio.gather(
        api.get("/v1/patterns"), api.get("/v1/templates"), api.get("/v1/models")
    )
    play.patterns = [p["name"] for p in patterns["patterns"] if p.get("valid", True)]
    play.catalog = {p["name"] for p in patterns["patterns"]}
    pairs = {f"{v['name']}/{v['role']}" for v in templates["versions"]}
    play.templates = sorted(pairs)
    play.models = [m["id"] for m in models["data"] if m.get("owned_by") != "gateway"]


async def _load_source(api: ConsoleApi, play: Play, posted: dict[str, str] | None) -> None:
    """The chosen source's variables (and a template's versions) as form fields."""
    source = play.source
    assert source is not None
    if source.template is None:
        if source.pattern not in play.catalog:  # a listed name only: never a path of its own
            message = f"No pattern named {source.pattern!r}. Choose one from the list."
            raise ApiError(404, "pattern_not_found", message)
        detail = await api.get(f"/v1/patterns/{source.pattern}")
        play.description = detail.get("description", "")
        play.fields = fields_of(
            detail["variables"], detail["required_variables"], detail["defaults"], posted
        )
        return
    name, role = source.template
    listed = await api.get("/v1/templates", name=name, role=role)
    play.versions = sorted(listed["versions"], key=lambda v: v["version"], reverse=True)
    if not play.versions:
        raise ApiError(404, "template_not_found", f"No template {name}/{role}.")
    pinned = play.form.get("version_a", "")
    shown = next(
        (v for v in play.versions if str(v["version"]) == pinned),
        next((v for v in play.versions if v["active"]), play.versions[0]),
    )
    play.description = f"Database template, showing the variables of version {shown['version']}."
    variables: dict[str, str | None] = dict.fromkeys(shown["variables"])
    play.fields = fields_of(variables, shown["variables"], {}, posted)


async def _play(api: ConsoleApi, source: Source | None, form: FormData | None) -> Play:
    play = Play(source=source)
    posted = None
    if form is not None:
        posted = {name: value for name, value in form.items() if isinstance(value, str)}
        play.form = {name: posted.get(name, "") for name in _TEXT_FIELDS}
    await _choices(api, play)
    if source is not None:
        try:
            await _load_source(api, play, posted)
        except ApiError as exc:
            play.load_error = exc
    return play


def _variant(play: Play, suffix: str) -> tuple[int | None, str | None, str | None]:
    """A variant's (version, label, model), noting a version that is no number."""
    version_text = play.form.get(f"version_{suffix}", "").strip()
    version = None
    if version_text:
        if version_text.isdigit() and int(version_text) >= 1:
            version = int(version_text)
        else:
            play.problems.append(f"Variant {suffix.upper()}: version must be a whole number ≥ 1")
    label = play.form.get(f"label_{suffix}", "").strip() or None
    model = play.form.get(f"model_{suffix}", "").strip() or None
    return version, label, model


def _body(play: Play, variables: dict[str, Any], suffix: str) -> dict[str, Any]:
    assert play.source is not None
    version, label, model = _variant(play, suffix)
    body: dict[str, Any] = {
        **play.source.reference(version, label),
        "variables": variables,
        "user_prompt": play.form.get("user_prompt", ""),
    }
    if model:
        body["model"] = model
    return body


async def _run(api: ConsoleApi, suffix: str, body: dict[str, Any]) -> dict[str, Any]:
    """One completion, not streamed: its envelope, or the API's error."""
    title = f"Variant {suffix.upper()}"
    try:
        envelope = await api.call("POST", "/v1/completions", json=body)
    except ApiError as exc:
        return {"title": title, "slug": suffix, "error": exc}
    calls = envelope["response"].get("tool_calls", [])
    tools = [{**call, "arguments": _readable(call["arguments"])} for call in calls]
    return {"title": title, "slug": suffix, "envelope": envelope, "tools": tools}


def _readable(arguments: str) -> str:
    """A tool call's JSON arguments indented, or as written when they are not JSON."""
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments


async def _act(api: ConsoleApi, play: Play, action: str) -> None:
    variables, play.problems = variables_of(play.fields)
    bodies = {suffix: _body(play, variables, suffix) for suffix in ("a", "b")}
    if play.problems:
        return
    if action == "render":
        try:
            play.rendered = await api.call("POST", "/v1/render", json=bodies["a"])
            params = play.rendered["params"]  # only the ones set: the rest are provider defaults
            play.rendered["params"] = {k: v for k, v in params.items() if v is not None}
        except ApiError as exc:
            play.render_error = exc
    elif action == "run":
        play.runs = [await _run(api, "a", bodies["a"])]
    elif action == "compare":
        play.runs = list(
            await asyncio.gather(_run(api, "a", bodies["a"]), _run(api, "b", bodies["b"]))
        )


def _page(play: Play) -> dict[str, Any]:
    source = play.source
    return {
        "play": play,
        "source": source,
        "source_field": "pattern" if source is None or source.template is None else "template",
        "chosen_kinds": CHOSEN_KINDS,
    }


@router.get(PATH)
async def playground(
    visit: VisitDep, pattern: _NAME = None, template: _NAME = None
) -> HTMLResponse:
    play = await _play(visit.api, _source(pattern, template), None)
    status = play.load_error.status if play.load_error else 200  # e.g. 404: no such pattern
    return visit.render("playground.html", status=status, **_page(play))


@router.post(PATH)
async def play_form(visit: VisitDep, form: FormDep) -> HTMLResponse:
    """Render, run or compare without JavaScript; the answer is the same page with results."""
    pattern, template = form.get("pattern"), form.get("template")
    source = _source(
        pattern if isinstance(pattern, str) else None,
        template if isinstance(template, str) else None,
    )
    play = await _play(visit.api, source, form)
    action = str(form.get("action", "render"))
    if source is not None and play.load_error is None:
        await _act(visit.api, play, action)
    return visit.render("playground.html", **_page(play))
