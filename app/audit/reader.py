"""JobReader: the one way audit records are read back, for the API, the CLI and replay alike.

Every read first writes what this process has queued (read-your-writes), so no job is missing.
"""

from __future__ import annotations

from typing import Any

from app.errors import JobNotFound, ReplayUnavailable
from app.schemas import JobPage, JobRecord, SnippetUse, UsageQuery, UsageReport, UsageWindow
from app.store import keyset
from app.store.jobs import JobFilter, JobRepository
from app.store.records import SourceUse, StoredJob
from app.store.secrets import ReplayVault, VaultError
from app.store.usage import UsageRepository
from app.store.writer import AuditWriter


class JobReader:
    """Reads jobs behind the writer's queue; opens sealed replay inputs with the vault."""

    def __init__(
        self, *, jobs: JobRepository, writer: AuditWriter, vault: ReplayVault | None
    ) -> None:
        self.jobs = jobs
        self.writer = writer
        self.vault = vault  # None: replay inputs are not kept
        self.usage_sums = UsageRepository(jobs.sessions)

    async def stored(self, job_id: str) -> StoredJob:
        """The job as stored (sealed replay inputs included); JobNotFound if there is none."""
        await self.writer.catch_up()
        job = await self.jobs.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    async def get(self, job_id: str) -> JobRecord:
        return (await self.stored(job_id)).record()

    async def recent(
        self, *, limit: int, status: str | None = None, source_name: str | None = None
    ) -> list[JobRecord]:
        """The newest jobs, newest first (queued writes first, so none is missing)."""
        await self.writer.catch_up()
        jobs = await self.jobs.recent(limit=limit, status=status, source_name=source_name)
        return [job.record() for job in jobs]

    async def page(self, where: JobFilter, *, limit: int, cursor: str | None = None) -> JobPage:
        """One page of job summaries, newest first (queued writes first, so none is missing)."""
        after = keyset.decode_cursor(cursor) if cursor is not None else None
        await self.writer.catch_up()
        found = await self.jobs.page(where, limit=limit + 1, after=after)
        jobs, next_cursor = keyset.cut(found, limit, lambda job: (job.created_at, job.id))
        return JobPage(jobs=jobs, next_cursor=next_cursor)

    async def sources(self, limit: int) -> list[SourceUse]:
        """Each distinct source the newest `limit` jobs used (queued writes first)."""
        await self.writer.catch_up()
        return await self.jobs.sources(limit)

    async def snippet_uses(self, limit: int) -> list[tuple[SnippetUse, int]]:
        """Each distinct snippet version the newest `limit` jobs used (queued writes first)."""
        await self.writer.catch_up()
        return await self.jobs.snippet_uses(limit)

    async def usage(self, query: UsageQuery) -> UsageReport:
        """Requests, tokens and cost in the query's window, grouped (queued writes first)."""
        await self.writer.catch_up()
        groups, totals = await self.usage_sums.report(query)
        filters = {
            name: value
            for name in ("key", "team", "pattern", "model", "provider")
            if (value := getattr(query, name)) is not None
        }
        return UsageReport(
            window=UsageWindow(start=query.since, end=query.until),
            group_by=query.group_by,
            filters=filters,
            groups=groups,
            totals=totals,
        )

    def replay_inputs(self, job: StoredJob) -> dict[str, Any]:
        """The job's sealed inputs, opened; ReplayUnavailable when they were not kept or cannot
        be opened (sealed under another key, or tampered with)."""
        if job.replay_inputs is None or self.vault is None:
            raise ReplayUnavailable(
                f"Job {job.id} cannot be replayed: its inputs were not kept "
                "(GENAI_AUDIT__STORE_REPLAY_INPUTS is off)."
            )
        try:
            return self.vault.open(job.id, job.replay_inputs)
        except VaultError as exc:
            raise ReplayUnavailable(f"Job {job.id} cannot be replayed: {exc}.") from None
