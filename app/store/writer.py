"""AuditWriter: group-commits pending records and batches outcomes, never dropping an outcome.

One retry schedule for audit writes lives here (FLUSH_BACKOFF, CLOSE_ATTEMPTS), run by tenacity
as provider retries are.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import structlog
from tenacity import AsyncRetrying, RetryCallState, stop_after_attempt, stop_when_event_set
from tenacity.wait import wait_exponential

from app.errors import StoreUnavailable
from app.store.db import STORAGE_ERRORS, store_unavailable
from app.store.group_commit import GroupCommit
from app.store.jobs import JobRepository, record_refused
from app.store.records import JobOutcome, PendingJob
from app.store.spool import OutcomeSpool

log = structlog.get_logger(__name__)

FLUSH_BACKOFF = wait_exponential(multiplier=0.05, exp_base=4, max=5.0)
"""A failed outcome flush waits 0.05, 0.2, 0.8, 3.2 s, then 5 s, repeatedly (and at stop)."""
CLOSE_ATTEMPTS = 4
"""At stop, outcomes are tried this many times; if the store stays down they are spooled."""


class AuditWriter:
    """Writes job records off the request path, in few transactions.

    Pending records (`insert`): group commit (group_commit.py), each caller's future resolving
    once its row is durable, or failing with StoreUnavailable at once (nothing is retried).

    Outcomes (`submit`): only enqueue (never await, so safe while a request is cancelled). A
    background task writes what has queued, up to `batch_size` per transaction, at most
    `flush_seconds` after it arrived. An outcome waits while its job's insert is still in
    flight, so an UPDATE never overtakes its INSERT; the outcome of a job whose insert failed
    is dropped (no record exists). A store that is down keeps every outcome (retried on
    FLUSH_BACKOFF); a record the store refuses is found by bisection and, if the store still
    answers a ping, set aside as `failed` (audit_write_failed).

    `aclose` never cancels a write mid-transaction: it lets running work finish, commits queued
    inserts, drains outcomes with bounded retries and, if the store is still down, spools them
    to a 0600 file in the data directory (spool.py), which `restore_spooled` queues at the next
    start.
    """

    def __init__(
        self,
        jobs: JobRepository,
        *,
        flush_seconds: float,
        batch_size: int,
        insert_window_seconds: float = 0.0,
        stuck_after_seconds: float = 30.0,
        spool_dir: Path | None = None,
    ) -> None:
        self._jobs = jobs
        self._flush_seconds = flush_seconds
        self._batch_size = batch_size
        self._inserts = GroupCommit(
            jobs,
            batch_size=batch_size,
            window_seconds=insert_window_seconds,
            committed=self._committed,
        )
        self._stuck_after = stuck_after_seconds
        self._spool = OutcomeSpool(spool_dir)
        self._pending: dict[str, JobOutcome] = {}
        self._arrived = asyncio.Event()
        self._stopping = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._waiting_since: float | None = None  # when the queue last went from empty to not
        self._last_write = time.monotonic()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="audit-writer")
        self._inserts.start()

    def insert(self, job: PendingJob) -> asyncio.Future[None]:
        """Queue a pending record for the next group commit; the future resolves once durable
        (or fails with StoreUnavailable)."""
        return self._inserts.insert(job)

    def _committed(self, job_ids: Sequence[str], error: StoreUnavailable | None) -> None:
        """Inserts ended: outcomes held back behind them may go, or are dropped with them."""
        if error is None:
            self._last_write = time.monotonic()
        for job_id in job_ids:
            if error is not None:
                self._pending.pop(job_id, None)  # no record exists for an outcome to update
            elif job_id in self._pending:
                self._arrived.set()  # its outcome was held back behind this insert

    # -- outcomes: batched, retried, never dropped ------------------------------------------

    def submit(self, outcome: JobOutcome) -> None:
        """Queue a job's outcome (a later outcome for the same job replaces an earlier one)."""
        if not self._pending:
            self._waiting_since = time.monotonic()
        self._pending.pop(outcome.id, None)
        self._pending[outcome.id] = outcome
        self._arrived.set()

    @property
    def backlog(self) -> int:
        return len(self._pending)

    @property
    def stuck(self) -> bool:
        """Records have waited, with nothing written, for longer than `stuck_after_seconds`."""
        if not self._pending or self._waiting_since is None:
            return False
        idle_since = max(self._waiting_since, self._last_write)
        return time.monotonic() - idle_since > self._stuck_after

    def _writable(self) -> list[str]:
        ready = (job_id for job_id in self._pending if not self._inserts.inserting(job_id))
        return [job_id for job_id, _ in zip(ready, range(self._batch_size), strict=False)]

    async def flush(self) -> None:
        """Write every outcome whose record exists; raises if the store is unreachable (then
        nothing is lost)."""
        async with self._lock:
            while ids := self._writable():
                in_flight = {job_id: self._pending.pop(job_id) for job_id in ids}
                try:
                    await self._write(in_flight, ids)
                except BaseException:
                    # Put back what was not written, unless a newer outcome arrived meanwhile.
                    for job_id, outcome in in_flight.items():
                        self._pending.setdefault(job_id, outcome)
                    raise
            if not self._pending:
                self._waiting_since = None
                self._spool.forget()

    async def catch_up(self) -> None:
        """Read-your-writes for readers: flush what is queued, shielded so a reader going away
        never cancels a flush mid-transaction; a store failure becomes StoreUnavailable (503)."""
        try:
            await asyncio.shield(self.flush())
        except STORAGE_ERRORS as exc:
            raise store_unavailable(exc) from exc

    async def _write(self, in_flight: dict[str, JobOutcome], ids: list[str]) -> None:
        """Writes the outcomes named; removes each from `in_flight` once written or set aside."""
        try:
            await self._jobs.apply([in_flight[job_id] for job_id in ids])
        except Exception as exc:
            if not record_refused(exc):
                raise  # the store is down, locked or slow: keep everything
            if len(ids) > 1:
                half = len(ids) // 2
                await self._write(in_flight, ids[:half])
                await self._write(in_flight, ids[half:])
                return
            await self._set_aside(in_flight, ids[0], exc)
            return
        self._last_write = time.monotonic()
        for job_id in ids:
            del in_flight[job_id]

    async def _set_aside(
        self, in_flight: dict[str, JobOutcome], job_id: str, exc: Exception
    ) -> None:
        """Records that this job's outcome could not be stored, if the store is otherwise up."""
        await self._jobs.ping()  # raises if the store went down: then the outcome is kept
        await self._jobs.set_aside(
            job_id,
            message=f"The store refused this job's final record ({type(exc).__name__}); "
            "it was set aside so later records could be written.",
            completed_at=in_flight[job_id].completed_at,
        )
        self._last_write = time.monotonic()
        del in_flight[job_id]
        log.error("audit_record_set_aside", job_id=job_id, error_type=type(exc).__name__)

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake as soon as the writer is asked to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    def _log_retry(self, event: str) -> Callable[[RetryCallState], None]:
        def log_it(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.error(
                event,
                error_type=type(exc).__name__,
                backlog=self.backlog,
                retry_in_s=round(state.upcoming_sleep, 3),
            )

        return log_it

    async def _flush_unless_stopping(self) -> None:
        if not self._stopping.is_set():  # aclose drains what is left
            await self.flush()

    async def _run(self) -> None:
        retrying = AsyncRetrying(
            wait=FLUSH_BACKOFF,
            stop=stop_when_event_set(self._stopping),  # type: ignore[arg-type]
            sleep=self._pause,
            before_sleep=self._log_retry("audit_flush_failed"),
            reraise=True,
        )
        while not self._stopping.is_set():
            await self._arrived.wait()
            await self._pause(self._flush_seconds)  # let a batch gather
            if self._stopping.is_set():
                return
            self._arrived.clear()
            try:
                await retrying(self._flush_unless_stopping)
            except Exception as exc:  # only when stopping: aclose drains and spools
                log.warning("audit_flush_left_to_close", error_type=type(exc).__name__)

    async def aclose(self) -> None:
        """Stop the loops and write what is left (a clean stop loses no record).

        The loops are never cancelled: a write they are running finishes with its transaction.
        Queued inserts are committed (or failed back to their callers); outcomes are drained
        with bounded retries and, if the store stays down, spooled to disk.
        """
        self._stopping.set()
        self._arrived.set()
        self._inserts.stop()
        await self._inserts.wait_closed()
        await asyncio.sleep(0)  # callbacks on resolved inserts run before outcomes are drained
        if self._task is not None:
            await self._task
        retrying = AsyncRetrying(
            wait=FLUSH_BACKOFF,
            stop=stop_after_attempt(CLOSE_ATTEMPTS),
            before_sleep=self._log_retry("audit_drain_failed"),
            reraise=True,
        )
        try:
            await retrying(self.flush)
        except Exception as exc:
            log.warning("audit_drain_failed", error_type=type(exc).__name__, backlog=self.backlog)
            if self._pending:
                await self._spool.save(list(self._pending.values()))

    # -- spooling: the queue survives a stop while the store is down ------------------------

    async def restore_spooled(self) -> int:
        """Queue records spooled by an earlier stop, then try to write them; returns how many.

        Call at start-up, before serving. A file is deleted once its records are written (or
        respooled at the next stop); if the store is still down they wait in the queue.
        """
        outcomes = await self._spool.load()
        for outcome in outcomes:
            self.submit(outcome)
        if outcomes:
            try:
                await self.flush()
            except Exception as exc:  # the loop retries; the files stay until it succeeds
                log.warning("audit_spool_not_yet_written", error_type=type(exc).__name__)
        return len(outcomes)
