"""The tests' own process helpers (tests/processes.py) and the CI check behind them
(.ci/leftovers): nothing a test starts outlives it, and CI names whatever does."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.processes import RUN_MARK, owned_process, run_process
from tests.support import REPO_ROOT

# A child that starts a grandchild which ignores SIGTERM, prints the grandchild's pid, and waits.
GRANDCHILD = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
PARENT = f"""
import signal, subprocess, sys
grandchild = subprocess.Popen([sys.executable, "-c", {GRANDCHILD!r}])
print(grandchild.pid, flush=True)
signal.pause()
"""


class _BodyFailed(Exception):
    pass


def _running(pid: int) -> bool:
    """Alive and not merely a zombie waiting for its reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS): a signal 0 says whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state != "Z"


def test_a_failing_test_body_still_ends_the_child_and_the_childs_children() -> None:
    with (
        pytest.raises(_BodyFailed),
        owned_process([sys.executable, "-c", PARENT], stdout=subprocess.PIPE) as child,
    ):
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        assert _running(child.pid) and _running(grandchild)
        raise _BodyFailed
    assert not _running(child.pid)
    assert not _running(grandchild), "the grandchild outlived its group"


def test_a_command_that_times_out_ends_with_its_children(tmp_path: Path) -> None:
    grandchild_file = tmp_path / "grandchild.pid"
    script = PARENT.replace(
        "print(grandchild.pid, flush=True)",
        f"open({str(grandchild_file)!r}, 'w').write(str(grandchild.pid))",
    )
    with pytest.raises(subprocess.TimeoutExpired):
        run_process([sys.executable, "-c", script], timeout=5)
    assert not _running(int(grandchild_file.read_text()))


def test_the_run_mark_reaches_a_child_given_a_scrubbed_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(RUN_MARK, "run-42")
    scrubbed = {"PATH": os.environ.get("PATH", "")}
    done = run_process(
        [sys.executable, "-c", f"import os; print(os.environ.get({RUN_MARK!r}))"],
        env=scrubbed,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "run-42"


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="the CI check reads /proc")
def test_the_ci_check_names_and_ends_a_process_the_run_left_behind() -> None:
    run_id = f"check-{uuid.uuid4().hex}"
    leftover = subprocess.Popen(
        ["sleep", "600"],
        env={**os.environ, RUN_MARK: run_id},
        start_new_session=True,
    )
    try:
        check = run_process(
            ["bash", str(REPO_ROOT / ".ci" / "leftovers"), run_id, "0"],
            env={k: v for k, v in os.environ.items() if k != RUN_MARK},
            timeout=60,
        )
        assert check.returncode == 1, check.stderr
        assert f"pid {leftover.pid} " in check.stderr and "sleep 600" in check.stderr
        assert leftover.wait(timeout=30) == -signal.SIGKILL
        clean = run_process(
            ["bash", str(REPO_ROOT / ".ci" / "leftovers"), run_id, "0"],
            env={k: v for k, v in os.environ.items() if k != RUN_MARK},
            timeout=60,
        )
        assert clean.returncode == 0, clean.stderr
    finally:
        if leftover.poll() is None:
            leftover.kill()
            leftover.wait()


# Names a test module may take from `subprocess`: types and constants, nothing that starts one.
_SUBPROCESS_TYPES = {"CompletedProcess", "CalledProcessError", "TimeoutExpired", "PIPE", "DEVNULL"}
_STARTERS = {
    "os": ("system", "popen", "fork", "forkpty", "posix_spawn", "spawn", "exec"),
    "asyncio": ("create_subprocess_exec", "create_subprocess_shell"),
    "pty": ("fork", "spawn"),
}
_HELPERS = {"processes.py", "test_processes.py"}  # the helpers, and this file's deliberate leftover


def _process_starts(source: str) -> list[str]:
    """Each line where a module starts a process other than through tests/processes.py."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [
                f"{node.lineno}: import {alias.name}"
                for alias in node.names
                if alias.name.split(".")[0] in ("subprocess", "multiprocessing")
            ]
        elif isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            names = {alias.name for alias in node.names}
            if root == "multiprocessing" or (root == "subprocess" and names - _SUBPROCESS_TYPES):
                found.append(f"{node.lineno}: from {node.module} import {', '.join(sorted(names))}")
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.attr.startswith(_STARTERS.get(node.value.id, ()))
        ):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_every_process_a_test_starts_goes_through_the_helpers() -> None:
    """So each one ends with its whole group and carries the run's mark for the CI check."""
    found = [
        f"{path.relative_to(REPO_ROOT)}:{start}"
        for path in sorted((REPO_ROOT / "tests").rglob("*.py"))
        if path.name not in _HELPERS
        for start in _process_starts(path.read_text(encoding="utf-8"))
    ]
    assert not found, "start processes with tests/processes.py instead:\n" + "\n".join(found)


def test_the_scan_finds_processes_started_directly() -> None:
    source = (
        "import subprocess\nimport os\nfrom subprocess import PIPE, Popen\n"
        "os.system('true')\nos.spawnlp(os.P_WAIT, 'true')\nos.getpid()\n"
    )
    assert _process_starts(source) == [
        "1: import subprocess",
        "3: from subprocess import PIPE, Popen",
        "4: os.system",
        "5: os.spawnlp",
    ]
