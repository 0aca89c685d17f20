"""Patterns page (issue 21, page 1): the catalog searchable by name, description and tags, with
each pattern's health (broken, drifted), use (jobs, last use) and its detail: front-matter,
variable contract, hash, body and test cases, run on demand."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter
from starlette.responses import HTMLResponse

from app.console.api import ApiError
from app.console.guard import FormDep, Visit, VisitDep

router = APIRouter()

MAX_QUERY = 200  # a search box, not a document


def _matches(pattern: dict[str, Any], words: list[str]) -> bool:
    """Every word appears in the name, the description or a tag (case-insensitive)."""
    haystack = " ".join(
        [pattern["name"], pattern.get("description") or "", *pattern.get("tags", [])]
    ).casefold()
    return all(word in haystack for word in words)


async def _usage_by_pattern(visit: Visit) -> dict[str, dict[str, Any]]:
    """Jobs and last use per source name over the API's default window (a `complete` key's
    report is narrowed to its own jobs by the API)."""
    report = await visit.api.get("/v1/usage", group_by="pattern")
    return {group["group"]["pattern"]: group for group in report["groups"]}


async def _drifted(visit: Visit) -> dict[str, list[str]]:
    """Pattern files whose content changed since recent jobs used them, with the reasons."""
    report = await visit.api.get("/v1/drift")
    found: dict[str, list[str]] = {}
    for finding in report["drifted"]:
        if finding["source_kind"] == "pattern":
            found.setdefault(finding["source_name"], []).append(finding["reason"])
    return found


def _templates(versions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Database templates, one row per (name, role): its versions and every label it has."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for version in versions:
        row = rows.setdefault(
            (version["name"], version["role"]),
            {"name": version["name"], "role": version["role"], "versions": 0, "labels": {}},
        )
        row["versions"] += 1
        row["latest"] = max(row.get("latest", 0), version["version"])
        for label in version["labels"]:
            row["labels"].setdefault(label, []).append(version["version"])
    return [rows[key] for key in sorted(rows)]


@router.get("/patterns")
async def pattern_list(visit: VisitDep, q: str = "") -> HTMLResponse:
    query = q[:MAX_QUERY]
    words = query.casefold().split()
    listed = (await visit.api.get("/v1/patterns"))["patterns"]
    shown = [pattern for pattern in listed if _matches(pattern, words)]
    admin = visit.session.is_admin
    return visit.render(
        "patterns.html",
        q=query,
        patterns=shown,
        total=len(listed),
        usage=await _usage_by_pattern(visit),
        drift=await _drifted(visit) if admin else None,
        templates=_templates((await visit.api.get("/v1/templates"))["versions"]) if admin else None,
    )


def _json_type(value: Any) -> str:
    """A default's JSON type: the only type a pattern file implies for its variable."""
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array"}
    return "object" if isinstance(value, dict) else names.get(type(value), "null")


def _contract(detail: dict[str, Any]) -> list[dict[str, Any]]:
    """Each variable the body uses: its description, whether a render must supply it, and
    its default (and the type the default implies) when the front-matter gives one."""
    defaults = detail["defaults"]
    return [
        {
            "name": name,
            "description": description,
            "required": name in detail["required_variables"],
            "has_default": name in defaults,
            "default": defaults.get(name),
            "type": _json_type(defaults[name]) if name in defaults else "any",
        }
        for name, description in detail["variables"].items()
    ]


def _cases(detail: dict[str, Any]) -> list[dict[str, Any]]:
    """Each test case with only the assertions it makes (the API lists every one, empty or not)."""
    return [
        {
            **case,
            "expect": {k: v for k, v in case["expect"].items() if v not in (None, "", [], {})},
        }
        for case in detail["tests"]
    ]


async def _jobs_using(visit: Visit, name: str) -> int | None:
    """Jobs that used the pattern in the usage window; None when usage cannot say."""
    try:
        report = await visit.api.get("/v1/usage", pattern=name)
    except ApiError:  # a name the usage filter's alphabet refuses: unknown, not zero
        return None
    return int(report["totals"]["requests"])


async def _detail_page(
    visit: Visit, name: str, *, report: dict[str, Any] | None = None, error: ApiError | None = None
) -> HTMLResponse:
    detail = await visit.api.get(f"/v1/patterns/{quote(name)}")
    return visit.render(
        "patterns_detail.html",
        status=error.status if error is not None else 200,
        pattern=detail,
        contract=_contract(detail),
        cases=_cases(detail),
        jobs=await _jobs_using(visit, name),
        report=report,
        outcomes={case["name"]: case for case in report["cases"]} if report else {},
        error=error,
    )


@router.get("/patterns/{name:path}")
async def pattern_detail(name: str, visit: VisitDep) -> HTMLResponse:
    return await _detail_page(visit, name)


@router.post("/patterns/{name:path}")
async def run_pattern_tests(name: str, visit: VisitDep, _: FormDep) -> HTMLResponse:
    """Runs the cases without a provider (rendered prompts only); the report is shown with
    the page, not stored, so the answer is the page itself rather than a redirect."""
    try:
        report = await visit.api.call(
            "POST", f"/v1/patterns/{quote(name)}/test", json={"live": False}
        )
    except ApiError as exc:
        return await _detail_page(visit, name, error=exc)
    return await _detail_page(visit, name, report=report)
