"""TemplateRepository: immutable versions of (name, role); labels say which one is live.

Which version answers is no longer a flag on the version: the `production` label points at it
(app/store/labels.py). A version is read with the labels pointing at it, and `active` is true
when `production` is one of them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.errors import TemplateConflict, TemplateNotFound
from app.schemas import PRODUCTION, TemplateCreate, TemplateVersion
from app.store.db import store_seam
from app.store.labels import Moved, Target, labels_by_version, point
from app.store.tables import PromptTemplate, TemplateLabel
from app.tracking import template_checksum


def _version(row: PromptTemplate, labels: list[str] | None = None) -> TemplateVersion:
    fields: dict[str, Any] = {
        "id": row.id,
        "name": row.name,
        "role": row.role,
        "version": row.version,
        "template": row.template,
        "variables": row.variables,
        "checksum": row.checksum,
        "blueprint_schema": row.blueprint_schema,
        "blueprint_instructions": row.blueprint_instructions,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "labels": labels or [],
        "active": PRODUCTION in (labels or []),
        "tests": row.tests or [],
    }
    return TemplateVersion.model_validate(fields)


class TemplateRepository:
    """Each method that reads or writes is a `store_seam`: storage failures are StoreUnavailable."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    @store_seam
    async def latest_version(self, name: str, role: str) -> int | None:
        async with self._sessions() as session:
            return await session.scalar(
                select(func.max(PromptTemplate.version)).where(
                    PromptTemplate.name == name, PromptTemplate.role == role
                )
            )

    @store_seam
    async def create_version(
        self, new: TemplateCreate, *, author: str = "cli", message: str | None = None
    ) -> tuple[TemplateVersion, Moved | None]:
        """Store the next version; `production` moves to it when asked (`activate`) and always
        for the first version of a (name, role), in the same transaction."""
        try:
            async with self._sessions.begin() as session:
                latest = await session.scalar(
                    select(func.max(PromptTemplate.version)).where(
                        PromptTemplate.name == new.name, PromptTemplate.role == new.role
                    )
                )
                row = PromptTemplate(
                    name=new.name,
                    role=new.role,
                    version=(latest or 0) + 1,
                    template=new.template,
                    variables=list(new.variables),
                    checksum=template_checksum(new.template),
                    blueprint_schema=new.blueprint_schema,
                    blueprint_instructions=new.blueprint_instructions,
                    tests=[case.model_dump(mode="json") for case in new.tests] or None,
                )
                session.add(row)
                await session.flush()
                moved = None
                if new.activate or latest is None:
                    revision = await _revision(session, new.name, new.role, PRODUCTION)
                    moved = await point(
                        session,
                        name=new.name,
                        role=new.role,
                        label=PRODUCTION,
                        target=Target(version=row.version),
                        message=message or creation_message(row.version, new.activate),
                        author=author,
                        revision=revision,
                    )
                labels = (await labels_by_version(session, new.name, new.role)).get(
                    (row.name, row.role, row.version), []
                )
                return _version(row, labels), moved
        except IntegrityError:
            raise TemplateConflict(
                f"Another version of {new.name!r}/{new.role!r} was stored at the same time; "
                "send the request again."
            ) from None

    @staticmethod
    async def _find(session: AsyncSession, name: str, role: str, version: int) -> PromptTemplate:
        row = await session.scalar(
            select(PromptTemplate).where(
                PromptTemplate.name == name,
                PromptTemplate.role == role,
                PromptTemplate.version == version,
            )
        )
        if row is None:
            raise TemplateNotFound(f"Template {name!r} has no version {version} for role {role!r}.")
        return row

    @store_seam
    async def get(self, name: str, role: str, version: int) -> TemplateVersion:
        async with self._sessions() as session:
            row = await self._find(session, name, role, version)
            labels = await labels_by_version(session, name, role)
            return _version(row, labels.get((name, role, version)))

    @store_seam
    async def get_by_id(self, template_id: int) -> TemplateVersion | None:
        async with self._sessions() as session:
            row = await session.get(PromptTemplate, template_id)
            if row is None:
                return None
            labels = await labels_by_version(session, row.name, row.role)
            return _version(row, labels.get((row.name, row.role, row.version)))

    @store_seam
    async def list_versions(
        self, name: str | None = None, role: str | None = None
    ) -> list[TemplateVersion]:
        query = select(PromptTemplate).order_by(
            PromptTemplate.name, PromptTemplate.role, PromptTemplate.version
        )
        if name is not None:
            query = query.where(PromptTemplate.name == name)
        if role is not None:
            query = query.where(PromptTemplate.role == role)
        async with self._sessions() as session:
            labels = await labels_by_version(session, name, role)
            return [
                _version(row, labels.get((row.name, row.role, row.version)))
                for row in await session.scalars(query)
            ]


async def _revision(session: AsyncSession, name: str, role: str, label: str) -> int | None:
    return await session.scalar(
        select(TemplateLabel.revision).where(
            TemplateLabel.name == name, TemplateLabel.role == role, TemplateLabel.label == label
        )
    )


def creation_message(version: int, activate: bool) -> str:
    """The history's message when creating a version moved `production`."""
    return f"version {version} created" + (" with activate" if activate else " (the first)")
