"""Work that grows with a request's input leaves the event loop once the input is large.

One rule for every stage: parsing and validating the body, fingerprinting the variables,
assembling the prompt, redacting and sealing the audit record. Below OFFLOAD_CHARS the work runs
inline (a thread hop costs more than it saves); above it, or for any request whose body was
larger than that, it runs in a worker thread, so one caller's large input never stalls the loop
that serves `/healthz` and every other request.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

OFFLOAD_CHARS = 20_000
# One thread on purpose: this work is CPU-bound and holds the interpreter lock, so more threads
# would not finish it sooner, only make the event loop wait longer for the lock each time it
# needs it (each running thread takes a 5 ms turn). Large requests queue here, in order; under
# bench/tenant_stall.py's attacks /healthz's p99 is 16 ms with one thread, 26-35 ms with two.
OFFLOAD_THREADS = 1
_threads: ThreadPoolExecutor | None = None

# Set once a request's body is read; each request runs in its own task, so its own context.
_large_request: ContextVar[bool] = ContextVar("large_request", default=False)


def note_body_size(size: int) -> None:
    """Record the size of the current request's body: past OFFLOAD_CHARS, its work leaves the
    loop at every stage."""
    if size > OFFLOAD_CHARS:
        _large_request.set(True)


def is_large_request() -> bool:
    return _large_request.get()


def _pool() -> ThreadPoolExecutor:
    global _threads
    if _threads is None:  # made on first use, on the event loop's thread
        _threads = ThreadPoolExecutor(OFFLOAD_THREADS, thread_name_prefix="genai-offload")
    return _threads


async def off_loop(work: Callable[[], T], size: int = 0) -> T:
    """`work()`, inline when `size` and the request are small, in a worker thread otherwise
    (with the caller's context variables, as `asyncio.to_thread` would)."""
    if size <= OFFLOAD_CHARS and not _large_request.get():
        return work()
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(_pool(), context.run, work)
