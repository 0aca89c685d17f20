"""Template labels: a name (`production`, `staging`, …) pointing at one version, or a canary
split between two versions by weight, and the history of its moves."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from pydantic import ConfigDict, Field, model_validator

from app.schemas.base import INT32_MAX, JSON_INTEGER, FrozenModel, InputModel

PRODUCTION = "production"
# A path segment of its own (GET …/labels/history), so never a label's name.
RESERVED_LABELS = frozenset({"history"})
LABEL = r"^[a-z0-9][a-z0-9_.-]{0,63}$"

VersionNumber = Annotated[int, Field(ge=1, le=INT32_MAX), JSON_INTEGER]


class SplitShare(InputModel):
    """One side of a canary: a version and its share of traffic, in whole percent."""

    version: VersionNumber
    weight: Annotated[int, Field(ge=1, le=99), JSON_INTEGER]


class LabelMoveIn(InputModel):
    """Point a label at one version, or split it between two; `message` says why (kept)."""

    model_config = ConfigDict(
        json_schema_extra={
            # `_one_target`, stated for validators and fuzzers (if/then/else: see RenderRequest).
            "if": {"properties": {"version": {"type": "integer"}}, "required": ["version"]},
            "then": {"properties": {"split": {"type": "null"}}},
            "else": {"properties": {"split": {"type": "array"}}, "required": ["split"]},
        },
    )

    version: VersionNumber | None = None
    split: list[SplitShare] | None = Field(
        default=None,
        min_length=2,
        max_length=2,
        description="Exactly two different versions whose weights sum to 100, e.g. "
        '`[{"version": 7, "weight": 90}, {"version": 8, "weight": 10}]`.',
    )
    message: str = Field(min_length=1, max_length=2000)

    @model_validator(mode="after")
    def _one_target(self) -> LabelMoveIn:
        if (self.version is None) == (self.split is None):
            raise ValueError("give exactly one of version or split")
        if self.split is not None:
            if len(self.split) != 2:
                raise ValueError("a split names exactly two versions")
            if self.split[0].version == self.split[1].version:
                raise ValueError("a split names two different versions")
            total = sum(share.weight for share in self.split)
            if total != 100:
                raise ValueError(f"the split's weights sum to {total}, not 100")
        return self

    @property
    def versions(self) -> list[int]:
        if self.split is not None:
            return [share.version for share in self.split]
        assert self.version is not None
        return [self.version]


class TemplateLabelInfo(FrozenModel):
    name: str
    role: str
    label: str
    version: int = Field(description="The version (a split's first version).")
    split: list[SplitShare] | None = None
    revision: int
    moved_at: dt.datetime


class LabelMoveRecord(FrozenModel):
    """One move in a label's history; `to_version` and `to_split` are null for a deletion."""

    name: str
    role: str
    label: str
    from_version: int | None
    from_split: list[SplitShare] | None
    to_version: int | None
    to_split: list[SplitShare] | None
    message: str
    author: str
    moved_at: dt.datetime


class TemplateLabelList(FrozenModel):
    labels: list[TemplateLabelInfo]


class LabelHistory(FrozenModel):
    moves: list[LabelMoveRecord]
