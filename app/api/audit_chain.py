"""The audit chain over HTTP (admin only): verify a range of it (issue 20)."""

from __future__ import annotations

from fastapi import APIRouter, Query

from app.api.deps import ChainDep, IsAdmin, SettingsDep
from app.api.errors import error_responses
from app.schemas import ChainReport

router = APIRouter(prefix="/v1/audit", tags=["audit"], dependencies=[IsAdmin])

SEQ_MAX = 2**63 - 1


@router.get(
    "/verify",
    operation_id="verifyAuditChain",
    summary="Walk the audit chain; name the first entry edited, deleted, inserted or reordered, "
    "and a tail cut since a checkpoint",
    description="One call checks at most GENAI_AUDIT__VERIFY_MAX_ENTRIES entries; when more "
    "remain, `next_from` says where to continue. A problem found is an answer (200, `ok: "
    "false`); 409 `audit_chain_disabled` when the chain is off. A `to` below `from` is an "
    "empty range: nothing is checked.",
    responses=error_responses(409, 422),
)
async def verify_audit_chain(
    chain: ChainDep,
    settings: SettingsDep,
    from_seq: int = Query(default=1, ge=1, le=SEQ_MAX, alias="from", description="First entry."),
    to_seq: int | None = Query(
        default=None, ge=1, le=SEQ_MAX, alias="to", description="Last entry (default: the head)."
    ),
) -> ChainReport:
    return await chain.verify(from_seq, to_seq, max_entries=settings.audit.verify_max_entries)
