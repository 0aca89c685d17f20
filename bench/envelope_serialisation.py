"""What answering with a CompletionEnvelope costs, per way of serialising it.

Each variant is a one-route FastAPI app called straight through ASGI (no sockets), returning the
same prebuilt envelope (a 1,500-character system prompt, a 500-character user prompt, a
400-character answer), so the differences are FastAPI's response handling and the JSON encoder:

- `model, stdlib json`: the route returns the model; FastAPI validates it against the
  `response_model`, dumps it to a dict and the response class runs `json.dumps` (as before).
- `model, orjson`: the same, with `GatewayJSONResponse` rendering the dict with orjson.
- `GatewayJSONResponse(model)`: the route returns the response; pydantic writes the bytes once.
- `model, FastAPI default class`: FastAPI's own fast path (validate, then `dump_json`), which it
  takes only without a custom response class, so it has no lone-surrogate fallback.

    .venv/bin/python -m bench.envelope_serialisation --n 20000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import orjson
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter
from starlette.types import Message

from app.api.responses import GatewayJSONResponse
from app.schemas import CompletionEnvelope

from ._common import CONTEXT, USER_PROMPT


class StdlibJSONResponse(JSONResponse):
    """GatewayJSONResponse as it was: starlette's `json.dumps`."""


def envelope() -> CompletionEnvelope:
    digest = "sha256:" + "ab" * 32
    return CompletionEnvelope.model_validate(
        {
            "job_id": "0192f3c5-7d1e-7a8b-9c0d-1e2f3a4b5c6d",
            "request_id": "5f0e8a1b2c3d4e5f60718293a4b5c6d7",
            "prompt": {
                "system": (CONTEXT + "\n") * 2,
                "messages": [{"role": "user", "content": USER_PROMPT}],
            },
            "params": {"max_tokens": 1024, "temperature": 0.2},
            "response": {
                "text": "Yes: under policy RF-2 a refund may go to another account. " * 7,
                "provider": "openai",
                "model": "gpt-4o-mini",
                "finish_reason": "stop",
                "usage": {"input_tokens": 411, "output_tokens": 97, "total_tokens": 508},
            },
            "model_choice": {
                "model": "openai/gpt-4o-mini",
                "provider": "openai",
                "name": "gpt-4o-mini",
                "source": "config_default",
                "reason": "the configured default model (order: explicit > hint > default)",
            },
            "provenance": {
                "pattern_name": "answer_from_context",
                "pattern_base_path": "patterns/answer_from_context.md",
                "pattern_content_hash": digest,
                "variables_hash": digest,
                "user_prompt_hash": digest,
                "provider": "openai",
                "model": "gpt-4o-mini",
            },
        }
    )


def _apps(value: CompletionEnvelope) -> dict[str, FastAPI]:
    stdlib = FastAPI(default_response_class=StdlibJSONResponse)
    orjson_dict = FastAPI(default_response_class=GatewayJSONResponse)
    direct = FastAPI(default_response_class=GatewayJSONResponse)
    fastapi_default = FastAPI()

    @stdlib.get("/e")
    async def e1() -> CompletionEnvelope:
        return value

    @orjson_dict.get("/e")
    async def e2() -> CompletionEnvelope:
        return value

    @direct.get("/e", response_model=CompletionEnvelope)
    async def e3() -> GatewayJSONResponse:
        return GatewayJSONResponse(value)

    @fastapi_default.get("/e")
    async def e4() -> CompletionEnvelope:
        return value

    return {
        "model, stdlib json (before)": stdlib,
        "model, orjson": orjson_dict,
        "GatewayJSONResponse(model)": direct,
        "model, FastAPI default class": fastapi_default,
    }


async def _call(app: FastAPI) -> bytes:
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/e",
        "raw_path": b"/e",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"bench")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    body = b""

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        nonlocal body
        if message["type"] == "http.response.body":
            body += message.get("body", b"")

    await app(scope, receive, send)
    return body


def _serialisers(value: CompletionEnvelope) -> dict[str, Any]:
    """The same four, without FastAPI around them: only the validation and the encoder."""
    adapter = TypeAdapter(CompletionEnvelope)  # what FastAPI builds for a response_model

    def as_fastapi(encode: Any) -> Any:
        checked = adapter.validate_python(value, from_attributes=True)
        return encode(adapter.dump_python(checked, mode="json", by_alias=True))

    return {
        "model, stdlib json (before)": lambda: as_fastapi(StdlibJSONResponse(None).render),
        "model, orjson": lambda: as_fastapi(orjson.dumps),
        "GatewayJSONResponse(model)": lambda: GatewayJSONResponse(None).render(value),
        "model, FastAPI default class": lambda: adapter.dump_json(
            adapter.validate_python(value, from_attributes=True), by_alias=True
        ),
    }


async def run(n: int) -> None:
    value = envelope()
    print(f"n={n} (5 rounds; µs per envelope, serialisation only)")
    print(f"{'variant':32} {'best':>8} {'median':>8}")
    for name, serialise in _serialisers(value).items():
        assert json.loads(serialise()) == value.model_dump(mode="json")
        rounds = []
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(n):
                serialise()
            rounds.append((time.perf_counter() - started) / n * 1e6)
        print(f"{name:32} {min(rounds):8.1f} {statistics.median(rounds):8.1f}")
    apps = _apps(value)
    for app in apps.values():  # start each app's middleware stack
        await _call(app)
    bodies = {name: json.loads(await _call(app)) for name, app in apps.items()}
    assert all(b == value.model_dump(mode="json") for b in bodies.values()), "bodies differ"
    print(f"n={n} (5 rounds; µs per request through ASGI)")
    print(f"{'variant':32} {'best':>8} {'median':>8}")
    for name, app in apps.items():
        rounds = []
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(n):
                await _call(app)
            rounds.append((time.perf_counter() - started) / n * 1e6)
        print(f"{name:32} {min(rounds):8.1f} {statistics.median(rounds):8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    asyncio.run(run(parser.parse_args().n))


if __name__ == "__main__":
    main()
