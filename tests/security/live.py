"""The service as a user runs it: `genai serve` in its own process, reached over real HTTP."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.fakes.provider_server import FakeProviderServer
from tests.support import ANTHROPIC_KEY, OPENAI_KEY, SHIPPED_PATTERNS

_FIRST_KEY = re.compile(r"^\s+(gsk_[0-9a-f]{16}_[A-Za-z0-9_-]{43})\s*$", re.MULTILINE)


def genai_command() -> str:
    """The `genai` console script installed beside the interpreter running the tests."""
    beside = Path(sys.executable).with_name("genai")
    found = str(beside) if beside.exists() else shutil.which("genai")
    assert found, "the `genai` command is not installed (pip install -e .)"
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def service_env(fake: FakeProviderServer, data_dir: Path, **extra: str) -> dict[str, str]:
    """A clean environment: this machine's GENAI_/provider variables never leak in."""
    prefixes = ("GENAI_", "OPENAI_", "ANTHROPIC_", "OLLAMA_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.update(
        GENAI_DATA_DIR=str(data_dir),
        GENAI_PATTERN_DIR=str(SHIPPED_PATTERNS),
        GENAI_PATTERN_RELOAD_SECONDS="0",
        GENAI_LOG_JSON="true",
        OPENAI_API_KEY=OPENAI_KEY,
        OPENAI_BASE_URL=f"{fake.base_url}/v1",
        ANTHROPIC_API_KEY=ANTHROPIC_KEY,
        ANTHROPIC_BASE_URL=fake.base_url,
        OLLAMA_HOST=fake.base_url,
    )
    env.update(extra)
    return env


@dataclass
class LiveService:
    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def first_admin_key(self) -> str:
        """The key the service printed on its first start (the only time it is shown)."""
        found = _FIRST_KEY.findall(self.log())
        assert len(found) == 1, f"expected one first admin key on the console:\n{self.log()}"
        return str(found[0])

    def client(self, key: str | None = None, **options: object) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=30, **options)  # type: ignore[arg-type]

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout)


@contextlib.contextmanager
def live_service(env: dict[str, str], workdir: Path, *args: str) -> Iterator[LiveService]:
    """Start `genai serve` on a free loopback port; wait until /healthz answers; stop it after."""
    port = free_port()
    log_path = workdir / f"service-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [genai_command(), "serve", "--host", "127.0.0.1", "--port", str(port), *args],
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    service = LiveService(f"http://127.0.0.1:{port}", process, log_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"the service exited early:\n{service.log()}"
            try:
                if httpx.get(f"{service.base_url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"the service never answered:\n{service.log()}"
            time.sleep(0.1)
        yield service
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
