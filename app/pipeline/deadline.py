"""Deadline: the instant a request's upstream work must be done by, and a guard that enforces it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from app.errors import DeadlineExceeded


@dataclass(frozen=True, slots=True)
class Deadline:
    """The monotonic instant a request's upstream work must be done by."""

    seconds: float
    expires_at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(seconds, time.monotonic() + seconds)

    def remaining(self) -> float:
        return self.expires_at - time.monotonic()

    def exceeded(self) -> DeadlineExceeded:
        ms = round(self.seconds * 1000)
        return DeadlineExceeded(
            f"The request's deadline of {ms} ms passed before an answer arrived (set by "
            "GENAI_UPSTREAM__DEADLINE_SECONDS or the x-genai-deadline-ms header).",
            deadline_ms=ms,
        )

    @contextlib.asynccontextmanager
    async def guard(self) -> AsyncIterator[None]:
        """Run the block until the deadline; past it, DeadlineExceeded."""
        try:
            async with asyncio.timeout_at(_loop_time(self.expires_at)):
                yield
        except TimeoutError:
            raise self.exceeded() from None


def _loop_time(monotonic_at: float) -> float:
    """A `time.monotonic()` instant on the running loop's clock (they may differ)."""
    return asyncio.get_running_loop().time() + (monotonic_at - time.monotonic())
