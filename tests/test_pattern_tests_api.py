"""`POST /v1/patterns/{name}/test`: the report as JSON for names with slashes, failing cases with
their messages, 404 and 422 (file:line), and a live run audited like any completion."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.release import parse_cases, render_through, run_cases
from app.schemas import TemplateRef
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import running_app, serve_app, settings_for

GREET = """---
description: Greet a customer.
---
You help {{ customer }}.
"""
TESTS = """- name: names the customer
  variables: {customer: Ana}
  user_prompt: Where is my order?
  expect:
    prompt_contains: [Ana]
- name: wrong customer
  variables: {customer: Ana}
  user_prompt: Hi
  expect:
    prompt_contains: [Bob]
- name: answers about the order
  variables: {customer: Ana}
  user_prompt: Where is my order?
  expect:
    answer_contains: [order]
    answer_max_chars: 100
"""

JUDGE = """---
description: Grade an answer.
---
Grade this answer to case {{ case.name }}: {{ answer }}. Answer PASS or FAIL.
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    pattern_root = tmp_path / "patterns"
    (pattern_root / "support").mkdir(parents=True)
    (pattern_root / "support" / "greet.md").write_text(GREET, encoding="utf-8")
    (pattern_root / "support" / "greet.tests.yaml").write_text(TESTS, encoding="utf-8")
    (pattern_root / "test.md").write_text("---\ndescription: Named test.\n---\nHi.\n")
    (pattern_root / "grade.md").write_text(JUDGE, encoding="utf-8")
    return pattern_root


@pytest.fixture
async def http(
    fake: FakeProviderServer, root: Path, database_url: str
) -> AsyncIterator[httpx.AsyncClient]:
    settings = settings_for(
        fake, pattern_dir=[root], database_url=database_url, database_auto_migrate=True
    )
    async with serve_app(settings) as client:
        yield client


async def test_a_non_live_run_reports_each_case(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    resp = await http.post("/v1/patterns/support/greet/test", json={"live": False})
    assert resp.status_code == 200, resp.text
    report = resp.json()
    assert (report["suite"], report["live"]) == ("support/greet", False)
    assert (report["total"], report["passed"], report["failed"], report["skipped"]) == (3, 1, 1, 1)
    statuses = {case["name"]: (case["status"], case["messages"]) for case in report["cases"]}
    assert statuses["names the customer"] == ("passed", [])
    assert statuses["wrong customer"] == ("failed", ["prompt does not contain 'Bob'"])
    assert statuses["answers about the order"][0] == "skipped"
    assert fake.requests == []  # non-live: no provider call


async def test_a_pattern_named_test_and_one_without_cases(http: httpx.AsyncClient) -> None:
    resp = await http.post("/v1/patterns/test/test", json={})
    assert resp.status_code == 200, resp.text
    assert (resp.json()["suite"], resp.json()["total"]) == ("test", 0)
    shown = await http.get("/v1/patterns/test")  # GET of the same name still reaches the pattern
    assert shown.status_code == 200 and shown.json()["name"] == "test"
    # A path ending in /test is the test route only: other methods are told it takes POST.
    wrong = await http.get("/v1/patterns/support/greet/test")
    assert (wrong.status_code, wrong.headers["allow"]) == (405, "POST")


async def test_unknown_pattern_is_404(http: httpx.AsyncClient) -> None:
    resp = await http.post("/v1/patterns/support/nope/test", json={})
    assert resp.status_code == 404
    assert resp.json()["error"]["type"] == "pattern_not_found"


async def test_a_broken_test_file_is_422_naming_file_and_line(
    http: httpx.AsyncClient, root: Path
) -> None:
    broken = root / "support" / "greet.tests.yaml"
    broken.write_text("- name: a\n  expect:\n    prompt_containz: [Ana]\n")
    resp = await http.post("/v1/patterns/support/greet/test", json={})
    assert resp.status_code == 422
    error = resp.json()["error"]
    assert error["type"] == "invalid_pattern_tests"
    assert error["message"] == (
        f"{broken}:3: case 'a': expect.prompt_containz: Extra inputs are not permitted"
    )


async def test_a_bad_body_is_422(http: httpx.AsyncClient) -> None:
    unknown = await http.post("/v1/patterns/support/greet/test", json={"model": "nope/x"})
    assert unknown.status_code == 422
    assert unknown.json()["error"]["type"] == "invalid_model"
    for body in ({"live": "yes"}, {"live": 0}, {"x": 1}):
        resp = await http.post("/v1/patterns/support/greet/test", json=body)
        assert resp.status_code == 422, body
        assert resp.json()["error"]["type"] == "invalid_request"


async def test_a_live_run_is_audited_like_any_completion(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.ok("Your order is on its way."))
    resp = await http.post(
        "/v1/patterns/support/greet/test", json={"live": True, "model": "openai/gpt-4o-mini"}
    )
    assert resp.status_code == 200, resp.text
    report = resp.json()
    assert (report["live"], report["passed"], report["failed"], report["skipped"]) == (
        True,
        2,
        1,
        0,
    )
    [answered] = [case for case in report["cases"] if case["name"] == "answers about the order"]
    assert answered["status"] == "passed"
    job = await http.get(f"/v1/jobs/{answered['job_id']}")
    assert job.status_code == 200, job.text
    assert (job.json()["status"], job.json()["source_name"]) == ("completed", "support/greet")
    assert len(fake.calls("openai")) == 1  # only the case asserting an answer


async def test_a_live_answer_that_fails_its_assertions_says_why(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.ok("Hello! " * 30))
    resp = await http.post("/v1/patterns/support/greet/test", json={"live": True})
    [answered] = [c for c in resp.json()["cases"] if c["name"] == "answers about the order"]
    assert answered["status"] == "failed"
    assert answered["messages"] == [
        "answer does not contain 'order'",
        "answer is 210 characters, over answer_max_chars 100",
    ]


async def test_a_judge_pattern_grades_a_live_answer(
    http: httpx.AsyncClient, fake: FakeProviderServer, root: Path
) -> None:
    (root / "support" / "greet.tests.yaml").write_text(
        "- name: judged\n  variables: {customer: Ana}\n  user_prompt: Hi\n"
        "  expect: {judge: grade}\n"
    )
    fake.script("openai", Reply.ok("Hello Ana!"), Reply.ok("FAIL: it ignores the order"))
    resp = await http.post("/v1/patterns/support/greet/test", json={"live": True})
    assert resp.status_code == 200, resp.text
    [case] = resp.json()["cases"]
    assert (case["status"], case["messages"]) == (
        "failed",
        ["judge 'grade' did not answer PASS: 'FAIL: it ignores the order'"],
    )
    _answer, judge_call = fake.calls("openai")
    assert "Grade this answer to case judged: Hello Ana!." in str(judge_call.body)


async def test_a_template_versions_cases_run_through_the_same_runner(
    fake: FakeProviderServer, root: Path, database_url: str
) -> None:
    """The gate another part builds on: a stored template version's cases, non-live."""
    settings = settings_for(
        fake, pattern_dir=[root], database_url=database_url, database_auto_migrate=True
    )
    async with running_app(settings) as (app, http):
        created = await http.post(
            "/v1/templates",
            json={
                "name": "support-reply",
                "role": "writer",
                "template": "Answer as {{ brand }} support.",
                "variables": ["brand"],
            },
        )
        assert created.status_code == 201, created.text
        cases = parse_cases(
            "- name: names the brand\n  variables: {brand: Acme}\n  user_prompt: Hi\n"
            '  expect: {prompt_equals: "Answer as Acme support.\\n\\nHi"}\n'
            "- name: wrong brand\n  variables: {brand: Acme}\n  user_prompt: Hi\n"
            "  expect: {prompt_contains: [Globex]}\n",
            source="template support-reply/writer v1",
        )
        version = TemplateRef(name="support-reply", role="writer", version=1)
        render = render_through(app.state.runtime.service.render, template=version)
        report = await run_cases(cases, render=render, suite="support-reply/writer v1")
    assert [case.status for case in report.cases] == ["passed", "failed"]
    assert report.failure_messages() == ["case 'wrong brand': prompt does not contain 'Globex'"]
