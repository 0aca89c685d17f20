"""LabelRepository: which version each label of a template points at, and its history.

A move is checked against the label's `revision` as the caller read it (optimistic concurrency):
the release checks (the pattern tests) run outside any transaction, and a move that another move
beat to the commit is refused as LabelConflict instead of silently undoing it. Each committed
move, creation or deletion appends one `label_moves` row in the same transaction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.errors import LabelConflict, LabelNotFound, TemplateNotFound
from app.schemas import LabelMoveRecord, SplitShare, TemplateLabelInfo
from app.store.db import store_seam
from app.store.tables import LabelMove, PromptTemplate, TemplateLabel


@dataclass(frozen=True, slots=True)
class Target:
    """Where a label points: one version, or a split (its first version is `version`)."""

    version: int
    split: tuple[SplitShare, ...] | None = None

    @property
    def versions(self) -> list[int]:
        return [share.version for share in self.split] if self.split else [self.version]

    def split_json(self) -> list[dict[str, int]] | None:
        if self.split is None:
            return None
        return [share.model_dump() for share in self.split]


@dataclass(frozen=True, slots=True)
class Moved:
    """A committed move: the label before (None: it was created) and after (None: deleted)."""

    before: TemplateLabelInfo | None
    after: TemplateLabelInfo | None
    moved_at: dt.datetime


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _info(row: TemplateLabel) -> TemplateLabelInfo:
    return TemplateLabelInfo(
        name=row.name,
        role=row.role,
        label=row.label,
        version=row.version,
        split=[SplitShare.model_validate(share) for share in row.split] if row.split else None,
        revision=row.revision,
        moved_at=row.moved_at,
    )


def _record(row: LabelMove) -> LabelMoveRecord:
    def shares(raw: list[Any] | None) -> list[SplitShare] | None:
        return [SplitShare.model_validate(share) for share in raw] if raw else None

    return LabelMoveRecord(
        name=row.name,
        role=row.role,
        label=row.label,
        from_version=row.from_version,
        from_split=shares(row.from_split),
        to_version=row.to_version,
        to_split=shares(row.to_split),
        message=row.message,
        author=row.author,
        moved_at=row.moved_at,
    )


async def labels_by_version(
    session: AsyncSession, name: str | None = None, role: str | None = None
) -> dict[tuple[str, str, int], list[str]]:
    """(name, role, version) → the labels pointing at it (a split counts for both versions)."""
    query = select(TemplateLabel).order_by(TemplateLabel.label)
    if name is not None:
        query = query.where(TemplateLabel.name == name)
    if role is not None:
        query = query.where(TemplateLabel.role == role)
    found: dict[tuple[str, str, int], list[str]] = {}
    for row in await session.scalars(query):
        versions = [share["version"] for share in row.split] if row.split else [row.version]
        for version in versions:
            found.setdefault((row.name, row.role, version), []).append(row.label)
    return found


async def point(
    session: AsyncSession,
    *,
    name: str,
    role: str,
    label: str,
    target: Target | None,
    message: str,
    author: str,
    revision: int | None,
) -> Moved:
    """Move (or with `target=None` delete) a label inside the caller's transaction, if its
    revision is still `revision` (None: the label must not exist yet); append the history row."""
    row = await session.scalar(
        select(TemplateLabel).where(
            TemplateLabel.name == name, TemplateLabel.role == role, TemplateLabel.label == label
        )
    )
    before = _info(row) if row is not None else None
    if (before.revision if before else None) != revision:
        raise LabelConflict(
            f"Label {label!r} of {name!r}/{role!r} was moved by someone else meanwhile; "
            "read it again and retry."
        )
    if target is not None:
        await _require_versions(session, name, role, target.versions)
    now = _now()
    after: TemplateLabelInfo | None = None
    if row is None:
        if target is None:
            raise LabelNotFound(f"Template {name!r}/{role!r} has no label {label!r}.")
        row = TemplateLabel(
            name=name,
            role=role,
            label=label,
            version=target.version,
            split=target.split_json(),
            revision=1,
            moved_at=now,
        )
        session.add(row)
        await session.flush()  # a concurrent creation fails here on the unique index
        after = _info(row)
    elif target is None:
        result = await session.execute(
            delete(TemplateLabel).where(
                TemplateLabel.id == row.id, TemplateLabel.revision == revision
            )
        )
        _require_one(result, name, role, label)
    else:
        result = await session.execute(
            update(TemplateLabel)
            .where(TemplateLabel.id == row.id, TemplateLabel.revision == revision)
            .values(
                version=target.version,
                split=target.split_json(),
                revision=TemplateLabel.revision + 1,
                moved_at=now,
            )
            .execution_options(synchronize_session=False)
        )
        _require_one(result, name, role, label)
        after = TemplateLabelInfo(
            name=name,
            role=role,
            label=label,
            version=target.version,
            split=list(target.split) if target.split else None,
            revision=row.revision + 1,
            moved_at=now,
        )
    session.add(
        LabelMove(
            name=name,
            role=role,
            label=label,
            from_version=before.version if before else None,
            from_split=row_split(before),
            to_version=target.version if target else None,
            to_split=target.split_json() if target else None,
            message=message,
            author=author,
            moved_at=now,
        )
    )
    return Moved(before=before, after=after, moved_at=now)


def row_split(info: TemplateLabelInfo | None) -> list[dict[str, int]] | None:
    if info is None or info.split is None:
        return None
    return [share.model_dump() for share in info.split]


def _require_one(result: Any, name: str, role: str, label: str) -> None:
    if result.rowcount != 1:
        raise LabelConflict(
            f"Label {label!r} of {name!r}/{role!r} was moved by someone else meanwhile; "
            "read it again and retry."
        )


async def _require_versions(
    session: AsyncSession, name: str, role: str, versions: Sequence[int]
) -> None:
    found = set(
        await session.scalars(
            select(PromptTemplate.version).where(
                PromptTemplate.name == name,
                PromptTemplate.role == role,
                PromptTemplate.version.in_(versions),
            )
        )
    )
    missing = [v for v in versions if v not in found]
    if missing:
        raise TemplateNotFound(
            f"Template {name!r} has no version {missing[0]} for role {role!r}; "
            "GET /v1/templates lists the versions."
        )


class LabelRepository:
    """Each method is a `store_seam`: storage failures are StoreUnavailable."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    @store_seam
    async def get(self, name: str, role: str, label: str) -> TemplateLabelInfo | None:
        async with self._sessions() as session:
            row = await session.scalar(
                select(TemplateLabel).where(
                    TemplateLabel.name == name,
                    TemplateLabel.role == role,
                    TemplateLabel.label == label,
                )
            )
            return _info(row) if row is not None else None

    @store_seam
    async def labels_of(self, name: str, role: str) -> list[TemplateLabelInfo]:
        async with self._sessions() as session:
            rows = await session.scalars(
                select(TemplateLabel)
                .where(TemplateLabel.name == name, TemplateLabel.role == role)
                .order_by(TemplateLabel.label)
            )
            return [_info(row) for row in rows]

    @store_seam
    async def history(
        self, name: str, role: str, label: str | None = None, *, limit: int = 500
    ) -> list[LabelMoveRecord]:
        """The newest moves first."""
        query = (
            select(LabelMove)
            .where(LabelMove.name == name, LabelMove.role == role)
            .order_by(LabelMove.moved_at.desc(), LabelMove.id.desc())
            .limit(limit)
        )
        if label is not None:
            query = query.where(LabelMove.label == label)
        async with self._sessions() as session:
            return [_record(row) for row in await session.scalars(query)]

    @store_seam
    async def move(
        self,
        *,
        name: str,
        role: str,
        label: str,
        target: Target | None,
        message: str,
        author: str,
        revision: int | None,
    ) -> Moved:
        """Point (or delete, `target=None`) a label, recorded; see `point`."""
        try:
            async with self._sessions.begin() as session:
                return await point(
                    session,
                    name=name,
                    role=role,
                    label=label,
                    target=target,
                    message=message,
                    author=author,
                    revision=revision,
                )
        except IntegrityError:
            raise LabelConflict(
                f"Label {label!r} of {name!r}/{role!r} was created by someone else meanwhile; "
                "read it again and retry."
            ) from None
