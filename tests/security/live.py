"""The service as a user runs it: `genai serve` in its own process, reached over real HTTP."""

from __future__ import annotations

import contextlib
import os
import pty
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.fakes.provider_server import FakeProviderServer
from tests.processes import OwnedProcess, owned_process
from tests.support import ANTHROPIC_KEY, OPENAI_KEY, SHIPPED_PATTERNS

# Where the service writes its first admin key when its console is no terminal (docs/deployment.md).
FIRST_KEY_FILE = Path("keys") / "first-admin-key"


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


def store_env(
    fake: FakeProviderServer, database_url: str, data_dir: Path, **extra: str
) -> dict[str, str]:
    """`service_env` on a database of the test's own, migrated when the service starts."""
    return service_env(
        fake,
        data_dir,
        GENAI_DATABASE_URL=database_url,
        GENAI_DATABASE_AUTO_MIGRATE="true",
        **extra,
    )


@contextlib.contextmanager
def cleared_umask() -> Iterator[None]:
    """Umask 0, so a private file mode has to come from the code, not from a kind umask."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


@dataclass
class LiveService:
    base_url: str
    process: OwnedProcess
    log_path: Path
    data_dir: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def first_admin_key(self) -> str:
        """The key the service's first start made. Its console here is a file, a log stream, so
        the key went to the file the docs tell an operator to read (and then delete)."""
        path = self.data_dir / FIRST_KEY_FILE
        assert path.is_file(), f"no first admin key in {path}; the service's log:\n{self.log()}"
        return path.read_text(encoding="ascii").strip()

    def client(self, key: str | None = None, **options: object) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=30, **options)  # type: ignore[arg-type]

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout)


def _copy_until_closed(controller: int, log_path: Path) -> None:
    """What the terminal shows, into the log file, until no process holds the terminal open."""
    with log_path.open("ab") as log:
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: every process holding the terminal's other end has gone
                return
            if not chunk:
                return
            log.write(chunk)
            log.flush()


@contextlib.contextmanager
def _console(log_path: Path, *, terminal: bool) -> Iterator[int]:
    """The file descriptor the service writes stdout and stderr to: the log file itself, or a
    pseudo-terminal (an operator's interactive start) whose output a thread copies into it.
    Leave this block only after the service and its children have ended."""
    if not terminal:
        with log_path.open("wb") as log:
            yield log.fileno()
        return
    log_path.write_bytes(b"")
    controller, child_end = pty.openpty()
    copier = threading.Thread(target=_copy_until_closed, args=(controller, log_path))
    copier.start()
    try:
        yield child_end
    finally:
        os.close(child_end)  # the last holder: the copier's read now ends
        copier.join(timeout=30)
        os.close(controller)


@contextlib.contextmanager
def live_service(
    env: dict[str, str], workdir: Path, *args: str, terminal: bool = False
) -> Iterator[LiveService]:
    """Start `genai serve` on a free loopback port; wait until /healthz answers. On leaving, the
    service and every process it started end, also when the test fails (tests/processes.py).
    `terminal=True` gives it a pseudo-terminal for stdout and stderr instead of a file."""
    port = free_port()
    log_path = workdir / f"service-{port}.log"
    data_dir = workdir / env.get("GENAI_DATA_DIR", "data")  # an absolute one replaces workdir
    argv = [genai_command(), "serve", "--host", "127.0.0.1", "--port", str(port), *args]
    with (
        _console(log_path, terminal=terminal) as console,
        owned_process(argv, cwd=workdir, env=env, stdout=console, stderr=console) as process,
    ):
        service = LiveService(f"http://127.0.0.1:{port}", process, log_path, data_dir)
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
