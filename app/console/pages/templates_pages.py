"""Database template page (issue 21, page 1): a template's versions, a side-by-side diff of any
two, its labels (one version or a canary split) and the form that moves one, with its history.
Every refusal the API gives a move (protected label, failing tests, a concurrent move) is shown
on the page beside the form, the form keeping what was typed."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter
from starlette.datastructures import FormData
from starlette.responses import HTMLResponse, RedirectResponse, Response

from app.console.api import ApiError
from app.console.guard import AdminVisitDep, FormDep, Visit
from app.console.pages.diff import counts, side_by_side

router = APIRouter()

FORM_FIELDS = ("label", "target", "version", "a_version", "a_weight", "b_version", "b_weight")


def _pick(versions: list[dict[str, Any]], wanted: int | None, fallback: int) -> dict[str, Any]:
    """The version numbered `wanted`, or the one at `fallback` (newest first) when absent."""
    for version in versions:
        if version["version"] == wanted:
            return version
    return versions[min(fallback, len(versions) - 1)]


async def _page(
    visit: Visit,
    name: str,
    role: str,
    *,
    a: int | None = None,
    b: int | None = None,
    moved: str | None = None,
    form: dict[str, str] | None = None,
    error: ApiError | None = None,
) -> HTMLResponse:
    base = f"/v1/templates/{quote(name)}/{quote(role)}"
    listed = await visit.api.get("/v1/templates", name=name, role=role)
    versions = sorted(listed["versions"], key=lambda v: v["version"], reverse=True)
    if not versions:
        raise ApiError(404, "template_not_found", f"No template {name!r} with role {role!r}.")
    # Defaults: the older of the two newest on the left, the newest on the right.
    old, new = _pick(versions, a, 1), _pick(versions, b, 0)
    rows = side_by_side(old["template"], new["template"])
    return visit.render(
        "templates_detail.html",
        status=error.status if error is not None else 200,
        name=name,
        role=role,
        versions=versions,
        old=old,
        new=new,
        rows=rows,
        counts=counts(rows),
        labels=(await visit.api.get(f"{base}/labels"))["labels"],
        history=(await visit.api.get(f"{base}/labels/history"))["moves"],
        moved=moved,
        form=form or {"target": "version", "version": str(versions[0]["version"])},
        error=error,
    )


@router.get("/templates/{name}/{role}")
async def template_detail(
    name: str,
    role: str,
    visit: AdminVisitDep,
    a: int | None = None,
    b: int | None = None,
    moved: str | None = None,
) -> HTMLResponse:
    return await _page(visit, name, role, a=a, b=b, moved=moved)


def _number(value: str) -> int | str:
    """A whole number as one; anything else as typed, for the API to refuse with its message."""
    text = value.strip()
    return int(text) if text.isdigit() else text


def move_body(form: FormData) -> dict[str, Any]:
    """The `PUT …/labels/{label}` body the form describes: one version, or a split of two."""
    message = str(form.get("message", ""))
    if form.get("target") == "split":
        split = [
            {
                "version": _number(str(form.get(f"{side}_version", ""))),
                "weight": _number(str(form.get(f"{side}_weight", ""))),
            }
            for side in ("a", "b")
        ]
        return {"split": split, "message": message}
    return {"version": _number(str(form.get("version", ""))), "message": message}


@router.post("/templates/{name}/{role}/labels")
async def move_label(name: str, role: str, visit: AdminVisitDep, form: FormDep) -> Response:
    label = str(form.get("label", "")).strip()
    kept = {field: str(form.get(field, "")) for field in (*FORM_FIELDS, "message")}
    try:
        if not label:
            raise ApiError(422, "invalid_request", "Name the label to move.")
        await visit.api.call(
            "PUT",
            f"/v1/templates/{quote(name)}/{quote(role)}/labels/{quote(label, safe='')}",
            json=move_body(form),
        )
    except ApiError as exc:
        return await _page(visit, name, role, form=kept, error=exc)
    return RedirectResponse(
        f"/console/templates/{quote(name)}/{quote(role)}?moved={quote(label, safe='')}#labels",
        status_code=303,
    )
