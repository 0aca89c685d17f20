"""The live-service set-up the security tests share: `genai serve` on the test's database."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

import pytest

from tests.fakes.provider_server import FakeProviderServer
from tests.security.live import LiveService, live_service, store_env


class Serve(Protocol):
    def __call__(self, *args: str, **env: str) -> AbstractContextManager[LiveService]: ...


@pytest.fixture
def serve(fake: FakeProviderServer, database_url: str, tmp_path: Path) -> Serve:
    """Starts `genai serve` (extra `args` after its own) against the fake providers and the
    test's database, data in `tmp_path/data` and `env` on top; each start is stopped on leaving."""

    def start(*args: str, **env: str) -> AbstractContextManager[LiveService]:
        environment = store_env(fake, database_url, tmp_path / "data", **env)
        return live_service(environment, tmp_path, *args)

    return start
