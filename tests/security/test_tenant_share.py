"""No tenant can stall, bloat or outlast its share, and an answer the SDKs read is read: over
real HTTP to `genai serve`, on SQLite and PostgreSQL (issue 16, classes 1, 5, 7, 10 and 11, and
a request's head, which anyone can send before any key is checked).

The service runs with one completion slot and no queue, so a request that kept its slot would
turn every later one into 503 `overloaded`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.security.conftest import Serve
from tests.security.live import LiveService

MAX_ANSWER_BYTES = 8 * 1024 * 1024  # GENAI_UPSTREAM__MAX_ANSWER_BYTES's default
MAX_BODY_BYTES = 4 * 1024 * 1024  # GENAI_MAX_BODY_BYTES's default
CHUNK = "x" * 65_536


@pytest.fixture
def service(serve: Serve) -> Iterator[LiveService]:
    with serve(
        GENAI_DEFAULT_MODEL="openai/gpt-4o-mini",
        GENAI_LIMITS__MAX_CONCURRENT="1",
        GENAI_LIMITS__MAX_QUEUED="0",
        GENAI_REQUEST__STREAM_SEND_TIMEOUT_SECONDS="1",
        GENAI_REQUEST__HEAD_TIMEOUT_SECONDS="1",
    ) as running:
        yield running


@pytest.fixture
async def http(service: LiveService) -> AsyncIterator[httpx.AsyncClient]:
    async with service.client(service.first_admin_key()) as client:
        yield client


async def _jobs(database_url: str) -> list[tuple[str, str | None]]:
    """(status, error_type) of every job, oldest first, as the database holds them."""
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT status, error_type FROM jobs ORDER BY created_at")
            )
            return [(row.status, row.error_type) for row in rows]
    finally:
        await engine.dispose()


async def _settled_jobs(database_url: str, count: int) -> list[tuple[str, str | None]]:
    """The jobs once `count` of them have left `pending` (outcomes are written in batches)."""
    deadline = time.monotonic() + 30
    while True:
        jobs = await _jobs(database_url)
        if sum(status != "pending" for status, _ in jobs) >= count or time.monotonic() > deadline:
            return jobs
        await asyncio.sleep(0.2)


def _summarize(**extra: Any) -> dict[str, Any]:
    return {"pattern_key": "summarize", "user_prompt": "Revenue rose.", **extra}


def _events(body: str) -> list[tuple[str, Any]]:
    """The (event, data) pairs of a Server-Sent Events body."""
    found = []
    for frame in body.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if "data" in fields:
            found.append((fields.get("event", "message"), json.loads(fields["data"])))
    return found


# --- 1. what one request may carry ------------------------------------------------------------


async def test_a_body_under_the_byte_cap_cannot_carry_unbounded_work(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    """300,000 variables the pattern never uses fit under the 4 MiB cap; each bound on what a
    request carries refuses its own excess with a 422 naming the setting, before any work."""
    unused = {f"v{index:06d}": 1 for index in range(300_000)}
    deep: Any = "leaf"
    for _ in range(40):
        deep = {"d": deep}
    refused: list[tuple[str, dict[str, Any]]] = [
        ("GENAI_REQUEST__MAX_VALUES", {"variables": unused}),  # refused before it is parsed
        ("GENAI_REQUEST__MAX_VALUES", {"variables": {"rows": list(range(150_000))}}),
        ("GENAI_REQUEST__MAX_VARIABLES", {"variables": {f"v{i}": i for i in range(300)}}),
        (
            "GENAI_REQUEST__MAX_VARIABLES_BYTES",
            {"variables": {"a": "x" * 600_000, "b": "y" * 600_000}},
        ),
        ("nested deeper than 32 levels", {"variables": {"deep": deep}}),
    ]
    for setting, extra in refused:
        body = json.dumps(_summarize(**extra), separators=(",", ":")).encode()
        assert len(body) < MAX_BODY_BYTES
        resp = await http.post(
            "/v1/completions", content=body, headers={"content-type": "application/json"}
        )
        assert resp.status_code == 422, (setting, resp.status_code, resp.text[:300])
        assert resp.json()["error"]["type"] == "invalid_request"
        assert setting in resp.json()["error"]["message"], resp.json()["error"]["message"]
    assert not fake.calls("openai")  # nothing reached the provider

    # The most a request may carry is served: 256 variables, ~1 MB of them.
    most = {f"v{index:03d}": "y" * 3_800 for index in range(256)}
    resp = await http.post("/v1/completions", json=_summarize(variables=most))
    assert resp.status_code == 200, resp.text[:300]
    assert (await http.get("/healthz")).status_code == 200


# --- 5. what a provider may send back -----------------------------------------------------------


async def test_an_oversize_answer_ends_with_answer_too_large_and_a_failed_record(
    http: httpx.AsyncClient, fake: FakeProviderServer, database_url: str
) -> None:
    oversize = MAX_ANSWER_BYTES // len(CHUNK) + 16
    fake.script(
        "openai",
        Reply.ok("x" * (MAX_ANSWER_BYTES + 1_000_000)),
        Reply.ok(chunks=(CHUNK,) * oversize),
    )
    resp = await http.post("/v1/completions", json=_summarize())
    assert resp.status_code == 502, resp.text[:300]
    assert resp.json()["error"]["type"] == "answer_too_large"
    assert "GENAI_UPSTREAM__MAX_ANSWER_BYTES" in resp.json()["error"]["message"]

    streamed = await http.post("/v1/completions", json=_summarize(stream=True))
    assert streamed.status_code == 200
    events = _events(streamed.text)
    assert events[-1][0] == "error", events[-1]
    assert events[-1][1]["error"]["type"] == "answer_too_large"
    assert len(streamed.content) < MAX_ANSWER_BYTES + 1_000_000  # cut off near the cap

    assert await _settled_jobs(database_url, 2) == [
        ("failed", "answer_too_large"),
        ("failed", "answer_too_large"),
    ]
    # Neither answer holds the service's only slot: the next request is served.
    assert (await http.post("/v1/completions", json=_summarize())).status_code == 200


# --- 7. a reader that stops reading -------------------------------------------------------------


def _open_unread_stream(service: LiveService, body: bytes) -> socket.socket:
    """A streamed completion whose client never reads a byte of the answer (a tiny receive
    buffer, so the service's writes back up at once)."""
    host, port = service.base_url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {service.first_admin_key()}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


async def test_a_stream_whose_client_stops_reading_frees_its_slot_and_is_recorded(
    service: LiveService,
    http: httpx.AsyncClient,
    fake: FakeProviderServer,
    database_url: str,
) -> None:
    # Over 6 MB: more than the kernel and the server buffer for one connection, under the cap.
    fake.script("openai", Reply.ok(chunks=(CHUNK,) * 100))
    stalled = _open_unread_stream(service, json.dumps(_summarize(stream=True)).encode())
    try:
        statuses = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # the stalled stream holds the only slot until freed
            resp = await http.post("/v1/completions", json=_summarize())
            statuses.append(resp.status_code)
            if resp.status_code == 200:
                break
            assert resp.json()["error"]["type"] == "overloaded", resp.text
            await asyncio.sleep(0.25)
        assert statuses[-1] == 200, f"the slot was never freed: {statuses}"
        jobs = await _settled_jobs(database_url, 2)
        assert ("cancelled", "client_stopped_reading") in jobs, jobs
        assert ("completed", None) in jobs, jobs
    finally:
        stalled.close()


# --- 10. a body over the cap -------------------------------------------------------------------


async def test_a_client_still_uploading_an_oversize_body_reads_the_413(
    service: LiveService,
) -> None:
    """Python's two HTTP clients, each sending three times the cap with its length declared:
    both read the documented 413 (the rest of the body is read and thrown away), no reset."""
    oversize = b"x" * (3 * MAX_BODY_BYTES)
    headers = {
        "Authorization": f"Bearer {service.first_admin_key()}",
        "Content-Type": "application/json",
    }

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(oversize), 65_536):
            yield oversize[start : start + 65_536]

    async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as client:
        resp = await client.post(
            "/v1/completions",
            content=chunks(),
            headers={**headers, "Content-Length": str(len(oversize))},
        )
    assert resp.status_code == 413
    assert resp.json()["error"]["type"] == "payload_too_large"

    def with_urllib() -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(
            f"{service.base_url}/v1/completions", data=oversize, headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as refused:
            return refused.code, json.loads(refused.read())

    status, body = await asyncio.to_thread(with_urllib)
    assert status == 413
    assert body["error"]["type"] == "payload_too_large"


# --- 11. an answer the SDKs accept --------------------------------------------------------------


async def test_an_answer_holding_a_lone_surrogate_is_served_streamed_and_not(
    http: httpx.AsyncClient, fake: FakeProviderServer, database_url: str
) -> None:
    """The provider escapes a lone surrogate (`\\ud800`), which the SDKs and the standard
    library read: the gateway answers 200, streamed every delta and then the envelope."""
    fake.script(
        "openai",
        Reply.ok("before \ud800 after"),
        Reply.ok(chunks=("before ", "\ud800", " after")),
    )
    resp = await http.post("/v1/completions", json=_summarize())
    assert resp.status_code == 200, resp.text[:300]
    assert resp.json()["response"]["text"] == "before \ud800 after"

    streamed = await http.post("/v1/completions", json=_summarize(stream=True))
    events = _events(streamed.text)
    deltas = "".join(data["text"] for event, data in events if event == "delta")
    assert deltas == "before \ud800 after"
    assert events[-1][0] == "envelope", events[-1]
    assert events[-1][1]["response"]["text"] == "before \ud800 after"
    assert await _settled_jobs(database_url, 2) == [("completed", None), ("completed", None)]


# --- beyond the twelve: a request's head ---------------------------------------------------------


async def test_an_oversize_request_head_is_refused_without_buffering_it(
    service: LiveService,
) -> None:
    """Uvicorn with httptools buffers headers of any size: 200 MB of one header was accepted.
    Past GENAI_REQUEST__MAX_HEAD_BYTES (64 KiB) the answer is 431, readable by the client."""
    async with httpx.AsyncClient(base_url=service.base_url, timeout=30) as client:
        resp = await client.get("/v1/patterns", headers={"X-Padding": "a" * 100_000})
    assert resp.status_code == 431
    assert resp.json()["error"]["type"] == "request_head_too_large"

    def endless_header() -> int:
        """Bytes of one endless header sent before the service hung up."""
        host, port = service.base_url.removeprefix("http://").split(":")
        sent = 0
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: ")
            with contextlib.suppress(OSError):
                while sent < 64 * 1024 * 1024:
                    sock.sendall(b"a" * 65_536)
                    sent += 65_536
        return sent

    assert await asyncio.to_thread(endless_header) < 8 * 1024 * 1024
    async with service.client() as client:
        assert (await client.get("/healthz")).status_code == 200


async def test_half_sent_request_heads_are_answered_408_and_closed(service: LiveService) -> None:
    """Slowloris: requests whose headers never end hold a connection each, for ever, unless
    the head has a deadline (GENAI_REQUEST__HEAD_TIMEOUT_SECONDS, 1 s here)."""
    host, port = service.base_url.removeprefix("http://").split(":")

    def half_sent(count: int) -> list[bytes]:
        socks = [socket.create_connection((host, int(port))) for _ in range(count)]
        try:
            for sock in socks:
                sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            answers = []
            for sock in socks:
                sock.settimeout(20)
                answers.append(sock.recv(65_536))
            return answers
        finally:
            for sock in socks:
                sock.close()

    answers = await asyncio.to_thread(half_sent, 200)
    assert {answer.split(b"\r\n", 1)[0] for answer in answers} == {b"HTTP/1.1 408 Request Timeout"}
    assert b'"request_head_timeout"' in answers[0]
