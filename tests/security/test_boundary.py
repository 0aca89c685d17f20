"""Hostile input at the HTTP boundary: every request gets a clear 4xx, never a 5xx.

Bodies are sent as raw bytes (`json.dumps` escapes a lone surrogate as `\\ud800`, as an attacker
would), so the server's own JSON parser sees exactly what a hostile client sends.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from app.middleware import body_limit
from tests.fakes.provider_server import FakeProviderServer
from tests.support import serve_app, settings_for

JSON = {"content-type": "application/json"}
# NUL (PostgreSQL text cannot hold it), and both ends of the surrogate range (unencodable alone).
BAD_TEXT = {"nul": "a\x00b", "high_surrogate": "a\ud800b", "low_surrogate": "\udfff"}
RENDER = {"pattern_key": "summarize", "variables": {"max_words": 10}, "user_prompt": "hello"}
TEMPLATE = {"name": "reply", "role": "writer", "template": "Hi {{ who }}", "variables": ["who"]}
SNIPPET = {"identifier": "nova", "name": "Nova", "text": "You are Nova."}

Put = Callable[[dict[str, Any], str], dict[str, Any]]


def _with(base: dict[str, Any], change: Callable[[dict[str, Any], str], None]) -> Put:
    def build(_: dict[str, Any], bad: str) -> dict[str, Any]:
        body = copy.deepcopy(base)
        change(body, bad)
        return body

    return build


def _set(*path: str | int) -> Callable[[dict[str, Any], str], None]:
    """Put the bad text at `path`, creating dicts on the way."""

    def change(body: dict[str, Any], bad: str) -> None:
        node: Any = body
        for step in path[:-1]:
            node = node.setdefault(step, {}) if isinstance(step, str) else node[step]
        node[path[-1]] = bad

    return change


def _key(*path: str) -> Callable[[dict[str, Any], str], None]:
    """Use the bad text as a dict key at `path`."""

    def change(body: dict[str, Any], bad: str) -> None:
        node: Any = body
        for step in path:
            node = node.setdefault(step, {})
        node[bad] = "x"

    return change


# (route, method, body with the bad text in one string field)
FIELDS: dict[str, tuple[str, str, Put]] = {
    "render.user_prompt": ("POST", "/v1/render", _with(RENDER, _set("user_prompt"))),
    "render.model": ("POST", "/v1/render", _with(RENDER, _set("model"))),
    "render.pattern_key": ("POST", "/v1/render", _with(RENDER, _set("pattern_key"))),
    "render.instructions": ("POST", "/v1/render", _with(RENDER, _set("instructions"))),
    "render.variable": ("POST", "/v1/render", _with(RENDER, _set("variables", "audience"))),
    "render.nested_variable": (
        "POST",
        "/v1/render",
        _with(
            {**RENDER, "variables": {"a": {"b": [{"c": "ok"}, {"d": "ok"}]}}},
            _set("variables", "a", "b", 1, "d"),
        ),
    ),
    "render.variable_key": ("POST", "/v1/render", _with(RENDER, _key("variables"))),
    "render.nested_variable_key": ("POST", "/v1/render", _with(RENDER, _key("variables", "a"))),
    "render.snippet_label": ("POST", "/v1/render", _with(RENDER, _key("snippets"))),
    "render.snippet_id": ("POST", "/v1/render", _with(RENDER, _set("snippets", "PERSONA"))),
    "render.stop": (
        "POST",
        "/v1/render",
        _with({**RENDER, "params": {"stop": ["END", "x"]}}, _set("params", "stop", 1)),
    ),
    "render.template_name": (
        "POST",
        "/v1/render",
        _with(
            {"template": {"name": "a", "role": "b"}, "user_prompt": "hi"},
            _set("template", "name"),
        ),
    ),
    "completions.user_prompt": ("POST", "/v1/completions", _with(RENDER, _set("user_prompt"))),
    "completions.variable": ("POST", "/v1/completions", _with(RENDER, _set("variables", "v"))),
    "template.name": ("POST", "/v1/templates", _with(TEMPLATE, _set("name"))),
    "template.text": ("POST", "/v1/templates", _with(TEMPLATE, _set("template"))),
    "template.variable": ("POST", "/v1/templates", _with(TEMPLATE, _set("variables", 0))),
    "template.blueprint_schema": (
        "POST",
        "/v1/templates",
        _with(TEMPLATE, _set("blueprint_schema", "properties", "title")),
    ),
    "template.blueprint_instructions": (
        "POST",
        "/v1/templates",
        _with(TEMPLATE, _set("blueprint_instructions")),
    ),
    "snippet.identifier": ("POST", "/v1/snippets", _with(SNIPPET, _set("identifier"))),
    "snippet.name": ("POST", "/v1/snippets", _with(SNIPPET, _set("name"))),
    "snippet.description": ("POST", "/v1/snippets", _with(SNIPPET, _set("description"))),
    "snippet.text": ("POST", "/v1/snippets", _with(SNIPPET, _set("text"))),
    "snippet.tag": ("POST", "/v1/snippets", _with({**SNIPPET, "tags": ["a"]}, _set("tags", 0))),
    "snippet.metadata_key": ("POST", "/v1/snippets", _with(SNIPPET, _key("metadata"))),
    "snippet.metadata_value": (
        "POST",
        "/v1/snippets",
        _with(SNIPPET, _set("metadata", "deep", "value")),
    ),
    "snippet.put_text": ("PUT", "/v1/snippets/nova", _with(SNIPPET, _set("text"))),
}


@pytest.fixture
async def http(fake: FakeProviderServer) -> AsyncIterator[httpx.AsyncClient]:
    async with serve_app(settings_for(fake)) as client:
        yield client


def _raw(body: Any) -> bytes:
    # ensure_ascii escapes lone surrogates as \\udXXX, which the server's parser turns back.
    return json.dumps(body).encode("ascii")


def assert_error(resp: httpx.Response, status: int, error_type: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    error: dict[str, Any] = resp.json()["error"]
    assert error["type"] == error_type
    assert error["message"]
    return error


@pytest.mark.parametrize("bad", BAD_TEXT.values(), ids=BAD_TEXT.keys())
@pytest.mark.parametrize("field", FIELDS, ids=FIELDS.keys())
async def test_unencodable_text_in_any_string_field_is_422(
    http: httpx.AsyncClient, field: str, bad: str
) -> None:
    method, path, build = FIELDS[field]
    resp = await http.request(method, path, content=_raw(build({}, bad)), headers=JSON)
    error = assert_error(resp, 422, "invalid_request")
    # The offending text is named by where it is, never echoed back.
    assert "\\u0000" not in resp.text and "\\ud" not in resp.text.lower()
    assert "U+0000" in error["message"] or "surrogate" in error["message"]


async def test_the_same_bodies_without_the_bad_text_are_accepted(http: httpx.AsyncClient) -> None:
    """The 422s above come from the text, not from a body that was wrong anyway."""
    resp = await http.post("/v1/render", content=_raw(RENDER), headers=JSON)
    assert resp.status_code == 200, resp.text
    nested = {**RENDER, "variables": {"max_words": 5, "a": {"b": [{"c": "ok"}, {"d": "é ✓"}]}}}
    assert (await http.post("/v1/render", content=_raw(nested), headers=JSON)).status_code == 200
    assert (await http.post("/v1/templates", json=TEMPLATE)).status_code == 201
    assert (await http.post("/v1/snippets", json=SNIPPET)).status_code == 201


@pytest.mark.parametrize(
    "model",
    ["openai/gpt 4o", "openai/gpt-4o\n", "ollama/llama3;rm -rf", "/leading-slash", "o" * 300],
)
async def test_model_outside_the_safe_alphabet_is_422(http: httpx.AsyncClient, model: str) -> None:
    resp = await http.post("/v1/render", json={**RENDER, "model": model})
    assert_error(resp, 422, "invalid_request")


@pytest.mark.parametrize(
    "model", ["ollama/llama3.2:latest", "ollama/hf.co/org/model:Q4_K_M", "openai/gpt-4o_mini"]
)
async def test_real_model_names_pass_the_boundary(http: httpx.AsyncClient, model: str) -> None:
    resp = await http.post("/v1/render", json={**RENDER, "model": model})
    assert resp.status_code == 200, resp.text
    assert resp.json()["model_choice"]["model"] == model


@pytest.mark.parametrize("version", [2**31, 2**63, 2**64, 0, -1])
async def test_template_versions_outside_a_32_bit_column_are_422(
    http: httpx.AsyncClient, version: int
) -> None:
    in_body = {"template": {"name": "a", "role": "b", "version": version}, "user_prompt": "x"}
    assert_error(await http.post("/v1/render", json=in_body), 422, "invalid_request")
    for resp in (
        await http.get(f"/v1/templates/a/b/versions/{version}"),
        await http.post(f"/v1/templates/a/b/versions/{version}/activate"),
    ):
        assert_error(resp, 422, "invalid_request")


async def test_the_largest_32_bit_version_reaches_the_store_and_is_not_found(
    fake: FakeProviderServer, database_url: str
) -> None:
    """On PostgreSQL the column is a 32-bit INTEGER: the bound must be exactly its maximum."""
    async with serve_app(
        settings_for(fake, database_url=database_url, database_auto_migrate=True)
    ) as http:
        resp = await http.get(f"/v1/templates/a/b/versions/{2**31 - 1}")
        assert_error(resp, 404, "template_not_found")
        ref = {"template": {"name": "a", "role": "b", "version": 2**31 - 1}, "user_prompt": "x"}
        assert_error(await http.post("/v1/render", json=ref), 404, "template_not_found")


async def test_text_with_nul_never_reaches_either_store(
    fake: FakeProviderServer, database_url: str
) -> None:
    async with serve_app(
        settings_for(fake, database_url=database_url, database_auto_migrate=True)
    ) as http:
        body = {**SNIPPET, "text": "before\x00after"}
        resp = await http.post("/v1/snippets", content=_raw(body), headers=JSON)
        assert_error(resp, 422, "invalid_request")
        assert (await http.get("/readyz")).status_code == 200
        assert_error(await http.get("/v1/snippets/nova"), 404, "snippet_not_found")


@pytest.mark.parametrize("seed", [2**31, -(2**31) - 1, 2**70])
async def test_seed_is_bounded(http: httpx.AsyncClient, seed: int) -> None:
    resp = await http.post("/v1/render", json={**RENDER, "params": {"seed": seed}})
    assert_error(resp, 422, "invalid_request")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/jobs/nope"),
        ("GET", "/v1/jobs/" + "A" * 32),  # upper case is not how ids are written
        ("GET", "/v1/jobs/" + "0" * 33),
        ("POST", "/v1/jobs/%00" + "0" * 31 + "/replay"),
        ("GET", "/v1/snippets/%00"),
        ("GET", "/v1/snippets/a%20b"),
        ("DELETE", "/v1/snippets/-leading-dash"),
        ("GET", "/v1/templates/na%00me/writer/versions/1"),
        ("GET", "/v1/templates/name/wr%20iter/versions/1"),
        ("GET", "/v1/templates?name=%00"),
        ("GET", "/v1/templates?role=a%20b"),
        ("GET", "/v1/snippets?tag=%00"),
        ("GET", "/v1/snippets?tag=" + "t" * 101),
    ],
)
async def test_malformed_path_and_query_parameters_are_422(
    http: httpx.AsyncClient, method: str, path: str
) -> None:
    assert_error(await http.request(method, path), 422, "invalid_request")


async def test_well_formed_identifiers_pass_the_boundary(http: httpx.AsyncClient) -> None:
    assert_error(await http.get("/v1/jobs/" + "0" * 32), 404, "job_not_found")
    assert_error(await http.get("/v1/snippets/no.such_snippet-1"), 404, "snippet_not_found")
    assert (await http.get("/v1/snippets?tag=Tone%20of%20voice")).status_code == 200
    assert (await http.get("/v1/templates?name=reply&role=writer")).status_code == 200


@pytest.mark.parametrize(
    ("name", "content", "content_type"),
    [
        ("huge_integer", b'{"pattern_key":"summarize","user_prompt":"x","variables":{"n":'
         + b"9" * 100_000 + b"}}", "application/json"),
        ("huge_seed", b'{"pattern_key":"summarize","user_prompt":"x","params":{"seed":'
         + b"9" * 100_000 + b"}}", "application/json"),
        ("deep_nesting_100k", b'{"variables":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
         "application/json"),
        ("deep_nesting_500", b'{"pattern_key":"summarize","user_prompt":"x","variables":{"a":'
         + b"[" * 500 + b"]" * 500 + b"}}", "application/json"),
        ("deep_objects_200", b'{"pattern_key":"summarize","user_prompt":"x","variables":'
         + b'{"a":' * 200 + b"1" + b"}" * 200 + b"}", "application/json"),
        ("invalid_utf8", b'{"pattern_key":"summarize","user_prompt":"\xff\xfe\xc3("}',
         "application/json"),
        ("nan", b'{"pattern_key":"summarize","user_prompt":"x","variables":{"n":NaN}}',
         "application/json"),
        ("infinity", b'{"pattern_key":"summarize","user_prompt":"x","params":'
         b'{"temperature":Infinity}}', "application/json"),
        ("truncated", b'{"pattern_key":"summ', "application/json"),
        ("not_an_object", b"[1, 2, 3]", "application/json"),
        ("empty_body", b"", "application/json"),
        ("wrong_content_type", json.dumps(RENDER).encode(), "text/plain"),
        ("form_encoded", b"pattern_key=summarize&user_prompt=x",
         "application/x-www-form-urlencoded"),
    ],
)  # fmt: skip
async def test_hostile_json_gets_a_clear_4xx(
    http: httpx.AsyncClient, name: str, content: bytes, content_type: str
) -> None:
    resp = await http.post("/v1/render", content=content, headers={"content-type": content_type})
    assert 400 <= resp.status_code < 500, (name, resp.status_code, resp.text)
    error = resp.json()["error"]
    assert error["type"] in {"invalid_request", "bad_request"} and error["message"]
    assert "error parsing the body" not in error["message"]  # it says what is wrong
    assert (await http.get("/healthz")).status_code == 200


# ---- the body limit ------------------------------------------------------------------------

LIMIT = 4096


@pytest.fixture
async def small_limit(fake: FakeProviderServer) -> AsyncIterator[httpx.AsyncClient]:
    async with serve_app(settings_for(fake, max_body_bytes=LIMIT)) as client:
        yield client


def _padded(size: int) -> bytes:
    """A valid render request of exactly `size` bytes."""
    empty = _raw({**RENDER, "user_prompt": ""})
    return _raw({**RENDER, "user_prompt": "x" * (size - len(empty))})


async def test_a_body_over_the_limit_with_content_length_is_413(
    small_limit: httpx.AsyncClient,
) -> None:
    assert (await small_limit.post("/v1/render", content=_padded(LIMIT), headers=JSON)).is_success
    resp = await small_limit.post("/v1/render", content=_padded(LIMIT + 1), headers=JSON)
    error = assert_error(resp, 413, "payload_too_large")
    assert str(LIMIT) in error["message"] and error["request_id"]
    assert resp.headers["x-request-id"] == error["request_id"]


async def test_a_declared_length_over_the_limit_is_refused_and_the_body_thrown_away(
    small_limit: httpx.AsyncClient,
) -> None:
    """Refused before the body is parsed; the rest is read and discarded (bounded) so that a
    client still uploading reads the 413 instead of a connection reset."""
    sent: list[int] = []

    async def body() -> AsyncIterator[bytes]:
        for _ in range(100):
            sent.append(1)
            yield b"x" * 1024

    resp = await small_limit.post(
        "/v1/render", content=body(), headers={**JSON, "content-length": str(100 * 1024)}
    )
    assert_error(resp, 413, "payload_too_large")
    assert resp.headers["connection"] == "close"
    assert len(sent) == 100  # drained, never parsed


async def test_a_chunked_body_is_cut_off_and_drained_no_further_than_the_bound(
    small_limit: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(body_limit, "DRAIN_BYTES", 64 * 1024)
    chunks_sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal chunks_sent
        for _ in range(10_000):  # 10 MB if it were all read
            chunks_sent += 1
            yield b" " * 1024

    resp = await small_limit.post("/v1/render", content=endless(), headers=JSON)
    assert "content-length" not in resp.request.headers  # really streamed, length unknown
    assert_error(resp, 413, "payload_too_large")
    assert chunks_sent <= LIMIT // 1024 + 64 + 2  # the limit, then at most the drain bound


async def test_a_chunked_body_under_the_limit_is_served(small_limit: httpx.AsyncClient) -> None:
    body = _padded(LIMIT - 100)

    async def in_pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 1000):
            yield body[start : start + 1000]

    resp = await small_limit.post("/v1/render", content=in_pieces(), headers=JSON)
    assert resp.status_code == 200, resp.text


async def test_requests_without_a_body_are_unaffected(small_limit: httpx.AsyncClient) -> None:
    assert (await small_limit.get("/healthz")).json() == {"status": "ok"}
    assert (await small_limit.get("/readyz")).status_code == 200
    assert (await small_limit.get("/v1/patterns")).status_code == 200
