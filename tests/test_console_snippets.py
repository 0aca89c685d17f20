"""The console's snippet pages over HTTP: admin only, CSRF on every form, a new version per save,
bad metadata kept in the form with the reason, odd stored values shown inert (issue 21)."""

from __future__ import annotations

from markupsafe import escape

from app.schemas import ApiKeyCreate, SnippetIn
from app.store.tables import SnippetRow
from tests.test_console_sessions import Console, console, csrf_of, sign_in

__all__ = ["console"]  # the fixture, shared with the sessions tests

HOSTILE = "<script>alert(1)</script>"


def _form(token: str, **fields: str) -> dict[str, str]:
    base = {
        "csrf": token,
        "name": "Nova",
        "description": "",
        "tags": "persona, support",
        "text": "You are Nova.",
        "metadata": '{"voice": "nova"}',
        "active": "on",
    }
    return {**base, **fields}


async def _identifiers(console: Console) -> list[str]:
    return [s.identifier for s in await console.app.state.runtime.snippets.list()]


async def test_a_complete_key_is_refused_every_snippet_page(console: Console) -> None:
    app, web, _ = console
    reader = await app.state.runtime.authenticator.create(
        ApiKeyCreate(scope="complete", name="reader")
    )
    await sign_in(web, reader.key)
    token = csrf_of((await web.get("/console")).text)
    for path in ("/console/snippets", "/console/snippets/new", "/console/snippets/tone-formal"):
        refused = await web.get(path)
        assert refused.status_code == 403 and "Admin only" in refused.text, path
    posted = await web.post("/console/snippets", data=_form(token, identifier="nova"))
    assert posted.status_code == 403
    assert "nova" not in await _identifiers(console)  # nothing was stored


async def test_create_then_edit_stores_versions_and_lists_them_by_tag(console: Console) -> None:
    _, web, key = console
    await sign_in(web, key)
    token = csrf_of((await web.get("/console/snippets/new")).text)

    forged = await web.post("/console/snippets", data=_form("forged", identifier="nova"))
    assert forged.status_code == 403 and "Form expired" in forged.text

    created = await web.post("/console/snippets", data=_form(token, identifier="nova"))
    assert created.status_code == 303
    assert created.headers["location"] == "/console/snippets/nova"

    saved = await web.post(
        "/console/snippets/nova", data=_form(token, text="You are Nova, v2.", tags="tone")
    )
    assert saved.status_code == 303 and saved.headers["location"].endswith("?saved=1")
    page = await web.get(saved.headers["location"])
    assert "Saved as version 2." in page.text and "You are Nova, v2." in page.text
    assert page.text.count('<span class="badge good">live</span>') == 1

    listing = await web.get("/console/snippets", params={"tag": "TONE"})
    assert "/console/snippets/nova" in listing.text
    assert "Tagged “TONE” (2)" in listing.text  # with the shipped file tone-formal
    assert "/console/snippets/persona-support" not in listing.text
    other = await web.get("/console/snippets", params={"tag": "persona"})
    assert "/console/snippets/persona-support" in other.text
    assert "/console/snippets/nova" not in other.text  # v2 is tagged tone only


async def test_bad_metadata_comes_back_in_the_form_with_the_reason(console: Console) -> None:
    _, web, key = console
    await sign_in(web, key)
    token = csrf_of((await web.get("/console/snippets/new")).text)
    typed = '{"voice": "nova", <b>oops'

    refused = await web.post(
        "/console/snippets", data=_form(token, identifier="nova", metadata=typed)
    )
    assert refused.status_code == 422
    assert "Metadata is not valid JSON" in refused.text
    assert str(escape(typed)) in refused.text  # kept, escaped, as typed
    assert 'value="nova"' in refused.text  # the other fields too

    not_object = await web.post(
        "/console/snippets", data=_form(token, identifier="nova", metadata="[1, 2]")
    )
    assert not_object.status_code == 422 and "must be a JSON object" in not_object.text

    bad_identifier = await web.post("/console/snippets", data=_form(token, identifier="no spaces"))
    assert bad_identifier.status_code == 422
    assert "The API refused it (422 invalid_request)" in bad_identifier.text
    assert "nova" not in await _identifiers(console)


async def test_a_snippet_with_odd_stored_values_still_renders_inert(console: Console) -> None:
    app, web, key = console
    runtime = app.state.runtime
    await runtime.snippets.create(
        SnippetIn(
            identifier="odd",
            name=HOSTILE,
            text=f"{HOSTILE}\n" + "x" * 5000 + "\n\u202eright-to-left",
            tags=[HOSTILE, "tone"],
            metadata={HOSTILE: [HOSTILE] * 2000},
        )
    )
    async with runtime.database.sessions.begin() as session:  # a row older code left behind
        session.add(
            SnippetRow(
                identifier="legacy",
                name="Legacy",
                description="",
                text="Old.",
                tags="not, a, list",
                meta=["not", "an", "object"],
                version=1,
            )
        )
    await sign_in(web, key)

    listing = await web.get("/console/snippets")
    assert listing.status_code == 200 and HOSTILE not in listing.text
    assert "&lt;script&gt;" in listing.text and "/console/snippets/legacy" in listing.text
    odd = await web.get("/console/snippets/odd")
    assert odd.status_code == 200 and HOSTILE not in odd.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in odd.text
    legacy = await web.get("/console/snippets/legacy")
    assert legacy.status_code == 200 and "Old." in legacy.text

    hostile_tag = await web.get("/console/snippets", params={"tag": HOSTILE})
    assert hostile_tag.status_code == 200 and HOSTILE not in hostile_tag.text
    assert "Tagged “&lt;script&gt;alert(1)&lt;/script&gt;” (1)" in hostile_tag.text
    for bad_tag in ("x" * 101, "a\x01b"):
        refused = await web.get("/console/snippets", params={"tag": bad_tag})
        assert refused.status_code == 422 and "Invalid request" in refused.text

    missing = await web.get("/console/snippets/nope")
    assert missing.status_code == 404 and "nope" in missing.text
    assert (await web.get("/console/snippets/..%2Fkeys")).status_code == 404
