"""The audit chain as verified: what `genai audit verify` and `GET /v1/audit/verify` report."""

from __future__ import annotations

from typing import Literal

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
