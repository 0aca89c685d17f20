"""Work that grows with the input leaves the event loop once the input is large
(app/concurrency/offload.py), body parsing and validation included (app/api/body.py), and the
answer is the same either way."""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from app.api import body
from app.api.body import OffLoopBodyRoute
from app.concurrency import offload
from app.concurrency.offload import OFFLOAD_CHARS, note_body_size, off_loop
from app.main import API_MODULES
from app.schemas import ApiKeyCreate, RenderRequest
from app.schemas.base import InputLimits, input_limits, unsafe_input
from tests.fakes.provider_server import FakeProviderServer
from tests.support import running_app, settings_for

JSON = {"content-type": "application/json"}


def _thread() -> str:
    return threading.current_thread().name


async def test_small_work_runs_inline_and_large_work_in_a_thread() -> None:
    main = _thread()
    assert await off_loop(_thread) == main
    assert await off_loop(_thread, OFFLOAD_CHARS + 1) != main


def test_once_a_body_was_large_every_stage_of_its_request_leaves_the_loop() -> None:
    async def stages() -> tuple[str, str]:
        before = await off_loop(_thread)
        note_body_size(OFFLOAD_CHARS + 1)
        return before, await off_loop(_thread)

    main = _thread()
    before, after = contextvars.copy_context().run(asyncio.run, stages())
    assert before == main
    assert after != main
    assert not offload.is_large_request()  # the mark stayed with that request's context


@pytest.fixture
def validated_in(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread each body was validated in."""
    threads: list[str] = []
    original = body._validated

    def spy(field: Any, raw: bytes) -> Any:
        threads.append(_thread())
        return original(field, raw)

    monkeypatch.setattr(body, "_validated", spy)
    return threads


def _render(user_prompt: Any, **extra: Any) -> dict[str, Any]:
    return {"pattern_key": "summarize", "user_prompt": user_prompt, **extra}


async def test_a_large_body_is_validated_in_a_worker_thread_with_the_same_answer(
    client: httpx.AsyncClient, validated_in: list[str]
) -> None:
    small = await client.post("/v1/render", json=_render("Revenue rose."))
    large = await client.post("/v1/render", json=_render("Revenue rose. " * 5_000))
    assert (small.status_code, large.status_code) == (200, 200), large.text
    main = _thread()
    assert validated_in[0] == main
    assert validated_in[1] != main


@pytest.mark.parametrize(
    ("content", "status", "error_type"),
    [
        (b'{"pattern_key": "summarize", "user_prompt": ', 422, "invalid_request"),  # cut short
        (b'{"pattern_key": "summarize", "user_prompt": "\xff"}', 400, "bad_request"),
        (
            b'{"pattern_key": "summarize", "variables": {"n": ' + b"9" * 5_000 + b"}}",
            400,
            "bad_request",
        ),
        (b"[" * 100_000 + b"]" * 100_000, 400, "bad_request"),
        (json.dumps(_render(5)).encode(), 422, "invalid_request"),
    ],
    ids=["not-json", "not-utf8", "long-number", "deep", "wrong-type"],
)
async def test_a_bad_body_gets_the_same_error_small_or_large(
    client: httpx.AsyncClient, content: bytes, status: int, error_type: str
) -> None:
    padding = b" " * (OFFLOAD_CHARS + 1)  # JSON allows whitespace around the value
    answers = [
        await client.post("/v1/render", content=content, headers=JSON),
        await client.post("/v1/render", content=padding + content, headers=JSON),
    ]
    for resp in answers:
        assert resp.status_code == status, resp.text
        assert resp.json()["error"]["type"] == error_type
    small, large = (resp.json()["error"] for resp in answers)
    if error_type == "bad_request":
        assert small["message"] == large["message"]
    else:
        assert [e["type"] for e in small["errors"]] == [e["type"] for e in large["errors"]]


def test_variables_are_bounded_by_count_and_size_before_any_work() -> None:
    limits = InputLimits(max_variables=3, max_variables_bytes=1_000)
    with input_limits(limits):
        RenderRequest.model_validate(_render("x", variables={"a": 1, "b": 2, "c": 3}))
        with pytest.raises(ValueError, match="GENAI_REQUEST__MAX_VARIABLES"):
            RenderRequest.model_validate(_render("x", variables={k: 1 for k in "abcd"}))
        with pytest.raises(ValueError, match="GENAI_REQUEST__MAX_VARIABLES_BYTES"):
            RenderRequest.model_validate(_render("x", variables={"a": "é" * 600}))
        with (
            pytest.raises(ValueError, match="GENAI_REQUEST__MAX_VALUES"),
            input_limits(InputLimits(max_values=1_000)),
        ):
            RenderRequest.model_validate(_render("x", variables={"a": [0] * 1_000}))
    # Outside a request, the defaults apply.
    RenderRequest.model_validate(_render("x", variables={f"v{i}": 1 for i in range(256)}))


def test_every_route_with_a_body_reads_it_off_the_loop() -> None:
    """A route class per router is easy to forget: every body route must be an OffLoopBodyRoute,
    and its body a model (what stands in for an invalid body must fail its validation)."""
    routes = [route for module in API_MODULES for route in module.router.routes]
    with_body = [r for r in routes if isinstance(r, APIRoute) and r.body_field is not None]
    assert with_body
    for route in with_body:
        assert isinstance(route, OffLoopBodyRoute), route.path
        model = route.body_field.field_info.annotation if route.body_field else None
        assert isinstance(model, type) and issubclass(model, BaseModel), route.path


async def test_a_caller_without_the_scope_gets_403_before_its_large_body_is_judged(
    fake: FakeProviderServer,
) -> None:
    async with running_app(settings_for(fake)) as (app, http):
        created = await app.state.runtime.authenticator.create(
            ApiKeyCreate(scope="complete", name="c")
        )
        invalid = {"name": "t", "role": "r", "template": 5, "padding": "x" * (OFFLOAD_CHARS + 1)}
        headers = {"Authorization": f"Bearer {created.key}"}
        resp = await http.post("/v1/templates", json=invalid, headers=headers)
        assert resp.status_code == 403, resp.text
        resp = await http.post("/v1/templates", json=invalid)  # the admin: the body's errors
        assert resp.status_code == 422, resp.text
        assert {tuple(e["loc"]) for e in resp.json()["error"]["errors"]} >= {
            ("body", "template"),
            ("body", "padding"),
        }


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=',"\\[]{}: a'),
    lambda children: (
        st.lists(children, max_size=6)
        | st.dictionaries(st.text(alphabet=',"\\a', max_size=3), children, max_size=6)
    ),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, limit=st.integers(min_value=1, max_value=30))
def test_the_value_count_before_parsing_never_refuses_what_the_walk_accepts(
    value: Any, limit: int
) -> None:
    """Counting commas outside strings is a lower bound of the values, commas in strings and
    keys (escaped quotes too) are not counted."""
    raw = json.dumps(value, separators=(",", ":")).encode()
    with input_limits(InputLimits(max_values=limit)):
        if body._more_values_than(raw, limit):
            assert unsafe_input({"v": value}) is not None


async def test_a_body_of_too_many_values_is_refused_before_it_is_parsed(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(raw: bytes) -> Any:
        raise AssertionError("parsed")

    monkeypatch.setattr(body, "_parsed", never)
    many = json.dumps(_render("x", variables={"rows": list(range(150_000))})).encode()
    resp = await client.post("/v1/render", content=many, headers=JSON)
    assert resp.status_code == 422, resp.text
    assert "GENAI_REQUEST__MAX_VALUES" in resp.json()["error"]["message"]
