"""JobRepository, and the AuditWriter that batches job completions into few transactions."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import time
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, StatementError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.store.db import STORAGE_ERRORS, store_seam, store_unavailable
from app.store.private import PRIVATE_FILE_MODE, ensure_private_dir
from app.store.tables import Job, UTCDateTime

log = structlog.get_logger(__name__)
_INSERT_JOB = insert(Job.metadata.tables[Job.__tablename__])

_RETRY_SECONDS = (0.05, 0.2, 1.0, 5.0)  # a failed flush waits this long, then the last, repeatedly
_CLOSE_RETRY_SECONDS = (0.05, 0.2, 1.0)  # at stop: retries this bounded, then the queue is spooled


class JobRepository:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    @store_seam
    async def insert(self, job: dict[str, Any]) -> None:
        """One small transaction, committed before the provider is called.

        A prebuilt Core INSERT with the row as parameters: measured faster than both the ORM
        unit of work and a per-call `insert().values()` (bench/README.md).
        """
        async with self._sessions.begin() as session:
            await session.execute(_INSERT_JOB, job)

    async def apply(self, changes: list[dict[str, Any]]) -> None:
        """Many completions in one transaction (bulk UPDATE by primary key).

        Not behind the storage seam on purpose: the AuditWriter reads the raw error to tell a
        record the store refuses from a store that is down.
        """
        async with self._sessions.begin() as session:
            await session.execute(update(Job), changes)

    @store_seam
    async def interrupt_pending(self, *, created_before: dt.datetime, message: str) -> int:
        """Marks `interrupted` every record still pending that was created before the cut-off."""
        query = (
            update(Job)
            .where(Job.status == "pending", Job.created_at < created_before)
            .values(
                status="interrupted",
                error_type="interrupted",
                error_message=message,
                completed_at=dt.datetime.now(dt.UTC),
            )
            .execution_options(synchronize_session=False)
        )
        async with self._sessions.begin() as session:
            result = await session.execute(query)
        return int(getattr(result, "rowcount", 0) or 0)

    @store_seam
    async def ping(self) -> None:
        """Touch the table records are written to; raises when it cannot be read."""
        async with self._sessions() as session:
            await session.execute(select(Job.id).limit(0))

    @store_seam
    async def get(self, job_id: str) -> Job | None:
        async with self._sessions() as session:
            return await session.get(Job, job_id)

    @store_seam
    async def sources(self, limit: int) -> list[tuple[Any, ...]]:
        """Distinct (kind, name, base path, template id, version, hash) seen in the newest jobs."""
        recent = select(Job).order_by(Job.created_at.desc()).limit(limit).subquery()
        query = (
            select(
                recent.c.source_kind,
                recent.c.source_name,
                recent.c.source_base_path,
                recent.c.template_id,
                recent.c.template_version,
                recent.c.template_sha256,
                func.count(),
            )
            .group_by(
                recent.c.source_kind,
                recent.c.source_name,
                recent.c.source_base_path,
                recent.c.template_id,
                recent.c.template_version,
                recent.c.template_sha256,
            )
            .order_by(recent.c.source_name)
        )
        async with self._sessions() as session:
            return [tuple(row) for row in await session.execute(query)]


def _record_refused(exc: BaseException) -> bool:
    """The store answered and refused this data (SQLSTATE class 22/23, or the driver could not
    encode a value), as opposed to being down, locked or slow: structured fields, not messages."""
    if isinstance(exc, DBAPIError):
        state = str(getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None) or "")
        return isinstance(exc, DataError | IntegrityError) or state[:2] in {"22", "23"}
    if isinstance(exc, StatementError):  # raised while binding a parameter, before any I/O
        return True
    return isinstance(exc, ValueError | TypeError) and not isinstance(exc, OSError)


class AuditWriter:
    """Completes job records off the request path without ever dropping one.

    `submit` only enqueues (it never awaits, so it is safe even while a request is being
    cancelled). A background task writes whatever has queued, up to `batch_size` per
    transaction, at most `flush_seconds` after it arrived.

    Two kinds of failure are told apart. A store that is down, locked or slow keeps every
    record: the batch goes back to the queue and the loop backs off and retries. A record the
    store refuses (a value it cannot take) is found by splitting the failing batch in halves;
    once it is alone and the store still answers a ping, it is set aside as `failed` with
    error_type `audit_write_failed`, so one bad record never blocks the ones after it.

    `aclose` never cancels a flush mid-transaction: it stops the loop, lets a running flush
    finish, drains with bounded retries and, if the store is still down, spools the queue to a
    0600 file in the data directory, which `restore_spooled` queues again at the next start.
    """

    def __init__(
        self,
        jobs: JobRepository,
        *,
        flush_seconds: float,
        batch_size: int,
        stuck_after_seconds: float = 30.0,
        spool_dir: Path | None = None,
    ) -> None:
        self._jobs = jobs
        self._flush_seconds = flush_seconds
        self._batch_size = batch_size
        self._stuck_after = stuck_after_seconds
        self._spool_dir = spool_dir
        self._pending: dict[str, dict[str, Any]] = {}
        self._arrived = asyncio.Event()
        self._stopping = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._waiting_since: float | None = None  # when the queue last went from empty to not
        self._last_write = time.monotonic()
        self._restored: list[Path] = []  # spool files whose records are queued, not yet written

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="audit-writer")

    def submit(self, job_id: str, change: dict[str, Any]) -> None:
        if not self._pending:
            self._waiting_since = time.monotonic()
        self._pending.setdefault(job_id, {"id": job_id}).update(change)
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

    async def flush(self) -> None:
        """Write everything queued now; raises if the store is unreachable (nothing is lost)."""
        async with self._lock:
            while self._pending:
                ids = list(self._pending)[: self._batch_size]
                in_flight = {job_id: self._pending.pop(job_id) for job_id in ids}
                try:
                    await self._write(in_flight, ids)
                except BaseException:
                    # Put back what was not written, under anything submitted meanwhile.
                    for job_id, change in in_flight.items():
                        self._pending[job_id] = {**change, **self._pending.get(job_id, {})}
                    raise
            self._waiting_since = None
            self._forget_restored()

    async def catch_up(self) -> None:
        """Read-your-writes for readers: flush what is queued, shielded so a reader going away
        never cancels a flush mid-transaction; a store failure becomes StoreUnavailable (503)."""
        try:
            await asyncio.shield(self.flush())
        except STORAGE_ERRORS as exc:
            raise store_unavailable(exc) from exc

    async def _write(self, in_flight: dict[str, dict[str, Any]], ids: list[str]) -> None:
        """Writes the records named; removes each from `in_flight` once written or set aside."""
        try:
            await self._jobs.apply([in_flight[job_id] for job_id in ids])
        except Exception as exc:
            if not _record_refused(exc):
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
        self, in_flight: dict[str, dict[str, Any]], job_id: str, exc: Exception
    ) -> None:
        """Records that this job's outcome could not be stored, if the store is otherwise up."""
        await self._jobs.ping()  # raises if the store went down: then the record is kept
        completed_at = in_flight[job_id].get("completed_at")
        await self._jobs.apply(
            [
                {
                    "id": job_id,
                    "status": "failed",
                    "error_type": "audit_write_failed",
                    "error_message": f"The store refused this job's final record "
                    f"({type(exc).__name__}); it was set aside so later records could be written.",
                    "completed_at": completed_at
                    if isinstance(completed_at, dt.datetime)
                    else dt.datetime.now(dt.UTC),
                }
            ]
        )
        self._last_write = time.monotonic()
        del in_flight[job_id]
        log.error("audit_record_set_aside", job_id=job_id, error_type=type(exc).__name__)

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake as soon as the writer is asked to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            await self._arrived.wait()
            await self._pause(self._flush_seconds)  # let a batch gather
            if self._stopping.is_set():
                return  # aclose drains what is left
            self._arrived.clear()
            try:
                await self.flush()
                failures = 0
            except Exception as exc:  # the writer must outlive any failure: log, keep, retry
                delay = _RETRY_SECONDS[min(failures, len(_RETRY_SECONDS) - 1)]
                failures += 1
                log.error(
                    "audit_flush_failed",
                    error_type=type(exc).__name__,
                    backlog=self.backlog,
                    retry_in_s=delay,
                )
                self._arrived.set()
                await self._pause(delay)

    async def aclose(self) -> None:
        """Stop the loop and write what is left (a clean stop loses no record).

        The loop is never cancelled: a flush it is running finishes with its transaction. The
        rest is drained with bounded retries; if the store stays down, it is spooled to disk.
        """
        self._stopping.set()
        self._arrived.set()
        if self._task is not None:
            await self._task
        for delay in (*_CLOSE_RETRY_SECONDS, None):
            try:
                await self.flush()
                return
            except Exception as exc:
                log.warning(
                    "audit_drain_failed", error_type=type(exc).__name__, backlog=self.backlog
                )
                if delay is None:
                    break
                await asyncio.sleep(delay)
        await self._spool()

    # -- spooling: the queue survives a stop while the store is down ----------------------

    async def _spool(self) -> None:
        if not self._pending:
            return
        if self._spool_dir is None:
            log.error("audit_records_lost", backlog=self.backlog, reason="no spool directory")
            return
        lines = "".join(
            json.dumps(change, default=_to_json) + "\n" for change in self._pending.values()
        )
        path = self._spool_dir / f"audit-spool-{time.time_ns()}-{os.getpid()}.jsonl"
        await asyncio.to_thread(_write_private, path, lines)
        log.warning("audit_spooled", path=str(path), records=self.backlog)
        self._forget_restored()  # their records are in the new file

    async def restore_spooled(self) -> int:
        """Queue records spooled by an earlier stop, then try to write them; returns how many.

        Call at start-up, before serving. A file is deleted once its records are written (or
        respooled at the next stop); if the store is still down they wait in the queue.
        """
        spool_dir = self._spool_dir
        if spool_dir is None:
            return 0
        files = sorted(await asyncio.to_thread(lambda: list(spool_dir.glob(_SPOOL_GLOB))))
        count = 0
        for path in files:
            try:
                text = await asyncio.to_thread(path.read_text, encoding="utf-8")
                changes = [_from_json(json.loads(line)) for line in text.splitlines() if line]
            except (OSError, ValueError) as exc:
                log.error("audit_spool_unreadable", path=str(path), error_type=type(exc).__name__)
                continue
            for change in changes:
                self.submit(change["id"], change)
            self._restored.append(path)
            count += len(changes)
        if count:
            log.info("audit_spool_restored", records=count, files=len(self._restored))
            try:
                await self.flush()
            except Exception as exc:  # the loop retries; the files stay until it succeeds
                log.warning("audit_spool_not_yet_written", error_type=type(exc).__name__)
        return count

    def _forget_restored(self) -> None:
        for path in self._restored:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._restored = []


_SPOOL_GLOB = "audit-spool-*.jsonl"
_DATETIME_COLUMNS = frozenset(
    column.name for column in Job.__table__.columns if isinstance(column.type, UTCDateTime)
)


def _to_json(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} cannot be spooled")


def _from_json(change: dict[str, Any]) -> dict[str, Any]:
    return {
        name: dt.datetime.fromisoformat(value)
        if name in _DATETIME_COLUMNS and isinstance(value, str)
        else value
        for name, value in change.items()
    }


def _write_private(path: Path, text: str) -> None:
    """Written whole, then renamed into place: a reader never sees half a file."""
    ensure_private_dir(path.parent)
    partial = path.with_suffix(".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)
