"""Shared fixtures: a loopback provider server, an isolated environment, the app over ASGI."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.fakes.provider_server import FakeProviderServer, running_fake_provider
from tests.support import serve_app, settings_for

_ENV_PREFIXES = ("GENAI_", "OPENAI_", "ANTHROPIC_", "OLLAMA_")


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own keys or overrides must never leak into a test."""
    for name in list(os.environ):
        if name.startswith(_ENV_PREFIXES):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeProviderServer]:
    with running_fake_provider() as server:
        yield server


@pytest.fixture
def fake(fake_server: FakeProviderServer) -> FakeProviderServer:
    """The shared loopback provider, with its script and recordings cleared."""
    fake_server.reset()
    return fake_server


@pytest.fixture
async def client(fake: FakeProviderServer) -> AsyncIterator[httpx.AsyncClient]:
    async with serve_app(settings_for(fake)) as http:
        yield http
