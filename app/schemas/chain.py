"""The audit chain as verified: what `genai audit verify` and `GET /v1/audit/verify` report."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import Field

from app.schemas.base import FrozenModel

ChainProblemKind = Literal[
    "edited", "deleted", "inserted", "reordered", "truncated", "bad_signature", "unknown_key"
]


class ChainProblem(FrozenModel):
    """The first thing that does not verify, located."""

    kind: ChainProblemKind
    seq: int | None = Field(default=None, description="The chain entry (or checkpoint's seq).")
    ref: str | None = Field(default=None, description="The record it links (a job id).")
    detail: str = Field(description="What does not match, in one line.")


class ChainReport(FrozenModel):
    """A walk over entries `from_seq`..`to_seq`; `next_from` continues a walk cut at the bound."""

    ok: bool
    from_seq: int
    to_seq: int = Field(description="The last entry checked (from_seq - 1: none).")
    head_seq: int = Field(description="The chain's last entry when the walk started.")
    entries_checked: int
    checkpoints_checked: int
    unsigned_checkpoints: int = Field(description="Stored while signing was off: not proof.")
    pruned: int = Field(description="Entries whose records a signed prune removed.")
    problem: ChainProblem | None = None
    next_from: int | None = Field(
        default=None, description="More entries remain: verify again from here."
    )


class CheckpointSummary(FrozenModel):
    """A signed statement of the chain head, as stored."""

    seq: int
    signed_at: dt.datetime
    reason: str = Field(description="periodic, prune, shutdown or manual.")
    kid: str | None = Field(description="The signing key's id; null: stored unsigned.")
    detail: dict[str, Any]


class AuditCounters(FrozenModel):
    """This service's own counters since it started (summed over its workers)."""

    template_fallbacks: int = Field(description="Renders that used the fallback prompt.")
    drift_detections: dict[str, int] = Field(description="Sources found changed, by kind.")
    redactions: dict[str, int] = Field(
        description="Values redacted from stored records, by category (once per record)."
    )


class AuditStatus(FrozenModel):
    """Where the audit trail stands: the chain's head and backlogs, the last checkpoint."""

    chain_enabled: bool
    head_seq: int | None = Field(description="The chain's last entry (null: chain off).")
    unchained: int | None = Field(
        description="Finished records the chainer has not linked yet (null: chain off)."
    )
    writer_backlog: int = Field(description="Records queued for the store by this process.")
    writer_stuck: bool
    last_checkpoint: CheckpointSummary | None
    counters: AuditCounters
