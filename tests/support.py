"""Helpers the tests import: settings aimed at the loopback fake, and the app over ASGI."""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from typer.testing import CliRunner, Result

from app.cli.main import cli
from app.config import AnthropicSettings, OllamaSettings, OpenAISettings, Settings, UpstreamSettings
from app.main import create_app
from app.schemas import ApiKeyCreate
from app.store.records import PendingJob
from tests.fakes.provider_server import FakeProviderServer

REPO_ROOT = Path(__file__).resolve().parent.parent
SHIPPED_PATTERNS = REPO_ROOT / "patterns"
OPENAI_KEY = "sk-test-openai-secret-123"
ANTHROPIC_KEY = "sk-ant-test-secret-456"


def settings_for(fake: FakeProviderServer | None, **overrides: Any) -> Settings:
    """Every provider pointed at the fake; with `fake=None`, no provider keys at all."""
    base: dict[str, Any] = {
        "data_dir": Path(tempfile.mkdtemp(prefix="genai-test-")),
        "pattern_dir": [SHIPPED_PATTERNS],
        "pattern_reload_seconds": 0,
        "default_model": "openai/gpt-4o-mini",
        "log_json": True,
        # Rendering's time budget guards the service against hostile templates; on a loaded CI
        # machine an ordinary render can need more than the default 2 s, so tests that are not
        # about the budget get room (tests/test_render_budget.py sets its own). Time limits in
        # tests are about correctness, never speed.
        "render_timeout_seconds": 30.0,
        # Likewise a write waiting for SQLite's one writer (tests of the lock timeout set theirs).
        "database_lock_timeout_seconds": 10.0,
        "upstream": UpstreamSettings(
            timeout_seconds=2.0,
            max_retries=2,
            backoff_initial_seconds=0.01,
            backoff_max_seconds=0.02,
            max_retry_after_seconds=1.0,
        ),
        "openai": OpenAISettings(
            api_key=OPENAI_KEY if fake else None, base_url=f"{fake.base_url}/v1" if fake else None
        ),
        "anthropic": AnthropicSettings(
            api_key=ANTHROPIC_KEY if fake else None, base_url=fake.base_url if fake else None
        ),
        # Port 9 (discard) on loopback: nothing listens, so a call fails fast.
        "ollama": OllamaSettings(host=fake.base_url if fake else "http://127.0.0.1:9"),
    }
    return Settings(_env_file=None, **{**base, **overrides})


def completion_scope(body: bytes, authorization: str) -> dict[str, Any]:
    """The ASGI scope of `POST /v1/completions`, for tests that drive the app message by message
    (to disconnect at a chosen moment)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/completions",
        "raw_path": b"/v1/completions",
        "query_string": b"",
        "root_path": "",
        "client": ("127.0.0.1", 5000),
        "server": ("gateway.test", 80),
        "headers": [
            (b"host", b"gateway.test"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"authorization", authorization.encode()),
        ],
    }


@contextlib.asynccontextmanager
async def running_app(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The real app, lifespan included, and a client reaching it through an ASGI transport.

    The client sends an admin key of its own unless auth is disabled; a test about auth
    overrides or drops the `Authorization` header per request.
    """
    app = create_app(settings)
    try:
        async with app.router.lifespan_context(app):
            headers = {}
            if not settings.auth_disabled:
                admin = await app.state.runtime.authenticator.create(
                    ApiKeyCreate(scope="admin", name="test-admin")
                )
                headers["Authorization"] = f"Bearer {admin.key}"
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://gateway.test", headers=headers
            ) as http:
                yield app, http
    finally:
        if settings.data_dir.name.startswith("genai-test-"):
            shutil.rmtree(settings.data_dir, ignore_errors=True)


@contextlib.asynccontextmanager
async def serve_app(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with running_app(settings) as (_, http):
        yield http


def run_cli(*args: str) -> Result:
    """`genai ARGS…` in-process; pair it with the `cli_env` fixture."""
    return CliRunner().invoke(cli, list(args))


def pending_job(job_id: str, created_at: dt.datetime | None = None, **fields: Any) -> PendingJob:
    """A pending audit record with plain values (now, pattern `note`); `fields` override any."""
    values: dict[str, Any] = {
        "id": job_id,
        "request_id": None,
        "created_at": created_at or dt.datetime.now(dt.UTC),
        "source_kind": "pattern",
        "source_name": "note",
        "source_base_path": "patterns",
        "template_id": None,
        "template_role": None,
        "template_version": None,
        "pattern_content_hash": "sha256:x",
        "variables_hash": "sha256:x",
        "user_prompt_hash": "sha256:x",
        "provider": "openai",
        "model": "m",
        "params": {},
        "prompt_redacted": {"system": "", "messages": []},
        "redaction_map": {},
        "snippet_ids": [],
    }
    return PendingJob(**{**values, **fields})
