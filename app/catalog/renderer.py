"""Compile and render off the event loop, each job under a wall-clock and a size budget.

Why it is built this way:

- A dedicated, bounded thread pool. Renders never share the default executor, so hostile
  templates can at worst occupy these few threads, never starve other `to_thread` work (file
  reloads, SQLite). A job that waits for a free thread spends its own budget waiting.
- `asyncio.wait_for` at the deadline: the caller gets `RenderTimeout` on time whatever the thread
  is doing, and the event loop (so `/healthz`) never waits for a render.
- Cooperative checks inside the job: the sandbox's hooks (`call`, `getattr`, `getitem`, binary
  operators, `range`, joins, output pieces) compare the clock with the job's deadline and stop the
  render themselves (`app/catalog/sandbox.py`). Size checks refuse huge values before computing
  them, so no single C call (a power, a repetition, a padded format) can run away.
- A backstop for loops no hook sees (`{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}`
  over a long string is pure Python): at the deadline the thread still running the job gets an
  exception injected with CPython's `PyThreadState_SetAsyncExc`. It is raised at the thread's
  next bytecode boundary, so it stops any Python-level loop; it cannot interrupt a long C call,
  which is what the size checks are for. The exception derives from BaseException so that no
  `except Exception` in Jinja swallows it. Injection and job completion take the same lock, and a
  finishing job clears any exception still pending for its thread, so an injection never lands in
  the next job or in the pool's own code. CPython ignores an exception raised inside a weakref
  or GC callback, so one injection can be lost: it is repeated every `_REINJECT_SECONDS` until
  the job lets go of its thread. On other interpreters there is no backstop, only the
  cooperative checks.

Killing a thread is not possible in Python and a subprocess per render would cost milliseconds;
this keeps a benign render at a thread hop while no template can hold a thread past its budget
(the few microseconds to the next bytecode boundary aside).

The hop itself (a few hundred microseconds on a busy loop) is most of what rendering a small
prompt costs, so a job its caller knows to be quick (`quick=True`: a compiled template with no
nested loop, macro or include, over small inputs, `app.catalog.engine.renders_quickly` and
`small_inputs`) first runs on the event loop itself, under the same cooperative checks but a
deadline of INLINE_SLICE_SECONDS; should it reach that deadline it is run again in a render
thread with the whole budget. The loop is never held longer than the slice.
"""

from __future__ import annotations

import asyncio
import ctypes
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import structlog

from app.catalog.budget import RenderBudget, render_budget
from app.errors import RenderTimeout

log = structlog.get_logger(__name__)
T = TypeVar("T")

_CAN_INTERRUPT = sys.implementation.name == "cpython"
_REINJECT_SECONDS = 0.1
#: The longest a quick job may hold the event loop before it moves to a render thread.
INLINE_SLICE_SECONDS = 0.005
#: Inputs of a quick job: at most this many characters and items, all values together.
SMALL_INPUTS = 16_384


def small_inputs(*values: object, limit: int = SMALL_INPUTS) -> bool:
    """Whether `values` hold at most `limit` characters and items together (stops counting
    as soon as they do not, so a huge input costs no more than a small one to refuse)."""
    pending = list(values)
    left = limit
    while pending:
        value = pending.pop()
        left -= 1
        if isinstance(value, str):
            left -= len(value)
        elif isinstance(value, Mapping):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list | tuple):
            pending.extend(value)
        elif not isinstance(value, int | float | bool | None):
            return False  # nothing else comes from JSON: unknown size
        if left < 0:
            return False
    return True


class _Interrupted(BaseException):
    """Injected into a render thread at its deadline; never escapes `TemplateRenderer.run`."""


class _Job:
    """One unit of work: which thread runs it, and whether its caller has given up on it."""

    __slots__ = ("abandoned", "thread_id")

    def __init__(self) -> None:
        self.thread_id: int | None = None
        self.abandoned = False


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> None:
    # None clears a pending exception (NULL in C).
    target = ctypes.c_ulong(thread_id)
    ctypes.pythonapi.PyThreadState_SetAsyncExc(target, ctypes.py_object(exc) if exc else None)


class TemplateRenderer:
    """Runs template work in its own pool: `await renderer.run(name, work)`."""

    def __init__(self, *, timeout_seconds: float, max_chars: int, workers: int) -> None:
        self.timeout_seconds = timeout_seconds
        self.max_chars = max_chars
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="render")
        self._lock = threading.Lock()
        self._reinjectors: set[asyncio.Task[None]] = set()  # kept referenced until they end

    async def run(self, name: str, work: Callable[[], T], *, quick: bool = False) -> T:
        """`work()` in a render thread; RenderTimeout once the budget is spent, whatever it does.
        A `quick` job first runs on the loop for at most INLINE_SLICE_SECONDS (see above)."""
        if quick:
            inline = RenderBudget(
                deadline=time.monotonic() + INLINE_SLICE_SECONDS, max_chars=self.max_chars
            )
            try:
                with render_budget(inline):
                    return work()
            except RenderTimeout:
                log.info("render_moved_off_loop", template=name)
        job = _Job()
        budget = RenderBudget(
            deadline=time.monotonic() + self.timeout_seconds, max_chars=self.max_chars
        )
        future = self._pool.submit(self._execute, job, budget, work)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.timeout_seconds)
        except TimeoutError:
            self._abandon(job, name)
            raise RenderTimeout(
                name, f"rendering took longer than {self.timeout_seconds:g} s"
            ) from None
        except asyncio.CancelledError:  # the caller went away: so does the work
            self._abandon(job, name)
            raise
        except _Interrupted:  # injected just as the job finished: it counts as a timeout
            raise RenderTimeout(name, "rendering ran past its time budget") from None

    def _execute(self, job: _Job, budget: RenderBudget, work: Callable[[], T]) -> T:
        with self._lock:
            if job.abandoned:  # waited in the queue past its deadline
                raise _Interrupted
            job.thread_id = threading.get_ident()
        try:
            with render_budget(budget):
                return work()
        finally:
            with self._lock:
                job.thread_id = None
                if _CAN_INTERRUPT and job.abandoned:
                    _set_async_exc(threading.get_ident(), None)

    def _abandon(self, job: _Job, name: str) -> None:
        if not self._interrupt(job):
            return
        log.warning("render_interrupted", template=name)
        task = asyncio.get_running_loop().create_task(self._keep_interrupting(job))
        self._reinjectors.add(task)
        task.add_done_callback(self._reinjectors.discard)

    def _interrupt(self, job: _Job) -> bool:
        """Marks the job abandoned and injects into its thread; False once it holds none."""
        with self._lock:
            job.abandoned = True
            if job.thread_id is None or not _CAN_INTERRUPT:
                return False
            _set_async_exc(job.thread_id, _Interrupted)
            return True

    async def _keep_interrupting(self, job: _Job) -> None:
        """Repeats the injection until the job lets go of its thread (one may be swallowed)."""
        while True:
            await asyncio.sleep(_REINJECT_SECONDS)
            if not self._interrupt(job):
                return

    def close(self) -> None:
        """Stop taking work; running jobs end at their deadline, so there is no need to wait."""
        self._pool.shutdown(wait=False, cancel_futures=True)
