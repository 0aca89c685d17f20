"""The console's keys and teams pages over HTTP: admin only, CSRF on every form, a new key shown
once and only in the answer to the form, revocation after a confirmation, limits and spend
(issue 21)."""

from __future__ import annotations

import re

from app.schemas import ApiKeyCreate
from tests.test_console_sessions import Console, console, csrf_of, sign_in

__all__ = ["console"]  # the fixture, shared with the sessions tests

NEW_KEY = re.compile(r'id="new-key"[^>]*value="(gsk_[^"]+)"')


async def _signed_in(console: Console) -> str:
    await sign_in(console.web, console.key)
    return csrf_of((await console.web.get("/console/keys")).text)


async def test_a_complete_key_is_refused_the_keys_and_teams_pages(console: Console) -> None:
    app, web, _ = console
    reader = await app.state.runtime.authenticator.create(
        ApiKeyCreate(scope="complete", name="reader")
    )
    await sign_in(web, reader.key)
    token = csrf_of((await web.get("/console")).text)
    for path in ("/console/keys", f"/console/keys/{reader.id}", "/console/teams/red"):
        refused = await web.get(path)
        assert refused.status_code == 403 and "Admin only" in refused.text, path
    minted = await web.post("/console/keys", data={"csrf": token, "name": "x", "scope": "admin"})
    assert minted.status_code == 403
    revoke = await web.post(
        f"/console/keys/{reader.id}/revoke", data={"csrf": token, "confirm": "yes"}
    )
    assert revoke.status_code == 403
    keys = {k.name: k for k in await app.state.runtime.authenticator.list_keys()}
    assert "x" not in keys and keys["reader"].revoked_at is None  # nothing minted or revoked


async def test_a_new_key_is_shown_once_in_the_answer_and_works(console: Console) -> None:
    app, web, _ = console
    token = await _signed_in(console)
    forged = await web.post(
        "/console/keys", data={"csrf": "forged", "name": "ci", "scope": "complete"}
    )
    assert forged.status_code == 403 and "Form expired" in forged.text

    answer = await web.post(
        "/console/keys",
        data={
            "csrf": token,
            "name": "ci bot",
            "scope": "complete",
            "budget_month": "50",
            "rpm": "60",
            "allowed_models": "openai/gpt-4o*\nanthropic/*",
            "expires": "2099-01-01",
        },
    )
    assert answer.status_code == 201  # the answer itself, not a redirect that could carry it
    found = NEW_KEY.search(answer.text)
    assert found is not None, answer.text
    secret = found[1]
    assert 'data-copy-target="new-key"' in answer.text
    assert secret not in str(answer.url) and "location" not in answer.headers

    listing = await web.get("/console/keys")
    assert secret not in listing.text  # never again: not on the list …
    assert "0.00 / 50.00 USD (0%) this month" in listing.text  # its spend against its budget
    created = next(
        k for k in await app.state.runtime.authenticator.list_keys() if k.name == "ci bot"
    )
    page = await web.get(f"/console/keys/{created.id}")
    assert secret not in page.text  # … nor on the key's page
    assert "0.00 / 50.00 USD (0%) this month" in page.text and "<meter" in page.text
    assert [m for m in created.allowed_models or []] == ["openai/gpt-4o*", "anthropic/*"]
    assert created.expires_at is not None and created.expires_at.year == 2099

    works = await web.get("/v1/models", headers={"authorization": f"Bearer {secret}"})
    assert works.status_code == 200


async def test_a_refused_form_keeps_its_fields_and_shows_the_api_reason(console: Console) -> None:
    _, web, _ = console
    token = await _signed_in(console)
    bad_glob = await web.post(
        "/console/keys",
        data={"csrf": token, "name": "ci", "scope": "complete", "allowed_models": "<script>"},
    )
    assert bad_glob.status_code == 422 and "The API refused it (422" in bad_glob.text
    assert "&lt;script&gt;" in bad_glob.text and "<script>" not in bad_glob.text
    assert NEW_KEY.search(bad_glob.text) is None
    not_number = await web.post(
        "/console/keys", data={"csrf": token, "name": "ci", "scope": "complete", "rpm": "lots"}
    )
    assert (
        not_number.status_code == 422 and "Requests per minute: &#39;lots&#39;" in not_number.text
    )
    assert 'value="lots"' in not_number.text


async def test_revoke_asks_first_then_the_key_stops_working(console: Console) -> None:
    app, web, _ = console
    victim = await app.state.runtime.authenticator.create(
        ApiKeyCreate(scope="complete", name="old")
    )
    token = await _signed_in(console)
    bearer = {"authorization": f"Bearer {victim.key}"}
    assert (await web.get("/v1/models", headers=bearer)).status_code == 200

    forged = await web.post(
        f"/console/keys/{victim.id}/revoke", data={"csrf": "x", "confirm": "yes"}
    )
    assert forged.status_code == 403
    asked = await web.post(f"/console/keys/{victim.id}/revoke", data={"csrf": token})
    assert asked.status_code == 200 and "Yes, revoke old" in asked.text
    assert (await web.get("/v1/models", headers=bearer)).status_code == 200  # not yet

    done = await web.post(
        f"/console/keys/{victim.id}/revoke", data={"csrf": token, "confirm": "yes"}
    )
    assert (
        done.status_code == 303 and done.headers["location"] == f"/console/keys?revoked={victim.id}"
    )
    assert (await web.get("/v1/models", headers=bearer)).status_code == 401
    listing = await web.get(done.headers["location"])
    assert "is revoked" in listing.text and "revoked 20" in listing.text


async def test_teams_are_made_and_their_limits_changed_and_shown_with_spend(
    console: Console,
) -> None:
    app, web, _ = console
    token = await _signed_in(console)
    made = await web.post(
        "/console/teams", data={"csrf": token, "name": "red", "budget_day": "5", "tpm": "1000"}
    )
    assert made.status_code == 303 and made.headers["location"] == "/console/teams/red"
    clash = await web.post("/console/teams", data={"csrf": token, "name": "red"})
    assert clash.status_code == 409 and 'value="red"' in clash.text

    await app.state.runtime.authenticator.create(
        ApiKeyCreate(scope="complete", name="member", team="red")
    )
    team = await web.get("/console/teams/red")
    assert "0.00 / 5.00 USD (0%) today" in team.text and "member" in team.text
    assert "0 / 1000 tokens this minute" in team.text

    changed = await web.post(
        "/console/teams/red", data={"csrf": token, "budget_month": "100", "tpm": ""}
    )
    assert changed.status_code == 303
    stored = await app.state.runtime.teams.get("red")
    assert [(b.usd, b.window) for b in stored.budgets] == [(100.0, "month")]
    assert stored.tpm is None  # emptied: removed
    listing = await web.get("/console/keys")
    assert (
        "100.00 USD per month" in listing.text
        and "0.00 / 100.00 USD (0%) this month" in listing.text
    )
