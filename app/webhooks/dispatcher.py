"""WebhookDispatcher: the EventSink that queues events durably, and the task that posts them.

`emit` writes one outbox row per configured URL and wakes the task; it never waits for a
receiver and never raises, so a release action is neither slowed nor undone by webhooks. The
task claims due rows with a lease (app/store/webhooks.py), posts each signed body, and records
the outcome: 2xx delivered; 408, 429, 5xx and network failures tried again later (back-off with
jitter, or the receiver's Retry-After) until `max_attempts`; any other status failed for good.
A process that dies mid-attempt leaves a lease that runs out, and the row is claimed again:
delivery is at least once, and receivers dedupe on the event id.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import structlog

from app.config.settings import WebhookSettings
from app.errors import ConfigurationError, GenAIError
from app.observability.metrics import Metrics
from app.store.webhooks import ClaimedDelivery, DeliveryRepository, Settlement
from app.webhooks import backoff, signing

log = structlog.get_logger(__name__)

Result = Literal["delivered", "retry", "failed"]
_RETRIED_STATUSES = frozenset({408, 429})


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True, slots=True)
class DispatchTuning:
    """The numbers of the delivery schedule (GENAI_WEBHOOKS__*)."""

    timeout_seconds: float = 10.0
    max_attempts: int = 8
    backoff_initial_seconds: float = 5.0
    backoff_max_seconds: float = 600.0
    batch_size: int = 20
    poll_seconds: float = 5.0
    stop_grace_seconds: float = 5.0  # attempts under way at shutdown may finish within this

    @property
    def lease_seconds(self) -> float:
        """Longer than any one attempt can take, so a live dispatcher never loses its row."""
        return self.timeout_seconds * 2 + 30.0


class WebhookDispatcher:
    """The real EventSink, and the background task that drains its outbox."""

    def __init__(
        self,
        *,
        deliveries: DeliveryRepository,
        urls: list[str],
        secret: bytes,
        tuning: DispatchTuning,
        metrics: Metrics | None = None,
        clock: Callable[[], dt.datetime] = _utcnow,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._deliveries = deliveries
        self.urls = list(urls)
        self._secret = secret
        self._tuning = tuning
        self._metrics = metrics
        self._clock = clock
        self._jitter = jitter
        self._http = httpx.AsyncClient(timeout=tuning.timeout_seconds, follow_redirects=False)
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def emit(self, event_type: str, data: Mapping[str, Any]) -> None:
        """EventSink: queue the event for every URL; never raises, never waits for a receiver."""
        await self.queue(event_type, data)

    async def queue(self, event_type: str, data: Mapping[str, Any]) -> str | None:
        """`emit` that answers the event id (None: the event could not be queued, and a log
        line and `genai_webhook_events_not_queued_total` say so)."""
        event_id, now = str(uuid.uuid4()), self._clock()
        try:
            payload = {
                "id": event_id,
                "type": event_type,
                "created_at": now.isoformat(),
                "data": json.loads(json.dumps(dict(data), default=str)),
            }
            await self._deliveries.add(
                event_id=event_id, event_type=event_type, urls=self.urls, payload=payload, now=now
            )
        except Exception as exc:  # the contract: the action that emitted is never undone
            log.error("webhook_event_not_queued", event_type=event_type, error=type(exc).__name__)
            if self._metrics is not None:
                self._metrics.webhook_events_lost.inc()
            return None
        self._wake.set()
        return event_id

    def wake(self) -> None:
        """Look for due deliveries now (a retried one), not at the next poll."""
        self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="webhook-dispatcher")

    async def aclose(self) -> None:
        """Stop between two rounds; attempts under way get `stop_grace_seconds` to finish, then
        are cut short (their rows are claimed again once the lease runs out, so a hanging
        receiver cannot hold up a shutdown). Then the HTTP client is closed."""
        self._stop.set()
        self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, self._tuning.stop_grace_seconds)
            except TimeoutError:
                log.warning("webhook_attempts_cut_short_at_stop")
            self._task = None
        await self._http.aclose()

    async def run_once(self) -> int:
        """Claim the due deliveries (one batch) and attempt each; how many were claimed."""
        claimed = await self._deliveries.claim(
            now=self._clock(),
            lease_seconds=self._tuning.lease_seconds,
            limit=self._tuning.batch_size,
        )
        await asyncio.gather(*(self._attempt(delivery) for delivery in claimed))
        return len(claimed)

    async def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before the claim: an emit during the round wakes the next one
            try:
                claimed = await self.run_once()
                wait = 0.0 if claimed >= self._tuning.batch_size else await self._idle_seconds()
            except GenAIError as exc:  # the store is down: try again after a poll interval
                log.warning("webhook_dispatch_paused", error_type=exc.error_type)
                wait = self._tuning.poll_seconds
            except Exception:  # a bug must not end delivery for the process's lifetime
                log.exception("webhook_dispatch_failed")
                wait = self._tuning.poll_seconds
            if wait > 0 and not self._stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)

    async def _idle_seconds(self) -> float:
        """Until the earliest pending row is due, at most one poll interval (other replicas
        queue rows without waking this one)."""
        due = await self._deliveries.next_due()
        if due is None:
            return self._tuning.poll_seconds
        return min(self._tuning.poll_seconds, max(0.0, (due - self._clock()).total_seconds()))

    async def _attempt(self, delivery: ClaimedDelivery) -> None:
        outcome, result = await self._post(delivery)
        try:
            kept = await self._deliveries.settle(delivery, outcome)
        except GenAIError as exc:  # the lease runs out and the row is tried again
            log.warning("webhook_outcome_not_saved", delivery=delivery.id, error=exc.error_type)
            return
        if not kept:
            log.warning("webhook_claim_lost", delivery=delivery.id, attempt=delivery.attempt)
        if self._metrics is not None:
            self._metrics.webhook_deliveries.labels(result).inc()
        log.info(
            "webhook_attempt",
            delivery=delivery.id,
            event_type=delivery.event_type,
            attempt=delivery.attempt,
            result=result,
            status_code=outcome.status_code,
        )

    async def _post(self, delivery: ClaimedDelivery) -> tuple[Settlement, Result]:
        body = json.dumps(delivery.payload, separators=(",", ":")).encode()
        headers = signing.headers(
            self._secret, body, event_type=delivery.event_type, event_id=delivery.event_id
        )
        retry_after: float | None = None
        try:
            async with (
                asyncio.timeout(self._tuning.timeout_seconds),  # a receiver that drips
                # The status and headers are the answer; the body is never read, so a receiver
                # cannot hold an attempt or fill memory with it.
                self._http.stream("POST", delivery.url, content=body, headers=headers) as response,
            ):
                pass
        except (TimeoutError, httpx.TimeoutException):
            status, error = None, f"no answer within {self._tuning.timeout_seconds:g}s"
        except httpx.HTTPError as exc:  # never str(exc): it may carry the URL and its query
            status, error = None, f"request failed: {type(exc).__name__}"
        except httpx.InvalidURL:  # settings check the scheme; a URL httpx still cannot send
            return self._failed(None, "the receiver URL is invalid"), "failed"
        else:
            status = response.status_code
            if 200 <= status < 300:
                return Settlement(status="delivered", at=self._clock(), status_code=status), (
                    "delivered"
                )
            error = f"receiver answered HTTP {status}"
            if status not in _RETRIED_STATUSES and status < 500:
                return self._failed(status, error), "failed"
            if status in (429, 503):
                retry_after = backoff.retry_after_seconds(
                    response.headers.get("retry-after"), now=self._clock()
                )
        if delivery.attempt >= self._tuning.max_attempts:
            return self._failed(status, f"{error} (attempt {delivery.attempt}, the last)"), "failed"
        now = self._clock()
        when = backoff.next_attempt_at(
            delivery.attempt,
            now=now,
            initial=self._tuning.backoff_initial_seconds,
            maximum=self._tuning.backoff_max_seconds,
            retry_after=retry_after,
            jitter=self._jitter,
        )
        return Settlement(
            status="pending", at=now, status_code=status, error=error, next_attempt_at=when
        ), "retry"

    def _failed(self, status: int | None, error: str) -> Settlement:
        return Settlement(status="failed", at=self._clock(), status_code=status, error=error)


def dispatcher_from_settings(
    settings: WebhookSettings, *, deliveries: DeliveryRepository, metrics: Metrics | None = None
) -> WebhookDispatcher | None:
    """None without URLs; ConfigurationError for URLs without a secret (unsigned events
    would let anyone who can reach a receiver forge a release)."""
    if not settings.urls:
        return None
    if settings.secret is None or not settings.secret.get_secret_value():
        raise ConfigurationError(
            "GENAI_WEBHOOKS__SECRET", "is required when GENAI_WEBHOOKS__URLS is set"
        )
    return WebhookDispatcher(
        deliveries=deliveries,
        urls=settings.urls,
        secret=settings.secret.get_secret_value().encode(),
        tuning=DispatchTuning(
            timeout_seconds=settings.timeout_seconds,
            max_attempts=settings.max_attempts,
            backoff_initial_seconds=settings.backoff_initial_seconds,
            backoff_max_seconds=settings.backoff_max_seconds,
        ),
        metrics=metrics,
    )
