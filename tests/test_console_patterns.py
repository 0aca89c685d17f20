"""The patterns and templates pages over HTTP (issue 21, page 1): search, detail, test runs,
the template diff and label moves, with their refusals and escaping."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import httpx

from app.console.pages.diff import side_by_side
from app.schemas import ApiKeyCreate
from tests.support import running_app, settings_for
from tests.test_console_sessions import Console, console, csrf_of, sign_in

__all__ = ["console"]  # the fixture, used by name

HOSTILE = "<script>alert(1)</script>"


async def _admin_api(console: Console) -> httpx.AsyncClient:
    """A client with the admin key as a bearer token, for setting up templates."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=console.app),
        base_url="http://gateway.test",
        headers={"Authorization": f"Bearer {console.key}"},
    )


async def _two_versions(console: Console, name: str = "greeting") -> None:
    texts = ["Hello {{ who }}.\nBe brief.\n", f"Hello {{{{ who }}}}!\n{HOSTILE}\nBe brief.\n"]
    async with await _admin_api(console) as api:
        for text in texts:
            body: dict[str, Any] = {
                "name": name,
                "role": "writer",
                "template": text,
                "variables": ["who"],
            }
            response = await api.post("/v1/templates", json=body)
            assert response.status_code == 201, response.text


def _words(text: str) -> str:
    """The page's text with its line breaks and indents as single spaces."""
    return " ".join(text.split())


async def _complete_key(console: Console) -> str:
    runtime = console.app.state.runtime
    created = await runtime.authenticator.create(ApiKeyCreate(scope="complete", name="reader"))
    return str(created.key)


async def test_the_list_finds_a_pattern_by_a_word_of_its_description(console: Console) -> None:
    await sign_in(console.web, console.key)
    everything = await console.web.get("/console/patterns")
    assert everything.status_code == 200
    found = await console.web.get("/console/patterns", params={"q": "invoice"})
    assert 'href="/console/patterns/extract_invoice"' in found.text
    assert 'href="/console/patterns/classify"' not in found.text
    assert found.text.count("<tr>") < everything.text.count("<tr>")
    nothing = await console.web.get("/console/patterns", params={"q": HOSTILE})
    assert "No pattern matches" in nothing.text
    assert HOSTILE not in nothing.text and html.escape(HOSTILE, quote=False) in nothing.text


async def test_the_detail_shows_contract_body_hash_and_tests_and_runs_them(
    console: Console,
) -> None:
    await sign_in(console.web, console.key)
    page = await console.web.get("/console/patterns/extract_invoice")
    assert page.status_code == 200
    async with await _admin_api(console) as api:
        detail = (await api.get("/v1/patterns/extract_invoice")).json()
    assert detail["content_hash"] in page.text
    assert detail["front_matter"]["tags"] == ["extraction", "json", "finance"]
    assert "write the date as {{ date_format }}" in detail["template"]
    assert "write the date as {{ date_format }}" in page.text  # the body, as written
    contract_row = page.text.split("<code>date_format</code></th>")[1].split("</tr>")[0]
    assert "string" in contract_row and "optional" in contract_row
    assert "Run tests" in page.text and "not run" in page.text
    assert 'href="/console/playground?pattern=extract_invoice"' in page.text
    assert 'href="/console/jobs?pattern=extract_invoice"' in page.text
    ran = await console.web.post(
        "/console/patterns/extract_invoice", data={"csrf": csrf_of(page.text)}
    )
    assert ran.status_code == 200
    assert "rendered prompts only" in ran.text and "not run" not in ran.text


async def test_running_tests_without_the_csrf_token_is_refused(console: Console) -> None:
    await sign_in(console.web, console.key)
    refused = await console.web.post("/console/patterns/extract_invoice", data={"csrf": "x"})
    assert refused.status_code == 403 and "Form expired" in refused.text


async def test_a_complete_key_sees_patterns_but_not_templates(console: Console) -> None:
    await _two_versions(console)
    await sign_in(console.web, await _complete_key(console))
    listed = await console.web.get("/console/patterns")
    assert listed.status_code == 200 and "Database templates" not in listed.text
    detail = await console.web.get("/console/patterns/extract_invoice")
    assert detail.status_code == 200 and "/console/jobs?pattern=" not in detail.text
    refused = await console.web.get("/console/templates/greeting/writer")
    assert refused.status_code == 403 and "Admin only" in refused.text


async def test_the_template_page_diffs_the_two_newest_versions_escaped(console: Console) -> None:
    await _two_versions(console)
    await sign_in(console.web, console.key)
    listed = await console.web.get("/console/patterns")
    assert 'href="/console/templates/greeting/writer"' in listed.text
    page = await console.web.get("/console/templates/greeting/writer")
    assert page.status_code == 200
    assert "v1 → v2: 1 changed, 0 removed, 1 added" in _words(page.text)
    assert HOSTILE not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    reversed_page = await console.web.get("/console/templates/greeting/writer?a=2&b=1")
    assert "v2 → v1: 1 changed, 1 removed, 0 added" in _words(reversed_page.text)


async def test_moving_a_label_records_the_message_in_the_history(console: Console) -> None:
    await _two_versions(console)
    await sign_in(console.web, console.key)
    page = await console.web.get("/console/templates/greeting/writer")
    form = {"csrf": csrf_of(page.text), "label": "staging", "target": "version"}
    moved = await console.web.post(
        "/console/templates/greeting/writer/labels",
        data={**form, "version": "2", "message": f"try v2 {HOSTILE}"},
    )
    assert moved.status_code == 303
    assert moved.headers["location"] == "/console/templates/greeting/writer?moved=staging#labels"
    after = await console.web.get(moved.headers["location"])
    assert "Label <code>staging</code> moved." in after.text
    assert "try v2 &lt;script&gt;" in after.text
    split = await console.web.post(
        "/console/templates/greeting/writer/labels",
        data={
            **form,
            "target": "split",
            "a_version": "1",
            "a_weight": "90",
            "b_version": "2",
            "b_weight": "10",
            "message": "canary",
        },
    )
    assert split.status_code == 303
    canary = await console.web.get("/console/templates/greeting/writer")
    assert "canary: v1 90%, v2 10%" in canary.text


async def test_a_refused_move_is_shown_on_the_page_with_what_was_typed(console: Console) -> None:
    await _two_versions(console)
    await sign_in(console.web, console.key)
    page = await console.web.get("/console/templates/greeting/writer")
    bad_split = await console.web.post(
        "/console/templates/greeting/writer/labels",
        data={
            "csrf": csrf_of(page.text),
            "label": "staging",
            "target": "split",
            "a_version": "1",
            "a_weight": "50",
            "b_version": "2",
            "b_weight": "20",
            "message": "kept message",
        },
    )
    assert bad_split.status_code == 422
    assert "Not moved: 422" in bad_split.text and "sum to 70" in bad_split.text
    assert ">kept message</textarea>" in bad_split.text
    no_token = await console.web.post(
        "/console/templates/greeting/writer/labels",
        data={"label": "staging", "target": "version", "version": "1", "message": "m"},
    )
    assert no_token.status_code == 403


def test_the_diff_pairs_replaced_lines_and_marks_each_row_in_text() -> None:
    rows = side_by_side("a\nb\nc\n", "a\nB\nc\nd\n")
    assert [(row.change, row.marker) for row in rows] == [
        ("same", ""),
        ("changed", "~"),
        ("same", ""),
        ("added", "+"),
    ]
    assert (rows[1].old_text, rows[1].new_text) == ("b", "B")
    assert (rows[3].old_number, rows[3].new_number) == (None, 4)
    removed = side_by_side("x\ny\n", "x\n")
    assert (removed[1].change, removed[1].old_text, removed[1].new_text) == ("removed", "y", None)


async def test_failing_tests_refuse_a_production_move_and_each_failure_is_listed(
    console: Console,
) -> None:
    await _two_versions(console)
    failing = {
        "name": "greeting",
        "role": "writer",
        "template": "Hello {{ who }}, welcome.\n",
        "variables": ["who"],
        "tests": [
            {
                "name": "says goodbye",
                "variables": {"who": "Ana"},
                "expect": {"prompt_contains": ["Goodbye"]},
            }
        ],
    }
    async with await _admin_api(console) as api:
        assert (await api.post("/v1/templates", json=failing)).status_code == 201
    await sign_in(console.web, console.key)
    page = await console.web.get("/console/templates/greeting/writer")
    refused = await console.web.post(
        "/console/templates/greeting/writer/labels",
        data={
            "csrf": csrf_of(page.text),
            "label": "production",
            "target": "version",
            "version": "3",
            "message": "ship it",
        },
    )
    assert refused.status_code == 422
    assert "Not moved: 422 tests_failed" in refused.text
    assert "<li>v3: case &#39;says goodbye&#39;: prompt does not contain" in refused.text


async def test_unreadable_test_cases_are_shown_beside_a_working_pattern(tmp_path: Path) -> None:
    (tmp_path / "hello.md").write_text("---\ndescription: Says hello.\n---\nHello {{ who }}.\n")
    (tmp_path / "hello.tests.yaml").write_text("- name: x\n  expect: {prompt_rhymes: yes}\n")
    async with running_app(settings_for(None, pattern_dir=[tmp_path])) as (app, http):
        detail = (await http.get("/v1/patterns/hello")).json()
        assert detail["tests"] == [] and "prompt_rhymes" in " ".join(detail["test_problems"])
        admin = await app.state.runtime.authenticator.create(
            ApiKeyCreate(scope="admin", name="console-admin")
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test") as web:
            await sign_in(web, admin.key)
            page = await web.get("/console/patterns/hello")
    assert page.status_code == 200
    assert "The test cases cannot be read" in page.text and "prompt_rhymes" in page.text
    assert "Run tests" not in page.text
