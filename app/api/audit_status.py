"""Where the audit trail stands, over HTTP (admin only): the chain's head, what waits to be
linked or written, the last checkpoint and the counters an operator watches (issue 21)."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import AuditBacklogDep, ChainIfOnDep, IsAdmin, MetricsDep
from app.api.errors import error_responses
from app.observability.counter_values import CounterValues
from app.schemas import AuditCounters, AuditStatus, CheckpointSummary

router = APIRouter(prefix="/v1/audit", tags=["audit"], dependencies=[IsAdmin])


@router.get(
    "/status",
    operation_id="getAuditStatus",
    summary="The audit chain's head, its unlinked records, the writer's queue, the last "
    "checkpoint, and the fallback-prompt, drift and redaction counters",
    description="Counters are this service's since it started, summed over its workers (as "
    "`/metrics` shows them). With the chain off, `head_seq` and `unchained` are null.",
    responses=error_responses(),
)
async def get_audit_status(
    backlog: AuditBacklogDep, metrics: MetricsDep, verifier: ChainIfOnDep
) -> AuditStatus:
    read = CounterValues(metrics)
    counters = AuditCounters(
        template_fallbacks=sum(read.of("genai_template_fallbacks").values()),
        drift_detections=read.of("genai_drift_detections", "source_kind"),
        redactions=read.of("genai_redactions", "category"),
    )
    head = unchained = None
    last = None
    if verifier is not None:
        chain = verifier.chain
        head = (await chain.head()).seq
        unchained = await chain.unchained_count()
        last = await chain.last_checkpoint()
    return AuditStatus(
        chain_enabled=verifier is not None,
        head_seq=head,
        unchained=unchained,
        writer_backlog=backlog.backlog,
        writer_stuck=backlog.stuck,
        last_checkpoint=None
        if last is None
        else CheckpointSummary(
            seq=last.seq,
            signed_at=last.signed_at,
            reason=last.reason,
            kid=last.kid,
            detail=last.detail,
        ),
        counters=counters,
    )
