"""Replay (rebuild a historical prompt and prove it) and drift detection over stored jobs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.audit.trail import redact_prompt
from app.catalog import PatternsAdapter
from app.catalog.library import SUFFIX
from app.catalog.templates import (
    FALLBACK_SHA256,
    render_fallback,
    render_template_version,
    template_checksum,
)
from app.errors import GenAIError, JobNotFound, ReplayUnavailable
from app.metrics import Metrics
from app.prompts.redaction import Redactor
from app.schemas import DriftFinding, DriftReport, HashCheck, Message, RenderedPrompt, ReplayResult
from app.store.jobs import AuditWriter, JobRepository
from app.store.secrets import ReplayVault, VaultError
from app.store.tables import Job
from app.store.templates import TemplateRepository
from app.tracking import canonical_json, pattern_content_hash, sha256_hex, user_prompt_hash
from app.tracking import variables_hash as hash_variables


class Auditor:
    def __init__(
        self,
        *,
        jobs: JobRepository,
        writer: AuditWriter,
        templates: TemplateRepository,
        patterns: PatternsAdapter,
        redactor: Redactor,
        vault: ReplayVault | None,
        metrics: Metrics,
    ) -> None:
        self.jobs = jobs
        self.writer = writer
        self.templates = templates
        self.patterns = patterns
        self.redactor = redactor
        self.vault = vault
        self.metrics = metrics

    async def _job(self, job_id: str) -> Job:
        await self.writer.flush()
        job = await self.jobs.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    async def current_source_hash(self, job: Job) -> str | None:
        """The hash of the job's source as it is *now*: file bytes, or template text."""
        if job.source_kind == "pattern":
            path = Path(job.source_base_path) / f"{job.source_name}{SUFFIX}"
            try:
                raw = await asyncio.to_thread(path.read_bytes)
            except OSError:
                return None
            return pattern_content_hash(raw)
        if job.source_kind == "template" and job.template_id is not None:
            version = await self.templates.get_by_id(job.template_id)
            return template_checksum(version.template) if version else None
        return FALLBACK_SHA256

    async def detect_template_drift(self, job: Job) -> DriftFinding | None:
        """Drift: the source a job used no longer hashes to what the job recorded."""
        current = await self.current_source_hash(job)
        if current == job.template_sha256:
            return None
        self.metrics.drift_detections.labels(job.source_kind).inc()
        return DriftFinding(
            source_kind=job.source_kind,
            source_name=job.source_name,
            template_version=job.template_version,
            recorded_sha256=job.template_sha256,
            current_sha256=current,
            jobs=1,
            reason="the source no longer exists"
            if current is None
            else "the source's content changed since the job used it",
        )

    async def drift_report(self, *, limit: int = 1000) -> DriftReport:
        """Check each distinct source used by the newest `limit` jobs."""
        await self.writer.flush()
        findings = []
        sources = await self.jobs.sources(limit)
        for kind, name, base_path, template_id, version, recorded, count in sources:
            probe = Job(
                source_kind=kind,
                source_name=name,
                source_base_path=base_path,
                template_id=template_id,
                template_version=version,
                template_sha256=recorded,
            )
            finding = await self.detect_template_drift(probe)
            if finding is not None:
                findings.append(finding.model_copy(update={"jobs": count}))
        return DriftReport(checked_sources=len(sources), drifted=findings)

    async def _rebuild_system(self, job: Job, variables: dict[str, object]) -> str | None:
        try:
            if job.source_kind == "pattern":
                owner = next(
                    (
                        lib
                        for lib in self.patterns.libraries
                        if lib.base_path == job.source_base_path
                    ),
                    None,
                )
                if owner is None:
                    return None
                await asyncio.to_thread(owner.refresh)  # see the file as it is now
                return owner.apply_template(job.source_name, variables).system
            if job.source_kind == "template" and job.template_id is not None:
                version = await self.templates.get_by_id(job.template_id)
                return render_template_version(version, variables) if version else None
            return render_fallback(job.template_role or "", variables)
        except GenAIError:
            return None

    async def replay(self, job_id: str) -> ReplayResult:
        """Rebuild the exact historical prompt; every stored hash must match the recomputed one."""
        job = await self._job(job_id)
        if job.replay_inputs is None or self.vault is None:
            raise ReplayUnavailable(
                f"Job {job_id} cannot be replayed: its inputs were not kept "
                "(GENAI_AUDIT__STORE_REPLAY_INPUTS is off)."
            )
        try:
            inputs = self.vault.open(job.id, job.replay_inputs)
        except VaultError as exc:
            raise ReplayUnavailable(f"Job {job_id} cannot be replayed: {exc}.") from None
        variables, user_prompt = inputs["variables"], inputs["user_prompt"]
        system = await self._rebuild_system(job, variables)
        prompt = None
        redacted_now = None
        if system is not None:
            prompt = RenderedPrompt(
                system=system, messages=[Message(role="user", content=user_prompt)]
            )
            stored_form, _ = redact_prompt(self.redactor, prompt)
            redacted_now = sha256_hex(canonical_json(stored_form).encode())
        checks = {
            "pattern_content_hash": (job.pattern_content_hash, await self.current_source_hash(job)),
            "variables_hash": (job.variables_hash, hash_variables(variables)),
            "user_prompt_hash": (job.user_prompt_hash, user_prompt_hash(user_prompt)),
            "prompt_redacted": (
                sha256_hex(canonical_json(job.prompt_redacted).encode()),
                redacted_now,
            ),
        }
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
        )
