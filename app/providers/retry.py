"""The one retry layer for every provider (the SDKs' own retries are switched off).

Retried: rate limits (honouring Retry-After) and upstream 5xx / connection failures, with
exponential back-off and full jitter. Not retried: timeouts (the caller has already waited a
whole timeout), and anything the caller or operator must fix.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_random_exponential

from app.config import UpstreamSettings
from app.errors import ProviderError, UpstreamError, UpstreamRateLimited
from app.observability.metrics import Metrics

T = TypeVar("T")
log = structlog.get_logger(__name__)


class RetryPolicy:
    def __init__(self, settings: UpstreamSettings, *, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self._metrics = metrics
        self._backoff = wait_random_exponential(
            multiplier=settings.backoff_initial_seconds, max=settings.backoff_max_seconds
        )

    def _retriable(self, exc: BaseException) -> bool:
        if isinstance(exc, UpstreamRateLimited):
            # A Retry-After longer than we are willing to wait goes back to the caller at once.
            return (
                exc.retry_after is None or exc.retry_after <= self.settings.max_retry_after_seconds
            )
        return isinstance(exc, UpstreamError)

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, UpstreamRateLimited) and exc.retry_after is not None:
            return exc.retry_after
        return float(self._backoff(state))

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        error_type = getattr(exc, "error_type", type(exc).__name__)
        log.warning(
            "upstream_retry",
            attempt=state.attempt_number,
            error_type=error_type,
            wait_seconds=round(state.upcoming_sleep, 3),
        )
        if self._metrics is not None:  # only ProviderErrors are retried: they name the provider
            self._metrics.retries.labels(getattr(exc, "provider", "unknown"), error_type).inc()

    async def run(self, call: Callable[[], Awaitable[T]]) -> T:
        """Call `call` until it succeeds, fails for good, or attempts run out (then re-raise)."""
        try:
            # Most calls succeed at once: they skip tenacity's loop (about 15 µs a call).
            return await call()
        except ProviderError as exc:
            if not self._retriable(exc) or self.settings.max_retries == 0:
                raise
            first_failure = exc

        replayed = False

        async def attempt_again() -> T:
            """Attempt 1 is the failure already seen, so tenacity's schedule is the only one."""
            nonlocal replayed
            if not replayed:
                replayed = True
                raise first_failure
            return await call()

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.settings.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(self._retriable),
            before_sleep=self._log_retry,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await attempt_again()
        raise AssertionError("unreachable: tenacity re-raises the last error")  # pragma: no cover
