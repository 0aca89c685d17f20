"""A loopback HTTP server that speaks the OpenAI, Anthropic and Ollama chat APIs.

The official SDKs (openai 3.x, anthropic 2.x) send requests through ``httpx2``, which
``respx`` cannot intercept, so tests run the real SDK code against this real server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

Provider = Literal["openai", "anthropic", "ollama"]
PROVIDERS: tuple[Provider, ...] = ("openai", "anthropic", "ollama")

_ANTHROPIC_ERROR_TYPES = {  # anything else (e.g. 500) is "api_error"
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class RecordedRequest:
    """One chat request as the fake received it, so tests can assert what the SDK sent."""

    provider: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """A scripted answer; build it with ``ok``, ``error``, ``delay`` or ``raw``."""

    kind: Literal["ok", "error", "delay", "raw"]
    status: int = 200
    text: str | None = None
    finish: str | None = None
    input_tokens: int = 11
    output_tokens: int = 7
    message: str = "scripted error"
    headers: dict[str, str] = field(default_factory=dict, hash=False)
    json_body: Any = field(default=None, hash=False)
    seconds: float = 0.0
    then: Reply | None = None

    @classmethod
    def ok(
        cls,
        text: str | None = None,
        finish: str | None = None,
        input_tokens: int = 11,
        output_tokens: int = 7,
    ) -> Reply:
        """Success; ``text`` defaults to ``"echo: "`` + the last user message."""
        return cls(
            "ok", text=text, finish=finish, input_tokens=input_tokens, output_tokens=output_tokens
        )

    @classmethod
    def error(
        cls, status: int, *, headers: dict[str, str] | None = None, message: str = "scripted error"
    ) -> Reply:
        """An HTTP error whose body has the provider's real error shape."""
        return cls("error", status=status, headers=dict(headers or {}), message=message)

    @classmethod
    def delay(cls, seconds: float, then: Reply | None = None) -> Reply:
        """Wait ``seconds`` before answering with ``then`` (default success): trips timeouts."""
        return cls("delay", seconds=seconds, then=then)

    @classmethod
    def raw(cls, status: int, json_body: Any, *, headers: dict[str, str] | None = None) -> Reply:
        """An arbitrary JSON body, for malformed or unusual provider answers."""
        return cls("raw", status=status, json_body=json_body, headers=dict(headers or {}))


def _content_text(content: Any) -> str:
    """Flatten string or content-block message content to plain text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


def _last_user_text(body: dict[str, Any]) -> str:
    """The text the default reply echoes, so tests can see the prompt reached the fake."""
    for msg in reversed(body.get("messages") or []):
        if isinstance(msg, dict) and msg.get("role") == "user":
            return _content_text(msg.get("content"))
    return ""


def _error_body(provider: Provider, status: int, message: str, n: int) -> dict[str, Any]:
    if provider == "openai":
        etype = (
            "server_error"
            if status >= 500
            else ("requests" if status == 429 else "invalid_request_error")
        )
        return {"error": {"message": message, "type": etype, "param": None, "code": None}}
    if provider == "anthropic":
        etype = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        return {
            "type": "error",
            "error": {"type": etype, "message": message},
            "request_id": f"req_fake_{n}",
        }
    return {"error": message}


def _success(provider: Provider, reply: Reply, body: dict[str, Any], n: int) -> Response:
    text = reply.text if reply.text is not None else "echo: " + _last_user_text(body)
    model = body.get("model", "fake-model")
    i, o = reply.input_tokens, reply.output_tokens
    if provider == "openai":
        return JSONResponse(
            {
                "id": f"chatcmpl-fake-{n}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": reply.finish or "stop",
                        "logprobs": None,
                        "message": {"role": "assistant", "content": text, "refusal": None},
                    }
                ],
                "usage": {"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o},
            },
            headers={"x-request-id": f"req_fake_{n}"},
        )
    if provider == "anthropic":
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        stop = reply.finish or "end_turn"
        forced = body.get("tool_choice") or {}
        if forced.get("type") == "tool":  # a forced tool call answers with the tool's input
            try:
                tool_input = json.loads(text)
            except ValueError:
                tool_input = {}
            content = [
                {
                    "type": "tool_use",
                    "id": f"toolu_fake_{n}",
                    "name": forced["name"],
                    "input": tool_input if isinstance(tool_input, dict) else {},
                }
            ]
            stop = reply.finish or "tool_use"
        return JSONResponse(
            {
                "id": f"msg_fake_{n}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": i, "output_tokens": o},
            },
            headers={"request-id": f"req_fake_{n}"},
        )
    payload = {
        "model": model,
        "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "message": {"role": "assistant", "content": text},
        "done": True,
        "done_reason": reply.finish or "stop",
        "total_duration": 1,
        "load_duration": 1,
        "prompt_eval_count": i,
        "prompt_eval_duration": 1,
        "eval_count": o,
        "eval_duration": 1,
    }
    if body.get("stream") is True:  # the SDK reads NDJSON lines until done=true
        return Response(json.dumps(payload) + "\n", media_type="application/x-ndjson")
    return JSONResponse(payload)


class FakeProviderServer:
    """Scriptable fake of all three providers; state is shared with the server thread."""

    def __init__(self) -> None:
        self.base_url = ""
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._queues: dict[str, deque[Reply]] = {p: deque() for p in PROVIDERS}
        self._counter = 0
        self._closing = asyncio.Event()  # binds to the server loop on first use
        self._loop: asyncio.AbstractEventLoop | None = None
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._handler("openai"), methods=["POST"]),
                Route("/v1/messages", self._handler("anthropic"), methods=["POST"]),
                Route("/api/chat", self._handler("ollama"), methods=["POST"]),
                Route("/api/tags", self._tags, methods=["GET"]),
            ]
        )

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every recorded chat request, oldest first."""
        with self._lock:
            return list(self._requests)

    def calls(self, provider: str) -> list[RecordedRequest]:
        """Recorded chat requests for one provider."""
        return [r for r in self.requests if r.provider == provider]

    def script(self, provider: str, *replies: Reply) -> None:
        """Queue replies for ``provider``'s route; once exhausted, replies are successes."""
        if provider not in self._queues:
            raise ValueError(f"unknown provider {provider!r}; expected one of {PROVIDERS}")
        with self._lock:
            self._queues[provider].extend(replies)

    def reset(self) -> None:
        """Forget recorded requests and pending scripts (call between tests)."""
        with self._lock:
            self._requests.clear()
            for q in self._queues.values():
                q.clear()

    async def _tags(self, request: Request) -> Response:
        """Ollama's model list, which health checks call; not recorded."""
        return JSONResponse({"models": []})

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake at shutdown: cancelled handlers would log tracebacks."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), seconds)

    async def _serve(self, server: uvicorn.Server, sock: socket.socket) -> None:
        """Run uvicorn in the server thread, binding the shutdown event to its loop."""
        self._loop = asyncio.get_running_loop()
        await server.serve(sockets=[sock])

    def _close(self) -> None:
        """Called from the test thread: wake pending delays so shutdown is quick."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._closing.set)

    def _handler(self, provider: Provider) -> Callable[[Request], Awaitable[Response]]:
        """Build the route endpoint that records a request and plays the next script."""

        async def handle(request: Request) -> Response:
            raw = await request.body()
            try:
                body = json.loads(raw) if raw else {}
            except json.JSONDecodeError:
                body = None
            with self._lock:
                self._counter += 1
                n = self._counter
                self._requests.append(
                    RecordedRequest(
                        provider,
                        request.url.path,
                        {k.lower(): v for k, v in request.headers.items()},
                        body if isinstance(body, dict) else {},
                    )
                )
                queue = self._queues[provider]
                reply = queue.popleft() if queue else Reply.ok()
            if not isinstance(body, dict):
                return JSONResponse(_error_body(provider, 400, "body is not a JSON object", n), 400)
            while reply.kind == "delay":
                await self._sleep(reply.seconds)
                reply = reply.then or Reply.ok()
            if reply.kind == "ok":
                return _success(provider, reply, body, n)
            rid = {
                "openai": {"x-request-id": f"req_fake_{n}"},
                "anthropic": {"request-id": f"req_fake_{n}"},
            }.get(provider, {})
            content = (
                reply.json_body
                if reply.kind == "raw"
                else _error_body(provider, reply.status, reply.message, n)
            )
            return JSONResponse(content, reply.status, headers={**rid, **reply.headers})

        return handle


@contextmanager
def running_fake_provider() -> Iterator[FakeProviderServer]:
    """Serve a ``FakeProviderServer`` on an ephemeral loopback port in a background thread."""
    fake = FakeProviderServer()
    # IPPROTO_TCP, not 0: only then does asyncio set TCP_NODELAY, without which every reply on
    # a kept-alive connection waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        fake.app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="off",
        loop="asyncio",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=lambda: asyncio.run(fake._serve(server, sock)),
        name="fake-provider-server",
        daemon=True,
    )
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("fake provider server failed to start")
            time.sleep(0.01)
        fake.base_url = f"http://127.0.0.1:{port}"
        yield fake
    finally:
        fake._close()
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
