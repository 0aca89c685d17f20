"""Replay (rebuild a historical prompt through the live pipeline and prove it) and drift."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from app.audit.reader import JobReader
from app.audit.records import redact_prompt
from app.audit.redaction import Redactor
from app.catalog import PatternCatalog
from app.catalog.chat import CHAT_BASE_PATH, CHAT_HASHES
from app.catalog.templates import FALLBACK_SHA256
from app.errors import GenAIError
from app.observability.metrics import Metrics
from app.pipeline.prepare import PromptPreparer
from app.schemas import (
    DriftFinding,
    DriftReport,
    HashCheck,
    RenderedPrompt,
    RenderRequest,
    ReplayResult,
    SnippetUse,
    TemplateRef,
)
from app.snippets import SnippetLibrary
from app.store.records import SourceUse, StoredJob
from app.store.templates import TemplateRepository
from app.tracking import (
    canonical_json,
    continuation_hash,
    sha256_hex,
    template_checksum,
    user_prompt_hash,
)
from app.tracking import variables_hash as hash_variables

log = structlog.get_logger(__name__)


def _prompt_hash(stored_form: Any) -> str:
    return sha256_hex(canonical_json(stored_form).encode())


def _snippet_hashes(used: list[SnippetUse]) -> str:
    """One hash over the (identifier, text hash) pairs a prompt was composed from, in order."""
    return sha256_hex(canonical_json([[u.identifier, u.sha256] for u in used]).encode())


class Replayer:
    """Rebuilds prompts with the same PromptPreparer completions use; compares against sources."""

    def __init__(
        self,
        *,
        reader: JobReader,
        preparer: PromptPreparer,
        patterns: PatternCatalog,
        templates: TemplateRepository,
        redactor: Redactor,
        metrics: Metrics,
        snippets: SnippetLibrary | None = None,
    ) -> None:
        self.snippets = snippets  # None: snippet drift is not checked
        self.reader = reader
        self.preparer = preparer
        self.patterns = patterns
        self.templates = templates
        self.redactor = redactor
        self.metrics = metrics

    async def _see_files_now(self) -> None:
        """Re-scan pattern files once (off the event loop) before comparing against them."""
        await asyncio.to_thread(self.patterns.refresh)

    async def current_source_hash(self, job: StoredJob | SourceUse) -> str | None:
        """The hash of the job's source as last scanned; None if it is gone or no longer loads."""
        if job.source_kind == "pattern" and job.source_base_path == CHAT_BASE_PATH:
            # The built-in chat source: no file, every version ships with the code.
            recorded = job.pattern_content_hash
            return recorded if recorded in CHAT_HASHES else None
        if job.source_kind == "pattern":
            owner = next(
                (lib for lib in self.patterns.libraries if lib.base_path == job.source_base_path),
                None,
            )
            if owner is None:
                return None
            try:
                return owner.info(job.source_name).content_hash  # no compile needed
            except GenAIError:
                return None
        if job.source_kind == "template" and job.template_id is not None:
            version = await self.templates.get_by_id(job.template_id)
            return template_checksum(version.template) if version else None
        return FALLBACK_SHA256

    async def detect_template_drift(self, job: StoredJob) -> DriftFinding | None:
        """Drift: the source a job used no longer hashes to what the job recorded."""
        await self._see_files_now()
        return await self._drift(job)

    async def _drift(self, job: StoredJob | SourceUse) -> DriftFinding | None:
        current = await self.current_source_hash(job)
        if current == job.pattern_content_hash:
            return None
        self.metrics.drift_detections.labels(job.source_kind).inc()
        return DriftFinding(
            source_kind=job.source_kind,
            source_name=job.source_name,
            template_version=job.template_version,
            recorded_sha256=job.pattern_content_hash,
            current_sha256=current,
            jobs=1,
            reason="the source no longer exists or no longer loads"
            if current is None
            else "the source's content changed since the job used it",
        )

    async def drift_report(self, *, limit: int = 1000) -> DriftReport:
        """Check each distinct source used by the newest `limit` jobs."""
        await self._see_files_now()
        findings = []
        sources = await self.reader.sources(limit)
        for use in sources:
            finding = await self._drift(use)
            if finding is not None:
                findings.append(finding.model_copy(update={"jobs": use.jobs}))
        snippet_findings, checked = await self._snippet_drift(limit)
        return DriftReport(
            checked_sources=len(sources) + checked, drifted=findings + snippet_findings
        )

    async def _snippet_drift(self, limit: int) -> tuple[list[DriftFinding], int]:
        """Each snippet version recent jobs used whose identifier now composes to other text."""
        if self.snippets is None:
            return [], 0
        await asyncio.to_thread(self.snippets.refresh_files)
        uses = await self.reader.snippet_uses(limit)
        current = await self.snippets.current([use.identifier for use, _ in uses])
        findings = []
        for use, jobs in uses:
            now = current.get(use.identifier)
            if now is not None and now.sha256 == use.sha256:
                continue
            self.metrics.drift_detections.labels("snippet").inc()
            findings.append(
                DriftFinding(
                    source_kind="snippet",
                    source_name=use.identifier,
                    template_version=None,
                    recorded_sha256=use.sha256,
                    current_sha256=None if now is None else now.sha256,
                    jobs=jobs,
                    reason="the snippet was deleted or hidden since the job used it"
                    if now is None
                    else "the snippet was edited since the job used it",
                    recorded_version=use.version,
                    current_version=None if now is None else now.version,
                )
            )
        return findings, len(uses)

    def _request(self, job: StoredJob, inputs: dict[str, Any]) -> RenderRequest:
        """The request that produced the job, rebuilt from the record and its sealed inputs."""
        source: dict[str, Any] = {"pattern_key": job.source_name}
        if job.source_kind != "pattern":
            source = {
                "template": TemplateRef(
                    name=job.source_name, role=job.template_role or "", version=job.template_version
                )
            }
        return RenderRequest(
            **source,
            variables=inputs["variables"],
            user_prompt=inputs["user_prompt"],
            # The stored model name may be redacted; newer sealed inputs keep it as chosen.
            model=inputs.get("model") or f"{job.provider}/{job.model}",
            snippets=inputs.get("snippets") or {},
            instructions=inputs.get("instructions"),
            continuation=inputs.get("continuation") or [],
        )

    async def replay(self, job_id: str, *, reveal: bool = False) -> ReplayResult:
        """Rebuild the exact historical prompt; every stored hash must match the recomputed one.

        The prompt comes back redacted, as it is stored; only `reveal` returns it raw, and every
        reveal is logged (with the caller's key id) and counted.
        """
        job = await self.reader.stored(job_id)
        inputs = self.reader.replay_inputs(job)
        prompt: RenderedPrompt | None = None
        rebuilt_prompt_hash = rebuilt_snippets = None
        await self._see_files_now()
        try:
            pins = {u.identifier: u.version for u in job.snippet_versions or [] if u.version}
            prepared = await self.preparer.prepare(
                self._request(job, inputs), snippet_versions=pins
            )
            rebuilt = prepared.prompt
        except GenAIError as exc:  # the source is gone or no longer renders: hashes say so
            log.info("replay_render_failed", job_id=job.id, error_type=exc.error_type)
        else:
            rebuilt_snippets = _snippet_hashes(prepared.snippets.used)
            stored_form = redact_prompt(self.redactor, rebuilt)[0]
            rebuilt_prompt_hash = _prompt_hash(stored_form)
            prompt = rebuilt
            if not reveal:
                prompt = RenderedPrompt.model_validate(
                    {**stored_form, "system_folded": rebuilt.system_folded}
                )
        if reveal:
            self.metrics.replay_reveals.inc()
            log.warning("replay_revealed", job_id=job.id)
        stored_prompt_hash = _prompt_hash(job.prompt_redacted.model_dump(exclude_unset=True))
        checks: dict[str, tuple[str, str | None]] = {
            "pattern_content_hash": (job.pattern_content_hash, await self.current_source_hash(job)),
            "variables_hash": (job.variables_hash, hash_variables(inputs["variables"])),
            "user_prompt_hash": (job.user_prompt_hash, user_prompt_hash(inputs["user_prompt"])),
        }
        if job.continuation_hash is not None:  # prov-2: the turns after the user prompt
            turns = inputs.get("continuation") or []
            checks["continuation_hash"] = (job.continuation_hash, continuation_hash(turns))
        if job.snippet_versions:  # recorded since snippet versions; the texts the job used
            checks["snippet_hashes"] = (_snippet_hashes(job.snippet_versions), rebuilt_snippets)
        checks["prompt_redacted"] = (stored_prompt_hash, rebuilt_prompt_hash)
        hashes = {
            name: HashCheck(stored=stored, recomputed=now, matches=stored == now)
            for name, (stored, now) in checks.items()
        }
        differing = [name for name, check in hashes.items() if not check.matches]
        return ReplayResult(
            job_id=job.id,
            reproduced=not differing,
            hashes=hashes,
            differing=differing,
            prompt=prompt,
            revealed=reveal and prompt is not None,
        )
