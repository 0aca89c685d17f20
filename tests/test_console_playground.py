"""The console's playground over HTTP (issue 21, page 2): the form built from a pattern's
variables, render without JavaScript (the exact prompt, escaped, the model choice and the
fingerprints), render errors, the posted run and compare, and the CSRF refusal."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI

from app.console.pages.playground_fields import VariableField, fields_of, kind_of, variables_of
from app.schemas import ApiKeyCreate
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import running_app, settings_for
from tests.test_console_sessions import csrf_of, sign_in

HOSTILE = "<script>alert(1)</script>"


@dataclass(frozen=True)
class Playground:
    app: FastAPI
    web: httpx.AsyncClient  # a browser signed in with a `complete` key
    csrf: str
    admin: httpx.AsyncClient  # the API with an admin key, to set things up


@pytest.fixture
async def playground(fake: FakeProviderServer) -> AsyncIterator[Playground]:
    """The app over the fake provider, and a browser signed in with a `complete` key."""
    async with running_app(settings_for(fake)) as (app, admin):
        key = await app.state.runtime.authenticator.create(
            ApiKeyCreate(scope="complete", name="console-player")
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test") as web:
            await sign_in(web, key.key)
            token = csrf_of((await web.get("/console")).text)
            yield Playground(app, web, token, admin)


async def _post(play: Playground, action: str, **fields: str) -> httpx.Response:
    return await play.web.post(
        "/console/playground", data={"csrf": play.csrf, "action": action, **fields}
    )


async def test_the_form_has_one_typed_input_per_variable(playground: Playground) -> None:
    page = await playground.web.get("/console/playground", params={"pattern": "summarize"})
    assert page.status_code == 200
    html = page.text
    assert 'type="number" step="any" id="var-max_words" name="var.max_words" value="150"' in html
    assert 'id="var-format" name="var.format" value="bullets"' in html
    assert '<option value="">Policy decides</option>' in html
    assert '<option value="openai/gpt-4o-mini"' in html  # the models the API lists
    classify = (await playground.web.get("/console/playground?pattern=classify")).text
    assert 'type="checkbox" id="var-explain"' in classify  # a boolean default: a checkbox
    assert "labels <span" in classify and "(required)" in classify  # no default: required
    assert '<option value="list" selected>' in classify  # "List of allowed labels…"


async def test_render_shows_the_exact_prompt_escaped_the_model_choice_and_fingerprints(
    playground: Playground,
) -> None:
    rendered = await _post(
        playground,
        "render",
        pattern="summarize",
        **{"var.max_words": "40", "var.audience": HOSTILE, "var.format": "paragraph"},
        user_prompt=f"Summarize {HOSTILE} \u202eevil\u202c " + "x" * 5000,
    )
    assert rendered.status_code == 200
    html = rendered.text
    assert HOSTILE not in html
    assert "Write for this audience: &lt;script&gt;alert(1)&lt;/script&gt;." in html
    assert "Use at most 40 words." in html
    assert "Summarize &lt;script&gt;alert(1)&lt;/script&gt; \u202eevil\u202c " in html
    assert "<code>openai/gpt-4o-mini</code>" in html and "<code>config_default</code>" in html
    for fingerprint in ("Template SHA-256", "Variables SHA-256", "User prompt SHA-256"):
        assert f'<dt>{fingerprint}</dt><dd class="hash">sha256:' in html
    assert 'value="&lt;script&gt;alert(1)&lt;/script&gt;"' in html  # the form keeps its input


async def test_render_errors_show_their_type_and_message(playground: Playground) -> None:
    missing = await _post(playground, "render", pattern="classify", user_prompt="hi")
    assert "<code>missing_variables</code> (422)" in missing.text
    assert "needs these variables: labels" in missing.text

    unknown = await playground.web.get("/console/playground", params={"pattern": "no/such"})
    assert unknown.status_code == 404
    assert "pattern_not_found" in unknown.text
    for sneaky in ("../keys", "summarize?x=1", "summarize/test"):
        refused = await playground.web.get("/console/playground", params={"pattern": sneaky})
        assert refused.status_code == 404  # only a catalog name reaches the API's path

    bad_number = await _post(
        playground, "render", pattern="summarize", **{"var.max_words": "many"}, user_prompt="x"
    )
    assert "max_words: &#39;many&#39; is not a number" in bad_number.text
    assert "render-result" not in bad_number.text  # nothing was sent to the API


async def test_a_posted_run_shows_the_answer_usage_and_job_link(
    playground: Playground, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.ok(f"Answer {HOSTILE}"))
    ran = await _post(playground, "run", pattern="summarize", user_prompt="The text.")
    assert ran.status_code == 200
    html = ran.text
    assert "Answer &lt;script&gt;alert(1)&lt;/script&gt;" in html and HOSTILE not in html
    assert "11 in, 7 out" in html
    assert '<a href="/console/jobs/' in html
    assert fake.calls("openai")[0].body["model"] == "gpt-4o-mini"


async def test_structured_output_is_shown_as_indented_json(
    playground: Playground, fake: FakeProviderServer
) -> None:
    invoice = '{"vendor": "ACME <b>", "date": "2026-01-02", "total": 12.5, "currency": "EUR"}'
    fake.script("openai", Reply.ok(invoice))
    ran = await _post(playground, "run", pattern="extract_invoice", user_prompt="Invoice")
    assert "Structured output (valid)" in ran.text
    assert "  &#34;vendor&#34;: &#34;ACME &lt;b&gt;&#34;" in ran.text


async def test_compare_runs_two_models_and_shows_an_upstream_error_beside_an_answer(
    playground: Playground, fake: FakeProviderServer
) -> None:
    fake.script("anthropic", *[Reply.error(500)] * 3)
    compared = await _post(
        playground,
        "compare",
        pattern="summarize",
        user_prompt="The text.",
        model_a="openai/gpt-4o-mini",
        model_b="anthropic/claude-sonnet-4-6",
    )
    html = compared.text
    assert '<h2 id="runs-heading">Comparison</h2>' in html
    assert "echo: The text." in html  # variant A answered
    assert "<code>upstream_error</code> (502)" in html  # variant B failed, shown as such


async def test_a_database_template_renders_and_compares_the_versions_the_form_pins(
    playground: Playground, fake: FakeProviderServer
) -> None:
    for text in ("Hello {{ who }}.", "Hi {{ who }}!"):
        created = await playground.admin.post(
            "/v1/templates",
            json={"name": "greet", "role": "system", "template": text, "variables": ["who"]},
        )
        assert created.status_code == 201, created.text
    page = await playground.web.get("/console/playground", params={"template": "greet/system"})
    assert '<option value="2">v2' in page.text and '<option value="1">v1' in page.text
    assert 'data-kind-from="kind-who"' in page.text  # a template variable: kind chosen
    pinned = await _post(
        playground,
        "render",
        template="greet/system",
        version_a="1",
        **{"var.who": HOSTILE},
        user_prompt="x",
    )
    assert "Hello &lt;script&gt;alert(1)&lt;/script&gt;." in pinned.text
    assert '<option value="1" selected>' in pinned.text
    fake.reset()
    compared = await _post(
        playground,
        "compare",
        template="greet/system",
        version_a="1",
        version_b="2",
        **{"var.who": "Ada"},
        user_prompt="x",
    )
    assert compared.text.count('<a href="/console/jobs/') == 2
    systems = sorted(call.body["messages"][0]["content"] for call in fake.calls("openai"))
    assert systems == ["Hello Ada.", "Hi Ada!"]  # each variant ran its own version
    unlabelled = await _post(
        playground, "render", template="greet/system", label_a="nope", user_prompt="x"
    )
    assert "(404)" in unlabelled.text and "nope" in unlabelled.text


async def test_a_form_without_the_session_token_is_refused(playground: Playground) -> None:
    forged = await playground.web.post(
        "/console/playground",
        data={"csrf": "forged", "action": "run", "pattern": "summarize", "user_prompt": "x"},
    )
    assert forged.status_code == 403 and "Form expired" in forged.text


def _field(name: str, kind: str, value: str) -> VariableField:
    return VariableField(name, kind, None, False, value)  # type: ignore[arg-type]


def test_inputs_are_read_back_as_the_json_types_their_defaults_have() -> None:
    assert [kind_of(v) for v in (True, 3, 2.5, ["a"], {"a": 1}, "s", None)] == [
        "boolean", "number", "number", "list", "object", "text", "text",
    ]  # fmt: skip
    variables, problems = variables_of(
        [
            _field("flag", "boolean", ""),
            _field("n", "number", " 12 "),
            _field("ratio", "number", "0.5"),
            _field("items", "list", "a\n\n b \n"),
            _field("meta", "object", '{"k": [1]}'),
            _field("any", "json", "null"),
            _field("empty", "text", ""),
            _field("text", "text", " kept as typed "),
        ]
    )
    assert problems == []
    assert variables == {
        "flag": False,
        "n": 12,
        "ratio": 0.5,
        "items": ["a", "b"],
        "meta": {"k": [1]},
        "any": None,
        "text": " kept as typed ",
    }
    _, problems = variables_of(
        [_field("n", "number", "nan"), _field("o", "object", "[1]"), _field("j", "json", "{")]
    )
    assert [p.split(":")[0] for p in problems] == ["n", "o", "j"]


def test_posted_fields_keep_the_kind_of_their_default_and_the_chosen_kind_otherwise() -> None:
    fields = fields_of(
        {"n": None, "free": "List of things"},
        ["free"],
        {"n": 3},
        {"var.n": "4", "kind.n": "json", "var.free": "[1]", "kind.free": "json"},
    )
    assert [(f.name, f.kind, f.value, f.chosen) for f in fields] == [
        ("n", "number", "4", False),  # a default's type is not the form's to change
        ("free", "json", "[1]", True),
    ]
