"""AuditTrail: when records are written. A pending record before every provider call, completed
or failed after it; what each record holds is `RecordBuilder`'s (records.py), reads `JobReader`'s.

`start` queues the pending record on the AuditWriter's group commit. With GENAI_AUDIT__MODE
`before-call` (the default) it returns once the record is durable, so nothing is called without
it; with `with-call` it returns at once and `confirm` waits for durability before the answer is
returned (StoreUnavailable otherwise). Outcomes queue behind their job's insert either way.

Every row, the pending insert and each completion alike, is built redacted and then passes
`storable`, which escapes what a backend refuses.

A record left `pending` by a crash is marked `interrupted` by `interrupt_stale`, but only once it
is older than the longest a request can live (`Settings.stale_pending_after_seconds`): no live
process, this one or another sharing the database, can still complete it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from collections.abc import Callable
from typing import Literal

from app.audit.reader import JobReader
from app.audit.records import (
    CallRun,
    OpenJob,
    RecordBuilder,
    answer_size,
    prompt_size,
    text_size,
)
from app.audit.redaction import Redactor
from app.auth.principal import Principal
from app.concurrency.offload import off_loop
from app.errors import GenAIError, StoreUnavailable
from app.observability.tracing import span
from app.pipeline.prepare import Prepared
from app.providers import ProviderReply
from app.schemas import RenderRequest
from app.store.jobs import JobRepository
from app.store.records import JobOutcome, PendingJob
from app.store.secrets import ReplayVault
from app.store.writer import AuditWriter

__all__ = ["AuditMode", "AuditTrail", "CallRun", "OpenJob"]

INTERRUPTED_MESSAGE = (
    "The process handling this job stopped before recording its outcome; the job is older than "
    "the longest a request can live, so no running process can still complete it."
)

AuditMode = Literal["before-call", "with-call"]


def _observe(future: asyncio.Future[None]) -> None:
    """Marks a failed insert's error as seen: the caller hears of it through `confirm`, or
    not at all if it went away (asyncio would otherwise log it as never retrieved)."""
    if not future.cancelled():
        future.exception()


class AuditTrail:
    """Sequences the writes of each job's records; builds nothing itself."""

    def __init__(
        self,
        *,
        jobs: JobRepository,
        writer: AuditWriter,
        redactor: Redactor,
        vault: ReplayVault | None,
        mode: AuditMode = "before-call",
        on_redacted: Callable[[dict[str, str]], None] | None = None,
    ) -> None:
        self.jobs = jobs
        # Told each finished record's redaction map (token → category): the metrics count it.
        self._on_redacted = on_redacted
        self.writer = writer
        self.records = RecordBuilder(redactor, vault)
        self.reader = JobReader(jobs=jobs, writer=writer, vault=vault)
        self.mode = mode

    async def start(
        self,
        prepared: Prepared,
        *,
        request: RenderRequest,
        request_id: str | None,
        caller: Principal | None = None,
    ) -> OpenJob:
        """Queue the pending record; in before-call mode, return only once it is durable.

        Raises StoreUnavailable (before-call) when it cannot be written: nothing is called.
        """
        started = time.perf_counter()
        job_id = uuid.uuid4().hex
        records = self.records

        def build() -> PendingJob:
            return records.pending(job_id, prepared, request, request_id, caller).made_storable()

        size = prompt_size(prepared.prompt) + len(request.user_prompt)
        # Redacting and queueing the pending record; waiting for it to be durable is `confirm`.
        attributes = {"genai.job_id": job_id, "genai.audit.mode": self.mode}
        with span("genai.audit.insert", attributes=attributes):
            pending = await off_loop(build, size)
            durable = self.writer.insert(pending)
        durable.add_done_callback(_observe)
        job = OpenJob(job_id, pending.redaction_map, pending.escaped_fields or (), durable)
        if self.mode == "before-call":
            try:
                await self.confirm(job)
            except asyncio.CancelledError:
                # The request went away while its record was being written: if the record lands,
                # it says so (the outcome waits behind the insert, and is dropped if it fails).
                self.cancelled(job, CallRun(latency_ms=(time.perf_counter() - started) * 1000))
                raise
        return job

    async def confirm(self, job: OpenJob) -> None:
        """Wait until the job's pending record is durable; StoreUnavailable if it cannot be.

        A no-op once durable (always, after `start` in before-call mode). Shielded: a caller
        going away never cancels the group commit other requests wait on.
        """
        if job.durable is None or (job.durable.done() and job.durable.exception() is None):
            return
        try:
            with span("genai.audit.confirm", attributes={"genai.job_id": job.id}):
                await asyncio.shield(job.durable)
        except StoreUnavailable as exc:  # the cause stays attached for the operator's log line
            if self.mode == "before-call":
                message = (
                    "The audit store cannot be written, so the provider was not called; "
                    "check the database (see /readyz)."
                )
            else:
                message = (
                    "The audit store cannot be written, so the answer is withheld; "
                    "check the database (see /readyz)."
                )
            raise StoreUnavailable(message) from exc.__cause__

    async def check_ready(self) -> None:
        """Raises StoreUnavailable when audit records cannot be written (for /readyz)."""
        await self.jobs.ping()

    async def _record(self, job: OpenJob, build: Callable[[], JobOutcome], size: int) -> None:
        """Builds the outcome (off the loop when large) and queues it, even if cancelled."""

        def storable() -> JobOutcome:
            return build().made_storable(also_escaped=job.escaped_fields)

        try:
            outcome = await off_loop(storable, size)
        except asyncio.CancelledError:
            # The request is being cancelled: its outcome is still recorded, inline.
            outcome = storable()
            self._submit(outcome)
            raise
        self._submit(outcome)

    def _submit(self, outcome: JobOutcome) -> None:
        if self._on_redacted is not None:
            self._on_redacted(outcome.redaction_map)
        self.writer.submit(outcome)

    async def completed(
        self,
        job: OpenJob,
        reply: ProviderReply,
        run: CallRun,
        *,
        answered_by: Prepared | None = None,
        cost_usd: float | None = None,
        cache_saved_usd: float | None = None,
        status: Literal["completed", "cached"] = "completed",
    ) -> None:
        """Record an answer: `answered_by` names a fallback that answered instead."""

        def build() -> JobOutcome:
            return self.records.completed(
                job,
                reply,
                run,
                answered_by=answered_by,
                cost_usd=cost_usd,
                cache_saved_usd=cache_saved_usd,
                status=status,
            )

        await self._record(job, build, answer_size(reply, run))

    async def failed(self, job: OpenJob, error: GenAIError, run: CallRun) -> None:
        """Record an error the caller is about to hear of."""
        size = text_size(error.message, attempts=run.output_attempts)
        await self._record(job, lambda: self.records.failed(job, error, run), size)

    def cancelled(self, job: OpenJob, run: CallRun, *, reason: str | None = None) -> None:
        """Called while the request task is being cancelled: it must not await. `reason` is
        the error type recorded (default: the client disconnected).

        Redaction here is inline, but bounded: only a prefix of each attempt is ever scanned.
        """
        outcome = self.records.cancelled(job, run, reason=reason)
        self._submit(outcome.made_storable(also_escaped=job.escaped_fields))

    async def interrupt_stale(self, *, older_than_seconds: float) -> int:
        """Marks `interrupted` the pending records no live process can still complete.

        This process's own queued completions are written first, so none of them is overtaken.
        """
        await self.writer.flush()
        cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=older_than_seconds)
        return await self.jobs.interrupt_pending(created_before=cutoff, message=INTERRUPTED_MESSAGE)
