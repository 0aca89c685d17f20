"""A loopback HTTP server that speaks the OpenAI, Anthropic and Ollama chat APIs.

The official SDKs (openai 3.x, anthropic 2.x) send requests through ``httpx2``, which
``respx`` cannot intercept, so tests run the real SDK code against this real server.

It streams when the request asks to (OpenAI SSE ``data:`` chunks ending ``data: [DONE]``, with a
usage chunk when ``stream_options.include_usage`` is set; Anthropic's named SSE events; Ollama's
NDJSON), and plays faults: a stream cut without its finish marker, a TCP reset, slow chunks,
an error event inside a stream, besides HTTP errors and delays. It also counts tokens as
Anthropic's ``/v1/messages/count_tokens`` does (the count is the scripted ``input_tokens``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, get_args

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse as StarletteJSONResponse
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Scope
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tests.fakes.threaded_server import serving_in_thread

Provider = Literal["openai", "anthropic", "ollama"]
PROVIDERS: tuple[Provider, ...] = get_args(Provider)

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
class StreamCounts:
    """Streamed answers the fake has begun, ended itself, and seen the client walk away from."""

    opened: int = 0
    finished: int = 0  # the fake ended the body (whole, cut, error event or reset)
    abandoned: int = 0  # the client closed the connection before the body ended

    @property
    def open(self) -> int:
        return self.opened - self.finished - self.abandoned


@dataclass(frozen=True)
class FakeCall:
    """A tool call the fake answers with, written in each provider's own shape: OpenAI's
    `tool_calls` (arguments as JSON text, streamed in fragments), Anthropic's `tool_use` blocks
    (streamed as `input_json_delta`), Ollama's `message.tool_calls` (arguments as an object)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Reply:
    """A scripted answer; build it with ``ok``, ``slow``, ``error``, ``delay``, ``raw``, ``cut``,
    ``reset`` or ``stream_error``.

    Token counts are what the provider puts on the wire: Anthropic's ``input_tokens`` excludes
    ``cached_input_tokens`` (its ``cache_read_input_tokens``) and ``cache_write_tokens`` (its
    ``cache_creation_input_tokens``, split by lifetime in ``cache_creation`` when
    ``cache_write_1h_tokens`` is given); OpenAI's ``prompt_tokens`` includes the cached ones and
    the cache writes (its ``prompt_tokens_details.cache_write_tokens``).
    A streamed text goes out in ``chunks`` (default: one per word, spaces kept).
    """

    kind: Literal["ok", "error", "delay", "raw", "cut", "reset", "stream_error"]
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
    chunks: tuple[str, ...] | None = None
    chunk_delay: float = 0.0
    after: int = 0  # cut, reset, stream_error: how many text chunks go out first
    cached_input_tokens: int | None = None
    cache_write_tokens: int | None = None
    cache_write_1h_tokens: int | None = None
    reasoning_tokens: int | None = None
    send_usage: bool = True
    tool_calls: tuple[FakeCall, ...] = ()
    thinking: str | None = None  # Anthropic: a thinking block (with a signature) before the rest

    @classmethod
    def ok(
        cls,
        text: str | None = None,
        finish: str | None = None,
        input_tokens: int = 11,
        output_tokens: int = 7,
        *,
        chunks: tuple[str, ...] | None = None,
        chunk_delay: float = 0.0,
        cached_input_tokens: int | None = None,
        cache_write_tokens: int | None = None,
        cache_write_1h_tokens: int | None = None,
        reasoning_tokens: int | None = None,
        send_usage: bool = True,
        tool_calls: tuple[FakeCall, ...] = (),
        thinking: str | None = None,
    ) -> Reply:
        """Success; ``text`` defaults to ``"echo: "`` + the last user message (or to the joined
        ``chunks``; to "" beside ``tool_calls``). ``chunk_delay`` seconds pass before each
        streamed chunk. The usage details (cached, cache writes, reasoning) appear in the
        provider's own fields only when given; ``send_usage=False`` is an OpenAI-compatible
        server that reports no usage at all. ``tool_calls`` end the answer with those calls
        (finish reason tool_calls / tool_use); ``thinking`` adds an Anthropic thinking block."""
        if text is None and chunks is None and tool_calls:
            text = ""
        return cls(
            "ok",
            tool_calls=tool_calls,
            thinking=thinking,
            text="".join(chunks) if text is None and chunks is not None else text,
            finish=finish,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            chunks=chunks,
            chunk_delay=chunk_delay,
            cached_input_tokens=cached_input_tokens,
            cache_write_tokens=cache_write_tokens,
            cache_write_1h_tokens=cache_write_1h_tokens,
            reasoning_tokens=reasoning_tokens,
            send_usage=send_usage,
        )

    @classmethod
    def slow(
        cls, chunk_delay: float, text: str | None = None, *, chunks: tuple[str, ...] | None = None
    ) -> Reply:
        """A success streamed with ``chunk_delay`` seconds before each chunk (the headers go at
        once): trips a stream's first-token or idle timeout. Unstreamed, an ordinary success."""
        return cls.ok(text, chunks=chunks, chunk_delay=chunk_delay)

    @classmethod
    def cut(
        cls,
        after: int,
        text: str | None = None,
        *,
        chunks: tuple[str, ...] | None = None,
        chunk_delay: float = 0.0,
    ) -> Reply:
        """A stream that sends ``after`` text chunks, then ends the body cleanly without the
        finish marker (no finish_reason/usage/[DONE], message_delta/message_stop, done=true).
        Unstreamed: the JSON body cut in half, with a Content-Length that matches."""
        joined = "".join(chunks) if text is None and chunks is not None else text
        return cls("cut", text=joined, chunks=chunks, after=after, chunk_delay=chunk_delay)

    @classmethod
    def reset(
        cls,
        after: int = 0,
        text: str | None = None,
        *,
        chunks: tuple[str, ...] | None = None,
        chunk_delay: float = 0.0,
    ) -> Reply:
        """Abort the TCP connection (RST) after ``after`` streamed text chunks; with 0, or for an
        unstreamed request, before a byte of the answer (not even the status line)."""
        joined = "".join(chunks) if text is None and chunks is not None else text
        return cls("reset", text=joined, chunks=chunks, after=after, chunk_delay=chunk_delay)

    @classmethod
    def stream_error(
        cls,
        after: int = 0,
        status: int = 529,
        *,
        message: str = "scripted stream error",
        chunks: tuple[str, ...] | None = None,
        chunk_delay: float = 0.0,
    ) -> Reply:
        """After ``after`` text chunks, the provider's error inside a 200 stream, then the end:
        Anthropic ``event: error`` (its ``error.type`` for ``status``: 529 overloaded_error,
        500 api_error, 429 rate_limit_error…), OpenAI ``data: {"error": …}``, Ollama
        ``{"error": …}``. Unstreamed: ``Reply.error(status)``."""
        return cls(
            "stream_error",
            status=status,
            after=after,
            message=message,
            text="".join(chunks) if chunks is not None else None,
            chunks=chunks,
            chunk_delay=chunk_delay,
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


class JSONResponse(StarletteJSONResponse):
    """JSON as the providers' servers write it: non-ASCII as `\\u` escapes, so an answer may
    hold what only an escape can carry (a lone surrogate) as the SDKs then read it."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode("ascii")


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


def _reply_text(reply: Reply, body: dict[str, Any]) -> str:
    return reply.text if reply.text is not None else "echo: " + _last_user_text(body)


def _pieces(reply: Reply, text: str) -> list[str]:
    """The streamed chunks: as scripted, else one per word with its trailing spaces."""
    if reply.chunks is not None:
        return list(reply.chunks)
    return re.findall(r"\S+\s*|\s+", text)


def _forced_tool(body: dict[str, Any]) -> str | None:
    """The tool an Anthropic request forces (structured output), whose input is the answer."""
    forced = body.get("tool_choice") or {}
    return str(forced["name"]) if forced.get("type") == "tool" and "name" in forced else None


def _openai_usage(reply: Reply) -> dict[str, Any]:
    i, o = reply.input_tokens, reply.output_tokens
    usage: dict[str, Any] = {"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o}
    if reply.cached_input_tokens is not None or reply.cache_write_tokens is not None:
        usage["prompt_tokens_details"] = {
            "cached_tokens": reply.cached_input_tokens or 0,
            "audio_tokens": 0,
        }
        if reply.cache_write_tokens is not None:
            usage["prompt_tokens_details"]["cache_write_tokens"] = reply.cache_write_tokens
    if reply.reasoning_tokens is not None:
        usage["completion_tokens_details"] = {
            "reasoning_tokens": reply.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        }
    return usage


def _anthropic_usage(reply: Reply, output_tokens: int, *, split: bool = True) -> dict[str, Any]:
    """A message's usage; `split=False` is message_delta's (cumulative counts, no `cache_creation`
    object, as the API sends it)."""
    usage: dict[str, Any] = {"input_tokens": reply.input_tokens, "output_tokens": output_tokens}
    if reply.cache_write_tokens is not None:
        usage["cache_creation_input_tokens"] = reply.cache_write_tokens
        if split and reply.cache_write_1h_tokens is not None:
            usage["cache_creation"] = {
                "ephemeral_5m_input_tokens": reply.cache_write_tokens - reply.cache_write_1h_tokens,
                "ephemeral_1h_input_tokens": reply.cache_write_1h_tokens,
            }
    if reply.cached_input_tokens is not None:
        usage["cache_read_input_tokens"] = reply.cached_input_tokens
    return usage


def _ollama_chunk(model: str, content: str) -> dict[str, Any]:
    return {
        "model": model,
        "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "message": {"role": "assistant", "content": content},
        "done": False,
    }


def _ollama_done(model: str, content: str, reply: Reply) -> dict[str, Any]:
    return {
        **_ollama_chunk(model, content),
        "done": True,
        "done_reason": reply.finish or "stop",
        "total_duration": 1,
        "load_duration": 1,
        "prompt_eval_count": reply.input_tokens,
        "prompt_eval_duration": 1,
        "eval_count": reply.output_tokens,
        "eval_duration": 1,
    }


def _request_id_header(provider: Provider, n: int) -> dict[str, str]:
    return {
        "openai": {"x-request-id": f"req_fake_{n}"},
        "anthropic": {"request-id": f"req_fake_{n}"},
    }.get(provider, {})


def _success(provider: Provider, reply: Reply, body: dict[str, Any], n: int) -> Response:
    text = _reply_text(reply, body)
    model = body.get("model", "fake-model")
    if provider == "openai":
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
        if reply.tool_calls:
            message["content"] = text or None
            message["tool_calls"] = [
                {
                    "id": _call_id(provider, n, i),
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for i, call in enumerate(reply.tool_calls)
            ]
        completion: dict[str, Any] = {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": reply.finish or ("tool_calls" if reply.tool_calls else "stop"),
                    "logprobs": None,
                    "message": message,
                }
            ],
        }
        if reply.send_usage:
            completion["usage"] = _openai_usage(reply)
        return JSONResponse(completion, headers=_request_id_header(provider, n))
    if provider == "anthropic":
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        stop = reply.finish or "end_turn"
        if reply.tool_calls or reply.thinking is not None:
            content = _anthropic_blocks(reply, text, n)
            stop = reply.finish or ("tool_use" if reply.tool_calls else "end_turn")
        tool = _forced_tool(body)
        if tool is not None:  # a forced tool call answers with the tool's input
            try:
                tool_input = json.loads(text)
            except ValueError:
                tool_input = {}
            content = [
                {
                    "type": "tool_use",
                    "id": f"toolu_fake_{n}",
                    "name": tool,
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
                "usage": _anthropic_usage(reply, reply.output_tokens),
            },
            headers=_request_id_header(provider, n),
        )
    done = _ollama_done(model, text, reply)
    if reply.tool_calls:
        done["message"]["tool_calls"] = _ollama_calls(reply)
    return JSONResponse(done)


def _call_id(provider: str, n: int, index: int) -> str:
    return f"{'toolu' if provider == 'anthropic' else 'call'}_fake_{n}_{index}"


SIGNATURE = "c2lnbmVkLWJ5LXRoZS1mYWtl"  # what the fake signs its thinking blocks with


def _anthropic_blocks(reply: Reply, text: str, n: int) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.thinking is not None:
        blocks.append({"type": "thinking", "thinking": reply.thinking, "signature": SIGNATURE})
    if text:
        blocks.append({"type": "text", "text": text})
    blocks += [
        {
            "type": "tool_use",
            "id": _call_id("anthropic", n, i),
            "name": c.name,
            "input": c.arguments,
        }
        for i, c in enumerate(reply.tool_calls)
    ]
    return blocks


def _ollama_calls(reply: Reply) -> list[dict[str, Any]]:
    return [{"function": {"name": c.name, "arguments": c.arguments}} for c in reply.tool_calls]


def _fragments(text: str) -> list[str]:
    """JSON text cut in three, as providers stream tool arguments."""
    third = max(1, len(text) // 3)
    return [text[:third], text[third : 2 * third], text[2 * third :]]


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


@dataclass
class _StreamPlan:
    """A streamed answer as frames: what precedes the text, one frame per text chunk, what
    finishes it (the finish marker and usage), and the provider's in-stream error frame."""

    media_type: str
    head: list[bytes]
    pieces: list[bytes]
    tail: list[bytes]
    error: bytes


def _stream_plan(provider: Provider, reply: Reply, body: dict[str, Any], n: int) -> _StreamPlan:
    text = _reply_text(reply, body)
    pieces = _pieces(reply, text)
    model = body.get("model", "fake-model")
    if provider == "openai":
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        base = {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": "fp_fake",
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            extra = {"usage": None} if with_usage else {}
            return _sse({**base, "choices": [choice], **extra})

        calls: list[bytes] = []
        for i, call in enumerate(reply.tool_calls):
            head = {"index": i, "id": _call_id(provider, n, i), "type": "function"}
            calls.append(chunk({"tool_calls": [{**head, "function": {"name": call.name}}]}))
            calls += [
                chunk({"tool_calls": [{"index": i, "function": {"arguments": fragment}}]})
                for fragment in _fragments(json.dumps(call.arguments))
            ]
        finish = reply.finish or ("tool_calls" if reply.tool_calls else "stop")
        tail = [*calls, chunk({}, finish)]
        if with_usage and reply.send_usage:
            tail.append(_sse({**base, "choices": [], "usage": _openai_usage(reply)}))
        tail.append(b"data: [DONE]\n\n")
        error = {"message": reply.message, "type": "server_error", "param": None, "code": None}
        return _StreamPlan(
            "text/event-stream",
            head=[chunk({"role": "assistant", "content": "", "refusal": None})],
            pieces=[chunk({"content": piece}) for piece in pieces],
            tail=tail,
            error=_sse({"error": error}),
        )
    if provider == "anthropic":
        tool = _forced_tool(body)
        block: dict[str, Any] = {"type": "text", "text": ""}
        if tool is not None:
            block = {"type": "tool_use", "id": f"toolu_fake_{n}", "name": tool, "input": {}}

        def delta(piece: str) -> bytes:
            change = (
                {"type": "input_json_delta", "partial_json": piece}
                if tool is not None
                else {"type": "text_delta", "text": piece}
            )
            return _sse(
                {"type": "content_block_delta", "index": 0, "delta": change}, "content_block_delta"
            )

        start = {
            "id": f"msg_fake_{n}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _anthropic_usage(reply, 1),
        }
        stop = reply.finish or ("tool_use" if tool is not None or reply.tool_calls else "end_turn")
        error_type = _ANTHROPIC_ERROR_TYPES.get(reply.status, "api_error")
        # Optional blocks: a thinking block before the text (index 0, so the text moves to 1),
        # tool_use blocks after it.
        first = 1 if reply.thinking is not None else 0
        before: list[bytes] = []
        if reply.thinking is not None:
            before = _anthropic_thinking_events(reply.thinking)
        after = _anthropic_tool_events(reply, n, first + 1)

        def at(index: int, frame: bytes) -> bytes:
            return frame.replace(b'"index": 0', f'"index": {index}'.encode(), 1)

        return _StreamPlan(
            "text/event-stream",
            head=[
                _sse({"type": "message_start", "message": start}, "message_start"),
                *before,
                at(
                    first,
                    _sse(
                        {"type": "content_block_start", "index": 0, "content_block": block},
                        "content_block_start",
                    ),
                ),
                _sse({"type": "ping"}, "ping"),
            ],
            pieces=[at(first, delta(piece)) for piece in pieces],
            tail=[
                at(first, _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")),
                *after,
                _sse(
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": stop, "stop_sequence": None},
                        "usage": _anthropic_usage(reply, reply.output_tokens, split=False),
                    },
                    "message_delta",
                ),
                _sse({"type": "message_stop"}, "message_stop"),
            ],
            error=_sse(
                {"type": "error", "error": {"type": error_type, "message": reply.message}},
                "error",
            ),
        )

    def line(data: dict[str, Any]) -> bytes:
        return json.dumps(data).encode() + b"\n"

    whole_calls: list[bytes] = []
    if reply.tool_calls:  # Ollama sends each call whole, in a chunk of its own
        with_calls = _ollama_chunk(model, "")
        with_calls["message"]["tool_calls"] = _ollama_calls(reply)
        whole_calls.append(line(with_calls))
    return _StreamPlan(
        "application/x-ndjson",
        head=[],
        pieces=[line(_ollama_chunk(model, piece)) for piece in pieces],
        tail=[*whole_calls, line(_ollama_done(model, "", reply))],
        error=line({"error": reply.message}),
    )


def _anthropic_thinking_events(thinking: str) -> list[bytes]:
    block = {"type": "thinking", "thinking": ""}
    return [
        _sse(
            {"type": "content_block_start", "index": 0, "content_block": block},
            "content_block_start",
        ),
        _sse(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": thinking},
            },
            "content_block_delta",
        ),
        _sse(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": SIGNATURE},
            },
            "content_block_delta",
        ),
        _sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
    ]


def _anthropic_tool_events(reply: Reply, n: int, first_index: int) -> list[bytes]:
    frames: list[bytes] = []
    for offset, call in enumerate(reply.tool_calls):
        index = first_index + offset
        block = {
            "type": "tool_use",
            "id": _call_id("anthropic", n, offset),
            "name": call.name,
            "input": {},
        }
        frames.append(
            _sse(
                {"type": "content_block_start", "index": index, "content_block": block},
                "content_block_start",
            )
        )
        for fragment in _fragments(json.dumps(call.arguments)):
            change = {"type": "input_json_delta", "partial_json": fragment}
            frames.append(
                _sse(
                    {"type": "content_block_delta", "index": index, "delta": change},
                    "content_block_delta",
                )
            )
        frames.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    return frames


def _tracking_protocol(
    transports: dict[tuple[str, int], asyncio.Transport], on_connection: Callable[[], None]
) -> type[HttpToolsProtocol]:
    """uvicorn's HTTP protocol, keeping each connection's transport by the client's address,
    so a handler can abort its own connection (ASGI gives an app no way to reset one)."""

    class TrackingProtocol(HttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            on_connection()
            if self.client is not None:
                transports[self.client] = transport

        def connection_lost(self, exc: Exception | None) -> None:
            if self.client is not None:
                transports.pop(self.client, None)
            super().connection_lost(exc)

    return TrackingProtocol


class FakeProviderServer:
    """Scriptable fake of all three providers; state is shared with the server thread."""

    def __init__(self) -> None:
        self.base_url = ""
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._queues: dict[str, deque[Reply]] = {p: deque() for p in PROVIDERS}
        self._counter = 0
        self._streams = StreamCounts()
        self._connections = 0
        self._transports: dict[tuple[str, int], asyncio.Transport] = {}
        self.protocol = _tracking_protocol(self._transports, self._count_connection)
        self._closing = asyncio.Event()  # binds to the server loop on first use
        self._loop: asyncio.AbstractEventLoop | None = None
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._handler("openai"), methods=["POST"]),
                Route("/v1/messages", self._handler("anthropic"), methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
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
        """Forget recorded requests, pending scripts and stream counts (call between tests)."""
        with self._lock:
            self._requests.clear()
            for q in self._queues.values():
                q.clear()
            self._streams = StreamCounts()
            self._connections = 0

    @property
    def connections(self) -> int:
        """TCP connections accepted since the last reset (a client that reuses one opens one)."""
        with self._lock:
            return self._connections

    def _count_connection(self) -> None:
        with self._lock:
            self._connections += 1

    @property
    def streams(self) -> StreamCounts:
        """How many streamed answers were opened, ended by the fake, abandoned by the client."""
        with self._lock:
            return self._streams

    async def settled_streams(self, seconds: float = 5.0) -> StreamCounts:
        """The stream counts once no stream is open any more: the fake notices a client that
        went away in its own thread, a moment after the client closed its end."""
        for _ in range(int(seconds / 0.01)):
            if (counts := self.streams).open <= 0:
                return counts
            await asyncio.sleep(0.01)
        raise AssertionError(f"streams still open after {seconds} s: {self.streams}")

    def _count_stream(self, **change: int) -> None:
        with self._lock:
            counts = self._streams
            self._streams = StreamCounts(
                opened=counts.opened + change.get("opened", 0),
                finished=counts.finished + change.get("finished", 0),
                abandoned=counts.abandoned + change.get("abandoned", 0),
            )

    async def _count_tokens(self, request: Request) -> Response:
        """Anthropic's token counting, recorded like a chat request (provider "anthropic", path
        /v1/messages/count_tokens). It plays the next scripted Anthropic reply: an error reply
        answers as that error, any other `{"input_tokens": reply.input_tokens}` (11 unscripted)."""
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
                    "anthropic",
                    request.url.path,
                    {k.lower(): v for k, v in request.headers.items()},
                    body if isinstance(body, dict) else {},
                )
            )
            queue = self._queues["anthropic"]
            reply = queue.popleft() if queue else Reply.ok()
        rid = _request_id_header("anthropic", n)
        if not isinstance(body, dict):
            error = _error_body("anthropic", 400, "body is not a JSON object", n)
            return JSONResponse(error, 400, headers=rid)
        if reply.kind == "error":
            error = _error_body("anthropic", reply.status, reply.message, n)
            return JSONResponse(error, reply.status, headers={**rid, **reply.headers})
        return JSONResponse({"input_tokens": reply.input_tokens}, headers=rid)

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

    def _abort(self, scope: Scope) -> None:
        """Reset this request's TCP connection: SO_LINGER 0 makes the close an RST, not a FIN."""
        client = scope.get("client")
        transport = self._transports.get(tuple(client)) if client else None
        if transport is None:
            raise RuntimeError("the fake cannot find the connection to reset")
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()

    def _stream(
        self, provider: Provider, reply: Reply, body: dict[str, Any], n: int, scope: Scope
    ) -> Response:
        plan = _stream_plan(provider, reply, body, n)
        stops_early = reply.kind in ("cut", "reset", "stream_error")

        async def frames() -> AsyncIterator[bytes]:
            self._count_stream(opened=1)
            ended = False
            try:
                for frame in plan.head:
                    yield frame
                for index, piece in enumerate(plan.pieces):
                    if stops_early and index == reply.after:
                        break
                    if reply.chunk_delay:
                        await self._sleep(reply.chunk_delay)
                    yield piece
                if reply.kind == "ok":
                    for frame in plan.tail:
                        yield frame
                elif reply.kind == "stream_error":
                    yield plan.error
                elif reply.kind == "reset":
                    ended = True  # by the fake, though the client will never see an end
                    self._abort(scope)
                    # Starlette cancels this body once uvicorn sees the connection gone.
                    await self._closing.wait()
                ended = True
            finally:
                self._count_stream(**({"finished": 1} if ended else {"abandoned": 1}))

        return StreamingResponse(
            frames(), media_type=plan.media_type, headers=_request_id_header(provider, n)
        )

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
            if reply.kind == "delay":
                while reply.kind == "delay":
                    await self._sleep(reply.seconds)
                    reply = reply.then or Reply.ok()
                if await request.is_disconnected():  # the client gave up waiting: answer no one
                    return Response()
            streamed = body.get("stream") is True
            if reply.kind == "reset" and (reply.after == 0 or not streamed):
                self._abort(request.scope)
                await request.receive()  # returns once uvicorn has seen the connection go
                return Response()  # never sent: the connection is gone
            if streamed and reply.kind in ("ok", "cut", "reset", "stream_error"):
                return self._stream(provider, reply, body, n, request.scope)
            if reply.kind == "ok":
                return _success(provider, reply, body, n)
            if reply.kind == "cut":
                whole = _success(provider, reply, body, n)
                kept = {k: v for k, v in whole.headers.items() if k != "content-length"}
                return Response(whole.body[: len(whole.body) // 2], headers=kept)
            rid = _request_id_header(provider, n)
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
    config = uvicorn.Config(
        fake.app,
        log_level="warning",
        lifespan="off",
        loop="asyncio",
        http=fake.protocol,
        timeout_graceful_shutdown=5,
    )
    with serving_in_thread(
        config, name="fake-provider-server", serve=fake._serve, before_exit=fake._close
    ) as port:
        fake.base_url = f"http://127.0.0.1:{port}"
        yield fake
