"""Traces over OTLP/HTTP: a fake collector receives the spans of real completions.

The collector is a plain HTTP server decoding the protobuf the SDK's exporter sends, so the
export path (endpoint from the environment, encoding, flush at shutdown) is the real one.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.fakes.provider_server import FakeProviderServer
from tests.processes import run_process
from tests.support import running_app, settings_for

REQUEST = {"pattern_key": "summarize", "variables": {}, "user_prompt": "a short text"}
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"


class Collector:
    """Every span received on POST /v1/traces, decoded."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()

    def receive(self, path: str, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self._lock:
            self.paths.append(path)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    self.spans.extend(scope.spans)


@contextlib.contextmanager
def fake_collector() -> Iterator[tuple[Collector, str]]:
    collector = Collector()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            collector.receive(self.path, body)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield collector, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _plain(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_plain(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


def attributes(span: Span) -> dict[str, Any]:
    return {item.key: _plain(item.value) for item in span.attributes}


async def test_a_completion_reaches_the_collector_as_one_trace(
    fake: FakeProviderServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with fake_collector() as (collector, endpoint):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        async with running_app(settings_for(fake)) as (_, http):
            completed = await http.post(
                "/v1/completions", json=REQUEST, headers={"traceparent": TRACEPARENT}
            )
            assert completed.status_code == 200, completed.text
            streamed = await http.post("/v1/completions", json={**REQUEST, "stream": True})
            assert streamed.status_code == 200, streamed.text
        # The lifespan's end flushed the exporter: everything has arrived.
    assert set(collector.paths) == {"/v1/traces"}
    servers = [s for s in collector.spans if s.kind == Span.SPAN_KIND_SERVER]
    by_trace = {s.trace_id.hex(): s for s in servers if s.name == "POST /v1/completions"}
    assert len(by_trace) == 2, [s.name for s in servers]
    # The caller's traceparent is continued: the server span joins the caller's trace.
    server = by_trace[CALLER_TRACE]
    assert server.parent_span_id.hex() == "00f067aa0ba902b7"
    assert attributes(server) == {
        "http.request.method": "POST",
        "url.path": "/v1/completions",
        "http.route": "/v1/completions",
        "http.response.status_code": 200,
    }
    children = [
        s for s in collector.spans if s.parent_span_id == server.span_id and s is not server
    ]
    names = [s.name for s in sorted(children, key=lambda s: s.start_time_unix_nano)]
    assert names[:3] == ["genai.render", "genai.audit.insert", "genai.audit.confirm"], names
    assert names[-1] == "chat gpt-4o-mini", names
    render = children[[s.name for s in children].index("genai.render")]
    assert attributes(render)["genai.pattern"] == "summarize"
    [call] = [s for s in children if s.name == "chat gpt-4o-mini"]
    assert call.kind == Span.SPAN_KIND_CLIENT
    job_id = completed.json()["job_id"]
    assert attributes(children[1])["genai.job_id"] == job_id
    assert attributes(call) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.request.temperature": 0.3,
        "gen_ai.request.max_tokens": 800,
        "gen_ai.response.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.response.finish_reasons": ["stop"],
    }
    # The streamed completion: its provider span covers the whole stream, under its server span.
    [stream_trace] = [t for t in by_trace if t != CALLER_TRACE]
    stream_server = by_trace[stream_trace]
    [stream_call] = [
        s for s in collector.spans if s.trace_id.hex() == stream_trace and s.name.startswith("chat")
    ]
    assert stream_call.parent_span_id == stream_server.span_id
    assert attributes(stream_call)["gen_ai.usage.output_tokens"] == 7
    assert attributes(stream_call)["gen_ai.response.finish_reasons"] == ["stop"]
    # Log lines name the trace and span they were written in.
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line[:1] == "{"]
    [request_line] = [
        line for line in lines if line.get("event") == "request" and line.get("job_id") == job_id
    ]
    assert request_line["trace_id"] == CALLER_TRACE
    assert request_line["span_id"] == server.span_id.hex()


def test_without_an_endpoint_no_opentelemetry_sdk_is_imported() -> None:
    probe = """
import json, sys
from app.main import create_app
from tests.support import settings_for
create_app(settings_for(None))
print(json.dumps(sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk"))))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = run_process(
        [sys.executable, "-c", probe],
        env=env,
        timeout=60,
        check=True,
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
