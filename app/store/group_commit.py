"""GroupCommit: pending records written many to a transaction, each caller told when its is durable.

Every insert that arrives while the previous commit runs (or within `window_seconds`) is written
in one transaction, and each caller's future resolves once its row is durable. A batch the store
refuses is bisected so one bad row fails only its own request; a store that is down fails every
waiting request with StoreUnavailable (the provider is never called for them). Nothing is
retried: the caller answers 503 at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import structlog

from app.errors import StoreUnavailable
from app.store.db import store_unavailable
from app.store.jobs import JobRepository, record_refused
from app.store.records import PendingJob

# Logged under the writer's name, as before the split: one logger for every audit write.
log = structlog.get_logger("app.store.writer")

_Insert = tuple[PendingJob, "asyncio.Future[None]"]
Committed = Callable[[Sequence[str], StoreUnavailable | None], None]
"""Told which jobs' inserts ended, and how (None: durable), before their callers are."""


class GroupCommit:
    """The insert side of the AuditWriter: one background loop committing groups of rows."""

    def __init__(
        self,
        jobs: JobRepository,
        *,
        batch_size: int,
        window_seconds: float,
        committed: Committed,
    ) -> None:
        self._jobs = jobs
        self._batch_size = batch_size
        self._window = window_seconds
        self._committed = committed
        self._inserts: list[_Insert] = []
        self._inserting: set[str] = set()  # queued or in flight, not yet durable
        self._arrived = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="audit-inserts")

    def inserting(self, job_id: str) -> bool:
        """Whether the job's insert is queued or in flight (its outcome must wait)."""
        return job_id in self._inserting

    def insert(self, job: PendingJob) -> asyncio.Future[None]:
        """Queue a pending record for the next group commit; the future resolves once durable
        (or fails with StoreUnavailable)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._stopping.is_set():
            future.set_exception(
                StoreUnavailable("The service is stopping; send the request again.")
            )
            return future
        self.start()
        self._inserts.append((job, future))
        self._inserting.add(job.id)
        self._arrived.set()
        return future

    def stop(self) -> None:
        """Refuse new inserts from now on; the loop commits what is queued, then ends."""
        self._stopping.set()
        self._arrived.set()

    async def wait_closed(self) -> None:
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        while not (self._stopping.is_set() and not self._inserts):
            if not self._inserts:
                await self._arrived.wait()
            self._arrived.clear()
            if self._window > 0 and not self._stopping.is_set():
                await asyncio.sleep(self._window)  # let a group gather
            else:
                await asyncio.sleep(0)  # requests ready in this turn of the loop join the group
            while self._inserts:
                batch = self._inserts[: self._batch_size]
                del self._inserts[: self._batch_size]
                await self._commit(batch)

    async def _commit(self, batch: Sequence[_Insert]) -> None:
        """One transaction for the batch; on refusal, halves until the bad row stands alone."""
        try:
            await self._jobs.insert_many([job for job, _ in batch])
        except Exception as exc:  # every waiting request must hear back, whatever happened
            if record_refused(exc) and len(batch) > 1:
                half = len(batch) // 2
                await self._commit(batch[:half])
                await self._commit(batch[half:])
                return
            log.error(
                "audit_insert_failed",
                records=len(batch),
                refused=record_refused(exc),
                error_type=type(exc).__name__,
            )
            self._resolve(batch, store_unavailable(exc))
            return
        self._resolve(batch, None)

    def _resolve(self, batch: Sequence[_Insert], error: StoreUnavailable | None) -> None:
        ids = [job.id for job, _ in batch]
        self._inserting.difference_update(ids)
        self._committed(ids, error)
        for _, future in batch:
            if future.done():  # the caller was cancelled; the row stands, its outcome says so
                continue
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)
