"""Processes the tests start: each leads a session of its own and ends with all its children.

Killing only the process a test started leaves that process's children running: `genai serve
--workers 2` left its uvicorn workers listening long after the suite this way. So every process
starts as the leader of a new session (its own process group), and ending it kills the whole
group and waits until no member is left, on every exit path of the test, a failure included.

`.ci/run` marks the test run with RUN_MARK in the environment, which every process the run
starts inherits, and fails when a marked process is still alive after the run. Tests often hand
a child a scrubbed environment (no GENAI_*), so these helpers put the mark back.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Any, TypeAlias

RUN_MARK = "GENAI_TEST_RUN"
# A SIGKILLed process is gone at once; one still there after this is stuck in the kernel.
_GONE_SECONDS = 30.0

Stream = int | IO[Any] | None
OwnedProcess: TypeAlias = subprocess.Popen[bytes]


def with_run_mark(env: Mapping[str, str] | None) -> dict[str, str] | None:
    """`env` plus this run's mark; None (the child inherits ours, mark included) stays None."""
    if env is None:
        return None
    mark = os.environ.get(RUN_MARK)
    return {**env, RUN_MARK: mark} if mark is not None else dict(env)


def group_members(pgid: int) -> list[int]:
    """The processes of group `pgid` that are still alive (zombies wait only for their reaper).
    Without /proc (macOS), a signal 0 tells whether any member is left: then `[pgid]`."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        return [pgid]
    members = []
    for stat in proc.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # After the command name (which may hold spaces): state, ppid, pgrp, ... (proc(5)).
            state, _ppid, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
            if int(pgrp) == pgid and state != "Z":
                members.append(int(stat.parent.name))
    return members


def end_process_group(process: OwnedProcess) -> None:
    """Kill the process and every member of its group, reap it, and wait until none is left."""
    deadline = time.monotonic() + _GONE_SECONDS
    while True:
        # Again each round: a member may have forked while the group was being killed.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if process.poll() is None:
            process.wait(timeout=_GONE_SECONDS)
        left = group_members(process.pid)
        if not left:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {left} of group {process.pid} survived SIGKILL")
        time.sleep(0.02)


@contextlib.contextmanager
def owned_process(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: Stream = subprocess.DEVNULL,
    stdout: Stream = None,
    stderr: Stream = None,
) -> Iterator[OwnedProcess]:
    """`argv` started in a session of its own; on leaving the block it ends with its whole
    group, however the block is left. Its stdin is empty unless given: a child must never wait
    on the terminal the tests run from."""
    process = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=with_run_mark(env),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        end_process_group(process)


def run_process(
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(argv, capture_output=True, text=True, timeout=...)`, except that when the
    command is done, times out or the wait is interrupted, its whole group ends, not only it."""
    with owned_process(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        out, err = process.communicate(timeout=timeout)
    done = subprocess.CompletedProcess(
        list(argv), process.returncode, out.decode(errors="replace"), err.decode(errors="replace")
    )
    if check:
        done.check_returncode()
    return done


def interrupt_on_sigterm() -> None:
    """A SIGTERM to the test run (a CI timeout, `timeout`) interrupts it as Ctrl-C does, so the
    finalizers run and end the groups the tests started: each leads a session of its own, out of
    reach of a signal sent to the run's process group, and SIGTERM's default would skip them."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
