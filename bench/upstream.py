"""A loopback upstream that answers the OpenAI, Anthropic and Ollama chat APIs at once.

It is the provider behind every benchmarked server, so it must never be the bottleneck: a raw
asyncio HTTP/1.1 keep-alive protocol (uvloop when installed), no framework, one process.

    python -m bench.upstream [--port 0] [--latency-ms 0] [--stream-gap-ms 5] [--flood-mb 0]

It prints `PORT <n>` on stdout once it listens. Routes: POST /v1/chat/completions (OpenAI),
POST /v1/messages (Anthropic), POST /api/chat and GET /api/tags (Ollama), GET /healthz.

A request that offers tools (and does not turn them off) is answered with one call to the tool
its `tool_choice` names, or else to the last tool offered, with a placeholder for each required
argument; any other request gets the fixed text ANSWER. An OpenAI request that asks for a stream
gets ANSWER as STREAM_PIECES `chat.completion.chunk` deltas sent `--stream-gap-ms` apart (a
model producing tokens), then the finish chunk, the usage chunk when `stream_options` asks for
it, and `[DONE]`; the connection stays open for the next request.

With `--flood-mb N`, an OpenAI request whose last user message starts with FLOOD_MARK gets an
answer of N MB of text instead (a hostile or broken provider, bench/tenant_stall.py): streamed
as `chat.completion.chunk` SSE frames of 16 KiB of text each when it asks for a stream, else one
`chat.completion` JSON body. The bytes are generated as the socket drains (never held whole),
and the connection is closed after it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

ANSWER = "Refunds for duplicate charges go back to the original card within 5-7 working days."
FLOOD_MARK = "bench-flood"
_LOREM = b"Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. "
# ASCII without quotes or backslashes: the same bytes raw and inside a JSON string.
_FLOOD_PIECE = (_LOREM * (16 * 1024 // len(_LOREM) + 1))[: 16 * 1024]
_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 411: b"Length Required"}
_counter = itertools.count(1)
STREAM_PIECES = 8
Paced = Iterator[bytes | float]
"""A streamed answer: bytes to write, or seconds to wait before the next write."""


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else ""
    return ""


_PLACEHOLDERS = {"string": "bench", "number": 1, "integer": 1, "boolean": True, "array": []}


def _arguments(schema: Any) -> dict[str, Any]:
    """A placeholder for each required argument: the first enum value, or one of its type."""
    if not isinstance(schema, dict):
        return {}
    properties = schema.get("properties") or {}
    arguments: dict[str, Any] = {}
    for name in schema.get("required") or ():
        spec = properties.get(name) if isinstance(properties, dict) else None
        spec = spec if isinstance(spec, dict) else {}
        enum = spec.get("enum")
        arguments[name] = enum[0] if enum else _PLACEHOLDERS.get(str(spec.get("type")), {})
    return arguments


def _chosen(tools: list[tuple[str, Any]], named: Any) -> tuple[str, dict[str, Any]] | None:
    """The tool to call (name and arguments) among (name, schema) pairs, or None for text."""
    if not tools:
        return None
    schemas = dict(tools)
    name = named if isinstance(named, str) and named in schemas else tools[-1][0]
    return name, _arguments(schemas[name])


def _openai_call(body: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    choice = body.get("tool_choice")
    if choice == "none":
        return None
    tools = [
        (str(function.get("name")), function.get("parameters"))
        for tool in body.get("tools") or ()
        if isinstance(tool, dict) and isinstance(function := tool.get("function"), dict)
    ]
    named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    return _chosen(tools, named)


def _openai(body: dict[str, Any], n: int) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    message: dict[str, Any] = {"role": "assistant", "content": ANSWER, "refusal": None}
    finish = "stop"
    if (call := _openai_call(body)) is not None:
        function = {"name": call[0], "arguments": json.dumps(call[1])}
        message |= {
            "content": None,
            "tool_calls": [{"id": f"call_bench_{n}", "type": "function", "function": function}],
        }
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-bench-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "bench-model"),
        "choices": [{"index": 0, "finish_reason": finish, "logprobs": None, "message": message}],
        "usage": {"prompt_tokens": 412, "completion_tokens": 19, "total_tokens": 431},
    }, [("x-request-id", f"req_bench_{n}")]


def _anthropic(body: dict[str, Any], n: int) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    choice = body.get("tool_choice")
    choice = choice if isinstance(choice, dict) else {}
    tools = [
        (str(tool.get("name")), tool.get("input_schema"))
        for tool in body.get("tools") or ()
        if isinstance(tool, dict)
    ]
    call = None if choice.get("type") == "none" else _chosen(tools, choice.get("name"))
    content: list[dict[str, Any]] = [{"type": "text", "text": ANSWER}]
    if call is not None:
        content = [
            {"type": "tool_use", "id": f"toolu_bench_{n}", "name": call[0], "input": call[1]}
        ]
    return {
        "id": f"msg_bench_{n}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "bench-model"),
        "content": content,
        "stop_reason": "end_turn" if call is None else "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 412, "output_tokens": 19},
    }, [("request-id", f"req_bench_{n}")]


def _ollama(body: dict[str, Any], n: int) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    message: dict[str, Any] = {"role": "assistant", "content": ANSWER}
    if (call := _openai_call(body)) is not None:  # Ollama takes OpenAI-shaped tools
        message = {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": call[0], "arguments": call[1]}}],
        }
    return {
        "model": body.get("model", "bench-model"),
        "created_at": "2026-01-01T00:00:00.000000Z",
        "message": message,
        "done": True,
        "done_reason": "stop",
        "total_duration": 1,
        "load_duration": 1,
        "prompt_eval_count": 412,
        "prompt_eval_duration": 1,
        "eval_count": 19,
        "eval_duration": 1,
    }, []


_CHAT_ROUTES: dict[bytes, Callable[..., tuple[dict[str, Any], list[tuple[str, str]]]]] = {
    b"/v1/chat/completions": _openai,
    b"/chat/completions": _openai,
    b"/v1/messages": _anthropic,
    b"/api/chat": _ollama,
}


def _sse_frame(base: dict[str, Any], choices: list[Any], **extra: Any) -> bytes:
    """One chunked-encoding chunk holding one SSE `data:` event of a chat.completion.chunk."""
    event = b"data: " + json.dumps({**base, "choices": choices, **extra}).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


def _flood_stream(model: str, n: int, pieces: int) -> Iterator[bytes]:
    """An SSE stream of `pieces` deltas of _FLOOD_PIECE each, chunked, generated lazily."""
    yield (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
        b"connection: close\r\nx-request-id: req_bench_%d\r\n\r\n" % n
    )
    base: dict[str, Any] = {"id": f"chatcmpl-bench-{n}", "object": "chat.completion.chunk"}
    base |= {"created": int(time.time()), "model": model}

    yield _sse_frame(base, [{"index": 0, "delta": {"role": "assistant", "content": ""}}])
    text = _FLOOD_PIECE.decode()
    delta = _sse_frame(base, [{"index": 0, "delta": {"content": text}, "finish_reason": None}])
    for _ in range(pieces):
        yield delta
    yield _sse_frame(base, [{"index": 0, "delta": {}, "finish_reason": "stop"}])
    tokens = pieces * len(_FLOOD_PIECE) // 4
    usage = {"prompt_tokens": 412, "completion_tokens": tokens, "total_tokens": 412 + tokens}
    yield _sse_frame(base, [], usage=usage)
    yield b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"


def _pieces(text: str, count: int) -> list[str]:
    """`text` cut into `count` pieces at word boundaries, as a model streams it."""
    words = text.split(" ")
    size = -(-len(words) // count)
    chunks = [" ".join(words[i : i + size]) for i in range(0, len(words), size)]
    return [chunk if i == 0 else " " + chunk for i, chunk in enumerate(chunks)]


def paced_stream(body: dict[str, Any], n: int, gap_s: float) -> Paced:
    """ANSWER streamed as OpenAI chunks `gap_s` apart, keep-alive (see the module doc)."""
    yield (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
        b"x-request-id: req_bench_%d\r\n\r\n" % n
    )
    base: dict[str, Any] = {"id": f"chatcmpl-bench-{n}", "object": "chat.completion.chunk"}
    base |= {"created": int(time.time()), "model": body.get("model", "bench-model")}
    yield _sse_frame(base, [{"index": 0, "delta": {"role": "assistant", "content": ""}}])
    for piece in _pieces(ANSWER, STREAM_PIECES):
        yield gap_s
        yield _sse_frame(base, [{"index": 0, "delta": {"content": piece}, "finish_reason": None}])
    yield _sse_frame(base, [{"index": 0, "delta": {}, "finish_reason": "stop"}])
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        usage = {"prompt_tokens": 412, "completion_tokens": 19, "total_tokens": 431}
        yield _sse_frame(base, [], usage=usage)
    yield b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"


def _flood_json(model: str, n: int, pieces: int) -> Iterator[bytes]:
    """One chat.completion whose text is `pieces` x _FLOOD_PIECE, generated lazily."""
    body, _ = _openai({"model": model}, n)
    body["choices"][0]["message"]["content"] = "@"
    tokens = pieces * len(_FLOOD_PIECE) // 4
    body["usage"] |= {"completion_tokens": tokens, "total_tokens": 412 + tokens}
    prefix, suffix = json.dumps(body).encode().split(b'"@"')
    prefix, suffix = prefix + b'"', b'"' + suffix
    length = len(prefix) + pieces * len(_FLOOD_PIECE) + len(suffix)
    yield (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\nx-request-id: req_bench_%d\r\n\r\n%s" % (length, n, prefix)
    )
    for _ in range(pieces):
        yield _FLOOD_PIECE
    yield suffix


def flood(body: dict[str, Any], flood_mb: float) -> Iterator[bytes] | None:
    """The flood answer when `body` (an OpenAI chat request) asks for one, else None."""
    if flood_mb <= 0 or not _last_user_text(body).startswith(FLOOD_MARK):
        return None
    pieces = max(1, round(flood_mb * 1e6 / len(_FLOOD_PIECE)))
    model, n = str(body.get("model", "bench-model")), next(_counter)
    if body.get("stream") is True:
        return _flood_stream(model, n, pieces)
    return _flood_json(model, n, pieces)


def _response(status: int, payload: bytes, headers: list[tuple[str, str]], ctype: str) -> bytes:
    head = [b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b"Error"))]
    head.append(b"content-type: " + ctype.encode())
    head.append(b"content-length: %d" % len(payload))
    head.extend(f"{k}: {v}".encode() for k, v in headers)
    return b"\r\n".join(head) + b"\r\n\r\n" + payload


def answer(
    method: bytes, path: bytes, raw_body: bytes, flood_mb: float = 0, gap_s: float = 0.005
) -> bytes | Iterator[bytes] | tuple[Paced]:
    """The full HTTP response for one request: its bytes, a flood's bytes generated lazily (the
    connection closes after it), or a paced stream in a 1-tuple (the connection stays open)."""
    path = path.split(b"?", 1)[0]
    if method == b"GET" and path in (b"/healthz", b"/api/tags"):
        payload = b'{"models": []}' if path == b"/api/tags" else b'{"status": "ok"}'
        return _response(200, payload, [], "application/json")
    route = _CHAT_ROUTES.get(path) if method == b"POST" else None
    if route is None:
        return _response(404, b'{"error": {"message": "no such route"}}', [], "application/json")
    try:
        body = json.loads(raw_body)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return _response(400, b'{"error": {"message": "body is not JSON"}}', [], "application/json")
    if route is _openai and (flooding := flood(body, flood_mb)) is not None:
        return flooding
    answer_body, headers = route(body, next(_counter))
    if route is _ollama and body.get("stream") is True:  # the SDK reads NDJSON until done
        return _response(200, json.dumps(answer_body).encode() + b"\n", [], "application/x-ndjson")
    if route is _openai and body.get("stream") is True:
        return (paced_stream(body, next(_counter), gap_s),)
    if body.get("stream") is True:
        message = b'{"error": {"message": "the bench upstream streams only OpenAI answers"}}'
        return _response(400, message, headers, "application/json")
    return _response(200, json.dumps(answer_body).encode(), headers, "application/json")


class UpstreamProtocol(asyncio.Protocol):
    """HTTP/1.1 with keep-alive and Content-Length or chunked bodies; nothing else."""

    def __init__(self, latency_s: float, flood_mb: float = 0, gap_s: float = 0.005) -> None:
        self._latency_s = latency_s
        self._flood_mb = flood_mb
        self._gap_s = gap_s
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._flooding: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._writable.set()  # a flood waiting for the socket to drain sees it is gone

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        self._buffer.extend(data)
        self._serve_buffered()

    def _serve_buffered(self) -> None:
        while self._flooding is None and (request := self._next_request()) is not None:
            response, close = request
            loop = asyncio.get_running_loop()
            if isinstance(response, bytes):
                self._send(response, close)
            elif isinstance(response, tuple):
                self._flooding = loop.create_task(self._pace(response[0], close))
            else:
                self._flooding = loop.create_task(self._pour(response))

    async def _pace(self, events: Paced, close: bool) -> None:
        """Write a paced stream, waiting where it says; then serve what the peer sent next."""
        if self._latency_s > 0:
            await asyncio.sleep(self._latency_s)
        for event in events:
            if self._transport is None:
                return
            if isinstance(event, float):
                await asyncio.sleep(event)
            else:
                self._transport.write(event)
        self._flooding = None
        if close and self._transport is not None:
            self._transport.close()
        elif self._transport is not None:
            self._serve_buffered()

    async def _pour(self, chunks: Iterator[bytes]) -> None:
        """Write a flood as fast as the peer reads it, then close; stop when the peer leaves."""
        if self._latency_s > 0:
            await asyncio.sleep(self._latency_s)
        for chunk in chunks:
            if self._transport is None:
                return
            self._transport.write(chunk)
            await self._writable.wait()
        if self._transport is not None:
            self._transport.close()

    def _send(self, response: bytes, close: bool) -> None:
        if self._latency_s > 0:
            loop = asyncio.get_running_loop()
            loop.call_later(self._latency_s, self._write, response, close)
        else:
            self._write(response, close)

    def _write(self, response: bytes, close: bool) -> None:
        if self._transport is None:
            return
        self._transport.write(response)
        if close:
            self._transport.close()

    def _next_request(self) -> tuple[bytes | Iterator[bytes] | tuple[Paced], bool] | None:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            return None
        lines = bytes(self._buffer[:end]).split(b"\r\n")
        method, path, _ = [*lines[0].split(b" ", 2), b"", b""][:3]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        start = end + 4
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            decoded = self._dechunk(start)
            if decoded is None:
                return None
            body, consumed = decoded
        else:
            length = int(headers.get(b"content-length", b"0") or 0)
            if len(self._buffer) < start + length:
                return None
            body, consumed = bytes(self._buffer[start : start + length]), start + length
        del self._buffer[:consumed]
        close = headers.get(b"connection", b"").lower() == b"close"
        return answer(method, path, body, self._flood_mb, self._gap_s), close

    def _dechunk(self, start: int) -> tuple[bytes, int] | None:
        body = bytearray()
        at = start
        while True:
            line_end = self._buffer.find(b"\r\n", at)
            if line_end < 0:
                return None
            size = int(bytes(self._buffer[at:line_end]).split(b";")[0], 16)
            chunk_start = line_end + 2
            if len(self._buffer) < chunk_start + size + 2:
                return None
            if size == 0:
                return bytes(body), chunk_start + 2
            body.extend(self._buffer[chunk_start : chunk_start + size])
            at = chunk_start + size + 2


async def serve(port: int, latency_s: float, flood_mb: float = 0, gap_s: float = 0.005) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: UpstreamProtocol(latency_s, flood_mb, gap_s),
        "127.0.0.1",
        port,
        backlog=1024,
        reuse_address=True,
    )
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed).")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="Fixed delay per answer.")
    parser.add_argument(
        "--flood-mb", type=float, default=0.0, help=f"Answer size for a {FLOOD_MARK!r} prompt."
    )
    parser.add_argument(
        "--stream-gap-ms", type=float, default=5.0, help="Time between a stream's deltas."
    )
    args = parser.parse_args(argv)
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        gap_s = args.stream_gap_ms / 1000
        asyncio.run(serve(args.port, args.latency_ms / 1000, args.flood_mb, gap_s))
    except OSError as exc:
        sys.exit(f"bench upstream: cannot listen on 127.0.0.1:{args.port}: {exc}")


if __name__ == "__main__":
    main()
